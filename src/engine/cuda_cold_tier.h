// src/engine/cuda_cold_tier.h - the host tier of one pipeline stage of the CUDA engine. A layer with
// cold experts sends its FFN-normalised rows and their experts to page-locked host memory; the CPU
// computes the cold slots (cold_experts, digits arithmetic: the GPU's bits for Q4_K experts) on a
// side stream's host node while the stage's GPUs compute the hot ones; each member then copies the
// cold slots' outputs from host memory into its pair outputs, and the combine runs in slot order
// as on an all-GPU plan. Everything is stream-ordered, so steps replay as CUDA graphs.
// Owns: the CPU work, its buffers, side stream and events. Does not own routing or the combine.
#pragma once

#include "tandem/expert_tiers.h"
#include "tandem/model.h"
#include "tandem/placement.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace tandem {

class cuda_device;

class cuda_cold_tier {
public:
    // members: the stage's devices, its first (the pair's host) first. row_slots: the engine's
    // page-locked step rows' slots ([max_step_rows], < 0 a padding row), read when a step runs.
    // tiers: the cold experts' requantization (cold_experts), none by default.
    cuda_cold_tier(const model_hparams &hp, const model_tensors &tensors, const placement_plan &plan,
                   std::vector<cuda_device *> members, int32_t n_threads, const int32_t *row_slots,
                   const expert_tiers_spec &tiers);
    ~cuda_cold_tier();
    cuda_cold_tier(const cuda_cold_tier &) = delete;
    cuda_cold_tier &operator=(const cuda_cold_tier &) = delete;

    // Whether the layer has cold experts.
    bool any(int32_t layer) const;
    // After every member's layer_route of rows [r0, r0 + n): rows and experts to the host, the CPU's
    // cold slots queued behind them. Returns the operations enqueued.
    int64_t send(int32_t layer, int32_t r0, int32_t n);
    // After the members' experts (and a pair's merge): each member waits for the CPU and takes the
    // cold slots' outputs. Returns the launches.
    int64_t receive(int32_t layer, int32_t r0, int32_t n);
    // The (row, slot) pairs the CPU computed since the last call (statistics).
    int64_t take_pairs();
    // Rethrows an error the CPU work met in the last step (the engine calls it after synchronizing).
    void check();

    struct impl;

private:
    std::unique_ptr<impl> s_;
};

}  // namespace tandem
