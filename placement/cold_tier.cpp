// placement/cold_tier.cpp - the host tier: its --host-experts budget, which routed experts a stage
// keeps on its GPUs (the most used per byte), what is left for host memory, and the decode speed a
// plan predicts.
#include "placement/cold_tier.h"

#include "tandem/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

namespace tandem::cold_tier {

namespace {

double to_gib(uint64_t bytes) { return double(bytes) / double(gib); }

// Default speed figures where the topology has none: a mid-range GPU's memory, a server CPU's
// quantized products over host memory, a PCIe 4.0 x16 link and one small copy over it.
constexpr double default_gpu_gbps = 1000.0;
constexpr double default_cpu_gbps = 50.0;
constexpr double default_link_gbps = 25.0;
// Between hosts: 100 Gb Ethernet's payload rate and a TCP round trip's order of magnitude.
constexpr double default_host_link_gbps = 10.0;
constexpr double default_host_link_latency_us = 50.0;
constexpr double default_link_latency_us = 10.0;

// A layer's experts, busiest first (ties: lower id), as the order they earn GPU room in.
std::vector<int32_t> by_weight(const std::vector<uint64_t> &w) {
    std::vector<int32_t> order(w.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return w[size_t(a)] > w[size_t(b)]; });
    return order;
}

uint64_t sum_of(const std::vector<uint64_t> &w) { return std::accumulate(w.begin(), w.end(), uint64_t{0}); }

// How many of each layer's busiest experts fit in `room` bytes: items (layer, rank) taken by rows
// per byte, ties by rank then layer, so uniform weights fill the layers evenly. A layer whose next
// expert does not fit takes no more (its later ones are the same size).
std::vector<int32_t> hot_counts(const placement_model &model, const std::vector<std::vector<uint64_t>> &w,
                                const std::vector<std::vector<int32_t>> &order, int32_t begin, int32_t end,
                                int64_t room) {
    struct item {
        double value;
        int32_t rank, layer;
    };
    std::vector<item> items;
    for (int32_t l = begin; l < end; ++l) {
        const uint64_t all = model.bytes.layer_experts[size_t(l)];
        if (all == 0) continue;
        const double per_byte = double(all) / double(model.n_expert), total = double(sum_of(w[size_t(l)]));
        for (int32_t r = 0; r < model.n_expert; ++r)
            items.push_back({double(w[size_t(l)][size_t(order[size_t(l - begin)][size_t(r)])]) / total / per_byte, r, l});
    }
    std::stable_sort(items.begin(), items.end(), [](const item &a, const item &b) {
        if (a.value != b.value) return a.value > b.value;
        return a.rank != b.rank ? a.rank < b.rank : a.layer < b.layer;
    });
    std::vector<int32_t> count(size_t(end - begin), 0);
    std::vector<bool> closed(size_t(end - begin), false);
    int64_t used = 0;
    for (const item &it : items) {
        const size_t li = size_t(it.layer - begin);
        if (closed[li]) continue;
        const uint64_t all = model.bytes.layer_experts[size_t(it.layer)];
        const int64_t more = int64_t(expert_bytes(all, model.n_expert, uint64_t(count[li]) + 1) -
                                     expert_bytes(all, model.n_expert, uint64_t(count[li])));
        if (used + more > room) {
            closed[li] = true;
            continue;
        }
        used += more;
        ++count[li];
    }
    return count;
}

}  // namespace

std::vector<std::vector<uint64_t>> weights(const placement_request &req, const placement_model &model) {
    std::vector<std::vector<uint64_t>> w(size_t(model.n_layer), std::vector<uint64_t>(size_t(model.n_expert), 1));
    if (!req.traffic) return w;
    for (int32_t l = 0; l < model.n_layer; ++l)
        if (sum_of(req.traffic->counts[size_t(l)]) > 0) w[size_t(l)] = req.traffic->counts[size_t(l)];
    return w;
}

std::vector<std::vector<std::vector<int32_t>>> pick(const placement_model &model,
                                                    const std::vector<std::vector<uint64_t>> &w, int32_t begin,
                                                    int32_t end, const std::vector<int64_t> &rooms) {
    TANDEM_ASSERT(rooms.size() == 1 || rooms.size() == 2);
    std::vector<std::vector<int32_t>> order;
    for (int32_t l = begin; l < end; ++l) order.push_back(by_weight(w[size_t(l)]));
    // A pair splits each layer's hot experts into halves of equal count (the larger half has at most
    // half an expert more): room for twice the smaller member, less one expert a layer (and two
    // bytes for expert_bytes' rounding), fits both.
    int64_t room = rooms[0];
    if (rooms.size() == 2) {
        room = 2 * std::min(rooms[0], rooms[1]);
        for (int32_t l = begin; l < end; ++l) room -= int64_t(model.bytes.layer_experts[size_t(l)] / uint64_t(model.n_expert) + 2);
        room = std::max<int64_t>(0, room);
    }
    const std::vector<int32_t> count = hot_counts(model, w, order, begin, end, room);
    std::vector<std::vector<std::vector<int32_t>>> held(rooms.size(), std::vector<std::vector<int32_t>>(size_t(end - begin)));
    for (int32_t l = begin; l < end; ++l) {
        const size_t li = size_t(l - begin);
        std::vector<int32_t> hot;
        if (model.bytes.layer_experts[size_t(l)] == 0) {
            hot.resize(size_t(model.n_expert));  // no routed experts here: nothing to place, nothing cold
            std::iota(hot.begin(), hot.end(), 0);
        } else {
            hot.assign(order[li].begin(), order[li].begin() + count[li]);
        }
        std::sort(hot.begin(), hot.end());
        if (rooms.size() == 1) {
            held[0][li] = std::move(hot);
            continue;
        }
        std::vector<uint64_t> hot_w;
        for (int32_t e : hot) hot_w.push_back(w[size_t(l)][size_t(e)]);
        const std::vector<bool> first = expert_traffic_split_even(hot_w);
        for (size_t i = 0; i < hot.size(); ++i) held[first[i] ? 0 : 1][li].push_back(hot[i]);
    }
    for (size_t m = 0; m < rooms.size(); ++m) {
        uint64_t bytes = 0;
        for (int32_t l = begin; l < end; ++l)
            bytes += expert_bytes(model.bytes.layer_experts[size_t(l)], model.n_expert, held[m][size_t(l - begin)].size());
        TANDEM_ASSERT(int64_t(bytes) <= rooms[m], "member {} of the stage holds {} expert bytes in a room of {}", m, bytes,
                      rooms[m]);
    }
    return held;
}

void finish(placement_plan &plan, const placement_model &model, const std::vector<std::vector<uint64_t>> &w,
            uint64_t budget, std::optional<uint64_t> cold_expert) {
    placement_cold_plan &cold = plan.cold;
    cold.experts.assign(size_t(model.n_layer), {});
    cold.row_share.assign(size_t(model.n_layer), 0.0);
    cold.bytes = 0;
    uint64_t on_gpus = 0;
    for (int32_t l = 0; l < model.n_layer; ++l) {
        std::vector<bool> held(size_t(model.n_expert), false);
        for (const placement_device_plan &d : plan.devices)
            if (l >= d.layer_begin && l < d.layer_end)
                for (int32_t e : d.experts[size_t(l - d.layer_begin)]) held[size_t(e)] = true;
        uint64_t cold_w = 0;
        for (int32_t e = 0; e < model.n_expert; ++e)
            if (!held[size_t(e)]) cold.experts[size_t(l)].push_back(e), cold_w += w[size_t(l)][size_t(e)];
        const uint64_t all = model.bytes.layer_experts[size_t(l)];
        const uint64_t n_cold = cold.experts[size_t(l)].size(), in_file = expert_bytes(all, model.n_expert, n_cold);
        cold.bytes += cold_expert ? *cold_expert * n_cold : in_file;
        on_gpus += all - in_file;
        cold.row_share[size_t(l)] = double(cold_w) / double(sum_of(w[size_t(l)]));
    }
    if (cold.bytes > budget)
        fail(error_kind::config, "the plan does not fit even with the host tier: the GPUs hold {:.2f} GiB of routed "
             "experts and the remaining {:.2f} GiB{} exceed the host tier's {:.2f} GiB (--host-experts); {:.2f} GiB "
             "missing. Raise --host-experts or --gpu-vram, add devices, or lower --ctx or --batched-session",
             to_gib(on_gpus), to_gib(cold.bytes), cold_expert ? " (as --expert-tiers requantizes them)" : "",
             to_gib(budget), to_gib(cold.bytes - budget));
}

placement_prediction predict(const placement_plan &plan, const placement_model &model, const topology &topo,
                             const std::vector<std::vector<uint64_t>> &w, std::optional<uint64_t> cold_expert) {
    placement_prediction p;
    auto figure = [&](double v, double fallback) {
        if (v > 0.0) return v;
        p.default_figures = true;
        return fallback;
    };
    if (!plan.hosts.empty()) {
        p.host_link_gbps = figure(plan.host_link.gbps, default_host_link_gbps);
        p.host_link_latency_us = figure(plan.host_link.latency_us, default_host_link_latency_us);
    }
    if (model.n_expert_used < 1 || model.d_model < 1) return p;
    const topology_host host = topo.host.value_or(topology_host{});
    p.cpu_gbps = figure(host.bandwidth_gbps, default_cpu_gbps);
    p.link_gbps = figure(host.link_gbps, default_link_gbps);
    p.link_latency_us = figure(host.link_latency_us, default_link_latency_us);
    p.gpu_gbps = 0.0;
    const double k = model.n_expert_used, lat = p.link_latency_us * 1e-6, row = double(model.d_model) * 4.0;
    auto seconds = [](double bytes, double gbps) { return bytes / (gbps * 1e9); };
    double gpu_s = 0.0, cold_s = 0.0, total_s = 0.0;
    for (const std::vector<int32_t> &stage : placement_stage_members(plan)) {
        const placement_device_plan &first = plan.devices[size_t(stage[0])];
        for (int32_t l = first.layer_begin; l < first.layer_end; ++l) {
            const double total_w = double(sum_of(w[size_t(l)]));
            const double one = double(model.bytes.layer_experts[size_t(l)]) / double(model.n_expert);
            double layer_gpu = 0.0;
            for (int32_t i : stage) {
                const placement_device_plan &d = plan.devices[size_t(i)];
                const double gbps = figure(topo.find(d.physical) ? topo.find(d.physical)->bandwidth_gbps : 0.0,
                                           default_gpu_gbps);
                p.gpu_gbps = p.gpu_gbps == 0.0 ? gbps : std::min(p.gpu_gbps, gbps);
                double share = 0.0;
                for (int32_t e : d.experts[size_t(l - d.layer_begin)]) share += double(w[size_t(l)][size_t(e)]);
                // Each of a row's k slots lands on this device's experts with its row share.
                const double bytes = double(model.bytes.layer_replicated[size_t(l)]) + k * share / total_w * one;
                layer_gpu = std::max(layer_gpu, seconds(bytes, gbps));
            }
            if (stage.size() > 1) layer_gpu += lat + seconds(k * row, p.link_gbps);  // the pair's exchange
            const double c = plan.cold.row_share.empty() ? 0.0 : plan.cold.row_share[size_t(l)];
            const double one_cold = cold_expert ? double(*cold_expert) : one;
            const double layer_cold = c > 0.0 ? 2.0 * lat + seconds(k * c * one_cold, p.cpu_gbps) : 0.0;
            gpu_s += layer_gpu;
            cold_s += layer_cold;
            total_s += std::max(layer_gpu, layer_cold);
        }
    }
    double tail = 0.0;
    for (const placement_device_plan &d : plan.devices)
        if (d.bytes_head > 0) tail = std::max(tail, seconds(double(d.bytes_head), p.gpu_gbps));
    const auto stages = placement_stage_members(plan);
    for (size_t s = 1; s < stages.size(); ++s) {
        const placement_device_plan &da = plan.devices[size_t(stages[s - 1][0])], &db = plan.devices[size_t(stages[s][0])];
        if (da.host != db.host) {  // x and h cross the network once
            tail += p.host_link_latency_us * 1e-6 + seconds(2.0 * row, p.host_link_gbps);
            continue;
        }
        const int32_t a = da.physical, b = db.physical;
        // x and h move to the next stage; without P2P they pass through host memory (two copies).
        tail += (topo.p2p(a, b) ? 1.0 : 2.0) * (lat + seconds(2.0 * row, p.link_gbps));
    }
    p.gpu_ms = (gpu_s + tail) * 1e3;
    p.cold_ms = cold_s * 1e3;
    p.tok_s = 1.0 / (total_s + tail);
    return p;
}

}  // namespace tandem::cold_tier

namespace tandem {

std::optional<uint64_t> placement_parse_host_experts(std::string_view spec, const topology &topo) {
    std::string_view v = spec;
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    if (v == "off") return std::nullopt;
    if (v == "auto") {
        if (!topo.host || !(topo.host->memory_gib > 0.0))
            fail(error_kind::config, "--host-experts auto: the host's memory is unknown (give the topology a \"host\" "
                 "entry with memory_gib, or give GiB)");
        const uint64_t memory = uint64_t(std::llround(topo.host->memory_gib * double(gib)));
        // Beyond the experts the host keeps the OS, the server and its buffers: 4 GiB or 10%.
        const uint64_t reserve = topo.host->reserve_gib ? uint64_t(std::llround(*topo.host->reserve_gib * double(gib)))
                                                        : std::max<uint64_t>(4 * gib, memory / 10);
        return memory > reserve ? memory - reserve : 0;
    }
    double g = 0.0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), g);
    if (ec != std::errc() || ptr != v.data() + v.size() || !std::isfinite(g) || g < 0.0 || g > 1e6)
        fail(error_kind::config, "--host-experts '{}': expected off, auto or a number of GiB (>= 0)", spec);
    return uint64_t(std::llround(g * double(gib)));
}

}  // namespace tandem
