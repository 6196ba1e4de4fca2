// src/engine/engine.cpp - engine_open: picks the backend and placement for a model file.
#include "cpu_engine.h"
#include "tandem/engine.h"
#include "tandem/error.h"

namespace tandem {

std::unique_ptr<engine> engine_open(std::shared_ptr<const gguf_file> file, const engine_options &options) {
    if (options.backend == "cpu") {
        if (options.n_devices != 1)
            fail(error_kind::unsupported, "--devices {}: CPU virtual devices are not implemented yet", options.n_devices);
        return std::make_unique<cpu_engine>(std::move(file), options);
    }
    if (options.backend == "cuda")
        fail(error_kind::unsupported, "the CUDA backend is not available in this build yet (use --backend cpu)");
    fail(error_kind::config, "unknown backend '{}' (allowed: cpu, cuda)", options.backend);
}

}  // namespace tandem
