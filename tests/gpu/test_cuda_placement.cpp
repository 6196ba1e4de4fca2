// tests/gpu/test_cuda_placement.cpp - placement invariance on CUDA devices: decode logits on every
// plan (pipeline stages, tensor-parallel pairs, micro-batches, both transports) are bitwise equal
// to the one-GPU run. Logical devices share GPU 0 (--gpu-devices 0,0,0,0), so this runs on one
// GPU; with two or more visible GPUs the same plans also run across GPUs 0 and 1.
#include "gpu_test_util.h"
#include "model_test_util.h"

#include "tandem/error.h"
#include "tandem/sampler.h"

#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

using namespace tandem;
using namespace tandem::test;

namespace {

struct gpu_plan {
    std::vector<int32_t> devices;
    bool tensor_parallel = false;
    int32_t micro_batches = 0;
    std::string transport = "auto";
};

// The options of every engine below: CUDA, 4 slots of 160 tokens, the plan's devices.
engine_options cuda_options(std::vector<int32_t> devices, bool tensor_parallel, int32_t n_slots = 4) {
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.n_slots = n_slots;
    opt.n_ctx = 160;
    opt.gpu_devices = std::move(devices);
    opt.tensor_parallel = tensor_parallel;
    return opt;
}

// The options of a plan: its devices, pairing, micro-batches and transport.
engine_options plan_options(const gpu_plan &p) {
    engine_options opt = cuda_options(p.devices, p.tensor_parallel);
    opt.micro_batches = p.micro_batches;
    opt.transport = engine_transport_parse(p.transport);
    return opt;
}

std::string describe(const gpu_plan &p) {
    std::ostringstream os;
    for (size_t i = 0; i < p.devices.size(); ++i) os << (i ? "," : "") << p.devices[i];
    os << (p.tensor_parallel ? " tensor-parallel" : " pipeline") << " micro-batches " << p.micro_batches
       << " transport " << p.transport;
    return os.str();
}

// Three sessions: prefill prompts of different lengths in one call, then greedy decode steps with
// all sessions in one call, the last steps with a fourth session's prompt riding along.
std::vector<std::vector<float>> run_sessions(const std::string &model, const gpu_plan &p, uint32_t seed,
                                             std::string *layout = nullptr) {
    auto eng = engine_open(gguf_file::open(model), plan_options(p));
    if (layout) *layout = eng->layout();
    std::mt19937 rng(seed);
    const int32_t nv = eng->hparams().n_vocab;
    std::vector<engine_row> rows;
    const int lengths[3] = {7, 1, 40};
    for (int32_t s = 0; s < 3; ++s)
        for (int32_t i = 0; i < lengths[s]; ++i)
            rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(i + 1 == lengths[s]), true});
    std::vector<std::vector<float>> out;
    std::vector<float> logits;
    engine_forward_logits(*eng, rows, logits);
    out.push_back(logits);
    for (int step = 0; step < 8; ++step) {
        rows.clear();
        for (int32_t s = 0; s < 3; ++s) {
            const int32_t next = argmax({logits.data() + size_t(s) * size_t(nv), size_t(nv)});
            rows.push_back({s, eng->slot_length(s), next, row_output::logits});
        }
        if (step >= 5)  // a stranger's prefill in the same call (rows without logits)
            for (int32_t i = 0; i < 9; ++i) rows.push_back({3, eng->slot_length(3) + i, int32_t(rng() % uint32_t(nv)), row_output::none, true});
        engine_forward_logits(*eng, rows, logits);
        logits.resize(3 * size_t(nv));
        out.push_back(logits);
    }
    return out;
}

void require_same(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        INFO("call " << i);
        REQUIRE(a[i].size() == b[i].size());
        CHECK(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) == 0);
    }
}

int visible_gpus() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

std::vector<gpu_plan> plans() {
    std::vector<gpu_plan> v = {
        {{0, 0}, false},          {{0, 0}, true},           {{0, 0, 0}, false},
        {{0, 0, 0, 0}, true},     {{0, 0, 0, 0}, false, 1}, {{0, 0, 0, 0}, true, 3},
        {{0, 0}, true, 0, "host"}, {{0, 0, 0, 0}, true, 2, "host"}, {{0, 0, 0, 0, 0, 0, 0, 0}, true},
    };
    if (visible_gpus() >= 2) {
        v.push_back({{0, 1}, false});
        v.push_back({{0, 1}, true});
        v.push_back({{0, 1}, true, 0, "host"});
        v.push_back({{0, 0, 1, 1}, true});
        v.push_back({{1, 0, 0, 1}, false, 2});
        v.push_back({{0, 1}, true, 0, "nccl"});
        v.push_back({{0, 1}, false, 2, "nccl"});
        v.push_back({{0, 0, 1, 1}, true, 2, "nccl"});
    }
    return v;
}

}  // namespace

TEST_CASE("CUDA decode logits are bitwise equal on every placement plan", "[gpu][placement]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    const auto single = run_sessions(model, {{0}}, 11);
    for (const gpu_plan &p : plans()) {
        std::string layout;
        INFO(describe(p));
        const auto placed = run_sessions(model, p, 11, &layout);
        INFO(layout);
        WARN(describe(p) << ": " << layout);
        require_same(placed, single);
    }
}

// Summaries on a plan: each device holding head columns reduces its shard, the engine merges
// them; ids and logits bitwise those of one GPU, the normaliser to double rounding. Best tokens
// on a second engine of the plan fed the same rows: each row's best token, bitwise the summary's
// first.
TEST_CASE("CUDA logits summaries are equal on every placement plan", "[gpu][placement][logits_top]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto run = [&](const gpu_plan &p) {
        auto eng = engine_open(gguf_file::open(model), plan_options(p));
        auto eng_best = engine_open(gguf_file::open(model), plan_options(p));
        std::vector<logits_top> bests;
        auto check_best = [&](const std::vector<engine_row> &rows, const std::vector<logits_top> &tops) {
            bests = forward_as(*eng_best, rows, row_output::best).top;
            REQUIRE(bests.size() == tops.size());
            for (size_t j = 0; j < tops.size(); ++j) {
                REQUIRE(bests[j].top.size() == 1);
                REQUIRE(bests[j].top[0].id == tops[j].top[0].id);
                REQUIRE(std::memcmp(&bests[j].top[0].logit, &tops[j].top[0].logit, sizeof(float)) == 0);
                REQUIRE(bests[j].has_nan == tops[j].has_nan);
            }
        };
        std::mt19937 rng(31);
        const int32_t nv = eng->hparams().n_vocab;
        std::vector<engine_row> rows;
        for (int32_t s = 0; s < 3; ++s)
            for (int32_t i = 0; i < 5 + 3 * s; ++i) rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), row_output::logits, true});
        std::vector<std::vector<logits_top>> out;
        std::vector<logits_top> tops;
        tops = forward_as(*eng, rows, row_output::summary).top;
        check_best(rows, tops);
        out.push_back(tops);
        for (int step = 0; step < 5; ++step) {
            std::vector<int32_t> next;
            for (int32_t s = 0, at = 0; s < 3; ++s) next.push_back(tops[size_t(at += (step == 0 ? 5 + 3 * s : 1)) - 1].top[0].id);
            rows.clear();
            for (int32_t s = 0; s < 3; ++s) rows.push_back({s, eng->slot_length(s), next[size_t(s)], row_output::logits});
            tops = forward_as(*eng, rows, row_output::summary).top;
            check_best(rows, tops);
            out.push_back(tops);
        }
        return out;
    };
    const auto single = run({{0}});
    std::vector<gpu_plan> some = {{{0, 0}, true}, {{0, 0, 0}, false}, {{0, 0, 0, 0}, true, 2}, {{0, 0}, true, 0, "host"}};
    if (visible_gpus() >= 2) {
        some.push_back({{0, 1}, true});
        some.push_back({{0, 0, 1, 1}, true});
    }
    for (const gpu_plan &p : some) {
        INFO(describe(p));
        const auto placed = run(p);
        REQUIRE(placed.size() == single.size());
        for (size_t c = 0; c < single.size(); ++c) {
            REQUIRE(placed[c].size() == single[c].size());
            for (size_t j = 0; j < single[c].size(); ++j) {
                INFO("call " << c << " row " << j);
                const logits_top &a = placed[c][j], &b = single[c][j];
                REQUIRE(a.top.size() == b.top.size());
                for (size_t i = 0; i < b.top.size(); ++i) {
                    REQUIRE(a.top[i].id == b.top[i].id);
                    REQUIRE(std::memcmp(&a.top[i].logit, &b.top[i].logit, sizeof(float)) == 0);
                }
                REQUIRE(std::abs(a.log_norm - b.log_norm) <= 1e-12 * std::max(1.0, std::abs(b.log_norm)));
            }
        }
    }
}

// Draws on a plan with device draws asked for: a pipeline's last stage draws on the
// device (its head is whole), a tensor-parallel pair on the device holding the head's first half
// (the other half sent to it), and every plan draws the one-GPU tokens (temperature, min_p and
// top_p requests; decode graphs with micro-batches included), beside summaries and beside best tokens.
TEST_CASE("CUDA draws are the same tokens on every placement plan", "[gpu][placement][draw]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto run = [&](const gpu_plan &p, bool best) {
        engine_options opt = plan_options(p);
        opt.device_draws = true;
        auto eng = engine_open(gguf_file::open(model), opt);
        REQUIRE(eng->counters().at("device_draws") == 1.0);  // every plan here draws on a device
        std::mt19937 rng(41);
        std::uniform_real_distribution<double> uniform(0.0, 1.0);
        const int32_t nv = eng->hparams().n_vocab;
        std::vector<engine_row> rows;
        for (int32_t s = 0; s < 3; ++s)
            for (int32_t i = 0; i < 4 + 2 * s; ++i) rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(i + 1 == 4 + 2 * s), true});
        std::vector<int32_t> drawn;
        std::vector<logits_top> tops;
        for (int step = 0; step < 8; ++step) {
            std::vector<row_draw> draws(3);
            for (size_t j = 0; j < 3; ++j) {
                draws[j].temperature = 0.5f + 0.4f * float(j);
                draws[j].inv_temp = float(1.0 / double(draws[j].temperature));
                draws[j].min_p = j == 1 ? 0.02f : 0.0f;
                draws[j].top_p = j == 2 ? 0.85f : 1.0f;
                draws[j].top_k = j == 0 ? 70 : 0;
                draws[j].u = uniform(rng);
            }
            if (best)
                tops = forward_as(*eng, rows, row_output::best, draws).top;
            else
                tops = forward_as(*eng, rows, row_output::summary, draws).top;
            REQUIRE(tops.size() == 3);
            rows.clear();
            for (int32_t s = 0; s < 3; ++s) {
                REQUIRE(tops[size_t(s)].drawn >= 0);
                drawn.push_back(tops[size_t(s)].drawn);
                rows.push_back({s, eng->slot_length(s), tops[size_t(s)].drawn, row_output::logits});
            }
        }
        return drawn;
    };
    const std::vector<int32_t> single = run({{0}}, false);
    REQUIRE(run({{0}}, true) == single);
    std::vector<gpu_plan> some = {{{0, 0, 0}, false}, {{0, 0, 0, 0}, false, 2}, {{0, 0}, true}, {{0, 0, 0, 0}, true, 2}};
    if (visible_gpus() >= 2) some.push_back({{0, 1}, false});
    for (const gpu_plan &p : some) {
        INFO(describe(p));
        REQUIRE(run(p, false) == single);
        REQUIRE(run(p, true) == single);
    }
}

TEST_CASE("CUDA fixture logits are bitwise equal on pairs and stages", "[gpu][placement][fixtures]") {
    if (!gpu_present()) return;
    for (const char *name : {"qwen3moe-a", "qwen3moe-b"})
        for (ggml_type type : {ggml_type::f32, ggml_type::q4_k}) {
            INFO(name << " " << ggml_type_name(type));
            const std::string model = fixture_gguf(name, type);
            const auto single = run_sessions(model, {{0}}, 5);
            require_same(run_sessions(model, {{0, 0}, true}, 5), single);
            require_same(run_sessions(model, {{0, 0}, false}, 5), single);  // the fixtures have 2 layers
            if (visible_gpus() >= 2) require_same(run_sessions(model, {{0, 1}, true}, 5), single);
        }
}

TEST_CASE("CUDA placements that cannot work are refused with a clear error", "[gpu][placement]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto open = [&](std::vector<int32_t> devices, bool tp, const std::string &vram = "auto",
                    const std::string &transport = "auto") {
        engine_options opt = cuda_options(std::move(devices), tp, 2);
        opt.gpu_vram = vram;
        opt.transport = engine_transport_parse(transport);
        return engine_open(gguf_file::open(model), opt);
    };
    CHECK_THROWS_WITH(open({0, 0, 0}, true), Catch::Contains("even"));
    CHECK_THROWS_WITH(open({0, 99}, false), Catch::Contains("99"));
    CHECK_THROWS_WITH(open({0, 0}, true, "0.001"), Catch::Contains("GiB"));
    CHECK_THROWS_WITH(open({0}, false, "auto", "pigeon"), Catch::Contains("unknown transport"));
    // Still usable after the refusals.
    CHECK(run_sessions(model, {{0, 0}, true}, 3).size() == 9);
}

// A big model given by path (the device runs point it at a qwen3-30b-a3b synth file): pairs and
// stages across the visible GPUs, or logical devices on GPU 0 when there is one.
TEST_CASE("CUDA logits of TANDEM_PLACEMENT_MODEL are bitwise equal on pairs and stages", "[gpu][placement][big]") {
    if (!gpu_present()) return;
    const char *model = std::getenv("TANDEM_PLACEMENT_MODEL");
    if (!model || !*model) {
        WARN("TANDEM_PLACEMENT_MODEL not set: skipping the big-model placement check");
        return;
    }
    const int32_t other = visible_gpus() >= 2 ? 1 : 0;
    const auto single = run_sessions(model, {{0}}, 21);
    for (const gpu_plan &p : {gpu_plan{{0, other}, true}, gpu_plan{{0, other}, false}}) {
        std::string layout;
        INFO(describe(p));
        const auto placed = run_sessions(model, p, 21, &layout);
        WARN(describe(p) << ": " << layout);
        require_same(placed, single);
    }
}

TEST_CASE("CUDA expert traffic: every routed row counted once, equal on a pair and on one GPU", "[gpu][placement][traffic]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto record = [&](std::vector<int32_t> devices, bool tp) {
        engine_options opt = cuda_options(std::move(devices), tp, 2);
        opt.record_expert_traffic = true;
        auto eng = engine_open(gguf_file::open(model), opt);
        std::vector<engine_row> rows;
        for (int32_t i = 0; i < 11; ++i) rows.push_back({0, i, 3 + 7 * i, logits_if(i == 10)});
        std::vector<float> logits;
        engine_forward_logits(*eng, rows, logits);  // 11 rows: a graph bucket of 16 with 5 padding rows
        const engine_row one{1, 0, 42, row_output::logits};
        engine_forward_logits(*eng, {&one, 1}, logits);
        return std::make_pair(eng->expert_traffic(), eng->hparams());
    };
    const auto [single, hp] = record({0}, false);
    REQUIRE(single.size() == size_t(hp.n_layer));
    for (const auto &layer : single) {
        uint64_t sum = 0;
        for (uint64_t c : layer) sum += c;
        CHECK(sum == 12u * uint64_t(hp.n_expert_used));  // padding rows are not counted
    }
    CHECK(record({0, 0}, true).first == single);
    CHECK(record({0, 0, 0, 0}, true).first == single);
}
