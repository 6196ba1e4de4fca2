// src/model/synth_deepseek2.cpp - random-weight deepseek2 models (DeepSeek-V2-Lite, Moonlight,
// DeepSeek-V3 shapes and the tiny test presets) with the keys and tensor names llama.cpp writes.
#include "synth_internal.h"

#include "tandem/convert.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tandem::synth_detail {

namespace {

model_hparams deepseek2_hparams(const synth_options &options, int32_t n_layer) {
    const synth_preset &p = options.preset;
    const synth_mla &m = p.mla;
    model_hparams hp;
    hp.arch = model_arch::deepseek2;
    hp.arch_name = "deepseek2";
    hp.n_layer = n_layer;
    hp.d_model = p.d_model;
    hp.n_head = p.n_head;
    hp.n_head_kv = options.mla_kv_b ? p.n_head : 1;
    hp.d_head = m.d_nope + m.d_rope;
    hp.d_head_v = m.d_v;
    hp.n_expert = p.n_expert;
    hp.n_expert_used = p.n_expert_used;
    hp.d_ff_expert = p.d_ff_expert;
    hp.n_vocab = p.n_vocab;
    hp.n_ctx_train = p.n_ctx_train;
    hp.rms_eps = p.rms_eps;
    hp.rope_theta = p.rope_theta;
    hp.norm_topk = m.norm_topk;
    hp.q_lora_rank = m.q_lora_rank;
    hp.kv_lora_rank = m.kv_lora_rank;
    hp.d_rope = m.d_rope;
    hp.n_expert_shared = m.n_expert_shared;
    hp.n_dense_lead = std::min(m.n_dense_lead, n_layer);
    hp.d_ff = p.d_ff;
    hp.n_expert_group = m.n_group;
    hp.n_expert_group_used = m.n_group_used;
    hp.gating = m.sigmoid ? expert_gating::sigmoid : expert_gating::softmax;
    hp.expert_weights_scale = m.weights_scale;
    if (m.yarn_factor > 0.0f) {
        hp.yarn = true;
        hp.yarn_params.factor = m.yarn_factor;
        hp.yarn_params.n_ctx_orig = m.yarn_n_ctx_orig;
        hp.yarn_params.mscale_all_dim = m.mscale_all_dim;
    }
    return hp;
}

struct layer_writer {
    gguf_writer &w;
    const model_hparams &hp;
    ggml_type type;
    uint64_t seed;

    // A matrix of rows of ne[0] elements, in `type` where its rows fill the type's blocks.
    void matrix(const std::string &name, std::vector<int64_t> ne, float std) {
        const ggml_type t = convert_fit_type(type, ne[0]);
        add_random(w, name, t, std::move(ne), std, seed);
    }
    void norm(const std::string &name, int64_t n) { add_random(w, name, ggml_type::f32, {n}, 0.05f, seed, 1.0f); }
    static float fan_in(int64_t n) { return 1.0f / std::sqrt(float(n)); }

    void attention(const std::string &b, bool kv_b) {
        const int64_t d = hp.d_model, nh = hp.n_head, lora = hp.kv_lora_rank, q_dim = nh * hp.d_head;
        norm(b + "attn_norm.weight", d);
        if (hp.q_lora_rank > 0) {
            matrix(b + "attn_q_a.weight", {d, hp.q_lora_rank}, fan_in(d));
            norm(b + "attn_q_a_norm.weight", hp.q_lora_rank);
            matrix(b + "attn_q_b.weight", {hp.q_lora_rank, q_dim}, fan_in(hp.q_lora_rank));
        } else {
            matrix(b + "attn_q.weight", {d, q_dim}, fan_in(d));
        }
        matrix(b + "attn_kv_a_mqa.weight", {d, lora + hp.d_rope}, fan_in(d));
        norm(b + "attn_kv_a_norm.weight", lora);
        if (kv_b) {
            matrix(b + "attn_kv_b.weight", {lora, nh * (hp.d_nope() + hp.d_head_v)}, fan_in(lora));
        } else {
            matrix(b + "attn_k_b.weight", {hp.d_nope(), lora, nh}, fan_in(lora));
            matrix(b + "attn_v_b.weight", {lora, hp.d_head_v, nh}, fan_in(lora));
        }
        matrix(b + "attn_output.weight", {nh * hp.d_head_v, d}, fan_in(nh * hp.d_head_v));
    }

    void ffn(const std::string &b, int32_t layer) {
        const int64_t d = hp.d_model, ff = hp.d_ff_expert, ne = hp.n_expert;
        norm(b + "ffn_norm.weight", d);
        if (layer < hp.n_dense_lead) {
            matrix(b + "ffn_gate.weight", {d, hp.d_ff}, fan_in(d));
            matrix(b + "ffn_up.weight", {d, hp.d_ff}, fan_in(d));
            matrix(b + "ffn_down.weight", {hp.d_ff, d}, fan_in(hp.d_ff));
            return;
        }
        add_random(w, b + "ffn_gate_inp.weight", ggml_type::f32, {d, ne}, 2.0f * fan_in(d), seed);
        // The selection bias moves which experts win, on the scale of the sigmoid scores' spread.
        if (hp.gating == expert_gating::sigmoid) add_random(w, b + "exp_probs_b.bias", ggml_type::f32, {ne}, 0.05f, seed);
        matrix(b + "ffn_gate_exps.weight", {d, ff, ne}, fan_in(d));
        matrix(b + "ffn_up_exps.weight", {d, ff, ne}, fan_in(d));
        matrix(b + "ffn_down_exps.weight", {ff, d, ne}, fan_in(ff));
        if (hp.n_expert_shared == 0) return;
        const int64_t sh = int64_t(hp.n_expert_shared) * ff;
        matrix(b + "ffn_gate_shexp.weight", {d, sh}, fan_in(d));
        matrix(b + "ffn_up_shexp.weight", {d, sh}, fan_in(d));
        matrix(b + "ffn_down_shexp.weight", {sh, d}, fan_in(sh));
    }
};

}  // namespace

std::vector<std::string> write_deepseek2(const synth_options &options, const std::string &path) {
    const synth_preset &p = options.preset;
    const int32_t n_layer = options.n_layer > 0 ? options.n_layer : p.n_layer;
    if (options.mix) fail(error_kind::config, "synth: llama.cpp mixes are written for qwen3moe presets (deepseek2: one type)");
    if (!ggml_type_info(options.type).computable)
        fail(error_kind::config, "synth: type {} is not supported", ggml_type_name(options.type));
    if (options.q4_k_m) fail(error_kind::config, "synth: the Q4_K_M mix is written for the qwen3moe presets");
    if (int64_t(p.d_model) % ggml_type_info(options.type).block_elems != 0)
        fail(error_kind::config, "synth: preset {} has d_model {}, not a multiple of {}'s block", p.name, p.d_model,
             ggml_type_name(options.type));
    const model_hparams hp = deepseek2_hparams(options, n_layer);
    gguf_writer w;
    model_hparams_write(w, hp, hp.d_ff);
    write_common(w, options);
    layer_writer lw{w, hp, options.type, options.seed};
    const float s_model = layer_writer::fan_in(p.d_model);
    add_random(w, "token_embd.weight", options.type, {p.d_model, p.n_vocab}, 1.0f, options.seed);
    add_random(w, "output_norm.weight", ggml_type::f32, {p.d_model}, 0.05f, options.seed, 1.0f);
    add_random(w, "output.weight", options.type, {p.d_model, p.n_vocab}, 2.0f * s_model, options.seed);
    for (int32_t l = 0; l < n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        lw.attention(b, options.mla_kv_b);
        lw.ffn(b, l);
    }
    return w.write(path, options.n_threads, options.split_max_bytes);
}

}  // namespace tandem::synth_detail
