// cuda/moe_route_grouped.h - DeepSeek's routing on the device (the CPU twin: src/cpu/route_grouped.cpp):
// softmax or sigmoid scores, the selection bias (exp_probs_b, noaux_tc), group-limited top-k
// (groups by the sum of their two best selections, ties to the lower group; experts by selection,
// ties to the lower id), the chosen scores normalised and scaled. One thread a row, in the CPU's
// order of operations, so a row's choice depends on its logits alone (batch invariant). The pairs
// are then grouped by expert as moe_route groups them (moe_group_pairs).
#pragma once

#include "moe.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

constexpr int32_t moe_route_grouped_max_experts = 512;

struct moe_route_grouped_args {
    const float *logits = nullptr;   // [n_rows][n_expert]
    const float *bias = nullptr;     // [n_expert] selection bias; nullptr: none
    const int32_t *slots = nullptr;  // [n_rows]; < 0: padding row (ids -1, weights 0)
    int32_t *ids = nullptr;          // [n_rows][k]
    float *weights = nullptr;        // [n_rows][k]
    int32_t n_rows = 0, n_expert = 0, k = 0, n_group = 1, n_group_used = 1;
    bool sigmoid = false, normalise = true;
    float scale = 1.0f;
};
void moe_route_grouped(const moe_route_grouped_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
