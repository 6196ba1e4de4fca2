// tests/kernels/routing_test_util.h - one step's routing on the device (cuda::moe_route) into
// buffers of its own: the ids, weights, groups and pair maps that the grouped-product and split
// tests read after it.
#pragma once

#include "gpu_test_util.h"

#include "cuda/moe.h"

#include <cstdint>
#include <vector>

namespace tandem::test {

struct device_routing {
    int32_t n_rows, n_expert, k;
    device_buffer<float> logits, weights;
    device_buffer<int32_t> slots, ids, group_expert, group_off, n_groups, pair_x, pair_y;
    // logits [n_rows][n_expert], slots [n_rows] (< 0: a padding row); group arrays sized for
    // n_expert groups, the most any step has.
    device_routing(const std::vector<float> &host_logits, const std::vector<int32_t> &host_slots, int32_t n_expert_, int32_t k_)
        : n_rows(int32_t(host_slots.size())), n_expert(n_expert_), k(k_), logits(host_logits), weights(pairs()), slots(host_slots),
          ids(pairs()), group_expert(size_t(n_expert_)), group_off(size_t(n_expert_) + 1), n_groups(1), pair_x(pairs()),
          pair_y(pairs()) {}
    size_t pairs() const { return size_t(n_rows) * size_t(k); }
    cuda::moe_route_args args() const {
        cuda::moe_route_args a;
        a.logits = logits.ptr;
        a.slots = slots.ptr;
        a.ids = ids.ptr;
        a.weights = weights.ptr;
        a.group_expert = group_expert.ptr;
        a.group_off = group_off.ptr;
        a.n_groups = n_groups.ptr;
        a.pair_x = pair_x.ptr;
        a.pair_y = pair_y.ptr;
        a.n_rows = n_rows;
        a.n_expert = n_expert;
        a.k = k;
        return a;
    }
    void run() const { cuda::moe_route(args(), nullptr); }
};

}  // namespace tandem::test
