// src/engine/cuda_types.cpp - the CUDA backend's tensor types, checked on the host.
#include "cuda_types.h"

#include "tandem/gguf.h"

#include <fmt/format.h>

namespace tandem {

// Kept equal to cuda::matvec_row_bytes's cases (cuda/matvec.cu): the other types (the 8-bit
// intermediate Q8_1/Q8_K, the ternary TQ types, the integer types) have no CUDA decoder.
bool cuda_computes(ggml_type type) {
    switch (type) {
    case ggml_type::f32:
    case ggml_type::f16:
    case ggml_type::bf16:
    case ggml_type::q8_0:
    case ggml_type::q4_k:
    case ggml_type::q6_k:
    case ggml_type::q5_k:
    case ggml_type::q3_k:
    case ggml_type::q2_k:
    case ggml_type::q4_0:
    case ggml_type::q4_1:
    case ggml_type::q5_0:
    case ggml_type::q5_1:
    case ggml_type::iq4_nl:
    case ggml_type::iq4_xs:
    case ggml_type::iq2_xxs:
    case ggml_type::iq2_xs:
    case ggml_type::iq2_s:
    case ggml_type::iq3_xxs:
    case ggml_type::iq3_s:
    case ggml_type::iq1_s:
    case ggml_type::iq1_m:
    case ggml_type::mxfp4: return true;
    default: return false;
    }
}

std::string cuda_type_refusal(const gguf_file &file) {
    for (const gguf_tensor_info &t : file.tensors())
        if (t.ne.size() >= 2 && !cuda_computes(t.type))
            return fmt::format("tensor {} has type {}, which the CUDA backend cannot compute with{}", t.name,
                               ggml_type_name(t.type), ggml_type_info(t.type).computable ? " (the CPU backend can: --backend cpu)" : "");
    return "";
}

}  // namespace tandem
