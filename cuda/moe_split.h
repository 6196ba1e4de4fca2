// cuda/moe_split.h - routed experts split across a tensor-parallel pair: each device computes
// only the (row, slot) pairs whose expert it holds, then takes the partner's outputs for the rest.
// Owns: narrowing moe_route's expert groups to the experts a device holds (remapped to the index
// of the expert's matrix in that device's compact upload), and merging the partner's pair
// outputs. The CPU twin is the exchange loop of src/engine/cpu_engine.cpp (run_stage).
// Both kernels only copy values: a pair's output is the bits its owner computed, so the slot-
// order combine that follows sees exactly what a single device would have.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

// Largest expert count the split kernels handle (one block, a thread per group).
constexpr int32_t moe_split_max_experts = 1024;

struct moe_groups_filter_args {
    // moe_route's grouping (experts in increasing id order):
    const int32_t *group_expert = nullptr;  // [max_groups]
    const int32_t *group_off = nullptr;     // [max_groups + 1]
    const int32_t *n_groups = nullptr;      // device scalar
    const int32_t *pair_x = nullptr;        // [n_pairs]
    const int32_t *pair_y = nullptr;        // [n_pairs]
    const int32_t *local = nullptr;         // [n_expert] matrix index on this device, -1: not held
    // The groups of held experts, same order, pairs compacted:
    int32_t *out_group_mat = nullptr;       // [max_groups] local matrix index
    int32_t *out_group_off = nullptr;       // [max_groups + 1]
    int32_t *out_n_groups = nullptr;        // device scalar
    int32_t *out_pair_x = nullptr;          // [n_pairs]
    int32_t *out_pair_y = nullptr;          // [n_pairs]
    int32_t max_groups = 0;                 // <= moe_split_max_experts
};
void moe_groups_filter(const moe_groups_filter_args &args, cudaStream_t stream);

struct moe_pairs_merge_args {
    float *out = nullptr;            // [n_rows][k][d_model] this device's pair outputs
    const float *other = nullptr;    // [n_rows][k][d_model] the partner's pair outputs
    const int32_t *ids = nullptr;    // [n_rows][k] routed experts (moe_route)
    const int32_t *slots = nullptr;  // [n_rows]; < 0: padding row, skipped
    const int32_t *local = nullptr;  // [n_expert] as above: pairs of experts not held come from other
    int32_t n_rows = 0, k = 0, d_model = 0;  // d_model a multiple of 4
};
void moe_pairs_merge(const moe_pairs_merge_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
