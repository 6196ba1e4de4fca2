// cuda/matvec_types.h - the weight types the CUDA products decode (quant_decode.cuh,
// quant_decode_iq.cuh) and their row sizes: the one list the kernels' dispatch and the host's
// refusal of a file (src/engine/cuda_types.cpp) both read. Plain C++, no CUDA includes.
#pragma once

#include "tandem/types.h"

#include <cstdint>

namespace tandem::cuda {

// Bytes of one weight row (n_in elements of type); 0 for a type the CUDA products do not take.
constexpr int64_t matvec_row_bytes(ggml_type type, int32_t n_in) {
    const int64_t n = n_in;
    switch (type) {
    case ggml_type::q4_k: return n / 256 * 144;
    case ggml_type::q6_k: return n / 256 * 210;
    case ggml_type::q5_k: return n / 256 * 176;
    case ggml_type::q3_k: return n / 256 * 110;
    case ggml_type::q2_k: return n / 256 * 84;
    case ggml_type::iq4_xs: return n / 256 * 136;
    case ggml_type::iq2_xxs: return n / 256 * 66;
    case ggml_type::iq2_xs: return n / 256 * 74;
    case ggml_type::iq2_s: return n / 256 * 82;
    case ggml_type::iq3_xxs: return n / 256 * 98;
    case ggml_type::iq3_s: return n / 256 * 110;
    case ggml_type::iq1_s: return n / 256 * 50;
    case ggml_type::iq1_m: return n / 256 * 56;
    case ggml_type::q8_0: return n / 32 * 34;
    case ggml_type::q4_0:
    case ggml_type::iq4_nl: return n / 32 * 18;
    case ggml_type::q4_1: return n / 32 * 20;
    case ggml_type::q5_0: return n / 32 * 22;
    case ggml_type::q5_1: return n / 32 * 24;
    case ggml_type::mxfp4: return n / 32 * 17;
    case ggml_type::f32: return n * 4;
    case ggml_type::f16:
    case ggml_type::bf16: return n * 2;
    default: return 0;
    }
}

// Elements per block of type: 256 for the K-quants, IQ4_XS and the grid IQ types (rows of whole
// blocks), else 32.
constexpr int32_t matvec_block_elems(ggml_type type) {
    return matvec_row_bytes(type, 32) == 0 && matvec_row_bytes(type, 256) > 0 ? 256 : 32;
}

// Whether the CUDA products take weights of this type.
constexpr bool matvec_decodes(ggml_type type) { return matvec_row_bytes(type, 256) > 0; }

}  // namespace tandem::cuda
