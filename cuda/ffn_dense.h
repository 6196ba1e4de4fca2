// cuda/ffn_dense.h - the pieces of DeepSeek's always-on FFN (shared experts, the dense leading
// layers) that the quantized products do not cover (the CPU twin: src/cpu/ffn_dense.cpp).
// Owns: y = W x for F32/F16/BF16 matrices whose rows the tensor-core products cannot take (widths
// not a multiple of 32, as in small test models); silu(gate) * up; and the combine
// x += (sum_s w_s out_s) + dense in the CPU's order. Each output is computed by one warp or one
// thread from its own row alone, so every result is independent of the step's other rows.
#pragma once

#include "tandem/types.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct dense_plain_args {
    const void *w = nullptr;  // [n_out][n_in] of type (f32, f16 or bf16)
    ggml_type type = ggml_type::f32;
    int32_t n_in = 0, n_out = 0, n_rows = 0;
    const float *x = nullptr;  // [n_rows][x_stride]
    float *y = nullptr;        // [n_rows][y_stride]
    int64_t x_stride = 0, y_stride = 0;
    bool accumulate = false;   // y += W x
};
bool dense_plain_supported(ggml_type type);
void dense_plain(const dense_plain_args &args, cudaStream_t stream);

// gate[r][i] <- silu(gate[r][i]) * up[r][i] (tandem/swiglu.h, bitwise the CPU's), rows of n values at stride `stride`.
void swiglu_rows(float *gate, const float *up, int32_t n_rows, int32_t n, int64_t stride, cudaStream_t stream);

struct ffn_combine_args {
    float *x = nullptr;              // [n_rows][d_model], updated in place
    const float *out = nullptr;      // [n_rows][k][d_model] routed experts' outputs (k > 0)
    const float *weights = nullptr;  // [n_rows][k]
    const float *dense = nullptr;    // [n_rows][d_model] the always-on FFN's output; nullptr: none (k > 0)
    const int32_t *slots = nullptr;  // [n_rows]; < 0: padding row (left as is)
    int32_t n_rows = 0, k = 0, d_model = 0;
};
void ffn_combine(const ffn_combine_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
