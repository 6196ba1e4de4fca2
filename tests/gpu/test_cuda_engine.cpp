// tests/gpu/test_cuda_engine.cpp - the CUDA engine against the CPU reference engine on the
// committed fixtures and tiny synth models (greedy tokens identical, logits within the bound of
// tests/kernels/gpu_test_util.h), batch invariance on the device (memcmp over many steps,
// alternating row order, graph and non-graph steps), identical validation errors.
#include "gpu_test_util.h"
#include "model_test_util.h"

#include "tandem/error.h"
#include "tandem/quantize.h"
#include "tandem/sampler.h"
#include "tandem/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>

using namespace tandem;
using namespace tandem::test;

namespace {

std::unique_ptr<engine> open_cuda(const std::string &path, int32_t n_slots, int32_t n_ctx, const std::string &kv = "f32",
                                  bool device_draws = false) {
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.device_draws = device_draws;
    opt.n_slots = n_slots;
    opt.n_ctx = n_ctx;
    opt.kv = kv_type_parse(kv);
    return engine_open(gguf_file::open(path), opt);
}

std::vector<int32_t> random_tokens(std::mt19937 &rng, size_t n, int32_t n_vocab) {
    std::vector<int32_t> out(n);
    for (auto &t : out) t = int32_t(rng() % uint32_t(n_vocab));
    return out;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Prefill (all logits) then greedy decode on both engines; every row's logits within the bound,
// greedy tokens identical. Prints the first divergent position.
void compare_engines(const std::string &path, size_t prompt_len, size_t n_steps, uint32_t seed, const std::string &kv = "f32") {
    auto cpu = open_cpu(path, 2, 128, kv_type_parse(kv));
    auto gpu = open_cuda(path, 2, 128, kv);
    const int32_t nv = cpu->hparams().n_vocab;
    std::mt19937 rng(seed);
    const std::vector<int32_t> prompt = random_tokens(rng, prompt_len, nv);
    const std::vector<float> lc = prefill(*cpu, 1, prompt, true), lg = prefill(*gpu, 1, prompt, true);
    REQUIRE(lc.size() == lg.size());
    double worst = 0;
    for (size_t r = 0; r < prompt_len; ++r) {
        const double e = rel_err(lg.data() + r * nv, lc.data() + r * nv, size_t(nv));
        worst = std::max(worst, e);
        INFO("prefill row " << r);
        CHECK(e <= tolerance::model_logits);
    }
    std::vector<float> c(lc.end() - nv, lc.end()), g(lg.end() - nv, lg.end());
    for (size_t step = 0; step < n_steps; ++step) {
        const int32_t tc = argmax(c), tg = argmax(g);
        INFO("first divergent greedy token at decode step " << step);
        REQUIRE(tc == tg);
        const engine_row row{1, cpu->slot_length(1), tc, row_output::logits};
        engine_forward_logits(*cpu, {&row, 1}, c);
        engine_forward_logits(*gpu, {&row, 1}, g);
        const double e = rel_err(g.data(), c.data(), size_t(nv));
        worst = std::max(worst, e);
        CHECK(e <= tolerance::model_logits);
    }
    WARN(path << ": worst relative L2 error of CUDA vs CPU logits " << worst);
}

}  // namespace

TEST_CASE("CUDA engine matches the CPU engine on the committed fixtures", "[gpu][model]") {
    if (!gpu_present()) return;
    const std::string fixture = GENERATE(std::string("qwen3moe-a"), std::string("qwen3moe-b"));
    const ggml_type type = GENERATE(ggml_type::f32, ggml_type::q8_0, ggml_type::q4_k);
    INFO(fixture << " " << ggml_type_name(type));
    compare_engines(fixture_gguf(fixture, type), 11, 12, 77);
}

TEST_CASE("CUDA engine matches the CPU engine on tiny synth models", "[gpu][model]") {
    if (!gpu_present()) return;
    const ggml_type type = GENERATE(ggml_type::q4_k, ggml_type::q6_k, ggml_type::bf16);
    INFO("tiny " << ggml_type_name(type));
    // 80 prompt rows: more than the largest graph bucket, so the direct path runs too.
    compare_engines(synth_gguf("tiny", type, 2), 80, 10, 91);
}

TEST_CASE("CUDA engine matches the CPU engine on tiny models of the generic-path types", "[gpu][model]") {
    if (!gpu_present()) return;
    // llama-quantize's mixes named by their base type, --pure: every matrix of that type (two
    // layers of the tiny f32 synth requantized).
    const std::string mix = GENERATE(std::string("Q5_K_S"), std::string("Q3_K_S"), std::string("Q2_K"), std::string("Q4_0"),
                                     std::string("Q4_1"), std::string("Q5_0"), std::string("Q5_1"), std::string("IQ4_NL"),
                                     std::string("IQ4_XS"), std::string("MXFP4_MOE"));
    INFO("tiny " << mix);
    const std::string f32 = synth_gguf("tiny", ggml_type::f32, 2);
    const std::string path = f32 + "." + mix + ".gguf";
    quantize_options opt;
    opt.ftype_name = mix;
    opt.pure = true;
    quantize_model(f32, path, opt);
    compare_engines(path, 80, 10, 95);
}

TEST_CASE("CUDA engine matches the CPU engine on tiny models of the IQ grid types", "[gpu][model]") {
    if (!gpu_present()) return;
    // Every matrix of one type (synth quantizes random weights with ggml's quantizers), then
    // llama.cpp's IQ mixes of them (llama-quantize's per-tensor types, Q2_K to Q6_K beside them).
    const std::string name = GENERATE(std::string("iq2_xxs"), std::string("iq2_xs"), std::string("iq2_s"), std::string("iq3_xxs"),
                                      std::string("iq3_s"), std::string("iq1_s"), std::string("iq1_m"), std::string("IQ2_XXS"),
                                      std::string("IQ2_M"), std::string("IQ3_XXS"), std::string("IQ3_M"), std::string("IQ1_M"));
    INFO("tiny " << name);
    const synth_type_choice c = synth_type_parse(name);
    synth_options opt{*synth_preset_find("tiny"), c.type, 2, 7, 0, c.q4_k_m};
    opt.mix = c.mix;
    const std::string path = scratch_dir() + "/synth-tiny-grid-" + name + ".gguf";
    synth_write(opt, path);
    compare_engines(path, 80, 10, 96);
}

TEST_CASE("CUDA engine matches the CPU engine on the Q4_K_M mix", "[gpu][model]") {
    if (!gpu_present()) return;
    // Four layers: Q6_K attn_v and experts' down in layers 2 and 3 (use_more_bits), a Q6_K head.
    compare_engines(synth_gguf("tiny", ggml_type::q4_k, 4, true), 80, 10, 93);
}

TEST_CASE("CUDA engine with an f16 KV cache matches the CPU engine rounding the same way", "[gpu][model]") {
    if (!gpu_present()) return;
    // Prompt rows (the tensor-core prompt attention reads halves), decode rows (the fused decode
    // attention rounds the new key and value as the cache holds them), 80 rows on the direct path.
    compare_engines(fixture_gguf("qwen3moe-a", ggml_type::q4_k), 11, 12, 77, "f16");
    compare_engines(synth_gguf("tiny", ggml_type::q4_k, 2), 80, 10, 91, "f16");
    // Qwen3's attention geometry: the decode rows take the tensor-core attention (attention_mma.h).
    compare_engines(synth_gguf("tiny-gqa8", ggml_type::q4_k, 2), 80, 10, 92, "f16");
    // Qwen3-30B-A3B's width and routing (64 experts, 8 a token): the 80 prompt rows' grouped experts.
    compare_engines(synth_gguf("tiny-moe64", ggml_type::q4_k, 2), 80, 10, 94, "f16");
}

TEST_CASE("CUDA decode rows that share a slot (a prompt fed without engine_row::prompt) match the CPU", "[gpu][model]") {
    if (!gpu_present()) return;
    // Such a step cannot take the attention with the K/V write fused in (each row needs the
    // others' writes first): it must match the CPU and repeat bitwise, with and without a graph.
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 3);
    for (const int32_t n : {9, 70}) {  // a graph bucket; more rows than the largest bucket (direct launches)
        INFO(n << " rows of one slot");
        auto cpu = open_cpu(model, 2, 128);
        const int32_t nv = cpu->hparams().n_vocab;
        std::mt19937 rng(uint32_t(600 + n));
        const std::vector<int32_t> tokens = random_tokens(rng, size_t(n), nv);
        std::vector<engine_row> rows;
        for (int32_t i = 0; i < n; ++i) rows.push_back({1, i, tokens[size_t(i)], row_output::logits});
        std::vector<float> lc, first;
        engine_forward_logits(*cpu, rows, lc);
        for (int run = 0; run < 2; ++run) {
            auto gpu = open_cuda(model, 2, 128);
            std::vector<float> lg;
            engine_forward_logits(*gpu, rows, lg);
            REQUIRE(lg.size() == lc.size());
            for (int32_t r = 0; r < n; ++r) {
                INFO("row " << r);
                CHECK(rel_err(lg.data() + size_t(r) * nv, lc.data() + size_t(r) * nv, size_t(nv)) <= tolerance::model_logits);
            }
            if (run == 0)
                first = lg;
            else
                CHECK(same_bits(lg, first));
        }
    }
}

// Each engine quantizes its own keys and values, and a key one float rounding apart between them
// may take the neighbouring quant (a 1/127 step of one element): over tens of random-weight prompt
// rows such flips grew to 0.045 relative L2 on an H100, past the logits bound. So the engines are
// compared on one cache: the CUDA engine's q8_0 blocks, imported into the CPU engine before every
// decode step (the kernel tests hold the writer's blocks and the attention to their CPU twins).
static void compare_on_shared_q8_0_cache(const std::string &path, size_t prompt_len, size_t n_steps, uint32_t seed) {
    auto cpu = open_cpu(path, 2, 128, kv_type::q8_0);
    auto gpu = open_cuda(path, 2, 128, "q8_0");
    const int32_t nv = cpu->hparams().n_vocab;
    std::mt19937 rng(seed);
    const std::vector<float> last = prefill(*gpu, 1, random_tokens(rng, prompt_len, nv));
    int32_t token = argmax(std::vector<float>(last.end() - nv, last.end()));
    double worst = 0;
    for (size_t step = 0; step < n_steps; ++step) {
        INFO("decode step " << step);
        cpu->slot_import(1, slot_blob(*gpu, 1));
        REQUIRE(slot_blob(*cpu, 1) == slot_blob(*gpu, 1));
        const std::vector<float> c = logits_after(*cpu, 1, token), g = logits_after(*gpu, 1, token);
        const double e = rel_err(g.data(), c.data(), size_t(nv));
        worst = std::max(worst, e);
        CHECK(e <= tolerance::model_logits);
        token = argmax(g);
    }
    WARN(path << ": worst relative L2 error of CUDA vs CPU logits on one q8_0 cache " << worst);
}

TEST_CASE("CUDA engine with a q8_0 KV cache matches the CPU engine on the same blocks", "[gpu][model]") {
    if (!gpu_present()) return;
    compare_on_shared_q8_0_cache(fixture_gguf("qwen3moe-a", ggml_type::q4_k), 11, 8, 77);
    compare_on_shared_q8_0_cache(synth_gguf("tiny", ggml_type::q4_k, 2), 80, 8, 91);
    compare_on_shared_q8_0_cache(synth_gguf("tiny-gqa8", ggml_type::q4_k, 2), 80, 8, 92);
    compare_on_shared_q8_0_cache(synth_gguf("tiny-moe64", ggml_type::q4_k, 2), 80, 8, 94);
    // A q8_0 cache is 34 bytes per 32 values: 34/128 of a float cache's.
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    const double f32_bytes = open_cuda(model, 2, 128, "f32")->counters().at("kv_bytes");
    const double q8_bytes = open_cuda(model, 2, 128, "q8_0")->counters().at("kv_bytes");
    CHECK(q8_bytes * 128 == f32_bytes * 34);
}

TEST_CASE("CUDA --kv-type auto takes q8_0 where the plan does not fit with f16", "[gpu][engine]") {
    if (!gpu_present()) return;
    // tiny with 2 layers: 1,024 bytes of f16 K/V a token, 544 of q8_0; 96 slots of 32,768 tokens:
    // 3 GiB against 1.59 GiB, besides a few MiB of weights and the scratch.
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto open_auto = [&](const std::string &vram) {
        engine_options opt;
        opt.backend = engine_backend::cuda;
        opt.n_slots = 96;
        opt.n_ctx = 32768;
        opt.gpu_vram = vram;
        opt.kv = kv_type::automatic;
        return engine_open(gguf_file::open(model), opt);
    };
    CHECK(open_auto("8")->kv_cache_type() == kv_type::f16);
    CHECK(open_auto("2.5")->kv_cache_type() == kv_type::q8_0);
    CHECK_THROWS_WITH(open_auto("1"), Catch::Contains("does not fit"));  // neither: f16's plan says why
}

TEST_CASE("CUDA decode logits are bitwise independent of the other rows of the step", "[gpu][invariance]") {
    if (!gpu_present()) return;
    // tiny-gqa8 with halves: the tensor-core decode attention (attention_mma.h). tiny-moe64: 16 rows
    // route to up to 64 groups, which the strided grouped expert blocks take (matvec_digits.cu).
    const std::string preset = GENERATE(std::string("tiny"), std::string("tiny-gqa8"), std::string("tiny-moe64"));
    const std::string model = synth_gguf(preset, ggml_type::q4_k, 0);
    const uint32_t seed = 4242;
    const std::string kv = GENERATE(std::string("f32"), std::string("f16"), std::string("q8_0"));
    INFO(preset << " seed " << seed << " kv " << kv);
    std::mt19937 rng(seed);
    const size_t n_sessions = 16, n_steps = 24;
    auto alone_eng = open_cuda(model, int32_t(n_sessions) + 1, 256, kv);
    auto batch_eng = open_cuda(model, int32_t(n_sessions) + 1, 256, kv);
    const int32_t nv = alone_eng->hparams().n_vocab;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t s = 0; s < n_sessions; ++s) prompts.push_back(random_tokens(rng, 1 + 7 * s, nv));

    // Alone: each session's rows in calls of their own (1-row graph bucket).
    std::vector<std::vector<std::vector<float>>> alone(n_sessions);
    std::vector<std::vector<int32_t>> tokens(n_sessions);
    for (size_t s = 0; s < n_sessions; ++s) {
        std::vector<float> logits = prefill(*alone_eng, int32_t(s), prompts[s]);
        for (size_t step = 0; step < n_steps; ++step) {
            const int32_t next = argmax(logits);
            tokens[s].push_back(next);
            const engine_row row{int32_t(s), alone_eng->slot_length(int32_t(s)), next, row_output::logits};
            engine_forward_logits(*alone_eng, {&row, 1}, logits);
            alone[s].push_back(logits);
        }
    }
    // Together: all 16 sessions in one call per step, order reversed every other step; at step 5
    // a stranger's 4-row prefill rides along (20 rows: a 32-row graph bucket), at step 7 a 60-row
    // one (76 rows: the direct, non-graph path).
    for (size_t s = 0; s < n_sessions; ++s) prefill(*batch_eng, int32_t(s), prompts[s]);
    const std::vector<int32_t> stranger = random_tokens(rng, 4, nv);
    std::vector<float> logits;
    for (size_t step = 0; step < n_steps; ++step) {
        std::vector<engine_row> rows;
        std::vector<size_t> order;
        for (size_t i = 0; i < n_sessions; ++i) order.push_back(step % 2 ? n_sessions - 1 - i : i);
        for (size_t s : order)
            rows.push_back({int32_t(s), batch_eng->slot_length(int32_t(s)), tokens[s][step], row_output::logits});
        if (step == 5)
            for (size_t i = 0; i < stranger.size(); ++i) rows.push_back({int32_t(n_sessions), int32_t(i), stranger[i], row_output::none, true});
        if (step == 7)
            for (int32_t i = 0; i < 60; ++i)
                rows.push_back({int32_t(n_sessions), int32_t(stranger.size()) + i, stranger[size_t(i) % stranger.size()], row_output::none, true});
        engine_forward_logits(*batch_eng, rows, logits);
        REQUIRE(logits.size() == n_sessions * size_t(nv));
        for (size_t i = 0; i < n_sessions; ++i) {
            const size_t s = order[i];
            const std::vector<float> mine(logits.begin() + i * nv, logits.begin() + (i + 1) * nv);
            INFO("session " << s << " step " << step);
            CHECK(same_bits(mine, alone[s][step]));
        }
    }
}

TEST_CASE("CUDA decode rows of a session fed several a call (speculative drafts) match one a call, bitwise", "[gpu][invariance][draft]") {
    if (!gpu_present()) return;
    // Several rows of one slot leave the fused attention (set_distinct_slots) for qk_rope_kv plus
    // the attention launches; each row must still get the bits a one-row step gives it.
    const std::string preset = GENERATE(std::string("tiny"), std::string("tiny-gqa8"), std::string("tiny-moe64"));
    const std::string kv = GENERATE(std::string("f32"), std::string("f16"), std::string("q8_0"));
    INFO(preset << " kv " << kv);
    const std::string model = synth_gguf(preset, ggml_type::q4_k, 2);
    check_draft_rows_bitwise([&](int32_t n_slots, int32_t n_ctx) { return open_cuda(model, n_slots, n_ctx, kv); }, 616);
}

TEST_CASE("CUDA engine rejects malformed rows exactly like the CPU engine and stays usable", "[gpu][engine]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto cpu = open_cpu(model, 2, 16);
    auto gpu = open_cuda(model, 2, 16);
    const int32_t nv = cpu->hparams().n_vocab;
    const std::vector<std::vector<engine_row>> bad = {
        {{2, 0, 1, row_output::logits}},                                          // slot out of range
        {{0, 0, nv, row_output::logits}},                                         // token out of range
        {{0, 1, 1, row_output::logits}},                                          // position not at the slot's length
        {{0, 0, 1, row_output::none}, {0, 2, 1, row_output::logits}},             // gap inside the call
    };
    for (const auto &rows : bad) {
        std::string cpu_msg, gpu_msg;
        error_kind cpu_kind = error_kind::internal, gpu_kind = error_kind::internal;
        std::vector<float> logits;
        try { engine_forward_logits(*cpu, rows, logits); } catch (const error &e) { cpu_msg = e.what(); cpu_kind = e.kind(); }
        try { engine_forward_logits(*gpu, rows, logits); } catch (const error &e) { gpu_msg = e.what(); gpu_kind = e.kind(); }
        CHECK(!cpu_msg.empty());
        CHECK(gpu_msg == cpu_msg);
        CHECK(int(gpu_kind) == int(cpu_kind));
    }
    // Context overflow: too_large, same message.
    std::vector<engine_row> rows;
    for (int32_t i = 0; i < 17; ++i) rows.push_back({0, i, 1, row_output::none});
    std::string cpu_msg, gpu_msg;
    std::vector<float> logits;
    try { engine_forward_logits(*cpu, rows, logits); } catch (const error &e) { cpu_msg = e.what(); }
    try { engine_forward_logits(*gpu, rows, logits); } catch (const error &e) { gpu_msg = e.what(); }
    CHECK(gpu_msg == cpu_msg);
    CHECK(gpu->slot_length(0) == 0);
    CHECK(prefill(*gpu, 0, {1, 2, 3}).size() == size_t(nv));
    // Options: the same config errors.
    std::string cm, gm;
    try { open_cpu(model, 0, 16); } catch (const error &e) { cm = e.what(); }
    try { open_cuda(model, 0, 16); } catch (const error &e) { gm = e.what(); }
    CHECK(gm == cm);
}

TEST_CASE("CUDA slot_truncate then re-prefill reproduces the logits bitwise", "[gpu][engine]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto gpu = open_cuda(model, 1, 128);
    std::mt19937 rng(5);
    const auto ids = random_tokens(rng, 90, gpu->hparams().n_vocab);
    const auto first = prefill(*gpu, 0, ids);
    gpu->slot_truncate(0, 12);
    const auto again = prefill(*gpu, 0, std::vector<int32_t>(ids.begin() + 12, ids.end()));
    CHECK(same_bits(first, again));  // each row's result is independent of the call's other rows
    gpu->slot_truncate(0, 89);
    const auto last = prefill(*gpu, 0, {ids.back()});  // a 1-row graph step vs a 90-row direct step
    CHECK(same_bits(first, last));
}

TEST_CASE("CUDA prompt rows are bitwise independent of chunking and of the decode rows beside them", "[gpu][invariance]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    const std::string kv = GENERATE(std::string("f32"), std::string("q8_0"));
    INFO("kv " << kv);
    auto whole = open_cuda(model, 2, 256, kv), chunked = open_cuda(model, 2, 256, kv);
    const int32_t nv = whole->hparams().n_vocab;
    std::mt19937 rng(606);
    const auto prompt = random_tokens(rng, 150, nv);
    // Whole: the prompt in one call (tensor-core steps of one kind), every row's logits.
    const std::vector<float> ref = prefill(*whole, 0, prompt, true);
    // Chunked: 1, 5, 30, 64 and 50 rows, each call also decoding another session (mixed steps:
    // decode rows and prompt rows in one call, graph buckets and the direct path).
    prefill(*chunked, 1, random_tokens(rng, 3, nv));
    int32_t next_other = 7;
    size_t at = 0;
    for (size_t len : {size_t(1), size_t(5), size_t(30), size_t(64), size_t(50)}) {
        std::vector<engine_row> rows;
        rows.push_back({1, chunked->slot_length(1), next_other, row_output::logits});
        for (size_t i = 0; i < len; ++i) rows.push_back({0, int32_t(at + i), prompt[at + i], row_output::logits, true});
        std::vector<float> logits;
        engine_forward_logits(*chunked, rows, logits);
        REQUIRE(logits.size() == (len + 1) * size_t(nv));
        next_other = argmax({logits.data(), size_t(nv)});
        for (size_t i = 0; i < len; ++i) {
            INFO("prompt row " << at + i << " in a chunk of " << len);
            CHECK(std::memcmp(logits.data() + (i + 1) * nv, ref.data() + (at + i) * nv, size_t(nv) * sizeof(float)) == 0);
        }
        at += len;
    }
    REQUIRE(at == prompt.size());
    // Then decode on both: bitwise the same tokens and logits.
    std::vector<float> a(ref.end() - nv, ref.end()), b = a;
    for (int step = 0; step < 6; ++step) {
        const int32_t tok = argmax(a);
        const engine_row ra{0, whole->slot_length(0), tok, row_output::logits}, rb{0, chunked->slot_length(0), tok, row_output::logits};
        engine_forward_logits(*whole, {&ra, 1}, a);
        engine_forward_logits(*chunked, {&rb, 1}, b);
        INFO("decode step " << step);
        CHECK(same_bits(a, b));
    }
}

// Rows that want summaries are reduced on the device: the same top (ids and logits bitwise) and
// normaliser (to double rounding) as the host reduction of whole rows, on graph steps (decode) and
// direct steps (a prompt with every row's logits). Rows that want their best token: bitwise the
// summary's first.
TEST_CASE("CUDA row summaries equal the host reduction of whole rows", "[gpu][engine][logits_top]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto whole = open_cuda(model, 3, 160), reduced = open_cuda(model, 3, 160), both = open_cuda(model, 3, 160);
    auto best = open_cuda(model, 3, 160);  // best tokens without draws
    const int32_t nv = whole->hparams().n_vocab;
    std::mt19937 rng(707);
    auto check = [&](const std::vector<float> &rows_logits, const std::vector<logits_top> &tops) {
        REQUIRE(rows_logits.size() == tops.size() * size_t(nv));
        for (size_t j = 0; j < tops.size(); ++j) {
            const logits_top ref = logits_top_of({rows_logits.data() + j * size_t(nv), size_t(nv)});
            INFO("logits row " << j);
            REQUIRE(tops[j].n_vocab == nv);
            REQUIRE_FALSE(tops[j].has_nan);
            REQUIRE(tops[j].top.size() == ref.top.size());
            for (size_t i = 0; i < ref.top.size(); ++i) {
                REQUIRE(tops[j].top[i].id == ref.top[i].id);
                REQUIRE(std::memcmp(&tops[j].top[i].logit, &ref.top[i].logit, sizeof(float)) == 0);
            }
            REQUIRE(std::abs(tops[j].log_norm - ref.log_norm) <= 1e-12 * std::max(1.0, std::abs(ref.log_norm)));
        }
    };
    std::vector<engine_row> rows;
    const int lengths[3] = {7, 1, 80};
    for (int32_t s = 0; s < 3; ++s)
        for (int32_t i = 0; i < lengths[s]; ++i)
            rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(s == 2 || i + 1 == lengths[s]), true});
    std::vector<float> a, b;
    std::vector<logits_top> tops, tops_b, bests;
    // Whole rows with their summaries from one call: the same bits as either alone.
    auto check_both = [&] {
        {
            engine_outputs o = forward_as(*both, rows, row_output::logits);
            b = std::move(o.logits);
            tops_b = std::move(o.top);
        }
        REQUIRE(b.size() == a.size());
        REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        REQUIRE(tops_b.size() == tops.size());
        for (size_t j = 0; j < tops.size(); ++j) {
            REQUIRE(tops_b[j].log_norm == tops[j].log_norm);
            REQUIRE(tops_b[j].top.size() == tops[j].top.size());
            for (size_t i = 0; i < tops[j].top.size(); ++i) REQUIRE(tops_b[j].top[i].id == tops[j].top[i].id);
        }
        bests = forward_as(*best, rows, row_output::best).top;
        REQUIRE(bests.size() == tops.size());
        for (size_t j = 0; j < tops.size(); ++j) {
            INFO("best of logits row " << j);
            REQUIRE(bests[j].n_vocab == nv);
            REQUIRE(bests[j].has_nan == tops[j].has_nan);
            REQUIRE(bests[j].top.size() == 1);
            REQUIRE(bests[j].top[0].id == tops[j].top[0].id);
            REQUIRE(std::memcmp(&bests[j].top[0].logit, &tops[j].top[0].logit, sizeof(float)) == 0);
            REQUIRE(std::isnan(bests[j].log_norm));
        }
    };
    engine_forward_logits(*whole, rows, a);
    tops = forward_as(*reduced, rows, row_output::summary).top;
    check(a, tops);
    check_both();
    for (int step = 0; step < 6; ++step) {
        rows.clear();
        for (int32_t s = 0; s < 3; ++s) rows.push_back({s, whole->slot_length(s), tops[size_t(s) < 2 ? s : tops.size() - 1].top[0].id, row_output::logits});
        engine_forward_logits(*whole, rows, a);
        tops = forward_as(*reduced, rows, row_output::summary).top;
        check(a, tops);
        check_both();
    }
}

// Draws on the device (engine_options::device_draws): the rows' summaries and, for each requesting row (temperature, top_k, min_p, top_p), the host twin's token
// (draw_exact on forward's row), on graph steps with padding rows (3 and 5 rows: buckets 4 and 8), with a row that asks
// for nothing, and on a direct step (a prompt with every row's logits). Best tokens on a third
// engine fed the same rows: the same draws beside each row's best token alone.
TEST_CASE("CUDA draws the host's tokens on the device", "[gpu][engine][draw]") {
    if (!gpu_present()) return;
    for (const char *preset : {"tiny", "tiny-moe64"}) {
        const std::string model = synth_gguf(preset, ggml_type::q4_k, 2);
        auto whole = open_cuda(model, 5, 160), drawing = open_cuda(model, 5, 160, "f32", true);
        auto best = open_cuda(model, 5, 160, "f32", true);
        std::vector<logits_top> bests;
        REQUIRE(whole->counters().at("device_draws") == 0.0);
        REQUIRE(drawing->counters().at("device_draws") == 1.0);
        const int32_t nv = whole->hparams().n_vocab;
        std::mt19937 rng(808);
        std::uniform_real_distribution<double> uniform(0.0, 1.0);
        std::vector<engine_row> rows;
        const int lengths[5] = {7, 1, 80, 3, 12};
        for (int32_t s = 0; s < 5; ++s)
            for (int32_t i = 0; i < lengths[s]; ++i)
                rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(s == 2 || i + 1 == lengths[s]), true});
        std::vector<float> a;
        std::vector<logits_top> tops;
        int64_t drawn = 0;
        for (int step = 0; step < 8; ++step) {
            size_t n_out = 0;
            for (const engine_row &r : rows) n_out += r.want != row_output::none ? 1 : 0;
            std::vector<row_draw> draws(n_out);
            for (size_t j = 0; j < n_out; ++j) {
                if (j % 4 == 3) continue;  // no draw for this row
                draws[j].temperature = j % 2 ? 0.6f : 1.3f;
                draws[j].inv_temp = float(1.0 / double(draws[j].temperature));
                draws[j].min_p = step % 2 ? 0.05f : 0.0f;
                draws[j].top_p = j % 3 == 1 ? 0.8f : 1.0f;
                draws[j].top_k = j % 5 == 2 ? 80 : 0;
                draws[j].u = uniform(rng);
            }
            engine_forward_logits(*whole, rows, a);
            tops = forward_as(*drawing, rows, row_output::summary, draws).top;
            bests = forward_as(*best, rows, row_output::best, draws).top;
            REQUIRE(tops.size() == n_out);
            REQUIRE(bests.size() == n_out);
            for (size_t j = 0; j < n_out; ++j) {
                INFO(preset << " step " << step << " logits row " << j);
                const std::span<const float> row(a.data() + j * size_t(nv), size_t(nv));
                const logits_top ref = logits_top_of(row);
                REQUIRE(tops[j].top.size() == ref.top.size());
                REQUIRE(tops[j].top[0].id == ref.top[0].id);
                REQUIRE(bests[j].top.size() == 1);
                REQUIRE(bests[j].top[0].id == ref.top[0].id);
                REQUIRE(std::memcmp(&bests[j].top[0].logit, &ref.top[0].logit, sizeof(float)) == 0);
                REQUIRE(bests[j].drawn == tops[j].drawn);
                REQUIRE(std::memcmp(&bests[j].drawn_logit, &tops[j].drawn_logit, sizeof(float)) == 0);
                if (draws[j].temperature <= 0.0f) {
                    REQUIRE(tops[j].drawn == -1);
                    continue;
                }
                const int32_t want = draw_exact(row, ref.top[0].logit, draws[j]);
                REQUIRE(tops[j].drawn == want);
                REQUIRE(std::memcmp(&tops[j].drawn_logit, &row[size_t(want)], sizeof(float)) == 0);
                REQUIRE(tops[j].drawn_u == draws[j].u);
                ++drawn;
            }
            // The next step: 3 slots (bucket 4), then 5 (bucket 8), fed their drawn tokens.
            const int32_t n_slots = step % 2 ? 5 : 3;
            rows.clear();
            for (int32_t s = 0; s < n_slots; ++s) {
                const size_t j = std::min<size_t>(size_t(s), tops.size() - 1);
                rows.push_back({s, whole->slot_length(s), tops[j].drawn >= 0 ? tops[j].drawn : tops[j].top[0].id, row_output::logits});
            }
        }
        REQUIRE(drawn > 20);
    }
}
