// src/model/synth.cpp - the presets, and random-weight Qwen3-MoE models of real shapes written
// straight into GGUF: Q8_0, Q4_K and Q6_K tensors get random blocks (no float pass), so 17 GB takes
// seconds on many cores; the other quantized types go through their quantizer. deepseek2 presets
// are written by synth_deepseek2.cpp.
#include "tandem/synth.h"

#include "synth_internal.h"
#include "synth_vocab.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/model.h"
#include "tandem/quant.h"
#include "tandem/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem {

namespace {

// deepseek2 presets: {name, layers, d_model, heads, kv heads, d_head (nope + rope), experts, used,
// d_ff_expert, d_ff (dense layers), vocab, ctx, theta, eps, arch, {q_lora, kv_lora, d_nope, d_rope, d_v,
// shared, dense lead, groups, groups used, sigmoid, scale, norm_topk, yarn factor, yarn ctx, mscale_all_dim}}.
synth_preset deepseek(std::string name, int32_t n_layer, int32_t d_model, int32_t n_head, int32_t n_expert,
                      int32_t n_used, int32_t d_ff_expert, int32_t d_ff, int32_t n_vocab, int32_t n_ctx, float theta,
                      float eps, synth_mla mla) {
    return {std::move(name), n_layer, d_model, n_head, 1, mla.d_nope + mla.d_rope, n_expert, n_used, d_ff_expert, d_ff,
            n_vocab, n_ctx, theta, eps, model_arch::deepseek2, mla};
}

const std::vector<synth_preset> &presets() {
    //                      name  layers d_model heads kv d_head experts used d_ff_e d_ff vocab ctx theta eps
    static const std::vector<synth_preset> list = {
        {"tiny", 4, 256, 4, 2, 64, 8, 2, 256, 768, 1024, 32768, 1000000.0f, 1e-6f},
        // tiny, with Qwen3-MoE's attention geometry (d_head 128, 8 query heads a KV head): the shape
        // the tensor-core decode attention takes (cuda/attention_mma.h), small enough for tests.
        {"tiny-gqa8", 2, 512, 16, 2, 128, 8, 2, 256, 768, 1024, 32768, 1000000.0f, 1e-6f},
        // tiny-gqa8's attention, Qwen3-30B-A3B's width and routing (d_model 2,048; 64 experts, 8 a
        // token): decode steps of 8+ rows take the strided grouped expert blocks and their tensor
        // copies (cuda/matvec_digits.cu), which the smaller presets never reach.
        {"tiny-moe64", 2, 2048, 16, 2, 128, 64, 8, 256, 768, 1024, 32768, 1000000.0f, 1e-6f},
        {"qwen3-30b-a3b", 48, 2048, 32, 4, 128, 128, 8, 768, 6144, 151936, 40960, 1000000.0f, 1e-6f},
        {"qwen3-235b-a22b", 94, 4096, 64, 4, 128, 128, 8, 1536, 12288, 151936, 40960, 1000000.0f, 1e-6f},
        // DeepSeek-V3's layout in small: q LoRA, 4 expert groups (2 used) with sigmoid scores and a
        // bias, a shared expert, one dense layer, YaRN; and DeepSeek-V2-Lite's: plain q, softmax.
        deepseek("tiny-deepseek-v3", 4, 256, 4, 16, 4, 256, 512, 1024, 32768, 10000.0f, 1e-6f,
                 {256, 256, 64, 32, 64, 1, 1, 4, 2, true, 2.5f, true, 8.0f, 4096, 1.0f}),
        deepseek("tiny-deepseek-v2", 3, 256, 4, 8, 2, 256, 512, 1024, 4096, 10000.0f, 1e-6f,
                 {0, 256, 64, 32, 64, 2, 1, 1, 1, false, 1.0f, false, 0.0f, 0, 0.0f}),
        deepseek("deepseek-v2-lite", 27, 2048, 16, 64, 6, 1408, 10944, 102400, 163840, 10000.0f, 1e-6f,
                 {0, 512, 128, 64, 128, 2, 1, 1, 1, false, 1.0f, false, 40.0f, 4096, 0.707f}),
        // Moonlight-16B-A3B: DeepSeek-V3's routing (sigmoid scores with a bias, normalised, scaled)
        // at V2-Lite's size, without q LoRA or rope scaling.
        deepseek("moonlight-16b-a3b", 27, 2048, 16, 64, 6, 1408, 11264, 163840, 8192, 50000.0f, 1e-5f,
                 {0, 512, 128, 64, 128, 2, 1, 1, 1, true, 2.446f, true, 0.0f, 0, 0.0f}),
        deepseek("deepseek-v3", 61, 7168, 128, 256, 8, 2048, 18432, 129280, 163840, 10000.0f, 1e-6f,
                 {1536, 512, 128, 64, 128, 1, 3, 8, 4, true, 2.5f, true, 40.0f, 4096, 1.0f}),
    };
    return list;
}

constexpr const char *qwen3_chat_template =
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}";

}  // namespace

std::optional<synth_preset> synth_preset_find(const std::string &name) {
    for (const auto &p : presets())
        if (p.name == name) return p;
    return std::nullopt;
}

synth_type_choice synth_type_parse(const std::string &name) {
    const std::optional<ggml_type> type = ggml_type_from_name(name);
    const std::optional<quant_ftype> ftype = quant_ftype_find(name);
    const bool capitals = std::none_of(name.begin(), name.end(), [](char c) { return c >= 'a' && c <= 'z'; });
    if (ftype && (capitals || !type)) {
        if (ftype->ftype == llama_ftype::q4_k_m) return {ggml_type::q4_k, true, std::nullopt};  // synth's own rule
        return {ftype->base, false, ftype->ftype};
    }
    if (type) return {*type, false, std::nullopt};
    std::string mixes;
    for (const std::string &n : quant_ftype_names()) mixes += (mixes.empty() ? "" : ", ") + n;
    fail(error_kind::config, "unknown type '{}': a ggml type (f16, q8_0, q4_K, iq2_xxs, ...) or a llama.cpp file type ({})",
         name, mixes);
}

std::vector<std::string> synth_preset_names() {
    std::vector<std::string> names;
    for (const auto &p : presets()) names.push_back(p.name);
    return names;
}

namespace synth_detail {

uint64_t name_hash(const std::string &s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (char c : s) h = (h ^ uint8_t(c)) * 1099511628211ull;
    return h;
}

// The types without a random-block writer: uniform values in [-amp, amp) through the type's
// quantizer (with a uniform importance where ggml requires one) for the first pool_blocks blocks;
// the rest are copies of those drawn at random. The searching quantizers (K-quants of 2, 3 and 5
// bits, the IQ types) then write a 30B-sized file in seconds instead of minutes, and a tensor's
// blocks still have the type's real distribution of codes and scales.
static void fill_quantized(ggml_type type, uint8_t *dst, int64_t n_elems, float amp, rng64 &rng) {
    if (!ggml_type_can_quantize(type))
        fail(error_kind::unsupported, "synth cannot write tensors of type {}", ggml_type_name(type));
    const int64_t blk = ggml_type_info(type).block_elems, n_blocks = n_elems / blk;
    const size_t blk_bytes = ggml_row_bytes(type, blk);
    const std::vector<float> importance(size_t(blk), 1.0f);
    const float *imp = ggml_type_needs_importance(type) ? importance.data() : nullptr;
    constexpr int64_t pool_blocks = 4096;
    const int64_t n_pool = std::min(pool_blocks, n_blocks);
    std::vector<float> x(size_t(n_pool * blk));
    for (float &v : x) v = (2.0f * rng.uniform() - 1.0f) * amp;
    quantize_rows(type, x.data(), dst, n_pool, blk, imp);
    for (int64_t b = n_pool; b < n_blocks; ++b)
        std::memcpy(dst + size_t(b) * blk_bytes, dst + size_t(rng.next() % uint64_t(n_pool)) * blk_bytes, blk_bytes);
}

// Fills n_elems of `type` with random values of mean ~0 and standard deviation ~std.
// Derivations of the scale factors (q uniform over its codes, scales uniform over their bits):
//   q8_0: d*q, q in [-128,127]: std(q) ~ 73.9
//   q4_K: d*(sc*q - 7.5*m) with dmin = 7.5 d, sc,m in 0..63, q in 0..15: std ~ 258 d
//   q6_K: d*sc*(q-32), sc int8, q in 0..63: std ~ 74 * 18.5 = 1369 d
void fill_random(ggml_type type, uint8_t *dst, int64_t n_elems, float std, rng64 &rng) {
    const float amp = std * std::sqrt(3.0f);  // uniform [-amp, amp) has this std
    switch (type) {
    case ggml_type::f32: {
        float *f = reinterpret_cast<float *>(dst);
        for (int64_t i = 0; i < n_elems; ++i) f[i] = (2.0f * rng.uniform() - 1.0f) * amp;
        return;
    }
    case ggml_type::f16:
    case ggml_type::bf16: {
        uint16_t *h = reinterpret_cast<uint16_t *>(dst);
        for (int64_t i = 0; i < n_elems; ++i) {
            const float v = (2.0f * rng.uniform() - 1.0f) * amp;
            h[i] = type == ggml_type::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
        }
        return;
    }
    case ggml_type::q8_0: {
        const uint16_t d = fp32_to_fp16(std / 73.9f);
        for (int64_t b = 0; b < n_elems / 32; ++b) {
            uint8_t *blk = dst + b * 34;
            std::memcpy(blk, &d, 2);
            rng.fill(blk + 2, 32);
        }
        return;
    }
    case ggml_type::q4_k: {
        const uint16_t d = fp32_to_fp16(std / 258.0f), dmin = fp32_to_fp16(7.5f * std / 258.0f);
        for (int64_t b = 0; b < n_elems / 256; ++b) {
            uint8_t *blk = dst + b * 144;
            std::memcpy(blk, &d, 2);
            std::memcpy(blk + 2, &dmin, 2);
            rng.fill(blk + 4, 140);  // 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
        }
        return;
    }
    case ggml_type::q6_k: {
        const uint16_t d = fp32_to_fp16(std / 1369.0f);
        for (int64_t b = 0; b < n_elems / 256; ++b) {
            uint8_t *blk = dst + b * 210;
            rng.fill(blk, 208);  // ql, qh, int8 scales
            std::memcpy(blk + 208, &d, 2);
        }
        return;
    }
    default: fill_quantized(type, dst, n_elems, amp, rng); return;
    }
}

void add_random(gguf_writer &w, const std::string &name, ggml_type t, std::vector<int64_t> ne, float std, uint64_t seed,
                float mean) {
    int64_t n = 1;
    for (int64_t v : ne) n *= v;
    w.add_tensor(name, t, ne, [=](uint8_t *dst) {
        rng64 rng{name_hash(name, seed)};
        fill_random(t, dst, n, std, rng);
        if (mean != 0.0f) {  // norm weights: 1 + noise
            float *f = reinterpret_cast<float *>(dst);
            for (int64_t i = 0; i < n; ++i) f[i] += mean;
        }
    });
}

void write_common(gguf_writer &w, const synth_options &options) {
    const synth_preset &p = options.preset;
    w.set_string("general.name", "tandem-synth-" + p.name);
    w.set_u32("general.quantization_version", 2);
    // llama_ftype of a file whose matrices are all `type` (all-Q4_K is closest to Q4_K_S), or of the mix.
    if (options.mix) w.set_u32("general.file_type", uint32_t(*options.mix));
    else switch (options.type) {
    case ggml_type::f32: w.set_u32("general.file_type", 0); break;
    case ggml_type::f16: w.set_u32("general.file_type", 1); break;
    case ggml_type::q8_0: w.set_u32("general.file_type", 7); break;
    case ggml_type::q4_k: w.set_u32("general.file_type", options.q4_k_m ? 15 : 14); break;
    case ggml_type::q6_k: w.set_u32("general.file_type", 18); break;
    case ggml_type::bf16: w.set_u32("general.file_type", 32); break;
    default: break;
    }

    synth_vocab vocab = synth_vocab_build(p.n_vocab, options.seed);
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_array_string("tokenizer.ggml.tokens", vocab.tokens);
    w.set_array_i32("tokenizer.ggml.token_type", vocab.types);
    w.set_array_string("tokenizer.ggml.merges", vocab.merges);
    w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(vocab.im_end));
    w.set_u32("tokenizer.ggml.padding_token_id", uint32_t(vocab.endoftext));
    w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(vocab.endoftext));
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    w.set_string("tokenizer.chat_template", qwen3_chat_template);
}

}  // namespace synth_detail

namespace {

struct planned_tensor {
    std::string name;
    ggml_type type;
    std::vector<int64_t> ne;
    float std, mean;
};

// llama-quantize's per-tensor choice for a mix, visiting the tensors in llama.cpp's order (its
// attn_v counters depend on it), as from an F32 file with an importance matrix: how published IQ
// files are made.
void apply_mix(std::vector<planned_tensor> &plan, llama_ftype mix, const quant_mix_model &model) {
    std::vector<std::string> names;
    for (const planned_tensor &t : plan) names.push_back(t.name);
    const std::vector<size_t> order = quant_mix_order(names);
    std::vector<quant_mix_tensor> tensors;
    for (size_t i : order) tensors.push_back({plan[i].name, plan[i].ne, ggml_type::f32});
    quant_mix_options mo;
    mo.ftype = mix;
    mo.has_imatrix = true;
    const std::vector<quant_mix_choice> choices = quant_mix_types(model, mo, tensors);
    for (size_t k = 0; k < order.size(); ++k) plan[order[k]].type = choices[k].type;
}

}  // namespace

std::vector<std::string> synth_write(const synth_options &options, const std::string &path) {
    const synth_preset &p = options.preset;
    if (p.arch == model_arch::deepseek2) return synth_detail::write_deepseek2(options, path);
    const int32_t n_layer = options.n_layer > 0 ? options.n_layer : p.n_layer;
    const ggml_type type = options.type;
    const auto &traits = ggml_type_info(type);
    if (!traits.computable) fail(error_kind::config, "synth: type {} is not supported", traits.name);
    const int64_t q_dim = int64_t(p.n_head) * p.d_head, kv_dim = int64_t(p.n_head_kv) * p.d_head;
    for (int64_t row : {int64_t(p.d_model), q_dim, int64_t(p.d_ff_expert)})
        if (row % traits.block_elems != 0)
            fail(error_kind::config, "synth: preset {} has a row of {} elements, not a multiple of {}'s block of {}",
                 p.name, row, traits.name, traits.block_elems);
    if (options.q4_k_m && type != ggml_type::q4_k) fail(error_kind::config, "synth: the Q4_K_M mix is built on q4_k");
    if (options.q4_k_m && options.mix) fail(error_kind::config, "synth: q4_k_m and a llama.cpp mix do not combine");
    // The Q4_K_M mix's tensors of more bits (llama-quant's use_more_bits over the layers).
    auto more_bits = [&](int32_t l) { return l < n_layer / 8 || l >= 7 * n_layer / 8 || (l - n_layer / 8) % 3 == 2; };
    auto mixed = [&](bool more) { return options.q4_k_m && more ? ggml_type::q6_k : type; };

    gguf_writer w;
    model_hparams hp;
    hp.arch_name = "qwen3moe";
    hp.n_layer = n_layer;
    hp.d_model = p.d_model;
    hp.n_head = p.n_head;
    hp.n_head_kv = p.n_head_kv;
    hp.d_head = hp.d_head_v = p.d_head;
    hp.n_expert = p.n_expert;
    hp.n_expert_used = p.n_expert_used;
    hp.d_ff_expert = p.d_ff_expert;
    hp.n_ctx_train = p.n_ctx_train;
    hp.rms_eps = p.rms_eps;
    hp.rope_theta = p.rope_theta;
    model_hparams_write(w, hp, p.d_ff);
    synth_detail::write_common(w, options);

    std::vector<planned_tensor> plan;
    auto add = [&](const std::string &name, ggml_type t, std::vector<int64_t> ne, float std, float mean = 0.0f) {
        plan.push_back({name, t, std::move(ne), std, mean});
    };
    const float s_model = 1.0f / std::sqrt(float(p.d_model));
    add("token_embd.weight", type, {p.d_model, p.n_vocab}, 1.0f);
    add("output_norm.weight", ggml_type::f32, {p.d_model}, 0.05f, 1.0f);
    add("output.weight", mixed(true), {p.d_model, p.n_vocab}, 2.0f * s_model);
    for (int32_t l = 0; l < n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        add(b + "attn_norm.weight", ggml_type::f32, {p.d_model}, 0.05f, 1.0f);
        add(b + "attn_q.weight", type, {p.d_model, q_dim}, s_model);
        add(b + "attn_k.weight", type, {p.d_model, kv_dim}, s_model);
        add(b + "attn_v.weight", mixed(more_bits(l)), {p.d_model, kv_dim}, s_model);
        add(b + "attn_output.weight", type, {q_dim, p.d_model}, 1.0f / std::sqrt(float(q_dim)));
        add(b + "attn_q_norm.weight", ggml_type::f32, {p.d_head}, 0.05f, 1.0f);
        add(b + "attn_k_norm.weight", ggml_type::f32, {p.d_head}, 0.05f, 1.0f);
        add(b + "ffn_norm.weight", ggml_type::f32, {p.d_model}, 0.05f, 1.0f);
        add(b + "ffn_gate_inp.weight", ggml_type::f32, {p.d_model, p.n_expert}, 2.0f * s_model);
        add(b + "ffn_gate_exps.weight", type, {p.d_model, p.d_ff_expert, p.n_expert}, s_model);
        add(b + "ffn_up_exps.weight", type, {p.d_model, p.d_ff_expert, p.n_expert}, s_model);
        add(b + "ffn_down_exps.weight", mixed(more_bits(l)), {p.d_ff_expert, p.d_model, p.n_expert},
            1.0f / std::sqrt(float(p.d_ff_expert)));
    }
    if (options.mix) apply_mix(plan, *options.mix, {hp.arch_name, n_layer, p.n_head, p.n_head_kv, p.n_expert});
    for (planned_tensor &t : plan) synth_detail::add_random(w, t.name, t.type, std::move(t.ne), t.std, options.seed, t.mean);
    return w.write(path, options.n_threads, options.split_max_bytes);
}

}  // namespace tandem
