// src/engine/cuda_types.cpp - the CUDA backend's tensor types, checked on the host.
#include "cuda_types.h"

#include "cuda/matvec_types.h"

#include "tandem/gguf.h"

#include <fmt/format.h>

namespace tandem {

bool cuda_computes(ggml_type type) { return cuda::matvec_decodes(type); }

std::string cuda_type_refusal(const gguf_file &file) {
    for (const gguf_tensor_info &t : file.tensors())
        if (t.ne.size() >= 2 && !cuda_computes(t.type))
            return fmt::format("tensor {} has type {}, which the CUDA backend cannot compute with{}", t.name,
                               ggml_type_name(t.type), ggml_type_info(t.type).computable ? " (the CPU backend can: --backend cpu)" : "");
    return "";
}

}  // namespace tandem
