// tests/model/test_engine.cpp - the engine call's contracts: batch invariance (bitwise), prefix
// reuse through slot_truncate, and clear errors for malformed rows.
#include "model_test_util.h"

#include "tandem/error.h"
#include "tandem/quant.h"
#include "tandem/quant_blocks.h"
#include "tandem/sampler.h"
#include "tandem/synth.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

std::vector<int32_t> random_tokens(std::mt19937 &rng, size_t n, int32_t n_vocab) {
    std::vector<int32_t> out(n);
    for (auto &t : out) t = int32_t(rng() % uint32_t(n_vocab));
    return out;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a row's logits do not depend on the other rows of the call", "[engine][invariance]") {
    const ggml_type type = GENERATE(ggml_type::q4_k, ggml_type::q6_k, ggml_type::q8_0, ggml_type::f32);
    const std::string arithmetic = GENERATE(std::string("exact"), std::string("digits"));
    const std::string model = synth_gguf("tiny", type, 2);
    const uint32_t seed = 20261129;
    INFO("type " << ggml_type_name(type) << ", arithmetic " << arithmetic << ", seed " << seed);
    std::mt19937 rng(seed);
    const std::vector<size_t> lengths = {1, 5, 17, 33, 64, 100};
    const size_t n_sessions = lengths.size(), n_steps = 8;
    auto open = [&](int32_t n_slots, int32_t n_ctx) { return open_cpu(model, n_slots, n_ctx, kv_type::f32, cpu_arithmetic_parse(arithmetic)); };
    auto probe = open(1, 8);
    const int32_t nv = probe->hparams().n_vocab;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t len : lengths) prompts.push_back(random_tokens(rng, len, nv));

    // Alone: one session per engine; record last-prefill logits and each decode step's logits.
    std::vector<std::vector<std::vector<float>>> alone(n_sessions);
    std::vector<std::vector<int32_t>> tokens(n_sessions);
    for (size_t s = 0; s < n_sessions; ++s) {
        auto eng = open(1, 256);
        std::vector<float> logits = prefill(*eng, 0, prompts[s]);
        alone[s].push_back(logits);
        for (size_t step = 0; step < n_steps; ++step) {
            const int32_t next = argmax(logits);
            tokens[s].push_back(next);
            const engine_row row{0, eng->slot_length(0), next, row_output::logits};
            engine_forward_logits(*eng, {&row, 1}, logits);
            alone[s].push_back(logits);
        }
    }

    // Together: all prompts in one call, interleaved; then every decode step in one call, in
    // alternating order, with a stranger's prefill chunk riding along at step 3.
    auto eng = open(8, 256);
    std::vector<engine_row> rows;
    std::vector<size_t> cursor(n_sessions, 0);
    for (bool more = true; more;) {
        more = false;
        for (size_t s = 0; s < n_sessions; ++s)
            if (cursor[s] < prompts[s].size()) {
                const size_t i = cursor[s]++;
                rows.push_back({int32_t(s), int32_t(i), prompts[s][i], logits_if(i + 1 == prompts[s].size())});
                more = true;
            }
    }
    std::vector<float> logits;
    engine_forward_logits(*eng, rows, logits);
    const size_t nvs = size_t(nv);
    // Logits come in row order: find each session's last prompt row.
    size_t out_index = 0;
    for (const engine_row &r : rows)
        if (r.want != row_output::none) {
            CHECK(same_bits({logits.data() + out_index * nvs, nvs}, alone[r.slot][0]));
            ++out_index;
        }
    const std::vector<int32_t> stranger = random_tokens(rng, 40, nv);
    for (size_t step = 0; step < n_steps; ++step) {
        rows.clear();
        for (size_t i = 0; i < n_sessions; ++i) {
            const size_t s = step % 2 ? n_sessions - 1 - i : i;
            rows.push_back({int32_t(s), eng->slot_length(int32_t(s)), tokens[s][step], row_output::logits});
        }
        if (step == 3)
            for (size_t i = 0; i < stranger.size(); ++i)
                rows.insert(rows.begin() + 2, engine_row{7, int32_t(stranger.size() - 1 - i),
                                                         stranger[stranger.size() - 1 - i], logits_if(i == 0)});
        engine_forward_logits(*eng, rows, logits);
        out_index = 0;
        for (const engine_row &r : rows) {
            if (r.want == row_output::none) continue;
            if (r.slot != 7) {
                INFO("step " << step << " session " << r.slot);
                CHECK(same_bits({logits.data() + out_index * nvs, nvs}, alone[r.slot][step + 1]));
            }
            ++out_index;
        }
    }
}

TEST_CASE("a session's decode rows fed several a call and truncated back match one a call, bitwise", "[engine][invariance][draft]") {
    const ggml_type type = GENERATE(ggml_type::q4_k, ggml_type::f32);
    const std::string kv = GENERATE(std::string("f32"), std::string("f16"));
    const std::string arithmetic = GENERATE(std::string("exact"), std::string("digits"));
    INFO("type " << ggml_type_name(type) << ", kv " << kv << ", arithmetic " << arithmetic);
    const std::string model = synth_gguf("tiny", type, 2);
    check_draft_rows_bitwise([&](int32_t n_slots, int32_t n_ctx) { return open_cpu(model, n_slots, n_ctx, kv_type_parse(kv), cpu_arithmetic_parse(arithmetic)); }, 515);
}

TEST_CASE("slot_truncate then re-prefill reproduces the logits", "[engine]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    const std::string arithmetic = GENERATE(std::string("exact"), std::string("digits"));
    INFO("arithmetic " << arithmetic);
    std::mt19937 rng(7);
    auto eng = open_cpu(model, 2, 128, kv_type::f32, cpu_arithmetic_parse(arithmetic));
    const std::vector<int32_t> ids = random_tokens(rng, 30, eng->hparams().n_vocab);
    const std::vector<float> full = prefill(*eng, 0, ids);
    eng->slot_truncate(0, 12);
    CHECK(eng->slot_length(0) == 12);
    const std::vector<float> again = prefill(*eng, 0, std::vector<int32_t>(ids.begin() + 12, ids.end()));
    CHECK(same_bits(full, again));
    CHECK_THROWS_AS(eng->slot_truncate(0, 31), tandem::error);
    CHECK_THROWS_AS(eng->slot_truncate(5, 0), tandem::error);
}

TEST_CASE("malformed rows are rejected with a clear error and leave the engine usable", "[engine]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto eng = open_cpu(model, 2, 16);
    const int32_t nv = eng->hparams().n_vocab;
    const std::vector<float> before = prefill(*eng, 0, {1, 2, 3});
    std::vector<float> logits;
    auto expect_error = [&](std::vector<engine_row> rows, error_kind kind, const std::string &fragment) {
        try {
            engine_forward_logits(*eng, rows, logits);
            FAIL("no error for " << fragment);
        } catch (const tandem::error &e) {
            CHECK(e.kind() == kind);
            CHECK_THAT(e.what(), Catch::Contains(fragment));
        }
    };
    expect_error({{5, 0, 1, row_output::logits}}, error_kind::invalid_request, "slot 5 out of range");
    expect_error({{0, 4, 1, row_output::logits}}, error_kind::invalid_request, "expects position 3");
    expect_error({{0, 3, nv, row_output::logits}}, error_kind::invalid_request, "token");
    expect_error({{1, 0, 1, row_output::none}, {1, 0, 2, row_output::logits}}, error_kind::invalid_request, "expects position 1");
    std::vector<engine_row> too_long;
    for (int32_t i = 0; i < 17; ++i) too_long.push_back({1, i, 1, row_output::none});
    expect_error(too_long, error_kind::too_large, "does not fit the context");
    CHECK(eng->slot_length(0) == 3);
    CHECK(eng->slot_length(1) == 0);
    eng->slot_truncate(0, 0);
    CHECK(same_bits(prefill(*eng, 0, {1, 2, 3}), before));
}

TEST_CASE("engine options are validated", "[engine]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto file = gguf_file::open(model);
    engine_options opt;
    opt.n_slots = 0;
    CHECK_THROWS_AS(engine_open(file, opt), tandem::error);
    opt.n_slots = 1;
    opt.n_ctx = 1 << 30;
    CHECK_THROWS_WITH(engine_open(file, opt), Catch::Contains("trained context"));
    opt.n_ctx = 64;
    CHECK_THROWS_WITH(engine_backend_parse("tpu"), Catch::Contains("unknown backend 'tpu'"));
    CHECK_THROWS_WITH(kv_type_parse("q8"), Catch::Contains("unknown KV cache type 'q8'"));
    CHECK_THROWS_WITH(engine_transport_parse("pigeon"), Catch::Contains("unknown transport 'pigeon'"));
    for (const engine_backend b : {engine_backend::automatic, engine_backend::cpu, engine_backend::cuda})
        CHECK(engine_backend_parse(engine_backend_name(b)) == b);
    for (const kv_type k : {kv_type::automatic, kv_type::f32, kv_type::f16, kv_type::q8_0}) CHECK(kv_type_parse(kv_type_name(k)) == k);
    CHECK_THROWS_WITH(cpu_arithmetic_parse("fast"), Catch::Contains("unknown CPU arithmetic 'fast'"));
    for (const cpu_arithmetic a : {cpu_arithmetic::digits, cpu_arithmetic::exact}) CHECK(cpu_arithmetic_parse(cpu_arithmetic_name(a)) == a);
    opt.backend = engine_backend::cpu;
    opt.kv = kv_type::f16;
    CHECK(engine_kv_bytes(opt) == 2);
    opt.kv = kv_type::f32;
    CHECK(engine_kv_bytes(opt) == 4);
    // auto: f16 on the CUDA backend, f32 on the CPU (the server's default).
    opt.kv = kv_type::automatic;
    CHECK(engine_kv_type_resolve(opt) == kv_type::f32);
    CHECK(engine_kv_bytes(opt) == 4);
    opt.backend = engine_backend::cuda;
    CHECK(engine_kv_type_resolve(opt) == kv_type::f16);
    CHECK(engine_kv_bytes(opt) == 2);
    opt.backend = engine_backend::cpu;
    CHECK_NOTHROW(engine_open(file, opt));  // auto opens on the CPU (as f32)
    opt.kv = kv_type::f32;
    CHECK(engine_kv_type_resolve(opt) == kv_type::f32);
}

TEST_CASE("an f16 KV cache rounds keys and values and stays close to f32", "[engine]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto f32 = open_cpu(model, 2, 128), f16 = open_cpu(model, 2, 128, kv_type::f16);
    std::mt19937 rng(31);
    const int32_t nv = f32->hparams().n_vocab;
    const std::vector<int32_t> prompt = random_tokens(rng, 40, nv);
    std::vector<float> a = prefill(*f32, 1, prompt), b = prefill(*f16, 1, prompt);
    // Rounding changes the bits (the option is not ignored) but not much else: half precision
    // keeps ~3 decimal digits of each key and value (measured 5e-5 to 3e-4 on this model).
    CHECK_FALSE(same_bits(a, b));
    CHECK(rel_l2(std::span<const float>(b), std::span<const float>(a)) < 2e-3);
    for (int step = 0; step < 8; ++step) {
        const int32_t next = int32_t(std::max_element(a.begin(), a.end()) - a.begin());
        const engine_row r{1, f32->slot_length(1), next, row_output::logits};
        engine_forward_logits(*f32, {&r, 1}, a);
        engine_forward_logits(*f16, {&r, 1}, b);
        CHECK(rel_l2(std::span<const float>(b), std::span<const float>(a)) < 2e-3);
    }
    // Batch invariance holds with the f16 cache too: slot 0's row alone and beside slot 1's.
    auto alone = open_cpu(model, 2, 128, kv_type::f16);
    std::vector<float> la = prefill(*alone, 0, prompt);
    prefill(*f16, 0, prompt);
    const engine_row r0{0, int32_t(prompt.size()), 5, row_output::logits}, r1{1, f16->slot_length(1), 7, row_output::logits};
    std::vector<float> lone, both;
    engine_forward_logits(*alone, {&r0, 1}, lone);
    const std::vector<engine_row> rows = {r1, r0};
    engine_forward_logits(*f16, rows, both);
    CHECK(same_bits(lone, std::span<const float>(both).subspan(size_t(nv))));
}

TEST_CASE("a q8_0 KV cache holds ggml's q8_0 blocks of each key and value row, batch invariant", "[engine]") {
    // tiny: K and V read by cpu::attention from the blocks; tiny-deepseek-v3: the latent cache.
    const std::string preset = GENERATE(std::string("tiny"), std::string("tiny-deepseek-v3"));
    INFO(preset);
    const std::string model = synth_gguf(preset, ggml_type::q4_k, 2);
    auto f32 = open_cpu(model, 2, 128), q8 = open_cpu(model, 2, 128, kv_type::q8_0);
    const model_hparams &hp = f32->hparams();
    const model_kv_shape shape = model_kv_shape_of(hp);
    CHECK(q8->kv_cache_type() == kv_type::q8_0);
    CHECK(q8->kv_token_bytes() == uint64_t(hp.n_layer) * uint64_t(shape.n_planes) * uint64_t(shape.width / 32) * 34);
    // The cache itself holds the blocks: 34 bytes per 32 values against a float cache's 128.
    CHECK(q8->counters().at("kv_bytes") * 128 == f32->counters().at("kv_bytes") * 34);
    std::mt19937 rng(37);
    const std::vector<int32_t> prompt = random_tokens(rng, 24, hp.n_vocab);
    const std::vector<float> a = prefill(*f32, 1, prompt), b = prefill(*q8, 1, prompt);
    CHECK_FALSE(same_bits(a, b));
    CHECK(rel_l2(std::span<const float>(b), std::span<const float>(a)) < 1e-2);
    // Layer 0's keys and values depend on the token alone, so the q8_0 cache's blocks of them are
    // quantize_row_q8_0 of the f32 cache's rows, byte for byte.
    std::vector<uint8_t> blob_f32(prompt.size() * f32->kv_token_bytes()), blob_q8(prompt.size() * q8->kv_token_bytes());
    f32->slot_export(1, int32_t(prompt.size()), blob_f32);
    q8->slot_export(1, int32_t(prompt.size()), blob_q8);
    const size_t row = size_t(shape.width) / 32 * sizeof(block_q8_0);
    std::vector<uint8_t> want(row);
    for (size_t t = 0; t < prompt.size(); ++t)
        for (int32_t p = 0; p < shape.n_planes; ++p) {
            const auto *src = reinterpret_cast<const float *>(blob_f32.data() + t * f32->kv_token_bytes()) + p * shape.width;
            quantize_row(ggml_type::q8_0, src, want.data(), shape.width);
            INFO("token " << t << " plane " << p);
            CHECK(std::memcmp(want.data(), blob_q8.data() + t * q8->kv_token_bytes() + size_t(p) * row, row) == 0);
        }
    // The blob goes back in exactly: a slot imported from it continues bitwise as the original.
    auto copy = open_cpu(model, 2, 128, kv_type::q8_0);
    copy->slot_import(0, blob_q8);
    const engine_row next1{1, int32_t(prompt.size()), 3, row_output::logits}, next0{0, int32_t(prompt.size()), 3, row_output::logits};
    std::vector<float> from_original, from_blob;
    engine_forward_logits(*q8, {&next1, 1}, from_original);
    engine_forward_logits(*copy, {&next0, 1}, from_blob);
    CHECK(same_bits(from_original, from_blob));
    // Batch invariance: slot 0's row alone and beside slot 1's.
    auto alone = open_cpu(model, 2, 128, kv_type::q8_0);
    prefill(*alone, 0, prompt);
    prefill(*q8, 0, prompt);
    const engine_row r0{0, int32_t(prompt.size()), 5, row_output::logits}, r1{1, q8->slot_length(1), 7, row_output::logits};
    std::vector<float> lone, both;
    engine_forward_logits(*alone, {&r0, 1}, lone);
    const std::vector<engine_row> rows = {r1, r0};
    engine_forward_logits(*q8, rows, both);
    CHECK(same_bits(lone, std::span<const float>(both).subspan(size_t(hp.n_vocab))));
}

TEST_CASE("synth's Q4_K_M mix puts Q6_K where llama.cpp's Q4_K_M does, and the engine runs it", "[engine][synth]") {
    // 16 layers: use_more_bits holds for layers 0-1 and 14-15 (the first and last eighth) and for
    // 4, 7, 10, 13 ((l - 2) % 3 == 2).
    const synth_preset preset = *synth_preset_find("tiny");
    const std::string path = scratch_dir() + "/synth-tiny-q4_k_m-16.gguf";
    synth_options opt{preset, ggml_type::q4_k, 16, 7, 0, true};
    synth_write(opt, path);
    auto file = gguf_file::open(path);
    CHECK(file->get_int("general.file_type") == 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    CHECK(file->tensor("output.weight").type == ggml_type::q6_k);
    CHECK(file->tensor("token_embd.weight").type == ggml_type::q4_k);
    const std::vector<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
    for (int l = 0; l < 16; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const ggml_type want = std::find(more.begin(), more.end(), l) != more.end() ? ggml_type::q6_k : ggml_type::q4_k;
        INFO("layer " << l);
        CHECK(file->tensor(b + "attn_v.weight").type == want);
        CHECK(file->tensor(b + "ffn_down_exps.weight").type == want);
        CHECK(file->tensor(b + "attn_q.weight").type == ggml_type::q4_k);
        CHECK(file->tensor(b + "ffn_gate_exps.weight").type == ggml_type::q4_k);
    }
    synth_options bad = opt;
    bad.type = ggml_type::q8_0;
    CHECK_THROWS_WITH(synth_write(bad, scratch_dir() + "/bad.gguf"), Catch::Contains("Q4_K_M mix is built on q4_k"));
    for (const std::string arithmetic : {"exact", "digits"}) {
        INFO("arithmetic " << arithmetic);
        auto eng = open_cpu(path, 1, 32, kv_type::f32, cpu_arithmetic_parse(arithmetic));
        std::mt19937 rng(3);
        const std::vector<float> logits = prefill(*eng, 0, random_tokens(rng, 5, eng->hparams().n_vocab));
        CHECK(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
    }
}
