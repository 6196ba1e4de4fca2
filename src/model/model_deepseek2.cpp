// src/model/model_deepseek2.cpp - the deepseek2 architecture (DeepSeek-V2/V3, Moonlight, Kimi K2)
// as llama.cpp writes it: hyper-parameters with their consistency checks, the keys written back,
// and the tensors of every layer kind (q LoRA or plain q, the latent's up-projection in either
// the attn_kv_b or the split attn_k_b/attn_v_b form, dense leading layers, shared experts).
#include "model_internal.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tandem::model_detail {

namespace {

// MLA head sizes: llama.cpp's current form (key_length_mla/value_length_mla, one KV "head" of the
// cached latent) or its legacy form (key_length/value_length are the decompressed heads).
void read_mla_dims(const gguf_file &file, const std::string &a, model_hparams &hp) {
    constexpr int64_t big = 1 << 20;
    hp.kv_lora_rank = read_positive(file, a + "attention.kv_lora_rank", big);
    hp.q_lora_rank = read_count(file, a + "attention.q_lora_rank", big, 0);
    hp.d_rope = read_positive(file, a + "rope.dimension_count", 65536);
    const bool mla_keys = file.has(a + "attention.key_length_mla") || file.has(a + "attention.value_length_mla");
    if (mla_keys) {
        hp.d_head = read_positive(file, a + "attention.key_length_mla", 65536);
        hp.d_head_v = read_positive(file, a + "attention.value_length_mla", 65536);
        const int64_t k_len = read_count(file, a + "attention.key_length", big, hp.kv_lora_rank + hp.d_rope);
        const int64_t v_len = read_count(file, a + "attention.value_length", big, hp.kv_lora_rank);
        if (k_len != int64_t(hp.kv_lora_rank) + hp.d_rope)
            fail(error_kind::file_format, "{}: {}attention.key_length = {} but the cached latent is kv_lora_rank {} + "
                 "rope.dimension_count {}", file.path(), a, k_len, hp.kv_lora_rank, hp.d_rope);
        if (v_len != hp.kv_lora_rank)
            fail(error_kind::file_format, "{}: {}attention.value_length = {} but kv_lora_rank is {}", file.path(), a,
                 v_len, hp.kv_lora_rank);
        if (hp.n_head_kv != 1)
            fail(error_kind::file_format, "{}: {}attention.head_count_kv = {}: with key_length_mla the latent is one "
                 "shared KV head (1)", file.path(), a, hp.n_head_kv);
    } else {
        hp.d_head = read_positive(file, a + "attention.key_length", 65536);
        hp.d_head_v = read_positive(file, a + "attention.value_length", 65536);
        if (hp.n_head_kv != hp.n_head)
            fail(error_kind::file_format, "{}: {}attention.head_count_kv = {} but head_count is {} (the decompressed "
                 "heads of the legacy MLA form)", file.path(), a, hp.n_head_kv, hp.n_head);
    }
    if (hp.d_rope % 2 != 0 || hp.d_rope >= hp.d_head)
        fail(error_kind::file_format, "{}: {}rope.dimension_count {} must be even and below the key head size {}",
             file.path(), a, hp.d_rope, hp.d_head);
}

void read_routing(const gguf_file &file, const std::string &a, model_hparams &hp) {
    constexpr int64_t big = 1 << 20;
    hp.n_expert_shared = read_count(file, a + "expert_shared_count", 65536, 0);
    hp.n_dense_lead = read_count(file, a + "leading_dense_block_count", 4096, 0);
    if (hp.n_dense_lead > hp.n_layer)
        fail(error_kind::file_format, "{}: {}leading_dense_block_count {} exceeds block_count {}", file.path(), a,
             hp.n_dense_lead, hp.n_layer);
    hp.d_ff = hp.n_dense_lead > 0 ? read_positive(file, a + "feed_forward_length", big)
                                  : read_count(file, a + "feed_forward_length", big, 0);
    hp.norm_topk = file.get_bool(a + "expert_weights_norm", false);
    // 0 means "not scaled" to llama.cpp, as 1 does.
    const double scale = file.get_float(a + "expert_weights_scale", 1.0);
    if (!std::isfinite(scale) || scale < 0)
        fail(error_kind::file_format, "{}: {}expert_weights_scale = {} must be a finite number >= 0", file.path(), a,
             scale);
    hp.expert_weights_scale = scale == 0.0 ? 1.0f : float(scale);
    // Absent (or 0) in DeepSeek-V2 files made before the key existed: softmax, as llama.cpp reads them.
    const int64_t gating = file.has(a + "expert_gating_func") ? file.get_int(a + "expert_gating_func") : 0;
    if (gating == 0 || gating == 1)
        hp.gating = expert_gating::softmax;
    else if (gating == 2)
        hp.gating = expert_gating::sigmoid;
    else
        fail(error_kind::unsupported, "{}: {}expert_gating_func = {} is not supported (1 softmax, 2 sigmoid)",
             file.path(), a, gating);
    hp.n_expert_group = std::max(1, read_count(file, a + "expert_group_count", 65536, 1));
    hp.n_expert_group_used = std::max(1, read_count(file, a + "expert_group_used_count", 65536, 1));
    if (hp.n_expert % hp.n_expert_group != 0)
        fail(error_kind::file_format, "{}: {}expert_group_count {} does not divide expert_count {}", file.path(), a,
             hp.n_expert_group, hp.n_expert);
    if (hp.n_expert_group_used > hp.n_expert_group)
        fail(error_kind::file_format, "{}: {}expert_group_used_count {} exceeds expert_group_count {}", file.path(),
             a, hp.n_expert_group_used, hp.n_expert_group);
    const int32_t per_group = hp.n_expert / hp.n_expert_group;
    // A group's score is the sum of its two best experts (DeepSeek-V3, llama.cpp).
    if (hp.n_expert_group > 1 && per_group < 2)
        fail(error_kind::file_format, "{}: {}expert_group_count {} leaves {} expert per group; group scores need two",
             file.path(), a, hp.n_expert_group, per_group);
    if (int64_t(hp.n_expert_group_used) * per_group < hp.n_expert_used)
        fail(error_kind::file_format, "{}: {}expert_group_used_count {} groups of {} experts cannot hold "
             "expert_used_count {}", file.path(), a, hp.n_expert_group_used, per_group, hp.n_expert_used);
}

void read_rope_scaling(const gguf_file &file, const std::string &a, model_hparams &hp) {
    const std::string type = file.get_string(a + "rope.scaling.type", "none");
    if (type == "none") return;
    if (type != "yarn")
        fail(error_kind::unsupported, "{}: {}rope.scaling.type '{}' is not supported for deepseek2 (none, yarn)",
             file.path(), a, type);
    hp.yarn = true;
    rope_yarn &y = hp.yarn_params;
    y.factor = float(file.get_float(a + "rope.scaling.factor"));
    if (!(y.factor >= 1.0f) || !std::isfinite(y.factor))
        fail(error_kind::file_format, "{}: {}rope.scaling.factor = {} must be >= 1", file.path(), a, y.factor);
    y.n_ctx_orig = read_positive(file, a + "rope.scaling.original_context_length", int64_t{1} << 30);
    y.beta_fast = float(file.get_float(a + "rope.scaling.yarn_beta_fast", 32.0));
    y.beta_slow = float(file.get_float(a + "rope.scaling.yarn_beta_slow", 1.0));
    if (!(y.beta_fast > 0.0f) || !(y.beta_slow > 0.0f))
        fail(error_kind::file_format, "{}: {}rope.scaling.yarn_beta_fast/slow must be positive", file.path(), a);
    // llama.cpp's deepseek2 converter writes 0.1 * mscale_all_dim here.
    y.mscale_all_dim = float(file.get_float(a + "rope.scaling.yarn_log_multiplier", 0.0) / 0.1);
    if (!std::isfinite(y.mscale_all_dim) || y.mscale_all_dim < 0.0f)
        fail(error_kind::file_format, "{}: {}rope.scaling.yarn_log_multiplier must be >= 0", file.path(), a);
    // DeepSeek's rope magnitude is mscale / mscale_all_dim = 1: the only one the engine applies.
    const double attn_factor = file.get_float(a + "rope.scaling.attn_factor", 1.0);
    if (attn_factor != 1.0)
        fail(error_kind::unsupported, "{}: {}rope.scaling.attn_factor = {} (only 1 is supported for deepseek2)",
             file.path(), a, attn_factor);
}

}  // namespace

void deepseek2_hparams_read(const gguf_file &file, model_hparams &hp) {
    const std::string a = hp.arch_name + ".";
    read_mla_dims(file, a, hp);
    read_routing(file, a, hp);
    read_rope_scaling(file, a, hp);
    if (file.has(a + "vocab_size")) {
        const gguf_tensor_info &embd = file.tensor("token_embd.weight");
        if (embd.ne.size() == 2 && file.get_int(a + "vocab_size") != embd.ne[1])
            fail(error_kind::file_format, "{}: {}vocab_size = {} but token_embd.weight has {} rows", file.path(), a,
                 file.get_int(a + "vocab_size"), embd.ne[1]);
    }
}

void deepseek2_hparams_write(gguf_writer &w, const model_hparams &hp) {
    const std::string a = "deepseek2.";
    // llama.cpp's current form: one latent KV head, key/value lengths of the cache, the
    // decompressed head sizes in *_mla; n_head_kv == n_head asks for the legacy form instead.
    const bool legacy = hp.n_head_kv == hp.n_head && hp.n_head > 1;
    w.set_string("general.architecture", "deepseek2");
    w.set_u32(a + "block_count", uint32_t(hp.n_layer));
    w.set_u32(a + "context_length", uint32_t(hp.n_ctx_train));
    w.set_u32(a + "embedding_length", uint32_t(hp.d_model));
    w.set_u32(a + "feed_forward_length", uint32_t(hp.d_ff));
    w.set_u32(a + "attention.head_count", uint32_t(hp.n_head));
    w.set_u32(a + "attention.head_count_kv", legacy ? uint32_t(hp.n_head) : 1u);
    w.set_f32(a + "rope.freq_base", hp.rope_theta);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", hp.rms_eps);
    w.set_u32(a + "expert_count", uint32_t(hp.n_expert));
    w.set_u32(a + "expert_used_count", uint32_t(hp.n_expert_used));
    if (hp.n_expert_group > 1) {
        w.set_u32(a + "expert_group_count", uint32_t(hp.n_expert_group));
        w.set_u32(a + "expert_group_used_count", uint32_t(hp.n_expert_group_used));
    }
    w.set_u32(a + "expert_gating_func", uint32_t(hp.gating));
    w.set_u32(a + "leading_dense_block_count", uint32_t(hp.n_dense_lead));
    w.set_u32(a + "vocab_size", uint32_t(hp.n_vocab));
    // Written even as 0: llama.cpp requires the key of models it does not recognise as "lite".
    w.set_u32(a + "attention.q_lora_rank", uint32_t(hp.q_lora_rank));
    w.set_u32(a + "attention.kv_lora_rank", uint32_t(hp.kv_lora_rank));
    if (legacy) {
        w.set_u32(a + "attention.key_length", uint32_t(hp.d_head));
        w.set_u32(a + "attention.value_length", uint32_t(hp.d_head_v));
    } else {
        w.set_u32(a + "attention.key_length", uint32_t(hp.kv_lora_rank + hp.d_rope));
        w.set_u32(a + "attention.value_length", uint32_t(hp.kv_lora_rank));
        w.set_u32(a + "attention.key_length_mla", uint32_t(hp.d_head));
        w.set_u32(a + "attention.value_length_mla", uint32_t(hp.d_head_v));
    }
    w.set_u32(a + "expert_feed_forward_length", uint32_t(hp.d_ff_expert));
    w.set_u32(a + "expert_shared_count", uint32_t(hp.n_expert_shared));
    w.set_f32(a + "expert_weights_scale", hp.expert_weights_scale);
    if (hp.norm_topk) w.set_bool(a + "expert_weights_norm", true);
    w.set_u32(a + "rope.dimension_count", uint32_t(hp.d_rope));
    if (hp.yarn) {
        const rope_yarn &y = hp.yarn_params;
        w.set_string(a + "rope.scaling.type", "yarn");
        w.set_f32(a + "rope.scaling.factor", y.factor);
        w.set_u32(a + "rope.scaling.original_context_length", uint32_t(y.n_ctx_orig));
        if (y.beta_fast != 32.0f) w.set_f32(a + "rope.scaling.yarn_beta_fast", y.beta_fast);
        if (y.beta_slow != 1.0f) w.set_f32(a + "rope.scaling.yarn_beta_slow", y.beta_slow);
        if (y.mscale_all_dim != 0.0f) w.set_f32(a + "rope.scaling.yarn_log_multiplier", 0.1f * y.mscale_all_dim);
    }
}

namespace {

void bind_attention(const gguf_file &file, const model_hparams &hp, const std::string &p, layer_tensors &lt) {
    const int64_t d = hp.d_model, nh = hp.n_head, q_dim = nh * hp.d_head, lora = hp.kv_lora_rank;
    lt.attn_norm = bind(file, p + "attn_norm.weight", {d}, true);
    if (hp.q_lora_rank > 0) {
        lt.wq_a = bind(file, p + "attn_q_a.weight", {d, hp.q_lora_rank}, false);
        lt.q_a_norm = bind(file, p + "attn_q_a_norm.weight", {hp.q_lora_rank}, true);
        lt.wq_b = bind(file, p + "attn_q_b.weight", {hp.q_lora_rank, q_dim}, false);
    } else {
        if (file.find_tensor(p + "attn_q_a.weight"))
            fail(error_kind::file_format, "{}: tensor {}attn_q_a.weight present but deepseek2.attention.q_lora_rank "
                 "is 0 or missing", file.path(), p);
        lt.wq = bind(file, p + "attn_q.weight", {d, q_dim}, false);
    }
    lt.wkv_a = bind(file, p + "attn_kv_a_mqa.weight", {d, lora + hp.d_rope}, false);
    lt.kv_a_norm = bind(file, p + "attn_kv_a_norm.weight", {lora}, true);
    if (file.find_tensor(p + "attn_k_b.weight") || !file.find_tensor(p + "attn_kv_b.weight")) {
        lt.wk_b = bind(file, p + "attn_k_b.weight", {hp.d_nope(), lora, nh}, false);
        lt.wv_b = bind(file, p + "attn_v_b.weight", {lora, hp.d_head_v, nh}, false);
    } else {
        lt.wkv_b = bind(file, p + "attn_kv_b.weight", {lora, nh * (hp.d_nope() + hp.d_head_v)}, false);
    }
    lt.wo = bind(file, p + "attn_output.weight", {nh * hp.d_head_v, d}, false);
}

void bind_ffn(const gguf_file &file, const model_hparams &hp, int32_t layer, const std::string &p, layer_tensors &lt) {
    const int64_t d = hp.d_model, ff = hp.d_ff_expert, ne = hp.n_expert;
    lt.ffn_norm = bind(file, p + "ffn_norm.weight", {d}, true);
    if (layer < hp.n_dense_lead) {
        lt.ffn_gate = bind(file, p + "ffn_gate.weight", {d, hp.d_ff}, false);
        lt.ffn_up = bind(file, p + "ffn_up.weight", {d, hp.d_ff}, false);
        lt.ffn_down = bind(file, p + "ffn_down.weight", {hp.d_ff, d}, false);
        return;
    }
    lt.router = bind(file, p + "ffn_gate_inp.weight", {d, ne}, false);
    if (file.find_tensor(p + "exp_probs_b.bias")) lt.exp_probs_b = bind(file, p + "exp_probs_b.bias", {ne}, true);
    lt.gate_exps = bind(file, p + "ffn_gate_exps.weight", {d, ff, ne}, false);
    lt.up_exps = bind(file, p + "ffn_up_exps.weight", {d, ff, ne}, false);
    lt.down_exps = bind(file, p + "ffn_down_exps.weight", {ff, d, ne}, false);
    const int64_t sh = int64_t(hp.n_expert_shared) * ff;
    if (sh == 0) {
        if (file.find_tensor(p + "ffn_gate_shexp.weight"))
            fail(error_kind::file_format, "{}: tensor {}ffn_gate_shexp.weight present but "
                 "deepseek2.expert_shared_count is 0", file.path(), p);
        return;
    }
    lt.gate_shexp = bind(file, p + "ffn_gate_shexp.weight", {d, sh}, false);
    lt.up_shexp = bind(file, p + "ffn_up_shexp.weight", {d, sh}, false);
    lt.down_shexp = bind(file, p + "ffn_down_shexp.weight", {sh, d}, false);
}

}  // namespace

void deepseek2_tensors_bind(const gguf_file &file, const model_hparams &hp, model_tensors &t) {
    for (int32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        layer_tensors lt;
        bind_attention(file, hp, p, lt);
        bind_ffn(file, hp, l, p, lt);
        t.layers.push_back(lt);
    }
}

}  // namespace tandem::model_detail
