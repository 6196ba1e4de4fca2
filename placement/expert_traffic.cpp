// placement/expert_traffic.cpp - the --expert-balance file (routed rows per layer and expert) and
// the per-layer split of experts into two halves that carry about half the rows each.
#include "placement/json_util.h"
#include "tandem/error.h"
#include "tandem/placement.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

namespace tandem {

expert_traffic expert_traffic_parse(std::string_view json_text, std::string_view source) {
    const nlohmann::json j = placement_json::parse(json_text, source);
    const std::string where(source);
    placement_json::require_object(j, where);
    placement_json::reject_unknown_keys(j, {"n_layer", "n_expert", "counts"}, where);
    if (!j.contains("counts") || !j["counts"].is_array() || j["counts"].empty())
        fail(error_kind::config, "{}: \"counts\" must be a non-empty array (one array of counts per layer)", source);
    expert_traffic t;
    const auto &rows = j["counts"];
    for (size_t l = 0; l < rows.size(); ++l) {
        if (!rows[l].is_array() || rows[l].empty())
            fail(error_kind::config, "{}: counts[{}] must be a non-empty array of integers", source, l);
        std::vector<uint64_t> layer;
        for (size_t e = 0; e < rows[l].size(); ++e) {
            const auto &v = rows[l][e];
            if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0))
                fail(error_kind::config, "{}: counts[{}][{}] must be a non-negative integer", source, l, e);
            const uint64_t c = v.get<uint64_t>();
            // Sums of a layer's counts must not overflow; 2^48 rows is far beyond any recording.
            if (c > (uint64_t{1} << 48))
                fail(error_kind::config, "{}: counts[{}][{}] = {} is implausibly large", source, l, e, c);
            layer.push_back(c);
        }
        if (l > 0 && layer.size() != t.counts[0].size())
            fail(error_kind::config, "{}: counts[{}] has {} experts but counts[0] has {}", source, l, layer.size(),
                 t.counts[0].size());
        t.counts.push_back(std::move(layer));
    }
    if (j.contains("n_layer")) {
        const int32_t n = placement_json::get_int(j, "n_layer", where, 1, 1 << 20);
        if (size_t(n) != t.counts.size())
            fail(error_kind::config, "{}: n_layer = {} but counts has {} layers", source, n, t.counts.size());
    }
    if (j.contains("n_expert")) {
        const int32_t n = placement_json::get_int(j, "n_expert", where, 1, 1 << 20);
        if (size_t(n) != t.counts[0].size())
            fail(error_kind::config, "{}: n_expert = {} but counts rows have {} experts", source, n,
                 t.counts[0].size());
    }
    return t;
}

expert_traffic expert_traffic_load(const std::string &path) {
    return expert_traffic_parse(placement_read_text(path, "expert traffic"), path);
}

std::string expert_traffic_to_json(const expert_traffic &traffic) {
    nlohmann::json j;
    j["n_layer"] = traffic.counts.size();
    j["n_expert"] = traffic.counts.empty() ? 0 : traffic.counts.front().size();
    j["counts"] = traffic.counts;
    return j.dump();
}

namespace {

// Swaps of one host expert with one partner expert (expert counts unchanged) while they strictly
// shrink the imbalance; each pass is O(n^2) and the imbalance is an integer that only decreases,
// so this ends; the pass cap keeps the worst case bounded.
void refine_by_swaps(const std::vector<uint64_t> &counts, std::vector<bool> &host, uint64_t load[2]) {
    const size_t n = counts.size();
    for (size_t pass = 0; pass < 4 * n; ++pass) {
        const int64_t d = int64_t(load[0]) - int64_t(load[1]);
        if (d == 0) break;
        int64_t best = std::llabs(d);
        size_t best_h = n, best_p = n;
        for (size_t h = 0; h < n; ++h) {
            if (!host[h]) continue;
            for (size_t p = 0; p < n; ++p) {
                if (host[p]) continue;
                const int64_t nd = d - 2 * (int64_t(counts[h]) - int64_t(counts[p]));
                if (std::llabs(nd) < best) {
                    best = std::llabs(nd);
                    best_h = h;
                    best_p = p;
                }
            }
        }
        if (best_h == n) break;
        host[best_h] = false;
        host[best_p] = true;
        load[0] = load[0] - counts[best_h] + counts[best_p];
        load[1] = load[1] - counts[best_p] + counts[best_h];
    }
}

// Longest processing time first: the hottest unassigned expert goes to the lighter half (unless
// that half already has `cap` experts). Without a binding cap the halves differ by at most the
// previous (larger) count after each step, which gives |host - total/2| <= max(count)/2.
std::vector<bool> split_longest_first(const std::vector<uint64_t> &counts, size_t cap) {
    const size_t n = counts.size();
    std::vector<bool> host(n, false);
    const uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t{0});
    if (total == 0) {
        for (size_t e = 0; e < (n + 1) / 2; ++e) host[e] = true;  // nothing measured: split by index
        return host;
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return counts[a] > counts[b]; });
    uint64_t load[2] = {0, 0};  // [0] host, [1] partner
    size_t members[2] = {0, 0};
    for (size_t e : order) {
        // Equal loads, or an expert with no rows (it moves no load): keep expert counts, and so
        // bytes, as even as the traffic allows.
        int side;
        if (load[0] != load[1] && counts[e] != 0) side = load[0] < load[1] ? 0 : 1;
        else side = members[0] <= members[1] ? 0 : 1;
        if (members[side] >= cap) side = 1 - side;
        host[e] = side == 0;
        load[side] += counts[e];
        ++members[side];
    }
    refine_by_swaps(counts, host, load);
    return host;
}

}  // namespace

std::vector<bool> expert_traffic_split(const std::vector<uint64_t> &counts) {
    return split_longest_first(counts, counts.size());
}

std::vector<bool> expert_traffic_split_even(const std::vector<uint64_t> &counts) {
    return split_longest_first(counts, (counts.size() + 1) / 2);
}

}  // namespace tandem
