// tests/unit/placement/test_placement_layout.cpp - what a plan prints: the start-up layout line
// (expected text derived here from the shapes and budgets), the table and the JSON.
#include "placement_test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

using namespace tandem;
using namespace tandem::test;

namespace {

// --gpu-vram auto for one H200 of the fixture: memory minus the default 5% reserve.
uint64_t h200_budget() {
    const double memory = 139.8 * double(gib);
    return uint64_t(std::llround(memory)) - uint64_t(memory * 0.05);
}

}  // namespace

TEST_CASE("layout line: single device, derived from the shapes", "[placement]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const moe_shape &s = qwen3_30b_a3b;
    const placement_model m = model_of(s);
    const placement_plan p = placement_plan_make(request(placement_mode::single, {3}), t, m);
    const uint64_t total = m.bytes.embedding + m.bytes.head + scratch +
                           uint64_t(s.n_layer) * (layer_replicated_bytes(s) + uint64_t(s.n_expert) * expert_bytes(s)) +
                           m.bytes.kv_per_token * 16 * 4096;
    const std::string want = fmt::format("layout: single stages=1 devices=1 kv=16x4096 | s0 L0-{} [d0@3 emb head 0-{} "
                                         "{:.1f}/{:.1f}G]",
                                         s.n_layer - 1, s.n_vocab - 1, to_gib(total), to_gib(h200_budget()));
    CHECK(placement_layout_line(p) == want);
}

TEST_CASE("layout line: two tensor-parallel pairs, derived from the shapes", "[placement]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const moe_shape &s = qwen3_30b_a3b;
    const placement_model m = model_of(s);
    const placement_plan p = placement_plan_make(request(placement_mode::tensor_parallel, {0, 1, 2, 3}), t, m);

    // Bytes of one layer on one device of a pair: replicated weights, half the experts, its KV.
    const uint64_t kv_layer = m.bytes.kv_per_token / uint64_t(s.n_layer) * 16 * 4096;
    const uint64_t per_layer = layer_replicated_bytes(s) + uint64_t(s.n_expert / 2) * expert_bytes(s) + kv_layer;
    const uint64_t head_half = m.bytes.head / 2;  // n_vocab is even: both shards hold n_vocab/2 rows
    // The split point k (stage 0 = layers [0, k)) that minimises the larger stage, by brute force.
    uint64_t best = UINT64_MAX;
    int32_t best_k = -1, ties = 0;
    for (int32_t k = 1; k < s.n_layer; ++k) {
        const uint64_t s0 = m.bytes.embedding + uint64_t(k) * per_layer;
        const uint64_t s1 = head_half + uint64_t(s.n_layer - k) * per_layer;
        const uint64_t worst = std::max(s0, s1);
        if (worst < best) best = worst, best_k = k, ties = 1;
        else if (worst == best) ++ties;
    }
    REQUIRE(ties == 1);
    const int32_t k = best_k, v2 = s.n_vocab / 2, e2 = s.n_expert / 2;
    const double b = to_gib(h200_budget());
    const uint64_t t0 = m.bytes.embedding + uint64_t(k) * per_layer + scratch;
    const uint64_t t2 = uint64_t(k) * per_layer + scratch;
    const uint64_t t1 = head_half + uint64_t(s.n_layer - k) * per_layer + scratch;
    const std::string want = fmt::format(
        "layout: tp pairs=2 stages=2 devices=4 kv=16x4096"
        " | s0 L0-{} [d0@0 E0-{} emb {:.1f}/{:.1f}G + d2@2 E{}-{} {:.1f}/{:.1f}G]"
        " | s1 L{}-{} [d1@1 E0-{} head 0-{} {:.1f}/{:.1f}G + d3@3 E{}-{} head {}-{} {:.1f}/{:.1f}G]",
        k - 1, e2 - 1, to_gib(t0), b, e2, s.n_expert - 1, to_gib(t2), b,
        k, s.n_layer - 1, e2 - 1, v2 - 1, to_gib(t1), b, e2, s.n_expert - 1, v2, s.n_vocab - 1, to_gib(t1), b);
    CHECK(placement_layout_line(p) == want);

    // Stable: the same inputs give the same line, and it is one line.
    const placement_plan again = placement_plan_make(request(placement_mode::tensor_parallel, {0, 1, 2, 3}), t, m);
    CHECK(placement_layout_line(again) == placement_layout_line(p));
    CHECK(placement_layout_line(p).find('\n') == std::string::npos);
}

TEST_CASE("layout line: logical devices on one GPU and traffic-balanced experts", "[placement]") {
    const topology t = topology_load(fixture("h200-1.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    placement_request r = request(placement_mode::tensor_parallel, {0, 0});
    expert_traffic traffic;
    for (int32_t l = 0; l < m.n_layer; ++l) {
        std::vector<uint64_t> c(m.n_expert, 10);
        c[l % m.n_expert] = 400;  // one hot expert per layer: counts per half become uneven
        traffic.counts.push_back(c);
    }
    r.traffic = traffic;
    const placement_plan p = placement_plan_make(r, t, m);
    const std::string line = placement_layout_line(p);
    INFO(line);
    CHECK(line.rfind("layout: tp pairs=1 stages=1 devices=2 kv=16x4096 experts=traffic(host rows ", 0) == 0);
    CHECK(line.find("[d0@0 E~") != std::string::npos);
    CHECK(line.find(" + d1@0 E~") != std::string::npos);
}

TEST_CASE("table and JSON carry the whole plan", "[placement]") {
    const topology t = topology_load(fixture("l40s-8-pairs.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    placement_request r = request(placement_mode::tensor_parallel, {});
    r.auto_order = true;
    const placement_plan p = placement_plan_make(r, t, m);

    const std::string table = placement_table(p);
    std::istringstream lines(table);
    std::string row;
    int n_rows = 0, n_l40s = 0;
    while (std::getline(lines, row)) {
        ++n_rows;
        n_l40s += row.find("L40S") != std::string::npos;
    }
    CHECK(n_rows == 1 + 8 + 1);  // header, one row per device, legend
    CHECK(n_l40s == 8);

    const nlohmann::json j = nlohmann::json::parse(placement_plan_json(p));
    CHECK(j["mode"] == "tp");
    CHECK(j["n_stages"] == 4);
    CHECK(j["layout"] == placement_layout_line(p));
    REQUIRE(j["devices"].size() == p.devices.size());
    for (size_t i = 0; i < p.devices.size(); ++i) {
        const auto &d = p.devices[i];
        const auto &jd = j["devices"][i];
        CHECK(jd["physical"] == d.physical);
        CHECK(jd["role"] == placement_role_name(d.role));
        CHECK(jd["layer_begin"] == d.layer_begin);
        CHECK(jd["layer_end"] == d.layer_end);
        CHECK(jd["experts"].get<std::vector<std::vector<int32_t>>>() == d.experts);
        CHECK(jd["bytes"]["total"].get<uint64_t>() == d.total());
        CHECK(jd["free"].get<uint64_t>() == d.free());
        CHECK(jd["head_end"].get<int32_t>() - jd["head_begin"].get<int32_t>() == d.head_end - d.head_begin);
    }
}

TEST_CASE("stage members: the host (or single device) first, then its partner", "[placement]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    using members = std::vector<std::vector<int32_t>>;
    // Logical 0..3 on GPUs 4,5,6,7: pairs (0,2) and (1,3), stages 0 and 1.
    CHECK(placement_stage_members(placement_plan_make(request(placement_mode::tensor_parallel, {4, 5, 6, 7}), t, m)) ==
          members{{0, 2}, {1, 3}});
    CHECK(placement_stage_members(placement_plan_make(request(placement_mode::pipeline, {2, 0, 1}), t, m)) ==
          members{{0}, {1}, {2}});
    CHECK(placement_stage_members(placement_plan_make(request(placement_mode::single, {3}), t, m)) == members{{0}});
}
