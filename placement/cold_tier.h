// placement/cold_tier.h - the host tier's part of the planner (internal): which routed experts
// stay on a stage's GPUs, what is left for host memory, and the plan's speed prediction.
#pragma once

#include "tandem/placement.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace tandem::cold_tier {

// Bytes of `count` experts of a layer whose experts take `all` bytes in all: proportional, exact
// when the tensors divide by n_expert (always, for real files).
inline uint64_t expert_bytes(uint64_t all, int32_t n_expert, uint64_t count) {
    const uint64_t n = uint64_t(n_expert);
    return (all / n) * count + (all % n) * count / n;
}

// The routing profile as weights: per layer, per expert, rows the router sends there. Without a
// profile, and for layers it recorded nothing for, every expert weighs 1 (uniform routing).
std::vector<std::vector<uint64_t>> weights(const placement_request &req, const placement_model &model);

// The experts one stage keeps on its members (one device, or a pair: host first), given each
// member's room for routed experts in bytes: the experts with the most rows per byte across the
// stage's layers, so every layer keeps its busiest ones; a pair splits each layer's hot experts
// into halves of equal count balanced by rows (sized for its smaller member, so both fit).
// Returns [member][layer - begin] sorted expert ids.
std::vector<std::vector<std::vector<int32_t>>> pick(const placement_model &model,
                                                    const std::vector<std::vector<uint64_t>> &w, int32_t begin,
                                                    int32_t end, const std::vector<int64_t> &rooms);

// Fills plan.cold from the devices' experts (what no device holds is cold) and each layer's
// expected cold row share under the weights; refuses, with the numbers, cold experts that do not
// fit the host budget.
// cold_expert: bytes of one cold expert as the tier holds it (nullopt: the file's).
void finish(placement_plan &plan, const placement_model &model, const std::vector<std::vector<uint64_t>> &w,
            uint64_t budget, std::optional<uint64_t> cold_expert);

// The plan's decode speed for one session from the topology's figures (defaults where missing).
placement_prediction predict(const placement_plan &plan, const placement_model &model, const topology &topo,
                             const std::vector<std::vector<uint64_t>> &w, std::optional<uint64_t> cold_expert);

}  // namespace tandem::cold_tier
