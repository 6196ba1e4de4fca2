// tests/model/test_deepseek2.cpp - the CPU engine on deepseek2 files: bad files refused at load
// naming the key or tensor, batch invariance (a row beside fifteen other sessions, prompts chunked
// any way), quantized files equal to their dequantised copies, both up-projection forms alike bit
// for bit, and the f16 cache.
#include "model_test_util.h"

#include "tandem/error.h"
#include "tandem/quant.h"
#include "tandem/sampler.h"
#include "tandem/synth.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <random>
#include <set>

using namespace tandem;
using namespace tandem::test;

namespace {

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<int32_t> random_tokens(std::mt19937 &rng, size_t n, int32_t n_vocab) {
    std::vector<int32_t> out(n);
    for (auto &t : out) t = int32_t(rng() % uint32_t(n_vocab));
    return out;
}

// A copy of `path`: metadata keys in `drop` left out, then `set` applied; tensors in `drop` left
// out, tensors in `replace` written by their own fill (name -> (ne, fill of f32 data)).
struct edit {
    std::set<std::string> drop = {};
    std::function<void(gguf_writer &)> set = {};
    std::map<std::string, std::pair<std::vector<int64_t>, std::function<void(float *)>>> replace = {};
};

std::string edited_copy(const std::string &path, const std::string &tag, const edit &e) {
    auto in = gguf_file::open(path);
    gguf_writer w;
    for (const gguf_kv &kv : in->kvs())
        if (kv.key != "general.alignment" && !e.drop.count(kv.key)) w.set_value(kv.key, kv.value);
    if (e.set) e.set(w);
    for (const gguf_tensor_info &t : in->tensors()) {
        if (e.drop.count(t.name) || e.replace.count(t.name)) continue;
        const gguf_tensor_info *src = &t;
        w.add_tensor(t.name, t.type, t.ne, [src](uint8_t *dst) { std::memcpy(dst, src->data, src->n_bytes); });
    }
    for (const auto &[name, r] : e.replace) {
        const auto fill = r.second;
        w.add_tensor(name, ggml_type::f32, r.first, [fill](uint8_t *dst) { fill(reinterpret_cast<float *>(dst)); });
    }
    const std::string out = scratch_dir() + "/edited-" + tag + ".gguf";
    w.write(out);
    return out;
}

void expect_refused(const std::string &path, error_kind kind, const std::string &needle) {
    INFO("expecting a refusal naming " << needle);
    try {
        open_cpu(path, 1, 32);
        FAIL("the file was accepted");
    } catch (const tandem::error &e) {
        CHECK(e.kind() == kind);
        CHECK_THAT(e.what(), Catch::Contains(needle));
    }
}

// Greedy continuation of `prompt` in slot 0: the prefill's last logits, then each decode row's.
std::vector<std::vector<float>> run_alone(const std::string &model, const std::vector<int32_t> &prompt, int n_steps,
                                          std::vector<int32_t> &tokens) {
    auto eng = open_cpu(model, 1, 128);
    std::vector<std::vector<float>> out{prefill(*eng, 0, prompt)};
    for (int step = 0; step < n_steps; ++step) {
        tokens.push_back(argmax(out.back()));
        const engine_row row{0, eng->slot_length(0), tokens.back(), row_output::logits};
        std::vector<float> logits;
        engine_forward_logits(*eng, {&row, 1}, logits);
        out.push_back(logits);
    }
    return out;
}

}  // namespace

TEST_CASE("deepseek2 files with inconsistent MLA dims, bad routing keys or missing tensors are refused naming them",
          "[model][deepseek2]") {
    const std::string good = synth_gguf("tiny-deepseek-v3", ggml_type::f32, 2);
    const std::string a = "deepseek2.";
    CHECK_NOTHROW(open_cpu(good, 1, 32));
    auto set_u32 = [](const std::string &key, uint32_t v) { return [=](gguf_writer &w) { w.set_u32(key, v); }; };
    expect_refused(edited_copy(good, "key-length", {{}, set_u32(a + "attention.key_length", 300)}),
                   error_kind::file_format, "attention.key_length");
    expect_refused(edited_copy(good, "value-length", {{}, set_u32(a + "attention.value_length", 64)}),
                   error_kind::file_format, "attention.value_length");
    expect_refused(edited_copy(good, "kv-heads", {{}, set_u32(a + "attention.head_count_kv", 4)}),
                   error_kind::file_format, "head_count_kv");
    expect_refused(edited_copy(good, "rope-odd", {{}, set_u32(a + "rope.dimension_count", 31)}),
                   error_kind::file_format, "rope.dimension_count");
    expect_refused(edited_copy(good, "groups", {{}, set_u32(a + "expert_group_count", 3)}), error_kind::file_format,
                   "expert_group_count 3 does not divide expert_count 16");
    expect_refused(edited_copy(good, "groups-used", {{}, set_u32(a + "expert_group_used_count", 5)}),
                   error_kind::file_format, "expert_group_used_count");
    expect_refused(edited_copy(good, "gating", {{}, set_u32(a + "expert_gating_func", 7)}), error_kind::unsupported,
                   "expert_gating_func = 7");
    expect_refused(edited_copy(good, "dense", {{}, set_u32(a + "leading_dense_block_count", 9)}),
                   error_kind::file_format, "leading_dense_block_count");
    expect_refused(edited_copy(good, "no-q-lora", {{}, set_u32(a + "attention.q_lora_rank", 0)}),
                   error_kind::file_format, "attn_q_a.weight present");
    expect_refused(edited_copy(good, "no-kv-lora", {{a + "attention.kv_lora_rank"}, {}}), error_kind::file_format,
                   "attention.kv_lora_rank");
    expect_refused(edited_copy(good, "scaling", {{}, [&](gguf_writer &w) { w.set_string(a + "rope.scaling.type", "linear"); }}),
                   error_kind::unsupported, "rope.scaling.type 'linear'");
    expect_refused(edited_copy(good, "attn-factor", {{}, [&](gguf_writer &w) { w.set_f32(a + "rope.scaling.attn_factor", 0.5f); }}),
                   error_kind::unsupported, "rope.scaling.attn_factor");
    expect_refused(edited_copy(good, "missing", {{"blk.1.attn_kv_a_mqa.weight"}, {}}), error_kind::file_format,
                   "blk.1.attn_kv_a_mqa.weight");
    expect_refused(edited_copy(good, "missing-shexp", {{"blk.1.ffn_down_shexp.weight"}, {}}), error_kind::file_format,
                   "blk.1.ffn_down_shexp.weight");
    // attn_k_b with its first two dims swapped: the same bytes, the wrong layout.
    const gguf_tensor_info kb = gguf_file::open(good)->tensor("blk.0.attn_k_b.weight");
    expect_refused(edited_copy(good, "k-b-shape", {{}, {}, {{"blk.0.attn_k_b.weight", {{kb.ne[1], kb.ne[0], kb.ne[2]},
                                                                                       [](float *) {}}}}}),
                   error_kind::file_format, "blk.0.attn_k_b.weight has shape [256, 64, 4]");
}

TEST_CASE("a deepseek2 row's logits are bitwise the same alone and beside fifteen other sessions", "[model][deepseek2][invariance]") {
    const std::string preset = GENERATE(std::string("tiny-deepseek-v3"), std::string("tiny-deepseek-v2"));
    const ggml_type type = GENERATE(ggml_type::q8_0, ggml_type::f32);
    INFO(preset << " " << ggml_type_name(type));
    const std::string model = synth_gguf(preset, type, 0);
    constexpr size_t n_sessions = 16, n_steps = 5;
    std::mt19937 rng(404);
    std::vector<std::vector<int32_t>> prompts, tokens(n_sessions);
    std::vector<std::vector<std::vector<float>>> alone;
    for (size_t s = 0; s < n_sessions; ++s) {
        prompts.push_back(random_tokens(rng, 1 + (s * 7) % 23, 1024));
        alone.push_back(run_alone(model, prompts[s], int(n_steps), tokens[s]));
    }
    auto eng = open_cpu(model, int32_t(n_sessions), 128);
    std::vector<engine_row> rows;  // every prompt in one call, interleaved
    for (size_t i = 0; i < 23; ++i)
        for (size_t s = 0; s < n_sessions; ++s)
            if (i < prompts[s].size())
                rows.push_back({int32_t(s), int32_t(i), prompts[s][i], logits_if(i + 1 == prompts[s].size()), true});
    std::vector<float> logits;
    engine_forward_logits(*eng, rows, logits);
    const size_t nv = size_t(eng->hparams().n_vocab);
    size_t out = 0;
    for (const engine_row &r : rows)
        if (r.want != row_output::none) {
            INFO("prefill of session " << r.slot);
            CHECK(same_bits({logits.data() + nv * out++, nv}, alone[size_t(r.slot)][0]));
        }
    for (size_t step = 0; step < n_steps; ++step) {
        rows.clear();
        for (size_t i = 0; i < n_sessions; ++i) {
            const size_t s = (i * 5 + step) % n_sessions;  // a different order every step
            rows.push_back({int32_t(s), eng->slot_length(int32_t(s)), tokens[s][step], row_output::logits});
        }
        engine_forward_logits(*eng, rows, logits);
        for (size_t i = 0; i < rows.size(); ++i) {
            INFO("step " << step << " session " << rows[i].slot);
            CHECK(same_bits({logits.data() + nv * i, nv}, alone[size_t(rows[i].slot)][step + 1]));
        }
    }
}

TEST_CASE("how a deepseek2 prompt is chunked does not change a bit of its logits", "[model][deepseek2][invariance]") {
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q4_k, 0);
    std::mt19937 rng(77);
    const std::vector<int32_t> prompt = random_tokens(rng, 41, 1024);
    auto whole = open_cpu(model, 1, 64);
    const std::vector<float> want = prefill(*whole, 0, prompt, true);
    const size_t nv = size_t(whole->hparams().n_vocab);
    for (size_t chunk : {size_t(1), size_t(7), size_t(13)}) {
        INFO("chunks of " << chunk);
        auto eng = open_cpu(model, 1, 64);
        std::vector<float> got;
        for (size_t at = 0; at < prompt.size(); at += chunk) {
            const std::vector<int32_t> part(prompt.begin() + long(at), prompt.begin() + long(std::min(prompt.size(), at + chunk)));
            const std::vector<float> logits = prefill(*eng, 0, part, true);
            got.insert(got.end(), logits.begin(), logits.end());
        }
        REQUIRE(got.size() == prompt.size() * nv);
        CHECK(same_bits(got, want));
    }
}

TEST_CASE("a quantized deepseek2 file computes exactly what its dequantised F32 copy computes", "[model][deepseek2]") {
    const ggml_type type = GENERATE(ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k);
    INFO(ggml_type_name(type));
    const std::string quant = synth_gguf("tiny-deepseek-v3", type, 0);
    const std::string f32 = dequantized_copy(quant);
    std::mt19937 rng(5);
    const std::vector<int32_t> prompt = random_tokens(rng, 17, 1024);
    std::vector<int32_t> ta, tb;
    const auto a = run_alone(quant, prompt, 6, ta), b = run_alone(f32, prompt, 6, tb);
    CHECK(ta == tb);
    for (size_t i = 0; i < a.size(); ++i) CHECK(same_bits(a[i], b[i]));
}

TEST_CASE("the attn_kv_b form and the split attn_k_b/attn_v_b form give the same logits bit for bit", "[model][deepseek2]") {
    const std::string legacy = scratch_dir() + "/tiny-deepseek-v2-kv-b.gguf";
    synth_options opt{*synth_preset_find("tiny-deepseek-v2"), ggml_type::f32, 0, 9, 0, false, true};
    synth_write(opt, legacy);
    auto in = gguf_file::open(legacy);
    const model_hparams hp = model_hparams_read(*in);
    REQUIRE(hp.n_head_kv == hp.n_head);  // the legacy keys
    const int64_t nh = hp.n_head, nope = hp.d_nope(), dv = hp.d_head_v, lora = hp.kv_lora_rank;
    // The split form as llama.cpp's converter writes it: current keys, attn_k_b transposed per head.
    edit e;
    const std::string a = "deepseek2.";
    e.set = [&](gguf_writer &w) {
        w.set_u32(a + "attention.head_count_kv", 1);
        w.set_u32(a + "attention.key_length", uint32_t(lora + hp.d_rope));
        w.set_u32(a + "attention.value_length", uint32_t(lora));
        w.set_u32(a + "attention.key_length_mla", uint32_t(hp.d_head));
        w.set_u32(a + "attention.value_length_mla", uint32_t(dv));
    };
    for (int32_t l = 0; l < hp.n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const float *kv_b = reinterpret_cast<const float *>(in->tensor(b + "attn_kv_b.weight").data);
        e.drop.insert(b + "attn_kv_b.weight");
        e.replace[b + "attn_k_b.weight"] = {{nope, lora, nh}, [=](float *dst) {
                                                for (int64_t h = 0; h < nh; ++h)
                                                    for (int64_t c = 0; c < lora; ++c)
                                                        for (int64_t j = 0; j < nope; ++j)
                                                            *dst++ = kv_b[(h * (nope + dv) + j) * lora + c];
                                            }};
        e.replace[b + "attn_v_b.weight"] = {{lora, dv, nh}, [=](float *dst) {
                                                for (int64_t h = 0; h < nh; ++h)
                                                    for (int64_t i = 0; i < dv; ++i)
                                                        for (int64_t c = 0; c < lora; ++c)
                                                            *dst++ = kv_b[(h * (nope + dv) + nope + i) * lora + c];
                                            }};
    }
    const std::string split = edited_copy(legacy, "split", e);
    REQUIRE(gguf_file::open(split)->find_tensor("blk.0.attn_k_b.weight"));
    std::mt19937 rng(8);
    const std::vector<int32_t> prompt = random_tokens(rng, 21, 1024);
    std::vector<int32_t> ta, tb;
    const auto x = run_alone(legacy, prompt, 5, ta), y = run_alone(split, prompt, 5, tb);
    CHECK(ta == tb);
    for (size_t i = 0; i < x.size(); ++i) CHECK(same_bits(x[i], y[i]));
}

TEST_CASE("an f16 deepseek2 cache rounds the latent and stays close to f32", "[model][deepseek2]") {
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q8_0, 0);
    auto f32 = open_cpu(model, 1, 64), f16 = open_cpu(model, 1, 64, kv_type::f16);
    std::mt19937 rng(6);
    const std::vector<int32_t> prompt = random_tokens(rng, 30, 1024);
    const std::vector<float> a = prefill(*f32, 0, prompt), b = prefill(*f16, 0, prompt);
    CHECK_FALSE(same_bits(a, b));
    // Half precision keeps ~3 decimal digits of the latent and the roped key.
    CHECK(rel_l2(std::span<const float>(b), std::span<const float>(a)) < 2e-3);
}

TEST_CASE("deepseek2's cache prices kv_lora_rank + rope values a token per layer", "[model][deepseek2]") {
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q8_0, 0);
    auto file = gguf_file::open(model);
    const model_hparams hp = model_hparams_read(*file);
    const model_bytes bytes = model_bytes_read(*file, hp, 2);
    CHECK(bytes.kv_per_token == uint64_t(hp.n_layer) * (256 + 32) * 2);
    // Shared experts and the dense layer are replicated weights; the dense layer has no routed experts.
    CHECK(bytes.layer_experts[0] == 0);
    uint64_t dense = 0;
    for (const char *n : {"ffn_gate", "ffn_up", "ffn_down"}) dense += file->tensor(std::string("blk.0.") + n + ".weight").n_bytes;
    CHECK(bytes.layer_replicated[0] >= dense);
    uint64_t shexp = 0;
    for (const char *n : {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"})
        shexp += file->tensor(std::string("blk.2.") + n + ".weight").n_bytes;
    uint64_t exps = 0;
    for (const char *n : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) exps += file->tensor(std::string("blk.2.") + n + ".weight").n_bytes;
    CHECK(bytes.layer_experts[2] == exps);
    CHECK(bytes.layer_replicated[2] >= shexp);
}
