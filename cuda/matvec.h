// cuda/matvec.h - y = W x for the decode rows of a step, W in its GGUF type (Q4_K, Q6_K, Q8_0,
// F32, F16, BF16), read once per group of up to 16 rows; optionally grouped by expert and fused
// with SwiGLU or the residual add.
// Owns: the weight-times-activation products of decode rows (attention projections, router,
// experts, head). Does not own: prompt rows (matmul_prompt.h), routing and the pair sort (moe.h),
// norms (norm.h).
//
// Numerics (mma_bf16.cuh): the products run on tensor cores with fp32 accumulation, the
// activations split into bf16 hi/lo pairs. Q4_K and Q6_K weights enter as exact integers and
// each scale group's sum is scaled after the mma (Q4_K's 32-element sub-blocks as 128 + q:
// d * sum((128 + q) x) - (m + 128 d) * sum(x), sum(x) over the split values the mma saw;
// (d * scale) * sum(q x) for Q6_K's 16-element groups); other
// types are dequantised as the CPU does and split too. An output sums its K range in chunks
// (a K-quant block, or 4 items of 32), chunk c into the partial of warp c % W, and the W partials
// are added in warp order; W (4, or 16 for dense matrices too narrow to fill the GPU) depends
// only on the matrix's shape, never on the number of rows or groups, and no term mixes two rows:
// decode logits are batch invariant, bitwise. Error vs the CPU's fp32 products: tolerance::matvec.
#pragma once

#include "matvec_types.h"
#include "tandem/types.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

// A further matrix of a fused dense launch (same n_in, same x): Q, K and V together. Of the
// launch's type, or (typed, the last part only) of its own: a Q4_K_M file's Q6_K V beside Q4_K Q
// and K, for the type pairs matvec_mixed_supported names (decode rows; matvec_mixed.cu).
struct matvec_part {
    const void *w = nullptr;  // [n_out][row_bytes]
    int32_t n_out = 0;
    float *y = nullptr;       // [*][y_stride]
    int64_t y_stride = 0;
    bool typed = false;       // its weights are of `type`, not the launch's
    ggml_type type{};         // (braces: GCC 12 rejects brace-initialising aggregates holding this with "= f32")
};

struct matvec_args {
    const void *w = nullptr;        // [n_mat][n_out][row_bytes] of `type` (n_mat = experts, or 1)
    const void *w_up = nullptr;     // same shape as w: SwiGLU mode, y = silu(W x) * (W_up x); else nullptr
    ggml_type type = ggml_type::f32;
    int32_t n_in = 0, n_out = 0;    // n_in a multiple of 32 and of the type's block
    const float *x = nullptr;       // [*][x_stride]
    float *y = nullptr;             // [*][y_stride]
    int64_t x_stride = 0, y_stride = 0;
    bool accumulate = false;        // y += W x (residual fused) instead of y = W x
    // Pairs: pair i reads x row x_rows[i] (nullptr: i) and writes y row y_rows[i] (nullptr: i).
    // Dense: the pairs computed. Grouped: a bound on all groups' pairs together (matmul_prompt
    // sizes its grid by it; matvec ignores it).
    int32_t n_pairs = 0;
    const int32_t *x_rows = nullptr;     // [pairs]
    const int32_t *y_rows = nullptr;     // [pairs]
    // Grouped mode (group_off != nullptr): group g < *n_groups multiplies matrix group_mat[g]
    // with pairs group_off[g] .. group_off[g+1]-1; max_groups bounds *n_groups (grid size).
    const int32_t *group_mat = nullptr;  // [max_groups]
    const int32_t *group_off = nullptr;  // [max_groups + 1]
    const int32_t *n_groups = nullptr;   // device scalar
    int32_t max_groups = 1;
    // PDL (launch.cuh): the group arrays were written two or more launches before this one, so
    // the kernel may read them, and start streaming weights, before waiting on its predecessor.
    bool groups_settled = false;
    // matmul_prompt, dense, its bf16 tiles: everything the launch reads was written two or more
    // launches before, so its blocks run beside their predecessor and wait on it (PDL) only before
    // they leave; their successor's wait then covers both. (Other kernels wait as usual.)
    bool inputs_settled = false;
    // Decode rows pre-split by their producer (x_split.cuh), same geometry as x: the B registers
    // and the 32-element sums Q4_K needs, both or neither (nullptr: computed here from x, to the
    // same bits; also when x_stride is not a multiple of 64 or x_sums not 8-byte aligned: the
    // kernels read the sums two at a time). x stays required (the prompt products read it).
    const uint4 *x_split = nullptr;
    const float *x_sums = nullptr;   // [*][x_stride / 32]
    matvec_part extra[2];            // dense mode only: more matrices over the same x
    int32_t n_extra = 0;
    // Dense: K in k_parts ranges of whole chunks (part s: chunks s * C / k_parts up to
    // (s + 1) * C / k_parts), each range's sums written to y + s * y_part_stride by blocks of
    // their own, so a narrow matrix (the router: 8 row tiles) spreads over k_parts times the
    // multiprocessors. The consumer adds the parts in order (moe_route_args::n_logit_parts).
    // Decode rows (matvec): chunks of 256 elements. Prompt rows (matmul_prompt, not the exact
    // Q4_K kernel): K steps of 128; the same parts for every prompt launch keep prompt rows
    // invariant to chunking.
    int32_t k_parts = 1;
    int64_t y_part_stride = 0;
    // matmul_prompt: rows per block tile, 16 or 128 (0: 16 for steps of few rows, see
    // matmul_prompt.cu). Same outputs, bitwise, either way (tests pin it).
    int32_t prompt_tile_rows = 0;
    // matmul_prompt, Q4_K: scratch for the activations split once (x_split.cuh's layout, same
    // geometry as x) and their 32-element sums, split into bf16 hi and lo; rows 0 ..
    // prompt_split_rows - 1 of x are split (every row x_rows can name). All three set, n_in a
    // multiple of 256 and x_stride of 128: the exact-quant kernel (matmul_prompt_q4k.cu,
    // matmul_prompt_q4k_applies); else the dequantising one.
    uint4 *prompt_split = nullptr;   // [prompt_split_rows][x_stride / 4]
    float *prompt_sums = nullptr;    // [prompt_split_rows][x_stride / 32] floats of room (bf16 pairs)
    int32_t prompt_split_rows = 0;
};

// Whether a dense launch of `type` may take a last extra matrix of type `part` (matvec_part::typed).
// Each block runs its own matrix's arithmetic with the launch's warps, so the parts of the launch's
// type give the bits a launch of them alone of the same width gives.
bool matvec_mixed_supported(ggml_type type, ggml_type part);
// Launches the product by plan_matvec's plan for it (matvec_plan.h; tests pass a plan of their own).
void matvec(const matvec_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
