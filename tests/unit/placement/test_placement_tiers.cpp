// tests/unit/placement/test_placement_tiers.cpp - the host tier: models larger than their GPUs,
// experts placed by a routing profile, budgets, refusals, the even pair split and the prediction.
#include "placement_test_util.h"
#include "tandem/error.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

using namespace tandem;
using namespace tandem::test;

namespace {

// A 125B-class MoE: 512 experts of which a token takes 10, 52 layers (about 66 GiB of Q4_K experts).
const moe_shape moe_125b{"moe-125b-a512", 52, 2048, 32, 4, 128, 512, 10, 768, 151936};

placement_model model_with_k(const moe_shape &s) {
    placement_model m = model_of(s);
    m.n_expert_used = s.n_expert_used;
    m.d_model = s.d_model;
    return m;
}

// Skewed routing like a real router's: per layer a random order of experts with Zipf-like weights
// (the busiest quarter carries about half the rows), plus some never-picked experts.
expert_traffic skewed_profile(const moe_shape &s, uint32_t seed) {
    std::mt19937 rng(seed);
    expert_traffic t;
    for (int32_t l = 0; l < s.n_layer; ++l) {
        std::vector<int32_t> order(size_t(s.n_expert));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<uint64_t> c(size_t(s.n_expert), 0);
        for (int32_t r = 0; r < s.n_expert; ++r)
            c[size_t(order[size_t(r)])] = r >= s.n_expert - 5 ? 0 : uint64_t(1e6 / std::pow(double(r + 8), 0.9)) + rng() % 7;
        t.counts.push_back(std::move(c));
    }
    return t;
}

// Checks a plan with a host tier against the model and weights, independently of the planner:
// every expert of every layer in exactly one place, budgets, bytes, and the profile's row shares.
void check_tiers(const placement_plan &p, const placement_model &m, const std::vector<std::vector<uint64_t>> &w,
                 uint64_t host_budget) {
    const uint64_t one = m.bytes.layer_experts[0] / uint64_t(m.n_expert);
    REQUIRE(p.cold.experts.size() == size_t(m.n_layer));
    REQUIRE(p.cold.row_share.size() == size_t(m.n_layer));
    uint64_t gpu_experts = 0;
    for (const auto &d : p.devices) {
        INFO("device d" << d.logical);
        CHECK(d.total() <= d.budget);
        uint64_t held = 0;
        for (const auto &v : d.experts) held += v.size();
        CHECK(d.bytes_experts == held * one);
        gpu_experts += d.bytes_experts;
    }
    CHECK(p.cold.bytes <= host_budget);
    CHECK(p.cold.bytes + gpu_experts == std::accumulate(m.bytes.layer_experts.begin(), m.bytes.layer_experts.end(), uint64_t{0}));
    for (int32_t l = 0; l < m.n_layer; ++l) {
        INFO("layer " << l);
        std::vector<int32_t> seen(size_t(m.n_expert), 0);
        std::vector<bool> hot(size_t(m.n_expert), false);
        for (const auto &d : p.devices)
            if (l >= d.layer_begin && l < d.layer_end)
                for (int32_t e : d.experts[size_t(l - d.layer_begin)]) ++seen[size_t(e)], hot[size_t(e)] = true;
        for (int32_t e : p.cold.experts[size_t(l)]) ++seen[size_t(e)];
        CHECK(std::all_of(seen.begin(), seen.end(), [](int32_t c) { return c == 1; }));
        uint64_t cold_rows = 0, all_rows = 0, min_hot = UINT64_MAX, max_cold = 0;
        for (int32_t e = 0; e < m.n_expert; ++e) {
            all_rows += w[size_t(l)][size_t(e)];
            if (hot[size_t(e)]) min_hot = std::min(min_hot, w[size_t(l)][size_t(e)]);
            else cold_rows += w[size_t(l)][size_t(e)], max_cold = std::max(max_cold, w[size_t(l)][size_t(e)]);
        }
        CHECK(std::abs(p.cold.row_share[size_t(l)] - double(cold_rows) / double(all_rows)) < 1e-12);
        if (!p.cold.experts[size_t(l)].empty()) CHECK(min_hot >= max_cold);  // the busiest stay on the GPUs
    }
}

}  // namespace

TEST_CASE("host tier: a 125B-class MoE on three 24 GB GPUs without P2P, placed by a routing profile",
          "[placement][tiers]") {
    const topology t = topology_load(fixture("pcie-3x24.json"));
    const placement_model m = model_with_k(moe_125b);
    placement_request r = request(placement_mode::pipeline, {0, 1, 2});

    // Without a host tier it does not fit, and the refusal says what would help.
    const std::string refused = config_error_of(r, t, m);
    CHECK(refused.find("does not fit") != std::string::npos);
    CHECK(refused.find("--host-experts") != std::string::npos);

    const std::optional<uint64_t> host = placement_parse_host_experts("auto", t);
    REQUIRE(host);
    CHECK(*host == uint64_t(120) * gib);  // 128 GiB less the file's 8 GiB reserve
    r.host_experts = host;
    r.traffic = skewed_profile(moe_125b, 7);
    const placement_plan p = placement_plan_make(r, t, m);
    CHECK(p.n_stages == 3);
    CHECK(p.cold.used());
    check_tiers(p, m, r.traffic->counts, *host);

    // Uniform routing places the same bytes, but its cold rows are the cold experts' count share,
    // and the profile's are far fewer.
    placement_request u = r;
    u.traffic.reset();
    const placement_plan pu = placement_plan_make(u, t, m);
    const std::vector<std::vector<uint64_t>> ones(size_t(m.n_layer), std::vector<uint64_t>(size_t(m.n_expert), 1));
    check_tiers(pu, m, ones, *host);
    double cold_profile = 0.0, cold_uniform = 0.0;
    for (int32_t l = 0; l < m.n_layer; ++l) {
        cold_profile += p.cold.row_share[size_t(l)];
        cold_uniform += pu.cold.row_share[size_t(l)];
        CHECK(pu.cold.row_share[size_t(l)] == Approx(double(pu.cold.experts[size_t(l)].size()) / m.n_expert));
    }
    CHECK(cold_uniform > 0.05 * m.n_layer);
    CHECK(cold_profile < 0.5 * cold_uniform);
    CHECK(p.prediction.tok_s > pu.prediction.tok_s);  // fewer cold rows: less CPU time per token
    CHECK_FALSE(p.prediction.default_figures);        // the fixture gives every figure
    CHECK(p.prediction.gpu_gbps == 936.0);
    CHECK(p.prediction.cpu_gbps == 60.0);
}

TEST_CASE("host tier: refusals with numbers, and no change for a model that fits", "[placement][tiers]") {
    const topology t = topology_load(fixture("pcie-3x24.json"));
    const placement_model m = model_with_k(moe_125b);
    placement_request r = request(placement_mode::pipeline, {0, 1, 2});

    // Host memory too small for what the GPUs cannot hold.
    r.host_experts = uint64_t(1) * gib;
    const std::string small = config_error_of(r, t, m);
    CHECK(small.find("even with the host tier") != std::string::npos);
    CHECK(small.find("1.00 GiB (--host-experts)") != std::string::npos);

    // Budgets that cannot take even the attention, KV and head: experts on the host do not help.
    r.host_experts = uint64_t(100) * gib;
    r.budgets = {uint64_t(2) * gib};
    CHECK(config_error_of(r, t, m).find("even with every routed expert on the host tier") != std::string::npos);

    // A profile for another model shape.
    r.budgets.clear();
    r.traffic = expert_traffic{std::vector<std::vector<uint64_t>>(48, std::vector<uint64_t>(128, 1))};
    const std::string shape = config_error_of(r, t, m);
    CHECK(shape.find("48 layers x 128 experts") != std::string::npos);
    CHECK(shape.find("52 x 512") != std::string::npos);

    // A model that fits leaves the host tier empty and the plan as it was.
    const topology h200 = topology_load(fixture("h200-8-nvlink.json"));
    const placement_model small_model = model_with_k(qwen3_30b_a3b);
    placement_request plain = request(placement_mode::tensor_parallel, {0, 1});
    const placement_plan a = placement_plan_make(plain, h200, small_model);
    plain.host_experts = uint64_t(64) * gib;
    const placement_plan b = placement_plan_make(plain, h200, small_model);
    CHECK_FALSE(b.cold.used());
    CHECK(b.cold.allowed);
    CHECK(placement_layout_line(a) == placement_layout_line(b));
    CHECK(placement_tier_table(b).empty());
}

TEST_CASE("host tier: tensor-parallel pairs keep their busiest experts, split evenly", "[placement][tiers]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const moe_shape &s = qwen3_235b_a22b;
    const placement_model m = model_with_k(s);
    // Four devices of 24 GiB hold about two thirds of the model's ~119 GiB of Q4_K experts.
    placement_request r = request(placement_mode::tensor_parallel, {0, 1, 2, 3});
    r.budgets = {uint64_t(24) * gib};
    r.host_experts = uint64_t(200) * gib;
    const bool profiled = GENERATE(false, true);
    if (profiled) r.traffic = skewed_profile(s, 3);
    INFO((profiled ? "profile" : "uniform"));
    const placement_plan p = placement_plan_make(r, t, m);
    REQUIRE(p.cold.used());
    const auto w = profiled ? r.traffic->counts
                            : std::vector<std::vector<uint64_t>>(size_t(m.n_layer), std::vector<uint64_t>(size_t(m.n_expert), 1));
    check_tiers(p, m, w, *r.host_experts);
    REQUIRE(p.host_row_share.size() == size_t(m.n_layer));
    for (int32_t st = 0; st < p.n_stages; ++st) {
        const auto &h = p.devices[size_t(st)], &q = p.devices[size_t(st + p.n_stages)];
        for (size_t li = 0; li < h.experts.size(); ++li) {
            INFO("stage " << st << " layer " << h.layer_begin + int32_t(li));
            CHECK(std::abs(int64_t(h.experts[li].size()) - int64_t(q.experts[li].size())) <= 1);
            const size_t l = size_t(h.layer_begin) + li;
            uint64_t mine = 0, all = 0;
            for (uint64_t c : w[l]) all += c;
            for (int32_t e : h.experts[li]) mine += w[l][size_t(e)];
            CHECK(p.host_row_share[l] == Approx(double(mine) / double(all)));
        }
    }
    // The layout line and the per-layer table say what went where.
    CHECK(placement_layout_line(p).find(" | host E~") != std::string::npos);
    const std::string table = placement_tier_table(p);
    CHECK(std::count(table.begin(), table.end(), '\n') == m.n_layer + 2);
}

TEST_CASE("even split: counts within one, rows balanced", "[placement][tiers]") {
    std::mt19937 rng(5);
    for (int trial = 0; trial < 50; ++trial) {
        const size_t n = 1 + rng() % 40;
        std::vector<uint64_t> c(n);
        for (auto &x : c) x = trial % 5 == 0 ? 0 : rng() % 1000;
        const std::vector<bool> h = expert_traffic_split_even(c);
        INFO("trial " << trial << " n " << n);
        const size_t first = size_t(std::count(h.begin(), h.end(), true));
        CHECK(std::abs(int64_t(first) - int64_t(n - first)) <= 1);
        uint64_t a = 0, b = 0;
        for (size_t e = 0; e < n; ++e) (h[e] ? a : b) += c[e];
        // Any split of equal counts is within the largest count of balance after the swaps: a swap
        // of the two halves' extremes would otherwise shrink the gap.
        CHECK(uint64_t(std::llabs(int64_t(a) - int64_t(b))) <= *std::max_element(c.begin(), c.end()));
        CHECK(h == expert_traffic_split_even(c));
    }
}

TEST_CASE("topology host entry and --host-experts", "[placement][tiers]") {
    const topology t = topology_parse(R"({"devices": [{"id": 0, "memory_gib": 24, "bandwidth_gbps": 900}],
        "host": {"memory_gib": 64, "bandwidth_gbps": 40}})", "x");
    REQUIRE(t.host);
    CHECK(t.host->memory_gib == 64.0);
    CHECK(t.devices[0].bandwidth_gbps == 900.0);
    CHECK(*placement_parse_host_experts("auto", t) == uint64_t(64) * gib - uint64_t(64) * gib / 10);  // 10% reserve
    CHECK(*placement_parse_host_experts("12.5", t) == uint64_t(12.5 * double(gib)));
    CHECK_FALSE(placement_parse_host_experts("off", t));
    CHECK_THROWS_WITH(placement_parse_host_experts("lots", t), Catch::Contains("expected off, auto or a number"));
    const topology no_host = topology_parse(R"({"devices": [{"id": 0, "memory_gib": 24}]})", "y");
    CHECK_THROWS_WITH(placement_parse_host_experts("auto", no_host), Catch::Contains("host's memory is unknown"));
    CHECK_THROWS_WITH(topology_parse(R"({"devices": [{"id": 0, "memory_gib": 24}], "host": {"memory": 4}})", "z"),
                      Catch::Contains("unknown key \"memory\""));
    CHECK_THROWS_WITH(topology_parse(R"({"devices": [{"id": 0, "memory_gib": 24}], "host": {"link_gbps": -1}})", "z"),
                      Catch::Contains("link_gbps"));
    const topology round = topology_parse(topology_to_json(t), "round trip");
    REQUIRE(round.host);
    CHECK(round.host->bandwidth_gbps == 40.0);
    CHECK(round.devices[0].bandwidth_gbps == 900.0);
}

TEST_CASE("host tier on random shapes, budgets and profiles: a plan that keeps its promises, or a refusal",
          "[placement][tiers]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    std::mt19937 rng(11);
    int32_t planned = 0, refused = 0, with_cold = 0;
    for (int trial = 0; trial < 300; ++trial) {
        placement_model m;
        m.n_layer = 1 + int32_t(rng() % 12);
        m.n_expert = 1 + int32_t(rng() % 40);
        m.n_vocab = 100 + int32_t(rng() % 1000);
        m.n_expert_used = 1 + int32_t(rng() % uint32_t(m.n_expert));
        m.d_model = 64;
        for (int32_t l = 0; l < m.n_layer; ++l) {
            m.bytes.layer_replicated.push_back(1000 + rng() % 100000);
            // Some layers without routed experts, and byte counts that do not divide by n_expert.
            m.bytes.layer_experts.push_back(rng() % 5 == 0 ? 0 : 1 + rng() % 4000000);
        }
        m.bytes.embedding = rng() % 200000;
        m.bytes.head = 1 + rng() % 200000;
        m.bytes.kv_per_token = rng() % 64;
        const bool tp = rng() % 2 == 0;
        const int32_t n = tp ? 2 * (1 + int32_t(rng() % 2)) : 1 + int32_t(rng() % 3);
        placement_request r;
        r.mode = tp ? placement_mode::tensor_parallel : n == 1 ? placement_mode::single : placement_mode::pipeline;
        for (int32_t i = 0; i < n; ++i) r.devices.push_back(i);
        r.n_sessions = 1;
        r.n_ctx = 64;
        uint64_t all = m.bytes.embedding + m.bytes.head;
        for (int32_t l = 0; l < m.n_layer; ++l) all += m.bytes.layer_replicated[l] + m.bytes.layer_experts[l];
        r.budgets = {uint64_t(double(all) / n * (0.2 + 1.2 * double(rng() % 1000) / 1000.0))};
        r.host_experts = uint64_t(rng() % 3 == 0 ? rng() % 20000000 : uint64_t(1) << 40);
        if (rng() % 2 == 0) r.traffic = skewed_profile({"random", m.n_layer, 64, 1, 1, 64, m.n_expert, 1, 256, 100}, rng());
        INFO("trial " << trial);
        placement_plan p;
        try {
            p = placement_plan_make(r, t, m);
        } catch (const error &e) {
            CHECK(e.kind() == error_kind::config);
            ++refused;
            continue;
        }
        ++planned;
        with_cold += p.cold.used() ? 1 : 0;
        const auto w = r.traffic ? r.traffic->counts
                                 : std::vector<std::vector<uint64_t>>(size_t(m.n_layer), std::vector<uint64_t>(size_t(m.n_expert), 1));
        uint64_t cold_bytes = 0;
        for (const auto &d : p.devices) CHECK(d.total() <= d.budget);
        for (int32_t l = 0; l < m.n_layer; ++l) {
            std::vector<int32_t> seen(size_t(m.n_expert), 0);
            uint64_t min_hot = UINT64_MAX, max_cold = 0;
            for (const auto &d : p.devices)
                if (l >= d.layer_begin && l < d.layer_end)
                    for (int32_t e : d.experts[size_t(l - d.layer_begin)]) ++seen[size_t(e)], min_hot = std::min(min_hot, w[l][size_t(e)]);
            for (int32_t e : p.cold.experts[size_t(l)]) ++seen[size_t(e)], max_cold = std::max(max_cold, w[l][size_t(e)]);
            CHECK(std::all_of(seen.begin(), seen.end(), [](int32_t c) { return c == 1; }));
            if (!p.cold.experts[size_t(l)].empty() && min_hot != UINT64_MAX) CHECK(min_hot >= max_cold);
            if (m.bytes.layer_experts[l] == 0) CHECK(p.cold.experts[size_t(l)].empty());
            const uint64_t q = m.bytes.layer_experts[l] / uint64_t(m.n_expert), rem = m.bytes.layer_experts[l] % uint64_t(m.n_expert);
            const uint64_t c = p.cold.experts[size_t(l)].size();
            cold_bytes += q * c + rem * c / uint64_t(m.n_expert);
        }
        CHECK(p.cold.bytes == cold_bytes);
        CHECK(p.cold.bytes <= *r.host_experts);
    }
    // The trials reach plans with and without cold experts, and refusals.
    CHECK(with_cold > 30);
    CHECK(planned - with_cold > 30);
    CHECK(refused > 10);
}

TEST_CASE("host tier: requantized cold experts (--expert-tiers) are what the budget and the prediction count",
          "[placement][tiers]") {
    const topology t = topology_load(fixture("pcie-3x24.json"));
    const placement_model m = model_with_k(moe_125b);
    placement_request r = request(placement_mode::pipeline, {0, 1, 2});
    r.host_experts = placement_parse_host_experts("auto", t);
    const placement_plan in_file = placement_plan_make(r, t, m);
    REQUIRE(in_file.cold.used());
    const uint64_t one = m.bytes.layer_experts[0] / uint64_t(m.n_expert);
    uint64_t n_cold = 0;
    for (const auto &l : in_file.cold.experts) n_cold += l.size();
    CHECK(in_file.cold.bytes == n_cold * one);

    // Half the bytes an expert: the same experts go cold, the tier counts half, the CPU reads half.
    placement_request half = r;
    half.cold_expert_bytes = one / 2;
    const placement_plan p = placement_plan_make(half, t, m);
    CHECK(p.cold.experts == in_file.cold.experts);
    CHECK(p.cold.bytes == n_cold * (one / 2));
    CHECK(p.prediction.cold_ms < in_file.prediction.cold_ms);
    CHECK(p.prediction.gpu_ms == in_file.prediction.gpu_ms);

    // A host budget between the two sizes: refused for the file's bytes, taken for the requantized.
    r.host_experts = in_file.cold.bytes * 3 / 4;
    half.host_experts = r.host_experts;
    CHECK(config_error_of(r, t, m).find("does not fit even with the host tier") != std::string::npos);
    CHECK(placement_plan_make(half, t, m).cold.bytes <= *half.host_experts);
}
