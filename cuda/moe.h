// cuda/moe.h - MoE routing and grouping on the device, and the slot-order combine.
// Owns: softmax over router logits, top-k (ties: lower expert id), renormalisation; the sort of
// the step's (row, slot) pairs by expert that the grouped matvec (matvec.h) consumes; and
// x += sum_s w_s * out_s in slot order fused with the next RMSNorm. Does not own the expert
// products themselves. One warp's routing of a row lives in moe_route.cuh, shared with the one-row
// gate/up that routes its row itself (matvec_digits_args::route_logits).
#pragma once

#include "matvec_digits.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct moe_route_args {
    const float *logits = nullptr;   // [n_rows][n_expert] router logits
    // The router's K parts (matvec_args::k_parts, 1 to 4): logits = part 0 + part 1 + ... in that order,
    // part s at logits + s * logit_part_stride.
    int32_t n_logit_parts = 1;
    int64_t logit_part_stride = 0;
    const int32_t *slots = nullptr;  // [n_rows]; < 0: padding row, routed nowhere
    int32_t *ids = nullptr;          // [n_rows][k] selected experts (-1 for padding rows)
    float *weights = nullptr;        // [n_rows][k]
    // Grouping of the pairs p = r * k + s by expert, experts in increasing id order:
    int32_t *group_expert = nullptr; // [max_groups] expert of group g
    int32_t *group_off = nullptr;    // [max_groups + 1] pair ranges into pair_x / pair_y
    int32_t *n_groups = nullptr;     // device scalar
    int32_t *pair_x = nullptr;       // [n_rows * k] row r of each grouped pair
    int32_t *pair_y = nullptr;       // [n_rows * k] pair index p of each grouped pair
    int32_t *groups_total = nullptr; // optional device counter: += n_groups (statistics)
    int32_t n_rows = 0, n_expert = 0, k = 0;
    bool renormalise = true;
};
// Bound on the number of groups of a step (grid size of the grouped products).
inline int32_t moe_max_groups(int32_t n_rows, int32_t n_expert, int32_t k) {
    const int64_t pairs = int64_t(n_rows) * k;
    return int32_t(pairs < n_expert ? pairs : n_expert);
}
void moe_route(const moe_route_args &args, cudaStream_t stream);
// The grouping alone, from ids another router wrote (moe_route_grouped.h): group_expert, group_off,
// n_groups, pair_x, pair_y and groups_total as moe_route writes them (logits and weights unused).
void moe_group_pairs(const moe_route_args &args, cudaStream_t stream);

// counts[e] += 1 for every routed pair of a real row (slot >= 0): the expert traffic the engine
// records for `--expert-balance`. Launched without PDL (it reads moe_route's ids).
struct moe_count_args {
    const int32_t *ids = nullptr;       // [n_rows][k]
    const int32_t *slots = nullptr;     // [n_rows]
    unsigned long long *counts = nullptr;  // [n_expert] of this layer
    int32_t n_rows = 0, k = 0;
};
void moe_count(const moe_count_args &args, cudaStream_t stream);

struct moe_combine_args {
    float *x = nullptr;              // [n_rows][d_model] residual stream, updated in place
    const float *out = nullptr;      // [n_rows][k][d_model] unweighted expert outputs
    const float *weights = nullptr;  // [n_rows][k]
    const int32_t *slots = nullptr;  // [n_rows]; < 0: padding row (x left as is)
    const float *norm = nullptr;     // [d_model] weights of the RMSNorm that follows; nullptr: none
    float *h = nullptr;              // [n_rows][d_model] normalised x (when norm is set)
    uint4 *h_split = nullptr;        // optional: h split too (x_split.cuh; d_model a multiple of 32)
    float *h_sums = nullptr;         // [n_rows][d_model / 32]
    // Optional: h also as int8 digits for prompt rows' digit products (matvec_digits.h; with the
    // norm, d_model a multiple of 256, 16-byte aligned rows, not with h_split): bitwise
    // digits_quantize of h, without its launch.
    digit_rows h_digits{};
    int32_t n_rows = 0, k = 0, d_model = 0;
    float eps = 1e-6f;
};
void moe_combine(const moe_combine_args &args, cudaStream_t stream);
// Whether moe_combine can write these rows' h_digits (set them only then): the norm, d_model a
// multiple of 256, x, out, norm and h 16-byte aligned, no split h.
bool moe_combine_digits_applies(const moe_combine_args &args);

}  // namespace tandem::cuda
