// tests/multi_device/test_cpu_placement.cpp - placement invariance on CPU virtual devices:
// decode logits on every plan (pipeline stages, tensor-parallel pairs) are bitwise equal to the
// single-device run.
#include "../model/model_test_util.h"

#include "tandem/error.h"
#include "tandem/sampler.h"

#include <catch2/catch.hpp>

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
std::vector<std::vector<float>> run_sessions(const std::string &model, plan_case pc, uint32_t seed) {
    engine_options opt;
    opt.n_slots = 3;
    opt.n_ctx = 128;
    opt.n_threads = 2;
    opt.n_devices = pc.devices;
    opt.tensor_parallel = pc.tensor_parallel;
    opt.micro_batches = pc.micro_batches;
    auto eng = engine_open(gguf_file::open(model), opt);
    std::mt19937 rng(seed);
    const int32_t nv = eng->hparams().n_vocab;
    std::vector<engine_row> rows;
    const int lengths[3] = {7, 1, 23};
    for (int32_t s = 0; s < 3; ++s)
        for (int32_t i = 0; i < lengths[s]; ++i)
            rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), i + 1 == lengths[s]});
    std::vector<std::vector<float>> out;
    std::vector<float> logits;
    eng->forward(rows, logits);
    out.push_back(logits);
    for (int step = 0; step < 6; ++step) {
        rows.clear();
        for (int32_t s = 0; s < 3; ++s) {
            const int32_t next = argmax({logits.data() + size_t(s) * size_t(nv), size_t(nv)});
            rows.push_back({s, eng->slot_length(s), next, true});
        }
        eng->forward(rows, logits);
        out.push_back(logits);
    }
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
