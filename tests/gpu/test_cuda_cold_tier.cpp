// tests/gpu/test_cuda_cold_tier.cpp - the CUDA engine's host tier: GPU budgets that force 30%, 50%
// and 70% of the routed experts to host memory give the all-GPU run's logits bitwise on Q4_K
// experts of qwen3moe and deepseek2 (the CPU computes their slots in the GPU's digit arithmetic),
// on one device, pipeline stages and tensor-parallel pairs (logical devices of GPU 0), in graph and
// plain steps; the Q4_K_M mix (Q6_K down, which the CPU computes its own way) within a bound; the
// tier really takes part; --expert-tiers (cold experts requantized at load) repeats bitwise.
#include "gpu_test_util.h"
#include "model_test_util.h"

#include "src/engine/cuda_engine.h"
#include "tandem/error.h"
#include "tandem/placement.h"

#include <fmt/format.h>

#include <cstring>
#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

engine_options cuda_options(std::vector<int32_t> devices, bool tensor_parallel) {
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.n_slots = 4;
    opt.n_ctx = 160;
    opt.n_threads = 4;
    opt.gpu_devices = std::move(devices);
    opt.tensor_parallel = tensor_parallel;
    return opt;
}

// The least per-device budget (bytes) with which the plan fits, with or without the host tier.
uint64_t least_budget(const std::string &model, engine_options opt, bool host_tier) {
    auto file = gguf_file::open(model);
    const model_hparams hp = model_hparams_read(*file);
    opt.host_experts = host_tier ? "auto" : "off";
    uint64_t lo = 0, hi = uint64_t(8) << 30;
    while (hi - lo > 4096) {
        const uint64_t mid = lo + (hi - lo) / 2;
        opt.gpu_vram = fmt::format("{:.9f}", double(mid) / double(gib));
        try {
            cuda_plan_make(*file, hp, opt);
            hi = mid;
        } catch (const error &) {
            lo = mid;
        }
    }
    return hi;
}

// The options of a plan whose devices hold about `fraction` of the routed experts between none
// (fraction 0) and all (1); the rest are cold.
engine_options tier_options(const std::string &model, std::vector<int32_t> devices, bool tp, double fraction) {
    engine_options opt = cuda_options(std::move(devices), tp);
    const uint64_t all_cold = least_budget(model, opt, true), none_cold = least_budget(model, opt, false);
    REQUIRE(all_cold < none_cold);
    opt.gpu_vram = fmt::format("{:.9f}", (double(all_cold) + fraction * double(none_cold - all_cold)) / double(gib));
    opt.host_experts = "auto";
    return opt;
}

struct run_result {
    std::vector<std::vector<float>> logits;
    double cold_pairs = 0;   // the host tier's pairs over the calls
    std::string layout;
};

// Three sessions: prompts of different lengths in one call, then greedy decode steps of all of
// them (graph steps), the last ones with a fourth session's prompt riding along (plain steps).
run_result run_sessions(const std::string &model, const engine_options &opt, uint32_t seed) {
    auto eng = engine_open(gguf_file::open(model), opt);
    run_result out;
    out.layout = eng->layout();
    std::mt19937 rng(seed);
    const int32_t nv = eng->hparams().n_vocab;
    std::vector<engine_row> rows;
    const int lengths[3] = {7, 1, 40};
    for (int32_t s = 0; s < 3; ++s)
        for (int32_t i = 0; i < lengths[s]; ++i)
            rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(i + 1 == lengths[s]), true});
    std::vector<float> logits;
    auto count = [&] {
        const auto c = eng->counters();
        if (auto it = c.find("host_tier_pairs_last_step"); it != c.end()) out.cold_pairs += it->second;
    };
    engine_forward_logits(*eng, rows, logits);
    count();
    out.logits.push_back(logits);
    for (int step = 0; step < 8; ++step) {
        rows.clear();
        for (int32_t s = 0; s < 3; ++s) {
            const int32_t next = argmax({logits.data() + size_t(s) * size_t(nv), size_t(nv)});
            rows.push_back({s, eng->slot_length(s), next, row_output::logits});
        }
        if (step >= 5)
            for (int32_t i = 0; i < 9; ++i) rows.push_back({3, eng->slot_length(3) + i, int32_t(rng() % uint32_t(nv)), row_output::none, true});
        engine_forward_logits(*eng, rows, logits);
        count();
        logits.resize(3 * size_t(nv));
        out.logits.push_back(logits);
    }
    return out;
}

struct tier_case {
    std::vector<int32_t> devices;
    bool tensor_parallel;
    double fraction;
};

}  // namespace

TEST_CASE("CUDA host tier: forced cold experts give the all-GPU logits bitwise", "[gpu][placement][tiers]") {
    if (!gpu_present()) return;
    // tiny-deepseek-v3: a dense first layer (nothing cold), shared experts beside the routed ones.
    const std::string preset = GENERATE(as<std::string>{}, "tiny", "tiny-moe64", "tiny-deepseek-v3");
    const std::string model = synth_gguf(preset, ggml_type::q4_k, preset == "tiny-moe64" ? 2 : 4);
    const run_result all_gpu = run_sessions(model, cuda_options({0}, false), 41);
    CHECK(all_gpu.cold_pairs == 0);
    const tier_case tc = GENERATE(values<tier_case>({{{0}, false, 0.3}, {{0}, false, 0.5}, {{0}, false, 0.7},
                                                     {{0, 0}, false, 0.5}, {{0, 0}, true, 0.5}}));
    INFO(preset << ": " << tc.devices.size() << " devices, " << (tc.tensor_parallel ? "pairs" : "stages")
                << ", experts on the GPUs fraction " << tc.fraction);
    const engine_options opt = tier_options(model, tc.devices, tc.tensor_parallel, tc.fraction);
    const run_result tiered = run_sessions(model, opt, 41);
    INFO(tiered.layout);
    CHECK(tiered.layout.find("host tier on 4 CPU threads") != std::string::npos);
    CHECK(tiered.cold_pairs > 0);
    REQUIRE(tiered.logits.size() == all_gpu.logits.size());
    for (size_t i = 0; i < all_gpu.logits.size(); ++i) {
        INFO("call " << i);
        REQUIRE(tiered.logits[i].size() == all_gpu.logits[i].size());
        CHECK(std::memcmp(tiered.logits[i].data(), all_gpu.logits[i].data(), all_gpu.logits[i].size() * sizeof(float)) == 0);
    }
}

TEST_CASE("CUDA host tier on the Q4_K_M mix stays within the model bound of the all-GPU run", "[gpu][placement][tiers]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4, true);
    const run_result all_gpu = run_sessions(model, cuda_options({0}, false), 43);
    const run_result tiered = run_sessions(model, tier_options(model, {0}, false, 0.5), 43);
    CHECK(tiered.cold_pairs > 0);
    REQUIRE(tiered.logits.size() == all_gpu.logits.size());
    // Greedy tokens may part on near ties, so only the prompt call is compared as a whole.
    const auto &a = tiered.logits.front(), &b = all_gpu.logits.front();
    REQUIRE(a.size() == b.size());
    CHECK(rel_err(a.data(), b.data(), a.size()) <= tolerance::model_logits);
}

// --expert-tiers on CUDA: the CPU computes the cold slots from its requantized copies (q8_0, on
// digits), so runs repeat bitwise, differ from the untiered run, and stay near it.
TEST_CASE("CUDA host tier with requantized cold experts repeats bitwise and stays near the untiered run",
          "[gpu][placement][tiers][expert_tiers]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    const run_result all_gpu = run_sessions(model, cuda_options({0}, false), 47);
    engine_options opt = tier_options(model, {0}, false, 0.3);
    opt.expert_tiers = "cold=q8_0";
    const run_result tiered = run_sessions(model, opt, 47), again = run_sessions(model, opt, 47);
    CHECK(tiered.cold_pairs > 0);
    REQUIRE(tiered.logits.size() == again.logits.size());
    for (size_t i = 0; i < tiered.logits.size(); ++i) {
        INFO("call " << i);
        CHECK(std::memcmp(tiered.logits[i].data(), again.logits[i].data(), tiered.logits[i].size() * sizeof(float)) == 0);
    }
    // Greedy tokens may part, so the prompt call alone is compared: q8_0 copies of Q4_K weights lose
    // 0.36% (relative L2), which the CPU engine's tiny model shows as at most 0.5% in its logits.
    const auto &a = tiered.logits.front(), &b = all_gpu.logits.front();
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0);
    CHECK(rel_l2(a, b) < 0.02);
}
