// tests/gpu/test_cuda_tiers.cpp - the host tier on the CUDA engine: a qwen3-30b-a3b-shaped synth
// with --gpu-vram forcing 30%, 50% and 70% of its routed experts to host memory, whose slots the
// CPU computes with the GPU's Q4_K digit arithmetic, against the all-GPU run (every row here takes
// the decode kernels: prompt rows' tiled products are not the CPU's).
#include "gpu_test_util.h"
#include "model_test_util.h"

#include "tandem/error.h"
#include "tandem/sampler.h"
#include "src/engine/cuda_engine.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

engine_options tier_options(const std::string &gpu_vram, const std::string &host_experts) {
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.n_slots = 3;
    opt.n_ctx = 160;
    opt.gpu_devices = {0};
    opt.gpu_vram = gpu_vram;
    opt.host_experts = host_experts;
    return opt;
}

// The least GiB for GPU 0 with which a plan allowed a host tier fits, keeping every expert on the
// GPU (all_hot) or not (the same scratch either way, so budgets between the two move experts only).
double least_budget(const gguf_file &file, const model_hparams &hp, bool all_hot) {
    double lo = 0.0, hi = 64.0;
    for (int i = 0; i < 30; ++i) {
        const double mid = 0.5 * (lo + hi);
        bool fits = false;
        try {
            fits = !all_hot || !cuda_plan_make(file, hp, tier_options(fmt::format("{:.9f}", mid), "auto")).cold.used();
        } catch (const error &e) {
            REQUIRE(e.kind() == error_kind::config);  // a budget too small: the plan is refused
        }
        (fits ? hi : lo) = mid;
    }
    return hi;
}

// Three sessions' prompts in one call, then decode steps of all three; every logits vector. The
// decode tokens are the greedy picks, recorded into `tokens` when it is empty, else taken from it
// (so a second run sees the first run's inputs whatever its own logits).
std::vector<std::vector<float>> run_sessions(const std::string &model, const engine_options &opt, uint32_t seed,
                                             std::vector<int32_t> &tokens, std::string *layout = nullptr) {
    auto eng = engine_open(gguf_file::open(model), opt);
    if (layout) *layout = eng->layout();
    const bool record = tokens.empty();
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
    out.push_back(logits);
    for (size_t step = 0, t = 0; step < 6; ++step) {
        rows.clear();
        for (int32_t s = 0; s < 3; ++s, ++t) {
            if (record) tokens.push_back(argmax({logits.data() + size_t(s) * size_t(nv), size_t(nv)}));
            rows.push_back({s, eng->slot_length(s), tokens.at(t), row_output::logits});
        }
        engine_forward_logits(*eng, rows, logits);
        out.push_back(logits);
    }
    return out;
}

double relative_l2(const std::vector<float> &a, const std::vector<float> &b) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
        norm += double(b[i]) * double(b[i]);
    }
    return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("CUDA host tier: 30%, 50% and 70% of the experts on the host give the all-GPU logits",
          "[gpu][placement][tiers]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("qwen3-30b-a3b", ggml_type::q4_k, 4);
    auto file = gguf_file::open(model);
    const model_hparams hp = model_hparams_read(*file);
    std::vector<int32_t> tokens;
    const auto all_gpu = run_sessions(model, tier_options("auto", "off"), 31, tokens);
    const double none_cold = least_budget(*file, hp, true), all_cold = least_budget(*file, hp, false);
    REQUIRE(all_cold < none_cold);
    const double cold_share = GENERATE(0.3, 0.5, 0.7);
    const std::string vram = fmt::format("{:.9f}", none_cold - cold_share * (none_cold - all_cold));
    const engine_options opt = tier_options(vram, "auto");
    const placement_plan plan = cuda_plan_make(*file, hp, opt);
    size_t cold = 0;
    for (const auto &layer : plan.cold.experts) cold += layer.size();
    const double share = double(cold) / double(size_t(hp.n_layer) * size_t(hp.n_expert));
    INFO("--gpu-vram " << vram << ": " << share * 100.0 << "% of the experts cold");
    CHECK(std::abs(share - cold_share) < 0.05);
    std::string layout;
    const auto tiered = run_sessions(model, opt, 31, tokens, &layout);
    INFO(layout);
    REQUIRE(tiered.size() == all_gpu.size());
    size_t bitwise = 0;
    for (size_t i = 0; i < all_gpu.size(); ++i) {
        INFO("call " << i);
        REQUIRE(tiered[i].size() == all_gpu[i].size());
        bitwise += std::memcmp(tiered[i].data(), all_gpu[i].data(), all_gpu[i].size() * sizeof(float)) == 0;
        // The cold slots' products are the GPU's digit arithmetic bit for bit; only SwiGLU's exp
        // (CUDA's expf, within 2 ulp, against glibc's) can round an activation differently, which
        // moves one of its digits by 2^-15 of its block's largest: far inside tolerance::moe, which
        // bounds whole expert products.
        CHECK(relative_l2(tiered[i], all_gpu[i]) <= tolerance::moe);
    }
    WARN(cold_share * 100.0 << "% cold: " << bitwise << " of " << all_gpu.size() << " logits calls bitwise equal to the all-GPU run");
    CHECK(bitwise > 0);  // most calls are expected bitwise; none would mean the arithmetic is not the GPU's
}
