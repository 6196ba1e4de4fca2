// cuda/matmul_prompt.h - y = W x for the prompt rows of a step on tensor cores: the products
// matvec.h computes, with the same arguments (dense or grouped by expert, SwiGLU, residual add,
// fused extra matrices), for rows that come in hundreds at a time.
// Owns: the weight-times-activation products of prompt rows. Does not own: decode rows (matvec.h:
// its own tensor-core kernel, another sum order), routing (moe.h).
//
// Numerics, Q4_K with split scratch (matvec_args::prompt_split, the engine's case): the exact
// quants on the tensor cores and only the activations split, d and m applied per 32-element
// sub-block (matmul_prompt_q4k.cu). Otherwise: each weight is dequantised to the CPU's value,
// bitwise (quant_decode.cuh), then weights
// and activations are split into bf16 pairs, v = hi + lo (hi = bf16(v), lo = bf16(v - hi)), and
// a product is hi_w hi_x + hi_w lo_x + lo_w hi_x on mma.sync (fp32 accumulate): ~16 bits of each
// operand, ~1e-6 relative per product; tolerance::matmul_prompt says what the tests allow.
// An output sums its K range in 128-element tiles, ascending, three mmas per 16 elements, into
// one accumulator (with matvec_args::k_parts, one a part, written apart for the consumer to add);
// no cross-row term, so a row's result depends only on its own activations and the matrix:
// prompt rows are invariant to the step's other rows, bitwise.
#pragma once

#include "matvec.h"

#include <cuda_runtime.h>

namespace tandem::cuda {

// Grouped mode: `n_pairs` must bound the pairs of all groups together (rows x k): it sizes the
// grid. Dense mode: as matvec. SwiGLU needs w_up of the same type; accumulate as matvec.
void matmul_prompt(const matvec_args &args, cudaStream_t stream);

// Rows of x (fp32, row stride x_stride) to x_split.cuh's split layout and 32-element sums.
void prompt_split_rows(const float *x, int64_t x_stride, int32_t n_rows, int32_t n_in, uint4 *split, float *sums,
                       cudaStream_t stream);

// Internal to matmul_prompt: whether the exact-quant Q4_K kernel takes these arguments (Q4_K, the
// scratch given, x rows in 128-element multiples, no K parts), and that kernel (small: 16-row tiles).
bool matmul_prompt_q4k_applies(const matvec_args &args);
void matmul_prompt_q4k(const matvec_args &args, bool small, cudaStream_t stream);

}  // namespace tandem::cuda
