// placement/planner.cpp - the planner proper: resolves devices, order and budgets, pairs devices,
// splits experts and head rows, and assigns contiguous layer ranges to stages by bytes.
#include "placement/cold_tier.h"
#include "tandem/error.h"
#include "tandem/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>

namespace tandem {

const char *placement_mode_name(placement_mode mode) {
    switch (mode) {
    case placement_mode::single: return "single";
    case placement_mode::pipeline: return "pipeline";
    case placement_mode::tensor_parallel: return "tp";
    }
    return "unknown";
}

const char *placement_role_name(placement_role role) {
    switch (role) {
    case placement_role::single: return "single";
    case placement_role::host: return "host";
    case placement_role::partner: return "partner";
    }
    return "unknown";
}

int32_t placement_plan::stage_of_layer(int32_t layer) const {
    for (const auto &d : devices)
        if (layer >= d.layer_begin && layer < d.layer_end) return d.stage;
    return -1;
}

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::vector<std::string_view> split_commas(std::string_view spec, const char *flag) {
    std::vector<std::string_view> out;
    size_t start = 0;
    while (true) {
        const size_t comma = spec.find(',', start);
        const std::string_view item = trim(spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start));
        if (item.empty()) fail(error_kind::config, "{} '{}': empty element in the list", flag, spec);
        out.push_back(item);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return out;
}

std::string join_ids(const std::vector<int32_t> &ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s;
}

double to_gib(uint64_t bytes) { return double(bytes) / double(gib); }

uint64_t mul_checked(uint64_t a, uint64_t b, const char *what) {
    if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
        fail(error_kind::config, "{} overflows 64 bits ({} x {})", what, a, b);
    return a * b;
}

// Best pairing of `ids` (sorted ascending; duplicates allowed) over P2P links: fewest devices
// left out, then lowest sum of link ranks, then the lexicographically first choice. Exact DP over
// subsets (2^n states), so the 8- and 16-GPU boxes we know are solved exactly; past 20 devices it
// falls back to greedy best-rank-first.
struct pairing {
    std::vector<std::pair<size_t, size_t>> pairs;  // indices into ids, first < second
    std::vector<size_t> left_out;
};

pairing pair_devices(const std::vector<int32_t> &ids, const topology &topo) {
    const size_t n = ids.size();
    // Link ranks looked up once: the subset DP below visits each pair up to 2^(n-2) times.
    std::vector<int64_t> ranks(n * n, -1);  // -1: no P2P
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j) {
            const topology_link *l = ids[i] == ids[j] ? nullptr : topo.link(ids[i], ids[j]);
            ranks[i * n + j] = ids[i] == ids[j] ? 0 : l && l->p2p ? l->rank : -1;
        }
    auto rank_of = [&](size_t i, size_t j) { return ranks[i * n + j]; };
    pairing out;
    if (n > 20) {
        std::vector<std::tuple<int64_t, size_t, size_t>> cand;
        for (size_t i = 0; i < n; ++i)
            for (size_t j = i + 1; j < n; ++j)
                if (rank_of(i, j) >= 0) cand.emplace_back(rank_of(i, j), i, j);
        std::sort(cand.begin(), cand.end());
        std::vector<bool> used(n, false);
        for (auto [r, i, j] : cand)
            if (!used[i] && !used[j]) {
                used[i] = used[j] = true;
                out.pairs.emplace_back(i, j);
            }
        for (size_t i = 0; i < n; ++i)
            if (!used[i]) out.left_out.push_back(i);
        std::sort(out.pairs.begin(), out.pairs.end());
        return out;
    }
    // cost = left_out * big + rank sum; choice = partner index, or n for "left out".
    const uint32_t full = (uint32_t{1} << n) - 1;
    constexpr int64_t big = int64_t{1} << 40;
    std::vector<int64_t> cost(size_t{1} << n, -1);
    std::vector<uint8_t> choice(size_t{1} << n, 0);
    cost[full] = 0;
    // Masks with more bits set are solved first, so every successor is known.
    for (int64_t mask = int64_t(full) - 1; mask >= 0; --mask) {
        const uint32_t m = uint32_t(mask);
        size_t i = 0;
        while (m & (uint32_t{1} << i)) ++i;
        int64_t best = std::numeric_limits<int64_t>::max();
        uint8_t pick = uint8_t(n);
        for (size_t j = i + 1; j < n; ++j) {
            if (m & (uint32_t{1} << j)) continue;
            const int64_t r = rank_of(i, j);
            if (r < 0) continue;
            const int64_t c = r + cost[m | (uint32_t{1} << i) | (uint32_t{1} << j)];
            if (c < best) best = c, pick = uint8_t(j);
        }
        const int64_t skip = big + cost[m | (uint32_t{1} << i)];
        if (skip < best) best = skip, pick = uint8_t(n);
        cost[m] = best;
        choice[m] = pick;
    }
    uint32_t m = 0;
    while (m != full) {
        size_t i = 0;
        while (m & (uint32_t{1} << i)) ++i;
        const size_t j = choice[m];
        if (j == n) {
            out.left_out.push_back(i);
            m |= uint32_t{1} << i;
        } else {
            out.pairs.emplace_back(i, j);
            m |= (uint32_t{1} << i) | (uint32_t{1} << j);
        }
    }
    return out;
}

std::vector<int32_t> pairing_order(const std::vector<int32_t> &ids, const pairing &p) {
    std::vector<int32_t> order;
    for (auto [h, q] : p.pairs) order.push_back(ids[h]);
    for (auto [h, q] : p.pairs) order.push_back(ids[q]);
    return order;
}

}  // namespace

device_list placement_parse_devices(std::string_view spec) {
    device_list out;
    if (trim(spec) == "auto") {
        out.auto_order = true;
        return out;
    }
    for (std::string_view item : split_commas(spec, "--gpu-devices")) {
        int32_t v = -1;
        const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (ec != std::errc() || ptr != item.data() + item.size() || v < 0)
            fail(error_kind::config, "--gpu-devices '{}': '{}' is not a device id (non-negative integer) or 'auto'",
                 spec, item);
        out.ids.push_back(v);
    }
    return out;
}

std::vector<uint64_t> placement_parse_vram(std::string_view spec, size_t n_devices) {
    if (trim(spec) == "auto") return {};
    std::vector<uint64_t> values;
    for (std::string_view item : split_commas(spec, "--gpu-vram")) {
        double v = 0.0;
        const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (ec != std::errc() || ptr != item.data() + item.size() || !std::isfinite(v) || v <= 0.0 || v > 1e6)
            fail(error_kind::config, "--gpu-vram '{}': '{}' is not a positive number of GiB (or use 'auto')", spec,
                 item);
        values.push_back(uint64_t(std::llround(v * double(gib))));
    }
    if (values.size() == 1) return std::vector<uint64_t>(n_devices, values[0]);
    if (values.size() != n_devices)
        fail(error_kind::config, "--gpu-vram '{}' has {} values but there are {} devices: give one value for all "
             "devices or one per device", spec, values.size(), n_devices);
    return values;
}

std::vector<int32_t> placement_auto_order(const topology &topo, placement_mode mode) {
    if (topo.devices.empty()) fail(error_kind::config, "--gpu-devices auto: the topology lists no devices");
    std::vector<int32_t> ids;
    for (const auto &d : topo.devices) ids.push_back(d.id);
    std::sort(ids.begin(), ids.end());
    switch (mode) {
    case placement_mode::single: {
        int32_t best = ids[0];
        for (int32_t id : ids)
            if (topo.find(id)->memory_gib > topo.find(best)->memory_gib) best = id;
        return {best};
    }
    case placement_mode::pipeline: return ids;
    case placement_mode::tensor_parallel: {
        const pairing p = pair_devices(ids, topo);
        if (p.pairs.empty())
            fail(error_kind::config, "--gpu-devices auto --tensor-parallel: no two devices of the topology ({}) have "
                 "P2P access; use pipeline mode (drop --tensor-parallel)", join_ids(ids));
        return pairing_order(ids, p);
    }
    }
    return ids;
}

namespace {

void check_request(const placement_request &req, const placement_model &model) {
    // These come from a validated file, but the planner is also a library.
    if (model.n_layer < 1 || model.n_expert < 1 || model.n_vocab < 1)
        fail(error_kind::config, "placement: model needs n_layer, n_expert, n_vocab >= 1 (got {}, {}, {})", model.n_layer,
             model.n_expert, model.n_vocab);
    if (model.bytes.layer_replicated.size() != size_t(model.n_layer) || model.bytes.layer_experts.size() != size_t(model.n_layer))
        fail(error_kind::config, "placement: model bytes list {} / {} layers but n_layer is {}",
             model.bytes.layer_replicated.size(), model.bytes.layer_experts.size(), model.n_layer);
    if (req.n_sessions < 1 || req.n_ctx < 1)
        fail(error_kind::config, "placement: sessions ({}) and context ({}) must be >= 1", req.n_sessions, req.n_ctx);
    if (req.traffic) {
        const auto &c = req.traffic->counts;
        const bool ragged = std::any_of(c.begin(), c.end(), [&](const auto &row) { return row.size() != c[0].size(); });
        if (c.size() != size_t(model.n_layer) || c.empty() || c[0].size() != size_t(model.n_expert) || ragged)
            fail(error_kind::config, "--expert-balance: the routing profile has {} layers x {} experts but the model "
                 "has {} x {}: it was recorded on another model", c.size(), c.empty() ? 0 : c[0].size(), model.n_layer,
                 model.n_expert);
    }
}

// The logical devices in order (auto: from the topology, noting who was left out), checked against
// the topology and the mode; sets plan.n_stages.
std::vector<int32_t> resolve_devices(const placement_request &req, const topology &topo, placement_plan &plan) {
    const bool tp = req.mode == placement_mode::tensor_parallel;
    std::vector<int32_t> ids;
    if (req.auto_order) {
        ids = placement_auto_order(topo, req.mode);
        for (const auto &d : topo.devices)
            if (std::find(ids.begin(), ids.end(), d.id) == ids.end())
                plan.notes.push_back(fmt::format("auto left out device {} ({}): {}", d.id, d.name,
                                                 tp ? "no free P2P partner" : "single-device mode"));
    } else {
        ids = req.devices;
    }
    if (ids.empty()) fail(error_kind::config, "--gpu-devices: no devices given");
    std::vector<int32_t> known;
    for (const auto &d : topo.devices) known.push_back(d.id);
    std::sort(known.begin(), known.end());
    for (int32_t id : ids)
        if (!topo.find(id))
            fail(error_kind::config, "--gpu-devices {}: device {} is not in the topology (devices: {})", join_ids(ids),
                 id, join_ids(known));
    const int32_t n = int32_t(ids.size());
    if (req.mode == placement_mode::single && n != 1)
        fail(error_kind::config, "single-device mode takes one device, got {} ({}): use pipeline stages or "
             "--tensor-parallel", n, join_ids(ids));
    if (tp && (n < 2 || n % 2 != 0))
        fail(error_kind::config, "--tensor-parallel needs an even number of devices (pairs), got {} ({})", n,
             join_ids(ids));
    plan.n_stages = tp ? n / 2 : n;
    if (plan.n_stages > plan.n_layer)
        fail(error_kind::config, "{} stages but the model has only {} layers (each stage needs at least one)",
             plan.n_stages, plan.n_layer);
    return ids;
}

// Every tensor-parallel pair must have P2P; else name an order that pairs them, if one exists.
void check_pairs_p2p(const std::vector<int32_t> &ids, int32_t n_stages, const topology &topo) {
    for (int32_t i = 0; i < n_stages; ++i) {
        const int32_t a = ids[i], b = ids[i + n_stages];
        if (topo.p2p(a, b)) continue;
        std::vector<int32_t> sorted = ids;
        std::sort(sorted.begin(), sorted.end());
        const pairing p = pair_devices(sorted, topo);
        const std::string fix = p.left_out.empty()
            ? fmt::format("use --gpu-devices {} (or auto)", join_ids(pairing_order(sorted, p)))
            : std::string("no order of these devices pairs them all over P2P: choose other devices or drop "
                          "--tensor-parallel for pipeline stages");
        fail(error_kind::config, "tensor-parallel pair {} (logical {} = device {}, logical {} = device {}) has no "
             "P2P access; {}", i, i, a, i + n_stages, b, fix);
    }
}

// Several hosts: each host's devices in turn; with pairs, each host's first half are stage hosts
// and its second half their partners, so no pair spans hosts and stages stay contiguous per host.
// Reorders req's devices (and per-device budgets) to the plan's logical order; returns each
// logical device's host (empty without hosts).
std::vector<int32_t> hosts_order(placement_request &req) {
    if (req.hosts.empty()) return {};
    if (req.auto_order)
        fail(error_kind::config, "--gpu-devices auto cannot be combined with --hosts: list each host's devices in turn");
    if (req.host_experts && req.hosts.size() > 1)
        fail(error_kind::config, "--host-experts cannot be combined with several hosts (each host's tier would need "
             "its own budget): drop --host-experts or use one host");
    size_t total = 0;
    for (const placement_host &h : req.hosts) total += size_t(h.n_devices);
    if (total != req.devices.size())
        fail(error_kind::config, "--hosts lists {} devices in all but the plan has {} ({})", total, req.devices.size(),
             join_ids(req.devices));
    const bool tp = req.mode == placement_mode::tensor_parallel;
    std::vector<size_t> order, firsts, seconds;
    std::vector<int32_t> host_of, host_firsts, host_seconds;
    size_t at = 0;
    for (int32_t h = 0; h < int32_t(req.hosts.size()); ++h) {
        const int32_t n = req.hosts[size_t(h)].n_devices;
        if (tp && n % 2 != 0)
            fail(error_kind::config, "--tensor-parallel: host '{}' has {} devices; pairs never span hosts, so each "
                 "host needs an even count", req.hosts[size_t(h)].name, n);
        for (int32_t k = 0; k < n; ++k, ++at) {
            const bool second = tp && k >= n / 2;
            (second ? seconds : firsts).push_back(at);
            (second ? host_seconds : host_firsts).push_back(h);
        }
    }
    order = firsts;
    order.insert(order.end(), seconds.begin(), seconds.end());
    host_of = host_firsts;
    host_of.insert(host_of.end(), host_seconds.begin(), host_seconds.end());
    std::vector<int32_t> devices;
    std::vector<uint64_t> budgets;
    for (size_t i : order) {
        devices.push_back(req.devices[i]);
        if (req.budgets.size() == req.devices.size()) budgets.push_back(req.budgets[i]);
    }
    req.devices = std::move(devices);
    if (!budgets.empty()) req.budgets = std::move(budgets);
    return host_of;
}

// Each logical device's budget: --gpu-vram (one for all or one each; logical devices sharing a
// device must fit in it together), else the device's memory less its reserve, shared evenly.
std::vector<uint64_t> device_budgets(const placement_request &req, const topology &topo, const std::vector<int32_t> &ids,
                                     const std::vector<int32_t> &host_of) {
    const int32_t n = int32_t(ids.size());
    auto key = [&](int32_t i) { return std::pair(host_of.empty() ? 0 : host_of[size_t(i)], ids[size_t(i)]); };
    std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> sharing;  // (host, physical id) -> logical indices
    for (int32_t i = 0; i < n; ++i) sharing[key(i)].push_back(i);
    std::vector<uint64_t> budget(n);
    if (req.budgets.empty()) {
        for (int32_t i = 0; i < n; ++i) {
            const topology_device &d = *topo.find(ids[i]);
            const uint64_t memory = uint64_t(std::llround(d.memory_gib * double(gib)));
            const uint64_t reserve = std::min(memory, topology_reserve_bytes(d));
            budget[i] = (memory - reserve) / sharing[key(i)].size();
        }
        return budget;
    }
    if (req.budgets.size() != 1 && req.budgets.size() != size_t(n))
        fail(error_kind::config, "--gpu-vram has {} values but there are {} devices: give one value for all devices "
             "or one per device", req.budgets.size(), n);
    for (int32_t i = 0; i < n; ++i) budget[i] = req.budgets.size() == 1 ? req.budgets[0] : req.budgets[i];
    for (const auto &[where, logical] : sharing) {
        const topology_device &d = *topo.find(where.second);
        uint64_t sum = 0;
        for (int32_t i : logical) sum += budget[i];
        if (sum > uint64_t(std::llround(d.memory_gib * double(gib))))
            fail(error_kind::config, "--gpu-vram: the budgets of logical device(s) {} on {}device {} ({}) sum to "
                 "{:.2f} GiB but it has {:.2f} GiB", join_ids(logical),
                 req.hosts.empty() ? std::string() : fmt::format("host '{}' ", req.hosts[size_t(where.first)].name),
                 where.second, d.name, to_gib(sum), d.memory_gib);
    }
    return budget;
}

// Pairs only: per layer, per expert, whether the stage host holds it (the first half by index, or
// a split by recorded traffic); records each layer's share of routed rows on the host.
std::vector<std::vector<bool>> expert_halves(const placement_request &req, const placement_model &model, bool tp,
                                             placement_plan &plan) {
    std::vector<std::vector<bool>> host_half(size_t(model.n_layer));
    if (!tp) return host_half;
    plan.traffic_balanced = req.traffic.has_value();
    for (int32_t l = 0; l < model.n_layer; ++l) {
        if (plan.traffic_balanced) {
            host_half[l] = expert_traffic_split(req.traffic->counts[l]);
            const auto &c = req.traffic->counts[l];
            uint64_t all = 0, h = 0;
            for (int32_t e = 0; e < model.n_expert; ++e) all += c[e], h += host_half[l][e] ? c[e] : 0;
            plan.host_row_share.push_back(all ? double(h) / double(all) : 0.5);
        } else {
            host_half[l].assign(model.n_expert, false);
            for (int32_t e = 0; e < (model.n_expert + 1) / 2; ++e) host_half[l][e] = true;
        }
    }
    return host_half;
}

// Bytes by role: a layer's KV, its experts on the stage host and on the partner, the head's split.
struct role_bytes {
    uint64_t kv_layer = 0;
    std::vector<uint64_t> host_exp, part_exp;  // [layer]
    int32_t head_split = 0;                    // the host holds head rows [0, head_split)
    uint64_t head_host = 0;
};

role_bytes role_bytes_of(const placement_request &req, const placement_model &model, bool tp,
                         const std::vector<std::vector<bool>> &host_half) {
    const int32_t n_layer = model.n_layer;
    role_bytes rb;
    const uint64_t kv_tokens = mul_checked(uint64_t(req.n_sessions), uint64_t(req.n_ctx), "sessions x ctx");
    const uint64_t kv_per_layer_token = (model.bytes.kv_per_token + uint64_t(n_layer) - 1) / uint64_t(n_layer);
    rb.kv_layer = mul_checked(kv_per_layer_token, kv_tokens, "KV bytes");
    rb.host_exp.assign(n_layer, 0);
    rb.part_exp.assign(n_layer, 0);
    for (int32_t l = 0; l < n_layer; ++l) {
        const uint64_t all = model.bytes.layer_experts[l];
        if (!tp) {
            rb.host_exp[l] = all;
            continue;
        }
        const uint64_t k = uint64_t(std::count(host_half[l].begin(), host_half[l].end(), true));
        // Every expert has the same shape, so bytes are proportional to the count; exact when the
        // file's expert tensors divide by n_expert (always, for real files).
        rb.host_exp[l] = (all / uint64_t(model.n_expert)) * k + (all % uint64_t(model.n_expert)) * k / uint64_t(model.n_expert);
        rb.part_exp[l] = all - rb.host_exp[l];
    }
    rb.head_split = tp ? (model.n_vocab + 1) / 2 : model.n_vocab;
    rb.head_host = tp ? model.bytes.head / uint64_t(model.n_vocab) * uint64_t(rb.head_split) +
                            model.bytes.head % uint64_t(model.n_vocab) * uint64_t(rb.head_split) / uint64_t(model.n_vocab)
                      : model.bytes.head;
    return rb;
}

// Everything the layer DP needs about one logical device.
struct dev_costs {
    std::vector<uint64_t> prefix;  // prefix[l] = bytes of layers [0, l) in this device's role
    uint64_t fixed = 0;            // embedding / head share in its stage
    int64_t avail = 0;             // budget - scratch (may be negative)
};

struct stage_eval {
    int64_t overflow;  // max over the stage's devices of (bytes - avail)
    uint64_t load;     // max over the stage's devices of bytes
};

// One DP over (stage, end layer), each stage at least one layer: stage_cost(s, b, e) is the cost of
// stage s covering layers [b, e) (nullopt: not allowed), combine folds it into the stages before,
// worse(have, cand) says cand is better. Returns whether a partition exists and its bounds: stage s
// covers [bounds[s], bounds[s + 1]).
template <typename Cost, typename Combine, typename Worse, typename T>
std::pair<bool, std::vector<int32_t>> stage_dp(int32_t S, int32_t L, Cost stage_cost, Combine combine, Worse worse, T init) {
    std::vector<std::vector<T>> f(S, std::vector<T>(L + 1, init));
    std::vector<std::vector<int32_t>> arg(S, std::vector<int32_t>(L + 1, -1));
    std::vector<std::vector<bool>> ok(S, std::vector<bool>(L + 1, false));
    for (int32_t e = 1; e <= L - (S - 1); ++e) {
        auto c = stage_cost(0, 0, e);
        if (c) f[0][e] = *c, ok[0][e] = true, arg[0][e] = 0;
    }
    for (int32_t s = 1; s < S; ++s)
        for (int32_t e = s + 1; e <= L - (S - 1 - s); ++e)
            for (int32_t b = s; b < e; ++b) {
                if (!ok[s - 1][b]) continue;
                auto c = stage_cost(s, b, e);
                if (!c) continue;
                const T v = combine(f[s - 1][b], *c);
                if (!ok[s][e] || worse(f[s][e], v)) f[s][e] = v, ok[s][e] = true, arg[s][e] = b;
            }
    std::vector<int32_t> bounds(S + 1, L);
    if (!ok[S - 1][L]) return {false, bounds};
    for (int32_t s = S - 1, e = L; s >= 0; --s) bounds[s] = arg[s][e], e = arg[s][e];
    return {true, bounds};
}

// Layer ranges by three DPs: 1) minimise the worst overflow (> 0: does not fit; the partition then
// names the culprits); 2) minimise the largest stage load within budgets (the slowest stage paces
// the pipeline); 3) among those, minimise the sum of squared loads so the other stages are even
// too. `worst` gets the worst overflow of the result.
template <typename Eval>
std::vector<int32_t> stage_bounds(int32_t S, int32_t L, Eval eval, int64_t &worst) {
    auto maxi = [](auto a, auto b) { return std::max(a, b); };
    auto worse = [](auto have, auto cand) { return cand < have; };
    const auto [found1, fit_bounds] =
        stage_dp(S, L, [&](int32_t s, int32_t b, int32_t e) { return std::optional<int64_t>(eval(s, b, e).overflow); }, maxi,
                 worse, int64_t{0});
    TANDEM_ASSERT(found1, "every partition has a finite overflow");
    worst = std::numeric_limits<int64_t>::min();
    for (int32_t s = 0; s < S; ++s) worst = std::max(worst, eval(s, fit_bounds[s], fit_bounds[s + 1]).overflow);
    if (worst > 0) return fit_bounds;
    auto feasible_load = [&](int32_t s, int32_t b, int32_t e) {
        const stage_eval r = eval(s, b, e);
        return r.overflow <= 0 ? std::optional<uint64_t>(r.load) : std::nullopt;
    };
    const auto [found2, b2] = stage_dp(S, L, feasible_load, maxi, worse, uint64_t{0});
    TANDEM_ASSERT(found2);
    uint64_t best_max = 0;
    for (int32_t s = 0; s < S; ++s) best_max = std::max(best_max, eval(s, b2[s], b2[s + 1]).load);
    auto squared = [&](int32_t s, int32_t b, int32_t e) {
        const stage_eval r = eval(s, b, e);
        const double g = to_gib(r.load);
        return r.overflow <= 0 && r.load <= best_max ? std::optional<double>(g * g) : std::nullopt;
    };
    const auto [found3, b3] = stage_dp(S, L, squared, [](double a, double b) { return a + b; }, worse, 0.0);
    TANDEM_ASSERT(found3);
    return b3;
}

// The refusal of a plan that does not fit: each device over budget, by how much, and its biggest class.
[[noreturn]] void fail_not_fit(const placement_plan &plan, const char *why) {
    std::string what;
    uint64_t need = 0, have = 0;
    for (const auto &dp : plan.devices) {
        need += dp.total();
        have += dp.budget;
        if (dp.total() <= dp.budget) continue;
        const std::pair<uint64_t, const char *> classes[] = {
            {dp.bytes_experts, "routed experts"}, {dp.bytes_replicated, "attention/norms/router"},
            {dp.bytes_kv, "KV cache"}, {dp.bytes_head, "output head"}, {dp.bytes_embedding, "embedding"},
            {dp.bytes_scratch, "scratch"}};
        const auto *big = std::max_element(std::begin(classes), std::end(classes));
        what += fmt::format("{}{}device d{} (physical {} {}, stage {} {}, layers {}-{}) needs {:.2f} GiB but its "
                            "budget is {:.2f} GiB: {:.2f} GiB missing (biggest class: {} {:.2f} GiB)",
                            what.empty() ? "" : "; ",
                            plan.hosts.empty() ? std::string() : fmt::format("host '{}' ", plan.hosts[size_t(dp.host)].name),
                            dp.logical, dp.physical, dp.name, dp.stage,
                            placement_role_name(dp.role), dp.layer_begin, dp.layer_end - 1, to_gib(dp.total()),
                            to_gib(dp.budget), to_gib(dp.total() - dp.budget), big->second, to_gib(big->first));
    }
    fail(error_kind::config, "the plan does not fit{}: {}. In all the plan needs {:.2f} GiB and the budgets total "
         "{:.2f} GiB; lower --ctx or --batched-session, raise --gpu-vram, or add devices{}", why, what, to_gib(need),
         to_gib(have), plan.cold.allowed ? "" : " (or give routed experts a host tier: --host-experts)");
}

// What the layer DPs and the device build share: the request resolved against the topology.
struct plan_inputs {
    const placement_request &req;
    const placement_model &model;
    bool tp;
    int32_t n_stages;
    std::vector<uint64_t> budget;
    role_bytes rb;
    std::vector<int32_t> host_of;  // [logical] host index; empty: one host
};

// Per logical device, the bytes of its layers in its role, with each layer's routed experts scaled
// by `fraction` (1: all on the GPUs; less: the rest on the host tier).
std::vector<dev_costs> device_costs(const plan_inputs &in, double fraction) {
    const int32_t n = int32_t(in.budget.size()), n_layer = in.model.n_layer;
    std::vector<dev_costs> costs(n);
    for (int32_t i = 0; i < n; ++i) {
        const bool partner = in.tp && i >= in.n_stages;
        const int32_t stage = in.tp ? i % in.n_stages : i;
        auto &c = costs[i];
        c.prefix.assign(n_layer + 1, 0);
        for (int32_t l = 0; l < n_layer; ++l) {
            const uint64_t experts = partner ? in.rb.part_exp[l] : in.rb.host_exp[l];
            const uint64_t scaled = fraction >= 1.0 ? experts : uint64_t(std::ceil(double(experts) * fraction));
            c.prefix[l + 1] = c.prefix[l] + in.model.bytes.layer_replicated[l] + scaled + in.rb.kv_layer;
        }
        if (stage == 0 && !partner) c.fixed += in.model.bytes.embedding;
        if (stage == in.n_stages - 1) c.fixed += partner ? in.model.bytes.head - in.rb.head_host : in.rb.head_host;
        c.avail = int64_t(in.budget[i]) - int64_t(in.req.scratch_bytes);
    }
    return costs;
}

// Stage bounds for the given costs; `worst` gets the worst overflow (> 0: does not fit).
std::vector<int32_t> bounds_of(const plan_inputs &in, const std::vector<dev_costs> &costs, int64_t &worst) {
    auto eval = [&](int32_t s, int32_t b, int32_t e) {
        stage_eval r{std::numeric_limits<int64_t>::min(), 0};
        for (int32_t i : in.tp ? std::vector<int32_t>{s, s + in.n_stages} : std::vector<int32_t>{s}) {
            const uint64_t bytes = costs[i].fixed + costs[i].prefix[e] - costs[i].prefix[b];
            r.overflow = std::max(r.overflow, int64_t(bytes) - costs[i].avail);
            r.load = std::max(r.load, bytes);
        }
        return r;
    };
    return stage_bounds(in.n_stages, in.model.n_layer, eval, worst);
}

// The plan's devices over `bounds`; held(i, l) gives the routed experts logical device i keeps of
// layer l (sorted), whose bytes follow their count.
template <typename Held>
void build_devices(placement_plan &plan, const plan_inputs &in, const topology &topo, const std::vector<int32_t> &ids,
                   const std::vector<int32_t> &bounds, Held held) {
    const placement_model &model = in.model;
    for (int32_t i = 0; i < int32_t(ids.size()); ++i) {
        const topology_device &d = *topo.find(ids[i]);
        const bool partner = in.tp && i >= in.n_stages;
        placement_device_plan dp;
        dp.logical = i;
        dp.physical = ids[i];
        dp.name = d.name;
        dp.stage = in.tp ? i % in.n_stages : i;
        dp.host = in.host_of.empty() ? 0 : in.host_of[size_t(i)];
        dp.role = !in.tp ? placement_role::single : partner ? placement_role::partner : placement_role::host;
        dp.partner = !in.tp ? -1 : partner ? i - in.n_stages : i + in.n_stages;
        dp.layer_begin = bounds[dp.stage];
        dp.layer_end = bounds[dp.stage + 1];
        for (int32_t l = dp.layer_begin; l < dp.layer_end; ++l) {
            std::vector<int32_t> experts = held(i, l);
            const uint64_t all = model.bytes.layer_experts[l], n_expert = uint64_t(model.n_expert);
            const size_t pair_held =
                partner ? experts.size() + plan.devices[size_t(dp.partner)].experts[size_t(l - dp.layer_begin)].size() : 0;
            // A pair holding every expert: the partner has the layer's bytes less its host's, exactly.
            dp.bytes_experts += pair_held == n_expert ? all - cold_tier::expert_bytes(all, model.n_expert, n_expert - experts.size())
                                                      : cold_tier::expert_bytes(all, model.n_expert, experts.size());
            dp.experts.push_back(std::move(experts));
            dp.bytes_replicated += model.bytes.layer_replicated[l];
            dp.bytes_kv += in.rb.kv_layer;
        }
        dp.embedding = dp.stage == 0 && !partner;
        dp.bytes_embedding = dp.embedding ? model.bytes.embedding : 0;
        if (dp.stage == in.n_stages - 1) {
            dp.head_begin = partner ? in.rb.head_split : 0;
            dp.head_end = partner ? model.n_vocab : in.rb.head_split;
            dp.bytes_head = partner ? model.bytes.head - in.rb.head_host : in.rb.head_host;
        }
        dp.bytes_scratch = in.req.scratch_bytes;
        dp.budget = in.budget[i];
        plan.devices.push_back(std::move(dp));
    }
}

// The largest share of routed expert bytes the GPUs can hold with layer ranges still fitting
// (bisection over the layer DP's feasibility); -1 when even none fits.
double gpu_expert_fraction(const plan_inputs &in) {
    int64_t worst = 0;
    bounds_of(in, device_costs(in, 0.0), worst);
    if (worst > 0) return -1.0;
    double lo = 0.0, hi = 1.0;
    // 2^-20 of the expert bytes: far below one expert of any real model.
    for (int iter = 0; iter < 20; ++iter) {
        const double mid = 0.5 * (lo + hi);
        bounds_of(in, device_costs(in, mid), worst);
        (worst > 0 ? hi : lo) = mid;
    }
    return lo;
}

// The host tier: layer ranges for the fitting fraction, then each stage's members filled with their
// busiest experts; the rest is cold.
void plan_with_cold_tier(placement_plan &plan, const plan_inputs &in, const topology &topo,
                         const std::vector<int32_t> &ids, const std::vector<std::vector<uint64_t>> &w) {
    const double fraction = gpu_expert_fraction(in);
    const std::vector<dev_costs> costs = device_costs(in, std::max(0.0, fraction));
    int64_t worst = 0;
    const std::vector<int32_t> bounds = bounds_of(in, costs, worst);
    if (fraction < 0.0) {
        build_devices(plan, in, topo, ids, bounds, [](int32_t, int32_t) { return std::vector<int32_t>{}; });
        fail_not_fit(plan, " even with every routed expert on the host tier");
    }
    std::vector<std::vector<std::vector<int32_t>>> held(ids.size());  // [logical][layer - begin]
    for (int32_t s = 0; s < in.n_stages; ++s) {
        const std::vector<int32_t> members = in.tp ? std::vector<int32_t>{s, s + in.n_stages} : std::vector<int32_t>{s};
        std::vector<int64_t> rooms;
        for (int32_t i : members) {
            const dev_costs &c = costs[size_t(i)];
            int64_t other = int64_t(c.fixed);
            for (int32_t l = bounds[s]; l < bounds[s + 1]; ++l) other += int64_t(in.model.bytes.layer_replicated[l] + in.rb.kv_layer);
            rooms.push_back(std::max<int64_t>(0, c.avail - other));
        }
        auto picked = cold_tier::pick(in.model, w, bounds[s], bounds[s + 1], rooms);
        for (size_t m = 0; m < members.size(); ++m) held[size_t(members[m])] = std::move(picked[m]);
    }
    build_devices(plan, in, topo, ids, bounds,
                  [&](int32_t i, int32_t l) { return held[size_t(i)][size_t(l - bounds[in.tp ? i % in.n_stages : i])]; });
    cold_tier::finish(plan, in.model, w, *in.req.host_experts, in.req.cold_expert_bytes);
    if (in.tp)  // the pair host's share of each layer's rows, of all of them (cold ones included)
        for (int32_t l = 0; l < in.model.n_layer; ++l) {
            const placement_device_plan &h = plan.devices[size_t(plan.stage_of_layer(l))];
            uint64_t mine = 0, all = 0;
            for (uint64_t c : w[size_t(l)]) all += c;
            for (int32_t e : h.experts[size_t(l - h.layer_begin)]) mine += w[size_t(l)][size_t(e)];
            plan.host_row_share[size_t(l)] = double(mine) / double(all);
        }
}

}  // namespace

placement_plan placement_plan_make(const placement_request &request, const topology &topo, const placement_model &model) {
    check_request(request, model);
    placement_request req = request;
    const std::vector<int32_t> host_of = hosts_order(req);
    placement_plan plan;
    plan.hosts = req.hosts;
    plan.host_link = req.host_link;
    plan.mode = req.mode;
    plan.n_layer = model.n_layer;
    plan.n_expert = model.n_expert;
    plan.n_vocab = model.n_vocab;
    plan.n_sessions = req.n_sessions;
    plan.n_ctx = req.n_ctx;
    const bool tp = req.mode == placement_mode::tensor_parallel;
    const std::vector<int32_t> ids = resolve_devices(req, topo, plan);
    if (tp) check_pairs_p2p(ids, plan.n_stages, topo);
    const std::vector<std::vector<bool>> host_half = expert_halves(req, model, tp, plan);
    const plan_inputs in{req, model, tp, plan.n_stages, device_budgets(req, topo, ids, host_of),
                         role_bytes_of(req, model, tp, host_half), host_of};
    const std::vector<std::vector<uint64_t>> w = cold_tier::weights(req, model);
    plan.cold.allowed = req.host_experts.has_value();
    plan.cold.budget = req.host_experts.value_or(0);
    plan.cold.row_share.assign(size_t(model.n_layer), 0.0);

    int64_t worst = 0;
    const std::vector<int32_t> bounds = bounds_of(in, device_costs(in, 1.0), worst);
    if (worst > 0 && plan.cold.allowed) {
        if (plan.host_row_share.empty() && tp) plan.host_row_share.assign(size_t(model.n_layer), 0.0);
        plan_with_cold_tier(plan, in, topo, ids, w);
    } else {
        build_devices(plan, in, topo, ids, bounds, [&](int32_t i, int32_t l) {
            const bool partner = tp && i >= plan.n_stages;
            std::vector<int32_t> held;
            for (int32_t e = 0; e < model.n_expert; ++e)
                if (!tp || host_half[l][e] != partner) held.push_back(e);
            return held;
        });
        plan.cold.experts.assign(size_t(model.n_layer), {});
        if (worst > 0) fail_not_fit(plan, "");
    }
    if (req.traffic && !tp && !plan.cold.used())
        plan.notes.push_back("expert traffic not used: only tensor-parallel pairs and the host tier place experts by it");
    plan.prediction = cold_tier::predict(plan, model, topo, w, req.cold_expert_bytes);
    return plan;
}

std::vector<std::vector<int32_t>> placement_stage_members(const placement_plan &plan) {
    std::vector<std::vector<int32_t>> members(static_cast<size_t>(plan.n_stages));
    for (const placement_device_plan &dp : plan.devices) {
        auto &stage = members[static_cast<size_t>(dp.stage)];
        if (dp.role == placement_role::partner) stage.push_back(dp.logical);
        else stage.insert(stage.begin(), dp.logical);
    }
    return members;
}

}  // namespace tandem
