// tests/unit/placement/test_placement_plan.cpp - the planner on real model shapes: device order,
// pairs and P2P, budgets, layer balance (against a brute force), expert and traffic splits.
#include "placement_test_util.h"
#include "tandem/error.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>

using namespace tandem;
using namespace tandem::test;

namespace {

uint64_t kv_per_layer(const placement_model &m, const placement_plan &p) {
    return m.bytes.kv_per_token / uint64_t(m.n_layer) * uint64_t(p.n_sessions) * uint64_t(p.n_ctx);
}

// Checks a plan against the model independently of how the planner computed it.
void check_invariants(const placement_plan &p, const placement_model &m, const std::vector<int32_t> &ids) {
    const bool tp = p.mode == placement_mode::tensor_parallel;
    const int32_t n = int32_t(ids.size());
    REQUIRE(p.devices.size() == ids.size());
    REQUIRE(p.n_stages == (tp ? n / 2 : n));
    const uint64_t one_expert = m.bytes.layer_experts[0] / uint64_t(m.n_expert);
    int32_t next = 0;
    for (int32_t s = 0; s < p.n_stages; ++s) {
        const auto &host = p.devices[s];
        CHECK(host.stage == s);
        CHECK(host.layer_begin == next);
        CHECK(host.layer_end > host.layer_begin);
        next = host.layer_end;
        if (tp) {
            const auto &partner = p.devices[s + p.n_stages];
            CHECK(host.role == placement_role::host);
            CHECK(partner.role == placement_role::partner);
            CHECK(host.partner == s + p.n_stages);
            CHECK(partner.partner == s);
            CHECK(partner.stage == s);
            CHECK(partner.layer_begin == host.layer_begin);
            CHECK(partner.layer_end == host.layer_end);
        }
    }
    CHECK(next == m.n_layer);
    uint64_t experts_sum = 0, head_sum = 0;
    std::vector<int32_t> head_owner(m.n_vocab, 0);
    for (const auto &d : p.devices) {
        INFO("logical device " << d.logical);
        CHECK(d.physical == ids[d.logical]);
        CHECK(d.role == (tp ? d.role : placement_role::single));
        REQUIRE(d.experts.size() == size_t(d.layer_end - d.layer_begin));
        uint64_t repl = 0, exp = 0;
        for (int32_t l = d.layer_begin; l < d.layer_end; ++l) {
            repl += m.bytes.layer_replicated[l];
            const auto &held = d.experts[l - d.layer_begin];
            CHECK(std::is_sorted(held.begin(), held.end()));
            exp += held.size() * one_expert;
            if (!tp) CHECK(held.size() == size_t(m.n_expert));
        }
        CHECK(d.bytes_replicated == repl);
        CHECK(d.bytes_experts == exp);
        experts_sum += d.bytes_experts;
        CHECK(d.bytes_kv == kv_per_layer(m, p) * uint64_t(d.layer_end - d.layer_begin));
        const bool first_host = d.stage == 0 && d.role != placement_role::partner;
        CHECK(d.embedding == first_host);
        CHECK(d.bytes_embedding == (first_host ? m.bytes.embedding : 0));
        if (d.stage == p.n_stages - 1) {
            CHECK(d.head_end > d.head_begin);
            for (int32_t v = d.head_begin; v < d.head_end; ++v) ++head_owner[v];
            head_sum += d.bytes_head;
        } else {
            CHECK(d.head_end == d.head_begin);
            CHECK(d.bytes_head == 0);
        }
        CHECK(d.bytes_scratch == scratch);
        CHECK(d.total() <= d.budget);
        CHECK(d.free() == d.budget - d.total());
    }
    CHECK(std::all_of(head_owner.begin(), head_owner.end(), [](int32_t c) { return c == 1; }));
    CHECK(head_sum == m.bytes.head);
    CHECK(experts_sum == std::accumulate(m.bytes.layer_experts.begin(), m.bytes.layer_experts.end(), uint64_t{0}));
    if (tp) {
        for (int32_t s = 0; s < p.n_stages; ++s) {
            const auto &h = p.devices[s], &q = p.devices[s + p.n_stages];
            for (size_t l = 0; l < h.experts.size(); ++l) {
                std::vector<int32_t> all = h.experts[l];
                all.insert(all.end(), q.experts[l].begin(), q.experts[l].end());
                std::sort(all.begin(), all.end());
                std::vector<int32_t> want(m.n_expert);
                std::iota(want.begin(), want.end(), 0);
                CHECK(all == want);  // disjoint halves covering every expert
            }
        }
    }
}

// The largest device bytes of a stage, computed from the model (pipeline mode: one device per
// stage; the first stage carries the embedding, the last the head).
uint64_t pipeline_stage_bytes(const placement_model &m, uint64_t kv_layer, int32_t s, int32_t S, int32_t b, int32_t e) {
    uint64_t bytes = 0;
    for (int32_t l = b; l < e; ++l) bytes += m.bytes.layer_replicated[l] + m.bytes.layer_experts[l] + kv_layer;
    if (s == 0) bytes += m.bytes.embedding;
    if (s == S - 1) bytes += m.bytes.head;
    return bytes;
}

// Brute force over every contiguous partition (S <= 4): the smallest possible largest stage
// load with each stage within avail[s] (budget minus scratch); UINT64_MAX when none fits.
uint64_t brute_force_min_max(const placement_model &m, uint64_t kv_layer, const std::vector<uint64_t> &avail) {
    const int32_t S = int32_t(avail.size()), L = m.n_layer;
    uint64_t best = UINT64_MAX;
    std::vector<int32_t> cut(S + 1, 0);
    cut[S] = L;
    auto rec = [&](auto &&self, int32_t s, uint64_t worst) -> void {
        if (s == S - 1) {
            const uint64_t b = pipeline_stage_bytes(m, kv_layer, s, S, cut[s], L);
            if (cut[s] < L && b <= avail[s]) best = std::min(best, std::max(worst, b));
            return;
        }
        for (int32_t e = cut[s] + 1; e <= L - (S - 1 - s); ++e) {
            const uint64_t b = pipeline_stage_bytes(m, kv_layer, s, S, cut[s], e);
            if (b > avail[s]) continue;
            cut[s + 1] = e;
            self(self, s + 1, std::max(worst, b));
        }
    };
    rec(rec, 0, 0);
    return best;
}

uint64_t plan_max_load(const placement_plan &p) {
    uint64_t worst = 0;
    for (const auto &d : p.devices) worst = std::max(worst, d.total() - d.bytes_scratch);
    return worst;
}

}  // namespace

TEST_CASE("auto order: 8xL40S with P2P pairs gives 0,2,4,6,1,3,5,7", "[placement]") {
    const topology t = topology_load(fixture("l40s-8-pairs.json"));
    CHECK(placement_auto_order(t, placement_mode::tensor_parallel) == std::vector<int32_t>{0, 2, 4, 6, 1, 3, 5, 7});
    CHECK(placement_auto_order(t, placement_mode::pipeline) == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
    const placement_model m = model_of(qwen3_30b_a3b);
    placement_request r = request(placement_mode::tensor_parallel, {});
    r.auto_order = true;
    const placement_plan p = placement_plan_make(r, t, m);
    check_invariants(p, m, {0, 2, 4, 6, 1, 3, 5, 7});
    CHECK(p.notes.empty());
}

TEST_CASE("auto order: 8xH200 all-to-all NVLink gives a valid pairing", "[placement]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const std::vector<int32_t> order = placement_auto_order(t, placement_mode::tensor_parallel);
    REQUIRE(order.size() == 8);
    CHECK(std::set<int32_t>(order.begin(), order.end()).size() == 8);
    for (int i = 0; i < 4; ++i) {
        CHECK(t.p2p(order[i], order[i + 4]));
        CHECK(order[i] < order[i + 4]);  // hosts are the smaller id of their pair
    }
    CHECK(std::is_sorted(order.begin(), order.begin() + 4));
    CHECK(placement_auto_order(t, placement_mode::single).size() == 1);
}

TEST_CASE("auto order prefers pairing everyone, then better link ranks", "[placement]") {
    // A chain 0-1-2-3 whose middle link is the best: greedy best-rank-first would pair (1,2) and
    // strand 0 and 3; the planner must find (0,1),(2,3).
    const topology chain = topology_parse(R"({"devices": [{"id": 0, "memory_gib": 8}, {"id": 1, "memory_gib": 8},
        {"id": 2, "memory_gib": 8}, {"id": 3, "memory_gib": 8}],
        "links": [{"a": 0, "b": 1, "rank": 1}, {"a": 1, "b": 2, "rank": 0}, {"a": 2, "b": 3, "rank": 1}]})", "chain");
    CHECK(placement_auto_order(chain, placement_mode::tensor_parallel) == std::vector<int32_t>{0, 2, 1, 3});
    // All pairs P2P over PCIe (rank 1), NVLink bridges (rank 0) on (0,3) and (1,2).
    const topology bridges = topology_parse(R"({"devices": [{"id": 0, "memory_gib": 8}, {"id": 1, "memory_gib": 8},
        {"id": 2, "memory_gib": 8}, {"id": 3, "memory_gib": 8}],
        "links": [{"a": 0, "b": 1, "rank": 1}, {"a": 0, "b": 2, "rank": 1}, {"a": 0, "b": 3, "rank": 0},
                  {"a": 1, "b": 2, "rank": 0}, {"a": 1, "b": 3, "rank": 1}, {"a": 2, "b": 3, "rank": 1}]})", "br");
    CHECK(placement_auto_order(bridges, placement_mode::tensor_parallel) == std::vector<int32_t>{0, 1, 3, 2});
}

TEST_CASE("a pair without P2P is refused with an order that fixes it", "[placement]") {
    const topology t = topology_load(fixture("l40s-8-pairs.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    const std::string msg = config_error_of(request(placement_mode::tensor_parallel, {0, 1, 2, 3, 4, 5, 6, 7}), t, m);
    CHECK(msg.find("pair 0") != std::string::npos);
    CHECK(msg.find("device 0") != std::string::npos);
    CHECK(msg.find("device 4") != std::string::npos);
    CHECK(msg.find("--gpu-devices 0,2,4,6,1,3,5,7") != std::string::npos);

    // A subset: the suggestion pairs the given devices, and planning with it succeeds.
    const std::string msg4 = config_error_of(request(placement_mode::tensor_parallel, {4, 5, 0, 1}), t, m);
    const size_t at = msg4.find("--gpu-devices ");
    REQUIRE(at != std::string::npos);
    const size_t from = at + std::string("--gpu-devices ").size();
    const std::string suggested = msg4.substr(from, msg4.find_first_not_of("0123456789,", from) - from);
    const std::vector<int32_t> fixed = placement_parse_devices(suggested).ids;
    CHECK(fixed == std::vector<int32_t>{0, 4, 1, 5});
    check_invariants(placement_plan_make(request(placement_mode::tensor_parallel, fixed), t, m), m, fixed);

    // No order can pair 1,3 (different switches): say so instead of suggesting one.
    const std::string none = config_error_of(request(placement_mode::tensor_parallel, {1, 3}), t, m);
    CHECK(none.find("no order") != std::string::npos);
}

TEST_CASE("config errors: odd counts with pairs, unknown ids, wrong budget lists, too many stages", "[placement]") {
    const topology odd = topology_load(fixture("odd-3.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    CHECK(config_error_of(request(placement_mode::tensor_parallel, {0, 1, 2}), odd, m).find("even") != std::string::npos);
    CHECK(config_error_of(request(placement_mode::tensor_parallel, {0}), odd, m).find("even") != std::string::npos);
    const std::string unknown = config_error_of(request(placement_mode::pipeline, {0, 7}), odd, m);
    CHECK(unknown.find("device 7") != std::string::npos);
    CHECK(unknown.find("0,1,2") != std::string::npos);  // lists the known ids
    placement_request wrong = request(placement_mode::pipeline, {0, 1, 2});
    wrong.budgets = {10 * gib, 10 * gib};
    CHECK(config_error_of(wrong, odd, m).find("2 values") != std::string::npos);
    CHECK(config_error_of(request(placement_mode::single, {0, 1}), odd, m).find("one device") != std::string::npos);
    CHECK(config_error_of(request(placement_mode::pipeline, {}), odd, m).find("no devices") != std::string::npos);

    // auto with pairs on an odd box leaves one device out and says so.
    placement_request a = request(placement_mode::tensor_parallel, {});
    a.auto_order = true;
    const placement_plan p = placement_plan_make(a, odd, m);
    CHECK(p.devices.size() == 2);
    REQUIRE(p.notes.size() == 1);
    CHECK(p.notes[0].find("device 2") != std::string::npos);

    placement_model tiny = m;
    tiny.n_layer = 4;
    tiny.bytes.layer_replicated.resize(4);
    tiny.bytes.layer_experts.resize(4);
    const topology h200 = topology_load(fixture("h200-8-nvlink.json"));
    CHECK(config_error_of(request(placement_mode::pipeline, {0, 1, 2, 3, 4, 5, 6, 7}), h200, tiny).find("8 stages") !=
          std::string::npos);
}

TEST_CASE("budgets too small: the error names the device and the GiB missing", "[placement]") {
    const topology t = topology_load(fixture("h200-1.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    placement_request r = request(placement_mode::single, {0});
    // What one device needs, summed here from the shapes.
    uint64_t need = m.bytes.embedding + m.bytes.head + scratch;
    for (int32_t l = 0; l < m.n_layer; ++l) need += m.bytes.layer_replicated[l] + m.bytes.layer_experts[l];
    need += m.bytes.kv_per_token * 16 * 4096;
    const uint64_t short_by = gib + gib / 4;  // 1.25 GiB
    r.budgets = {need - short_by};
    const std::string msg = config_error_of(r, t, m);
    CHECK(msg.find("device d0") != std::string::npos);
    CHECK(msg.find(fmt::format("{:.2f} GiB missing", to_gib(short_by))) != std::string::npos);
    CHECK(msg.find("biggest class: routed experts") != std::string::npos);
    r.budgets = {need};  // exactly enough fits
    CHECK(placement_plan_make(r, t, m).devices[0].free() == 0);

    // Two L40S cannot hold qwen3-235b-a22b: every short device is named, and what is missing adds
    // up to at least what the model needs beyond the budgets.
    const topology l40s = topology_load(fixture("l40s-8-pairs.json"));
    const placement_model big = model_of(qwen3_235b_a22b);
    const std::string msg2 = config_error_of(request(placement_mode::pipeline, {0, 1}), l40s, big);
    uint64_t need2 = big.bytes.embedding + big.bytes.head + 2 * scratch + big.bytes.kv_per_token * 16 * 4096;
    for (int32_t l = 0; l < big.n_layer; ++l) need2 += big.bytes.layer_replicated[l] + big.bytes.layer_experts[l];
    const double budget_each = to_gib(48 * gib - uint64_t(48 * 0.05 * double(gib)));
    double missing = 0.0;
    int n_missing = 0;
    for (size_t pos = msg2.find(" GiB missing"); pos != std::string::npos; pos = msg2.find(" GiB missing", pos + 1)) {
        const size_t start = msg2.find_last_of(' ', pos - 1) + 1;  // the number before " GiB missing"
        missing += std::stod(msg2.substr(start, pos - start));
        ++n_missing;
    }
    CHECK(n_missing >= 1);
    CHECK(missing + 0.02 >= to_gib(need2) - 2 * budget_each);
    CHECK(msg2.find("device d") != std::string::npos);
}

TEST_CASE("logical devices sharing one GPU: budgets are summed against its memory", "[placement]") {
    const topology t = topology_load(fixture("h200-1.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    const std::vector<int32_t> ids{0, 0, 0, 0};
    const placement_plan p = placement_plan_make(request(placement_mode::tensor_parallel, ids), t, m);
    check_invariants(p, m, ids);
    const uint64_t memory = uint64_t(std::llround(139.8 * double(gib)));
    uint64_t sum = 0;
    for (const auto &d : p.devices) sum += d.budget;
    const uint64_t usable = memory - uint64_t(double(memory) * 0.05);  // the default reserve: 5%
    CHECK(sum <= usable + 4);
    CHECK(sum + 8 >= usable);  // auto splits the GPU four ways, it does not shrink it further
    placement_request r = request(placement_mode::tensor_parallel, ids);
    r.budgets = {40 * gib};  // 4 x 40 GiB > 139.8 GiB
    const std::string msg = config_error_of(r, t, m);
    CHECK(msg.find("on device 0") != std::string::npos);
    CHECK(msg.find("160.00 GiB") != std::string::npos);
}

TEST_CASE("mixed memory: layer ranges shift toward the bigger devices, and the max stage is minimal", "[placement]") {
    const topology t = topology_load(fixture("mixed-4.json"));
    const placement_model m = model_of(qwen3_235b_a22b);
    const std::vector<int32_t> ids{0, 1, 2, 3};  // L4, L4, A100, A100
    const placement_plan p = placement_plan_make(request(placement_mode::pipeline, ids), t, m);
    check_invariants(p, m, ids);
    const auto layers = [&](int i) { return p.devices[i].layer_end - p.devices[i].layer_begin; };
    CHECK(layers(2) > layers(0));
    CHECK(layers(3) > layers(1));
    CHECK(layers(2) >= 2 * layers(0));  // 24 vs 80 GiB: far more than an even split
    std::vector<uint64_t> avail;
    for (const auto &d : p.devices) avail.push_back(d.budget - scratch);
    CHECK(p.devices[2].budget == 80 * gib - uint64_t(2.5 * double(gib)));  // the file's reserve_gib
    CHECK(plan_max_load(p) == brute_force_min_max(m, kv_per_layer(m, p), avail));

    // Pairs: the L4 pair is stage 0, the A100 pair stage 1; stage 1 takes more layers.
    const placement_plan tp = placement_plan_make(request(placement_mode::tensor_parallel, {0, 2, 1, 3}), t, m);
    check_invariants(tp, m, {0, 2, 1, 3});
    CHECK(tp.devices[1].layer_end - tp.devices[1].layer_begin > tp.devices[0].layer_end - tp.devices[0].layer_begin);

    // Equal budgets on the same box: the split is even to within one layer.
    placement_request even = request(placement_mode::pipeline, ids);
    even.budgets = {22 * gib};
    even.n_sessions = 1;
    const placement_model small = model_of(qwen3_30b_a3b);
    const placement_plan pe = placement_plan_make(even, t, small);
    check_invariants(pe, small, ids);
    for (int i = 0; i < 4; ++i) CHECK(std::abs((pe.devices[i].layer_end - pe.devices[i].layer_begin) - 12) <= 1);
    std::vector<uint64_t> avail_even(4, 22 * gib - scratch);
    CHECK(plan_max_load(pe) == brute_force_min_max(small, kv_per_layer(small, pe), avail_even));
}

TEST_CASE("plans for 1, 2, 4, 8 devices: pipeline only and pairs, both model shapes", "[placement]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    for (const moe_shape *shape : {&qwen3_30b_a3b, &qwen3_235b_a22b}) {
        const placement_model m = model_of(*shape);
        const int64_t sessions = shape == &qwen3_30b_a3b ? 16 : 4;
        for (int32_t n : {1, 2, 4, 8}) {
            std::vector<int32_t> ids(n);
            std::iota(ids.begin(), ids.end(), 0);
            INFO(shape->name << " on " << n << " devices");
            const placement_mode pm = n == 1 ? placement_mode::single : placement_mode::pipeline;
            const placement_plan pp = placement_plan_make(request(pm, ids, sessions), t, m);
            check_invariants(pp, m, ids);
            if (n >= 2) {
                const placement_plan tp = placement_plan_make(request(placement_mode::tensor_parallel, ids, sessions), t, m);
                check_invariants(tp, m, ids);
                for (int32_t s = 0; s < tp.n_stages; ++s)
                    for (const auto &held : tp.devices[s].experts) CHECK(held.size() == size_t(m.n_expert / 2));
            }
        }
    }
}

TEST_CASE("50/50 expert split: halves equal by bytes within one expert's bytes", "[placement]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    for (int32_t n_expert : {128, 7, 1}) {
        INFO("n_expert " << n_expert);
        moe_shape shape = qwen3_30b_a3b;
        shape.n_expert = n_expert;
        const placement_model m = model_of(shape);
        const std::vector<int32_t> ids{0, 1, 2, 3};
        const placement_plan p = placement_plan_make(request(placement_mode::tensor_parallel, ids), t, m);
        check_invariants(p, m, ids);
        for (int32_t s = 0; s < 2; ++s) {
            const auto &h = p.devices[s], &q = p.devices[s + 2];
            const uint64_t layers = uint64_t(h.layer_end - h.layer_begin);
            const uint64_t diff = h.bytes_experts > q.bytes_experts ? h.bytes_experts - q.bytes_experts
                                                                    : q.bytes_experts - h.bytes_experts;
            CHECK(diff <= layers * expert_bytes(shape));  // at most one expert per layer
            for (size_t l = 0; l < h.experts.size(); ++l) {
                CHECK(h.experts[l].size() == size_t((n_expert + 1) / 2));
                CHECK(h.experts[l].front() == 0);  // by index: the first half to the host
            }
        }
    }
}

TEST_CASE("traffic-balanced split: each half carries half the routed rows within the tolerance", "[placement]") {
    const uint32_t seed = Catch::rngSeed() ? Catch::rngSeed() : 20261129u;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    const uint64_t one_expert = m.bytes.layer_experts[0] / uint64_t(m.n_expert);

    for (const bool skewed : {false, true}) {
        INFO((skewed ? "zipf-like traffic" : "even traffic"));
        placement_request r = request(placement_mode::tensor_parallel, {0, 1, 2, 3, 4, 5, 6, 7});
        expert_traffic traffic;
        for (int32_t l = 0; l < m.n_layer; ++l) {
            std::vector<uint64_t> c(m.n_expert);
            std::vector<int32_t> rank(m.n_expert);
            std::iota(rank.begin(), rank.end(), 1);
            std::shuffle(rank.begin(), rank.end(), rng);
            for (int32_t e = 0; e < m.n_expert; ++e)
                c[e] = skewed ? uint64_t(200000.0 / std::pow(double(rank[e]), 1.1)) + rng() % 7
                              : 500 + rng() % 1001;  // every expert < 2% of the layer's rows
            traffic.counts.push_back(std::move(c));
        }
        r.traffic = traffic;
        const placement_plan p = placement_plan_make(r, t, m);
        check_invariants(p, m, r.devices);
        CHECK(p.traffic_balanced);
        for (int32_t s = 0; s < p.n_stages; ++s) {
            const auto &h = p.devices[s], &q = p.devices[s + p.n_stages];
            for (int32_t l = h.layer_begin; l < h.layer_end; ++l) {
                const auto &c = traffic.counts[l];
                const uint64_t total = std::accumulate(c.begin(), c.end(), uint64_t{0});
                uint64_t host_rows = 0, part_rows = 0;
                for (int32_t e : h.experts[l - h.layer_begin]) host_rows += c[e];
                for (int32_t e : q.experts[l - h.layer_begin]) part_rows += c[e];
                REQUIRE(host_rows + part_rows == total);
                const double dev = std::abs(double(host_rows) - double(total) / 2.0);
                const uint64_t hottest = *std::max_element(c.begin(), c.end());
                INFO("layer " << l << " host rows " << host_rows << " of " << total);
                CHECK(dev <= double(hottest) / 2.0);          // the guaranteed bound
                if (!skewed) CHECK(dev <= 0.01 * double(total));  // the stated tolerance without a hot expert
                CHECK(std::abs(p.host_row_share[l] - double(host_rows) / double(total)) < 1e-12);
            }
            uint64_t held = 0;
            for (const auto &v : h.experts) held += v.size();
            CHECK(h.bytes_experts == held * one_expert);  // bytes follow the (now uneven) expert counts
        }
    }

    placement_request wrong = request(placement_mode::tensor_parallel, {0, 1});
    wrong.traffic = expert_traffic{std::vector<std::vector<uint64_t>>(10, std::vector<uint64_t>(128, 1))};
    CHECK(config_error_of(wrong, t, m).find("10 layers x 128 experts") != std::string::npos);
    placement_request pipe = request(placement_mode::pipeline, {0, 1});
    pipe.traffic = expert_traffic{std::vector<std::vector<uint64_t>>(48, std::vector<uint64_t>(128, 1))};
    CHECK(placement_plan_make(pipe, t, m).notes.size() == 1);
}

TEST_CASE("expert_traffic_split on its own: bound, fallbacks, determinism", "[placement]") {
    const uint32_t seed = Catch::rngSeed() ? Catch::rngSeed() : 7u;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    CHECK(expert_traffic_split({0, 0, 0, 0, 0}) == std::vector<bool>{true, true, true, false, false});
    CHECK(expert_traffic_split({5}) == std::vector<bool>{true});
    const std::vector<bool> one_hot = expert_traffic_split({0, 0, 900, 0});
    CHECK(std::count(one_hot.begin(), one_hot.end(), true) == 2);  // zero experts still spread evenly
    for (int trial = 0; trial < 200; ++trial) {
        const size_t n = 1 + rng() % 160;
        std::vector<uint64_t> c(n);
        for (auto &x : c) x = rng() % 4 == 0 ? 0 : rng() % (trial % 2 ? 1000000 : 100);
        const std::vector<bool> h = expert_traffic_split(c);
        REQUIRE(h.size() == n);
        CHECK(h == expert_traffic_split(c));
        uint64_t total = 0, host = 0;
        for (size_t e = 0; e < n; ++e) total += c[e], host += h[e] ? c[e] : 0;
        const uint64_t hottest = *std::max_element(c.begin(), c.end());
        INFO("trial " << trial << " n " << n);
        CHECK(std::abs(double(host) - double(total) / 2.0) <= double(hottest) / 2.0);
    }
}

TEST_CASE("auto order on big all-to-all boxes: exact up to 20 devices, greedy beyond", "[placement]") {
    for (int32_t n : {16, 20, 24}) {
        INFO(n << " devices");
        topology t;
        for (int32_t i = 0; i < n; ++i) t.devices.push_back({i, "gpu", 80.0, 0, std::nullopt});
        for (int32_t a = 0; a < n; ++a)
            for (int32_t b = a + 1; b < n; ++b) t.links.push_back({a, b, true, (a / 2 == b / 2) ? 0 : 1, ""});
        const std::vector<int32_t> order = placement_auto_order(t, placement_mode::tensor_parallel);
        REQUIRE(order.size() == size_t(n));
        for (int32_t i = 0; i < n / 2; ++i) {
            // Rank 0 links join (0,1), (2,3), ...: every pair must use one.
            CHECK(order[i] / 2 == order[i + n / 2] / 2);
            CHECK(order[i] == 2 * i);
        }
    }
}
