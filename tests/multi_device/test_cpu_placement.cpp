// tests/multi_device/test_cpu_placement.cpp - placement invariance on CPU virtual devices:
// decode logits on every plan (pipeline stages, tensor-parallel pairs, a host tier for experts)
// are bitwise equal to the single-device run; the host tier's requantized experts (--expert-tiers).
#include "../model/model_test_util.h"

#include "tandem/error.h"
#include "tandem/expert_tiers.h"
#include "tandem/quant.h"
#include "tandem/placement.h"
#include "tandem/sampler.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

struct plan_case {
    int32_t devices;
    bool tensor_parallel;
    int32_t micro_batches = 0;
};

// Three sessions: prefill prompts of different lengths in one call, then decode steps with all
// sessions in one call; returns every logits vector in order.
std::vector<std::vector<float>> run_sessions(const std::string &model, plan_case pc, uint32_t seed,
                                             const engine_options *tiers = nullptr) {
    engine_options opt;
    if (tiers) {
        opt.gpu_vram = tiers->gpu_vram;
        opt.host_experts = tiers->host_experts;
        opt.expert_tiers = tiers->expert_tiers;
    }
    opt.n_slots = 3;
    opt.n_ctx = 128;
    opt.n_threads = 2;
    opt.n_devices = pc.devices;
    opt.tensor_parallel = pc.tensor_parallel;
    opt.micro_batches = pc.micro_batches;
    auto eng = engine_open(gguf_file::open(model), opt);
    REQUIRE(eng->counters().at("devices") == double(pc.devices));  // the plan took effect
    const bool host_tier = tiers && tiers->host_experts != "off";
    if (host_tier) REQUIRE(eng->layout().find(" | host E~") != std::string::npos);  // so did the host tier
    double cold_pairs = 0;
    std::mt19937 rng(seed);
    const int32_t nv = eng->hparams().n_vocab;
    std::vector<engine_row> rows;
    const int lengths[3] = {7, 1, 23};
    for (int32_t s = 0; s < 3; ++s)
        for (int32_t i = 0; i < lengths[s]; ++i)
            rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(i + 1 == lengths[s])});
    std::vector<std::vector<float>> out;
    std::vector<float> logits;
    engine_forward_logits(*eng, rows, logits);
    cold_pairs += eng->counters().at("host_tier_pairs_last_step");
    out.push_back(logits);
    for (int step = 0; step < 6; ++step) {
        rows.clear();
        for (int32_t s = 0; s < 3; ++s) {
            const int32_t next = argmax({logits.data() + size_t(s) * size_t(nv), size_t(nv)});
            rows.push_back({s, eng->slot_length(s), next, row_output::logits});
        }
        engine_forward_logits(*eng, rows, logits);
        cold_pairs += eng->counters().at("host_tier_pairs_last_step");
        out.push_back(logits);
    }
    if (host_tier) CHECK(cold_pairs > 0);  // rows went to cold experts
    return out;
}

}  // namespace

TEST_CASE("decode logits are bitwise equal on every CPU placement plan", "[multi_device][invariance]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    const auto single = run_sessions(model, {1, false}, 11);
    const plan_case pc = GENERATE(values<plan_case>({{2, false}, {4, false}, {2, true}, {4, true}, {8, true},
                                                     {2, false, 1}, {4, false, 3}, {4, true, 2}}));
    INFO(pc.devices << " devices, " << (pc.tensor_parallel ? "tensor-parallel pairs" : "pipeline only")
                    << ", micro-batches " << pc.micro_batches);
    const auto placed = run_sessions(model, pc, 11);
    REQUIRE(placed.size() == single.size());
    for (size_t i = 0; i < single.size(); ++i) {
        INFO("call " << i);
        REQUIRE(placed[i].size() == single[i].size());
        CHECK(std::memcmp(placed[i].data(), single[i].data(), single[i].size() * sizeof(float)) == 0);
    }
}

TEST_CASE("fixture logits are bitwise equal on a tensor-parallel pair", "[multi_device][fixtures]") {
    const std::string model = fixture_gguf("qwen3moe-b", ggml_type::f32);
    const auto single = run_sessions(model, {1, false}, 5);
    const auto pair = run_sessions(model, {2, true}, 5);
    const auto stages = run_sessions(model, {3, false}, 5);
    for (size_t i = 0; i < single.size(); ++i) {
        CHECK(std::memcmp(pair[i].data(), single[i].data(), single[i].size() * sizeof(float)) == 0);
        CHECK(std::memcmp(stages[i].data(), single[i].data(), single[i].size() * sizeof(float)) == 0);
    }
}

// deepseek2: latent attention, the router and shared experts (or a dense layer's FFN) replicated in
// a pair, routed experts split; the dense first layer and the cache of latent + rope key per token
// cross stage boundaries like any other layer.
TEST_CASE("deepseek2 logits are bitwise equal on one device, tensor-parallel pairs and pipeline stages",
          "[multi_device][invariance][deepseek2]") {
    const std::string preset = GENERATE(std::string("tiny-deepseek-v3"), std::string("tiny-deepseek-v2"));
    const std::string model = synth_gguf(preset, ggml_type::q8_0, 0);
    const auto single = run_sessions(model, {1, false}, 17);
    const plan_case pc = GENERATE(values<plan_case>({{2, true}, {2, false}, {3, false}, {4, true}, {2, false, 1}}));
    INFO(preset << ": " << pc.devices << " devices, " << (pc.tensor_parallel ? "tensor-parallel pairs" : "pipeline only")
                << ", micro-batches " << pc.micro_batches);
    const auto placed = run_sessions(model, pc, 17);
    REQUIRE(placed.size() == single.size());
    for (size_t i = 0; i < single.size(); ++i) {
        INFO("call " << i);
        REQUIRE(placed[i].size() == single[i].size());
        CHECK(std::memcmp(placed[i].data(), single[i].data(), single[i].size() * sizeof(float)) == 0);
    }
}

TEST_CASE("invalid CPU placements are refused with a clear error", "[multi_device]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    engine_options opt;
    opt.n_slots = 1;
    opt.n_ctx = 64;
    opt.n_devices = 3;
    opt.tensor_parallel = true;
    CHECK_THROWS_AS(engine_open(gguf_file::open(model), opt), tandem::error);
    opt.n_devices = 0;
    opt.tensor_parallel = false;
    CHECK_THROWS_AS(engine_open(gguf_file::open(model), opt), tandem::error);
}

TEST_CASE("recorded expert traffic counts every routed row, alike on every plan, and feeds the planner",
          "[multi_device][traffic]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto record = [&](int32_t devices, bool tp) {
        engine_options opt;
        opt.n_slots = 2;
        opt.n_ctx = 64;
        opt.n_threads = 2;
        opt.n_devices = devices;
        opt.tensor_parallel = tp;
        opt.record_expert_traffic = true;
        auto eng = engine_open(gguf_file::open(model), opt);
        std::vector<engine_row> rows;
        for (int32_t i = 0; i < 11; ++i) rows.push_back({0, i, 3 + 7 * i, logits_if(i == 10)});
        for (int32_t i = 0; i < 5; ++i) rows.push_back({1, i, 100 + i, logits_if(i == 4)});
        std::vector<float> logits;
        engine_forward_logits(*eng, rows, logits);
        return std::make_pair(eng->expert_traffic(), eng->hparams());
    };
    const auto [single, hp] = record(1, false);
    REQUIRE(single.size() == size_t(hp.n_layer));
    for (const auto &layer : single) {
        REQUIRE(layer.size() == size_t(hp.n_expert));
        uint64_t sum = 0;
        for (uint64_t c : layer) sum += c;
        CHECK(sum == 16u * uint64_t(hp.n_expert_used));  // 16 rows, k experts each
    }
    CHECK(record(2, true).first == single);
    CHECK(record(4, false).first == single);

    // Round trip through the --expert-balance format, then a traffic-balanced pair plan.
    expert_traffic traffic{single};
    const expert_traffic back = expert_traffic_parse(expert_traffic_to_json(traffic), "recorded");
    CHECK(back.counts == single);
    placement_model pm;
    auto file = gguf_file::open(model);
    pm.bytes = model_bytes_read(*file, hp, 4);
    pm.n_layer = hp.n_layer;
    pm.n_expert = hp.n_expert;
    pm.n_vocab = hp.n_vocab;
    placement_request req;
    req.mode = placement_mode::tensor_parallel;
    req.devices = {0, 1};
    req.traffic = back;
    const placement_plan plan = placement_plan_make(req, topology_cpu_virtual(2, uint64_t(64) << 30), pm);
    CHECK(plan.traffic_balanced);
    REQUIRE(plan.host_row_share.size() == size_t(hp.n_layer));
    for (double share : plan.host_row_share) CHECK(std::abs(share - 0.5) < 0.2);

    // Without recording there is nothing to write.
    engine_options plain;
    plain.n_ctx = 16;
    auto eng = engine_open(gguf_file::open(model), plain);
    CHECK(eng->expert_traffic().empty());
    CHECK_THROWS_WITH(engine_write_expert_traffic(*eng, "/tmp/never.json"), Catch::Contains("recorded no expert traffic"));
}

namespace {

// A budget per virtual device between the least that fits with every routed expert on the host
// tier (fraction 0) and the least that fits with none there (1), found by asking the planner for
// the plan run_sessions' engine makes: smaller fractions push more experts to the host tier.
std::string budget_gib(const std::string &model, int32_t devices, bool tp, double fraction) {
    auto file = gguf_file::open(model);
    const model_hparams hp = model_hparams_read(*file);
    placement_model pm;
    pm.bytes = model_bytes_read(*file, hp, sizeof(float));
    pm.n_layer = hp.n_layer;
    pm.n_expert = hp.n_expert;
    pm.n_vocab = hp.n_vocab;
    placement_request req;
    req.mode = devices == 1 ? placement_mode::single : tp ? placement_mode::tensor_parallel : placement_mode::pipeline;
    for (int32_t i = 0; i < devices; ++i) req.devices.push_back(i);
    req.n_sessions = 3;
    req.n_ctx = 128;
    const topology topo = topology_cpu_virtual(devices, uint64_t(64) << 30);
    auto least = [&](std::optional<uint64_t> host) {
        uint64_t lo = 0, hi = pm.bytes.total() + pm.bytes.kv_per_token * 3 * 128;  // hi always fits
        while (hi - lo > 1) {
            const uint64_t mid = lo + (hi - lo) / 2;
            req.budgets = {mid};
            req.host_experts = host;
            try {
                placement_plan_make(req, topo, pm);
                hi = mid;
            } catch (const error &) {
                lo = mid;
            }
        }
        return hi;
    };
    const uint64_t all_cold = least(uint64_t(64) << 30), none_cold = least(std::nullopt);
    REQUIRE(all_cold < none_cold);
    return fmt::format("{:.12f}", (double(all_cold) + fraction * double(none_cold - all_cold)) / double(gib));
}

}  // namespace

TEST_CASE("a host tier forced by small device budgets gives the single device's logits bitwise",
          "[multi_device][invariance][tiers]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    const auto single = run_sessions(model, {1, false}, 23);
    struct tier_case {
        int32_t devices;
        bool tensor_parallel;
        double fraction;
    };
    const tier_case tc = GENERATE(values<tier_case>({{1, false, 0.3}, {1, false, 0.7}, {2, false, 0.5}, {2, true, 0.5},
                                                     {4, true, 0.3}}));
    INFO(tc.devices << " devices, " << (tc.tensor_parallel ? "pairs" : "pipeline") << ", experts fraction " << tc.fraction);
    engine_options extra;
    extra.gpu_vram = budget_gib(model, tc.devices, tc.tensor_parallel, tc.fraction);
    extra.host_experts = "auto";
    const auto tiered = run_sessions(model, {tc.devices, tc.tensor_parallel}, 23, &extra);
    REQUIRE(tiered.size() == single.size());
    for (size_t i = 0; i < single.size(); ++i) {
        INFO("call " << i);
        REQUIRE(tiered[i].size() == single[i].size());
        CHECK(std::memcmp(tiered[i].data(), single[i].data(), single[i].size() * sizeof(float)) == 0);
    }
}

// deepseek2: a dense first layer (no routed experts, nothing cold) and shared experts beside the
// routed ones, which the host tier splits like any other.
TEST_CASE("deepseek2 with a host tier gives the single device's logits bitwise", "[multi_device][invariance][tiers][deepseek2]") {
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q8_0, 0);
    const auto single = run_sessions(model, {1, false}, 29);
    const plan_case pc = GENERATE(values<plan_case>({{1, false}, {2, true}}));
    INFO(pc.devices << " devices, " << (pc.tensor_parallel ? "pairs" : "one device"));
    engine_options extra;
    extra.gpu_vram = budget_gib(model, pc.devices, pc.tensor_parallel, 0.4);
    extra.host_experts = "auto";
    const auto tiered = run_sessions(model, pc, 29, &extra);
    REQUIRE(tiered.size() == single.size());
    for (size_t i = 0; i < single.size(); ++i) {
        INFO("call " << i);
        CHECK(std::memcmp(tiered[i].data(), single[i].data(), single[i].size() * sizeof(float)) == 0);
    }
}

TEST_CASE("the host tier computes the cold slots and follows the routing profile", "[multi_device][tiers]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    engine_options opt;
    opt.n_slots = 1;
    opt.n_ctx = 64;
    opt.n_threads = 2;
    opt.gpu_vram = budget_gib(model, 1, false, 0.5);
    opt.host_experts = "auto";
    opt.record_expert_traffic = true;
    std::vector<engine_row> rows;
    for (int32_t i = 0; i < 24; ++i) rows.push_back({0, i, 5 + 11 * i, logits_if(i == 23)});
    std::vector<float> logits;
    auto uniform = engine_open(gguf_file::open(model), opt);
    REQUIRE(uniform->layout().find(" | host E~") != std::string::npos);
    engine_forward_logits(*uniform, rows, logits);
    const double uniform_cold = uniform->counters().at("host_tier_pairs_last_step");
    CHECK(uniform_cold > 0);  // the tier took part

    // The same rows with their own profile: the busiest experts move to the device, fewer slots go cold.
    const std::string profile = std::string(TANDEM_BINARY_DIR) + "/test_multi_device_profile.json";
    engine_write_expert_traffic(*uniform, profile);
    opt.expert_balance = profile;
    opt.record_expert_traffic = false;
    auto profiled = engine_open(gguf_file::open(model), opt);
    std::vector<float> again;
    engine_forward_logits(*profiled, rows, again);
    CHECK(profiled->counters().at("host_tier_pairs_last_step") < uniform_cold);
    CHECK(std::memcmp(again.data(), logits.data(), logits.size() * sizeof(float)) == 0);

    // Budgets the host tier cannot make up for are refused before anything runs.
    opt.host_experts = "0";
    CHECK_THROWS_WITH(engine_open(gguf_file::open(model), opt), Catch::Contains("even with the host tier"));
    // Without a host tier --gpu-vram is the GPUs' flag alone: the CPU engine keeps every expert.
    opt.host_experts = "off";
    CHECK(engine_open(gguf_file::open(model), opt)->layout().find(" | host") == std::string::npos);
}

namespace {

// A copy of `path` whose routed experts (ffn_*_exps) are requantized to `type` as the host tier's
// tiers do it: each row dequantized to f32, then quantize_rows without an importance.
std::string experts_requantized_copy(const std::string &path, ggml_type type) {
    auto in = gguf_file::open(path);
    gguf_writer w;
    for (const gguf_kv &kv : in->kvs())
        if (kv.key != "general.alignment") w.set_value(kv.key, kv.value);
    for (const gguf_tensor_info &t : in->tensors()) {
        const gguf_tensor_info *src = &t;
        if (t.name.find("_exps.weight") == std::string::npos) {
            w.add_tensor(t.name, t.type, t.ne, [src](uint8_t *dst) { std::memcpy(dst, src->data, src->n_bytes); });
            continue;
        }
        w.add_tensor(t.name, type, t.ne, [src, type](uint8_t *dst) {
            std::vector<float> rows(size_t(src->n_elements()));
            dequantize_rows(src->type, src->data, rows.data(), src->n_rows(), src->ne[0]);
            quantize_rows(type, rows.data(), dst, src->n_rows(), src->ne[0], nullptr);
        });
    }
    const std::string out = fmt::format("{}.experts-{}.gguf", path, ggml_type_name(type));
    w.write(out);
    return out;
}

engine_options tiered(const std::string &model, double fraction, const std::string &spec) {
    engine_options extra;
    extra.gpu_vram = budget_gib(model, 1, false, fraction);
    extra.host_experts = "auto";
    extra.expert_tiers = spec;
    return extra;
}

double worst_rel_l2(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, rel_l2(a[i], b[i]));
    return worst;
}

bool bitwise_equal(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
            return false;
    return true;
}

}  // namespace

TEST_CASE("a requantized host tier gives the logits of the file with requantized experts bitwise",
          "[multi_device][tiers][expert_tiers]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto file = gguf_file::open(model);
    const model_hparams hp = model_hparams_read(*file);
    // Device room for half an expert: every routed expert is cold, so every expert the tiered run
    // computes is a requantized copy, as every expert of the copy's single-device run is.
    // q8_0, q6_k and q4_k on digits, q4_0 exact: both arithmetics read the copies alike.
    const ggml_type type = GENERATE(ggml_type::q8_0, ggml_type::q6_k, ggml_type::q4_k, ggml_type::q4_0);
    INFO("cold=" << ggml_type_name(type));
    const engine_options tiers = tiered(model, 0.5 / double(hp.n_layer * hp.n_expert), "cold=" + std::string(ggml_type_name(type)));
    const auto reference = run_sessions(experts_requantized_copy(model, type), {1, false}, 31);
    const auto tiered_run = run_sessions(model, {1, false}, 31, &tiers);
    CHECK(bitwise_equal(tiered_run, reference));
    // The reference differs from the q4_k file's own logits, so the equality above is the tier's doing.
    CHECK_FALSE(bitwise_equal(run_sessions(model, {1, false}, 31), reference));
}

// deepseek2: a dense first layer (nothing cold) and shared experts, which stay as the file has them.
TEST_CASE("deepseek2 with a requantized host tier gives the logits of the file with requantized experts bitwise",
          "[multi_device][tiers][expert_tiers][deepseek2]") {
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q8_0, 0);
    auto file = gguf_file::open(model);
    const model_hparams hp = model_hparams_read(*file);
    const engine_options tiers = tiered(model, 0.5 / double(hp.n_layer * hp.n_expert), "cold=q4_k");
    const auto reference = run_sessions(experts_requantized_copy(model, ggml_type::q4_k), {1, false}, 59);
    CHECK(bitwise_equal(run_sessions(model, {1, false}, 59, &tiers), reference));
    CHECK_FALSE(bitwise_equal(run_sessions(model, {1, false}, 59), reference));
}

TEST_CASE("a host tier requantized to q4_0 stays near the untiered logits", "[multi_device][tiers][expert_tiers]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    // Forced tokens: every run sees the same inputs, so a difference is the cold experts' alone.
    auto run = [&](const engine_options *tiers) {
        engine_options opt = tiers ? *tiers : engine_options{};
        opt.n_slots = 3;
        opt.n_ctx = 128;
        opt.n_threads = 2;
        auto eng = engine_open(gguf_file::open(model), opt);
        std::vector<std::vector<float>> out;
        for (int32_t s = 0; s < 3; ++s) {
            out.push_back(prefill(*eng, s, random_prompt(5 + 7 * s, eng->hparams().n_vocab, 47 + uint32_t(s))));
            for (int32_t t : random_prompt(4, eng->hparams().n_vocab, 53 + uint32_t(s))) out.push_back(logits_after(*eng, s, t));
        }
        return out;
    };
    const auto plain = run(nullptr);
    const engine_options q4_0_tier = tiered(model, 0.3, "cold=q4_0"), q8_0_tier = tiered(model, 0.3, "cold=q8_0");
    const auto q4_0 = run(&q4_0_tier), q8_0 = run(&q8_0_tier);
    CHECK_FALSE(bitwise_equal(q4_0, plain));  // the tier took effect
    // The q4_k weights requantized lose 5.8% (q4_0: one scale per 32 weights, no minimum) and 0.36%
    // (q8_0) in relative L2; the tiny random model's 4 layers amplify that up to about three times in its
    // logits (measured: 0.18 and 0.005 at worst), and an expert computed from the wrong weights
    // would put the logits about 1 apart.
    const double err_q4_0 = worst_rel_l2(q4_0, plain), err_q8_0 = worst_rel_l2(q8_0, plain);
    INFO("worst relative L2 of a row's logits: q4_0 " << err_q4_0 << ", q8_0 " << err_q8_0);
    CHECK(err_q4_0 < 0.3);
    CHECK(err_q8_0 < 0.01);
    CHECK(err_q8_0 > 0);
    // Reproducible: a second engine requantizes to the same bits.
    CHECK(bitwise_equal(run(&q4_0_tier), q4_0));
}

TEST_CASE("a tiered host tier keeps each session's logits independent of its batch",
          "[multi_device][tiers][expert_tiers][invariance]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    const engine_options tiers = tiered(model, 0.4, "cold=iq4_xs");
    auto open = [&] {
        engine_options opt = tiers;
        opt.n_slots = 3;
        opt.n_ctx = 128;
        opt.n_threads = 2;
        return engine_open(gguf_file::open(model), opt);
    };
    const std::vector<int32_t> prompt = random_prompt(9, 1024, 41);
    // Session 0 alone: its prompt, then four greedy decode steps.
    auto alone = open();
    std::vector<std::vector<float>> own;
    std::vector<float> logits = prefill(*alone, 0, prompt);
    own.push_back(logits);
    std::vector<int32_t> tokens;
    for (int step = 0; step < 4; ++step) {
        tokens.push_back(argmax(logits));
        logits = logits_after(*alone, 0, tokens.back());
        own.push_back(logits);
    }
    // The same session beside two others, its prompt in the call of theirs, its decode rows with theirs.
    auto shared = open();
    const int32_t nv = shared->hparams().n_vocab;
    std::vector<engine_row> rows;
    for (int32_t i = 0; i < 5; ++i) rows.push_back({1, i, 7 + 3 * i, logits_if(i == 4)});
    for (int32_t i = 0; i < int32_t(prompt.size()); ++i) rows.push_back({0, i, prompt[size_t(i)], logits_if(i + 1 == int32_t(prompt.size()))});
    for (int32_t i = 0; i < 12; ++i) rows.push_back({2, i, 100 + i, logits_if(i == 11)});
    engine_forward_logits(*shared, rows, logits);
    double cold_pairs = shared->counters().at("host_tier_pairs_last_step");
    CHECK(std::memcmp(logits.data() + nv, own[0].data(), size_t(nv) * sizeof(float)) == 0);
    for (int step = 0; step < 4; ++step) {
        rows = {{1, shared->slot_length(1), 5 + step, row_output::logits},
                {0, shared->slot_length(0), tokens[size_t(step)], row_output::logits},
                {2, shared->slot_length(2), 50 + step, row_output::logits}};
        engine_forward_logits(*shared, rows, logits);
        cold_pairs += shared->counters().at("host_tier_pairs_last_step");
        INFO("decode step " << step);
        CHECK(std::memcmp(logits.data() + nv, own[size_t(step) + 1].data(), size_t(nv) * sizeof(float)) == 0);
    }
    CHECK(cold_pairs > 0);
}

TEST_CASE("expert tiers without a host tier change nothing; bad ones are refused at open", "[multi_device][expert_tiers]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    const auto plain = run_sessions(model, {1, false}, 43);
    engine_options no_tier;
    no_tier.expert_tiers = "cold=q4_0";  // --host-experts off: the plan puts nothing cold
    CHECK(bitwise_equal(run_sessions(model, {1, false}, 43, &no_tier), plain));
    engine_options opt;
    opt.n_ctx = 64;
    opt.expert_tiers = "cold=q9_0";
    CHECK_THROWS_WITH(engine_open(gguf_file::open(model), opt), Catch::Contains("unknown type 'q9_0'"));
    // Every expert cold: 32 of about 0.1 MiB in q4_k fit a 10 MiB host tier, their f32 copies (0.75
    // MiB each) do not.
    auto file = gguf_file::open(model);
    const model_hparams hp = model_hparams_read(*file);
    engine_options big = tiered(model, 0.5 / double(hp.n_layer * hp.n_expert), "cold=f32");
    big.host_experts = "0.01";
    big.n_slots = 3;
    big.n_ctx = 128;
    CHECK_THROWS_WITH(engine_open(gguf_file::open(model), big), Catch::Contains("as --expert-tiers requantizes them"));
    big.expert_tiers = "cold=q8_0";
    CHECK(engine_open(gguf_file::open(model), big)->layout().find(" | host E~") != std::string::npos);
}
