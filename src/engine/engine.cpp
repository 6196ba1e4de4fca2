// src/engine/engine.cpp - engine_open: picks the backend and placement for a model file.
#include "cpu_engine.h"
#ifdef TANDEM_HAVE_CUDA
#include "cuda_engine.h"
#endif
#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/placement.h"

namespace tandem {

#ifdef TANDEM_HAVE_CUDA
namespace {
// `tandem plan --backend cuda` and the planner's --gpu-devices auto read the GPUs through this.
const bool cuda_probe_registered = [] {
    topology_probe_register(cuda_topology_probe);
    return true;
}();
}  // namespace
#endif

std::unique_ptr<engine> engine_open(std::shared_ptr<const gguf_file> file, const engine_options &options) {
    if (options.backend == "cpu") return std::make_unique<cpu_engine>(std::move(file), options);
    if (options.backend == "cuda") {
#ifdef TANDEM_HAVE_CUDA
        return std::make_unique<cuda_engine>(std::move(file), options);
#else
        fail(error_kind::unsupported, "this build has no CUDA backend (configure with -DTANDEM_CUDA=ON; use --backend cpu)");
#endif
    }
    fail(error_kind::config, "unknown backend '{}' (allowed: cpu, cuda)", options.backend);
}

std::string engine_plan_check(const gguf_file &file, const engine_options &options) {
    if (options.backend == "cpu") return "";
    if (options.backend == "cuda") {
#ifdef TANDEM_HAVE_CUDA
        return placement_layout_line(cuda_plan_make(file, model_hparams_read(file), options));
#else
        fail(error_kind::unsupported, "this build has no CUDA backend (configure with -DTANDEM_CUDA=ON; use --backend cpu)");
#endif
    }
    fail(error_kind::config, "unknown backend '{}' (allowed: cpu, cuda)", options.backend);
}

}  // namespace tandem
