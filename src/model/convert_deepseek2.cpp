// src/model/convert_deepseek2.cpp - DeepseekV2ForCausalLM / DeepseekV3ForCausalLM folders (bf16, f16,
// f32, or DeepSeek's FP8 with weight_scale_inv blocks) -> deepseek2 GGUF as llama.cpp's converter
// writes it: MLA keys in the current form, kv_b_proj split into attn_k_b (transposed) and attn_v_b,
// the selection bias as exp_probs_b.bias, multi-token-prediction layers left out.
#include "convert_internal.h"

#include "tandem/error.h"
#include "tandem/log.h"
#include "tandem/model.h"

#include <algorithm>
#include <cmath>

namespace tandem::convert_detail {

namespace {

struct deepseek_config : hf_common {
    bool v3 = false;
    int64_t q_lora = 0, kv_lora = 0, nope = 0, rope = 0, dv = 0;
    int64_t n_expert = 0, n_used = 0, n_shared = 0, d_ff_expert = 0, d_ff = 0, n_dense = 0;
    int64_t n_group = 1, n_group_used = 1, n_nextn = 0;
    bool sigmoid = false, norm_topk = false;
    double scale = 1.0;
};

int64_t get_count(const json &cfg, const std::string &path, const char *key, int64_t fallback) {
    return member(cfg, key) ? get_int(cfg, path, key, {}, 0) : fallback;
}

void read_routing(const json &cfg, deepseek_config &c) {
    if (member(cfg, "n_routed_experts") && member(cfg, "num_local_experts") &&
        get_int(cfg, c.path, "n_routed_experts") != get_int(cfg, c.path, "num_local_experts"))
        fail(error_kind::file_format, "{}: n_routed_experts and num_local_experts disagree", c.path);
    c.n_expert = member(cfg, "n_routed_experts") ? get_int(cfg, c.path, "n_routed_experts")
                                                  : get_int(cfg, c.path, "num_local_experts");
    c.n_used = get_int(cfg, c.path, "num_experts_per_tok");
    c.n_shared = get_count(cfg, c.path, "n_shared_experts", 0);
    c.d_ff_expert = get_int(cfg, c.path, "moe_intermediate_size");
    c.n_dense = get_count(cfg, c.path, "first_k_dense_replace", 0);
    c.d_ff = c.n_dense > 0 ? get_int(cfg, c.path, "intermediate_size") : get_count(cfg, c.path, "intermediate_size", 0);
    c.n_group = std::max<int64_t>(1, get_count(cfg, c.path, "n_group", 1));
    c.n_group_used = std::max<int64_t>(1, get_count(cfg, c.path, "topk_group", 1));
    c.n_nextn = get_count(cfg, c.path, "num_nextn_predict_layers", 0);
    c.norm_topk = get_bool(cfg, c.path, "norm_topk_prob", false);
    c.scale = get_num(cfg, c.path, "routed_scaling_factor", 1.0);
    if (get_count(cfg, c.path, "moe_layer_freq", 1) != 1)
        fail(error_kind::unsupported, "{}: moe_layer_freq != 1 (dense layers between MoE layers)", c.path);
    // The reference modelings score DeepSeek-V2 by softmax and V3 by sigmoid; scoring_func says so when given.
    const json *scoring = member(cfg, "scoring_func");
    const std::string score = scoring && scoring->is_string() ? scoring->get<std::string>() : (c.v3 ? "sigmoid" : "softmax");
    if (score != "sigmoid" && score != "softmax")
        fail(error_kind::unsupported, "{}: scoring_func '{}' is not supported (softmax, sigmoid)", c.path, score);
    c.sigmoid = score == "sigmoid";
    const json *method = member(cfg, "topk_method");
    const std::string topk = method && method->is_string() ? method->get<std::string>() : (c.v3 ? "noaux_tc" : "greedy");
    if (topk != "greedy" && topk != "group_limited_greedy" && topk != "noaux_tc")
        fail(error_kind::unsupported, "{}: topk_method '{}' is not supported (greedy, group_limited_greedy, noaux_tc)",
             c.path, topk);
    if (topk == "group_limited_greedy" && c.n_group > 1)
        log_warn("convert: {}: topk_method group_limited_greedy ranks groups by their best expert; deepseek2 files "
                 "rank them by their two best, as llama.cpp does", c.path);
}

void read_yarn(deepseek_config &c) {
    if (c.rope_type == "default") return;
    if (c.rope_type != "yarn")
        fail(error_kind::unsupported, "{}: rope scaling '{}' is not supported for DeepSeek (default, yarn)", c.path,
             c.rope_type);
    if (c.rope_orig_ctx <= 0)
        fail(error_kind::file_format, "{}: yarn rope scaling needs original_max_position_embeddings", c.path);
    // The rope magnitude is mscale / mscale_all_dim: only DeepSeek's published 1 (equal values) is kept.
    if (c.rope_mscale.value_or(-1.0) != c.rope_mscale_all_dim.value_or(-2.0))
        fail(error_kind::unsupported, "{}: yarn with mscale {} and mscale_all_dim {}: only equal values are supported",
             c.path, c.rope_mscale ? fmt::format("{}", *c.rope_mscale) : "missing",
             c.rope_mscale_all_dim ? fmt::format("{}", *c.rope_mscale_all_dim) : "missing");
    // transformers derives the factor from the context lengths; a config where they disagree is ambiguous.
    const double ratio = double(c.n_ctx) / double(c.rope_orig_ctx);
    if (std::abs(ratio - c.rope_factor) > 1e-6 * c.rope_factor)
        fail(error_kind::file_format, "{}: max_position_embeddings / original_max_position_embeddings = {} but "
             "rope_scaling factor is {}", c.path, ratio, c.rope_factor);
}

deepseek_config read_config(const json &cfg, const std::string &path, bool v3) {
    deepseek_config c;
    c.path = path;
    c.v3 = v3;
    read_common(cfg, c);
    c.q_lora = get_count(cfg, c.path, "q_lora_rank", 0);
    c.kv_lora = get_int(cfg, c.path, "kv_lora_rank");
    c.nope = get_int(cfg, c.path, "qk_nope_head_dim");
    c.rope = get_int(cfg, c.path, "qk_rope_head_dim");
    c.dv = get_int(cfg, c.path, "v_head_dim");
    if (c.rope % 2 != 0) fail(error_kind::file_format, "{}: qk_rope_head_dim {} must be even", c.path, c.rope);
    if (get_bool(cfg, c.path, "attention_bias", false))
        fail(error_kind::unsupported, "{}: attention_bias true", c.path);
    read_routing(cfg, c);
    read_yarn(c);
    if (c.n_used > c.n_expert)
        fail(error_kind::file_format, "{}: num_experts_per_tok {} exceeds the {} experts", c.path, c.n_used, c.n_expert);
    if (c.n_expert % c.n_group != 0 || c.n_group_used > c.n_group)
        fail(error_kind::file_format, "{}: n_group {} must divide n_routed_experts {} and be >= topk_group {}", c.path,
             c.n_group, c.n_expert, c.n_group_used);
    if (c.n_dense > c.n_layer)
        fail(error_kind::file_format, "{}: first_k_dense_replace {} exceeds num_hidden_layers {}", c.path, c.n_dense,
             c.n_layer);
    return c;
}

model_hparams hparams_of(const deepseek_config &c, const hf_vocab &voc) {
    model_hparams hp;
    hp.arch = model_arch::deepseek2;
    hp.arch_name = "deepseek2";
    hp.n_layer = int32_t(c.n_layer);
    hp.d_model = int32_t(c.d_model);
    hp.n_head = int32_t(c.n_head);
    hp.n_head_kv = 1;
    hp.d_head = int32_t(c.nope + c.rope);
    hp.d_head_v = int32_t(c.dv);
    hp.n_expert = int32_t(c.n_expert);
    hp.n_expert_used = int32_t(c.n_used);
    hp.d_ff_expert = int32_t(c.d_ff_expert);
    hp.n_vocab = int32_t(voc.tokens.size());
    hp.n_ctx_train = int32_t(c.n_ctx);
    hp.rms_eps = float(c.rms_eps);
    hp.rope_theta = float(c.rope_theta);
    hp.norm_topk = c.norm_topk;
    hp.q_lora_rank = int32_t(c.q_lora);
    hp.kv_lora_rank = int32_t(c.kv_lora);
    hp.d_rope = int32_t(c.rope);
    hp.n_expert_shared = int32_t(c.n_shared);
    hp.n_dense_lead = int32_t(c.n_dense);
    hp.d_ff = int32_t(c.d_ff);
    hp.n_expert_group = int32_t(c.n_group);
    hp.n_expert_group_used = int32_t(c.n_group_used);
    hp.gating = c.sigmoid ? expert_gating::sigmoid : expert_gating::softmax;
    hp.expert_weights_scale = float(c.scale);
    if (c.rope_type == "yarn") {
        hp.yarn = true;
        hp.yarn_params.factor = float(c.rope_factor);
        hp.yarn_params.n_ctx_orig = int32_t(c.rope_orig_ctx);
        hp.yarn_params.beta_fast = float(c.rope_beta_fast.value_or(32.0));
        hp.yarn_params.beta_slow = float(c.rope_beta_slow.value_or(1.0));
        hp.yarn_params.mscale_all_dim = float(c.rope_mscale_all_dim.value_or(0.0));
    }
    return hp;
}

// tokenizer.ggml.pre from tokenizer.json's split regexes (llama.cpp names them by a hash of their output).
std::string tokenizer_pre(const json &pre, const std::string &path) {
    const std::string text = pre.dump();
    if (text.find("\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+") != std::string::npos) return "qwen2";
    if (text.find("\\\\p{N}{1,3}") != std::string::npos && text.find("\xe4\xb8\x80-\xe9\xbe\xa5") != std::string::npos)
        return "deepseek-v3";
    if (text.find("\\\\s?[A-Za-z\xc2\xb5") != std::string::npos) return "deepseek-llm";
    fail(error_kind::unsupported, "{}/tokenizer.json: pre-tokenizer not recognised (qwen2, deepseek-v3 or "
         "deepseek-llm splits)", path);
}

struct layer_planner {
    tensor_plan &plan;
    const deepseek_config &c;
    ggml_type type, expert_type;

    void one(const std::string &gg, ggml_type t, std::vector<int64_t> ne, const std::string &hf) {
        const std::vector<int64_t> shape(ne.rbegin(), ne.rend());
        plan.add(gg, t, std::move(ne), {plan.whole(hf, shape)});
    }

    void attention(const std::string &p, const std::string &b) {
        const int64_t d = c.d_model, nh = c.n_head, q_dim = nh * (c.nope + c.rope), per_head = c.nope + c.dv;
        one(b + "attn_norm", ggml_type::f32, {d}, p + "input_layernorm.weight");
        if (c.q_lora > 0) {
            one(b + "attn_q_a", type, {d, c.q_lora}, p + "self_attn.q_a_proj.weight");
            one(b + "attn_q_a_norm", ggml_type::f32, {c.q_lora}, p + "self_attn.q_a_layernorm.weight");
            one(b + "attn_q_b", type, {c.q_lora, q_dim}, p + "self_attn.q_b_proj.weight");
        } else {
            one(b + "attn_q", type, {d, q_dim}, p + "self_attn.q_proj.weight");
        }
        one(b + "attn_kv_a_mqa", type, {d, c.kv_lora + c.rope}, p + "self_attn.kv_a_proj_with_mqa.weight");
        one(b + "attn_kv_a_norm", ggml_type::f32, {c.kv_lora}, p + "self_attn.kv_a_layernorm.weight");
        // kv_b_proj rows: per head nope key rows, then dv value rows, each over the latent.
        const row_segment kv_b = plan.whole(p + "self_attn.kv_b_proj.weight", {nh * per_head, c.kv_lora});
        std::vector<row_segment> k_b, v_b;
        for (int64_t h = 0; h < nh; ++h) {
            row_segment k = kv_b, v = kv_b;
            k.first_row = h * per_head, k.n_rows = c.nope, k.transpose = true;
            v.first_row = h * per_head + c.nope, v.n_rows = c.dv;
            k_b.push_back(k);
            v_b.push_back(v);
        }
        plan.add(b + "attn_k_b", type, {c.nope, c.kv_lora, nh}, std::move(k_b));
        plan.add(b + "attn_v_b", type, {c.kv_lora, c.dv, nh}, std::move(v_b));
        one(b + "attn_output", type, {nh * c.dv, d}, p + "self_attn.o_proj.weight");
    }

    void ffn(const std::string &p, const std::string &b, int64_t layer) {
        const int64_t d = c.d_model;
        one(b + "ffn_norm", ggml_type::f32, {d}, p + "post_attention_layernorm.weight");
        if (layer < c.n_dense) {
            one(b + "ffn_gate", type, {d, c.d_ff}, p + "mlp.gate_proj.weight");
            one(b + "ffn_up", type, {d, c.d_ff}, p + "mlp.up_proj.weight");
            one(b + "ffn_down", type, {c.d_ff, d}, p + "mlp.down_proj.weight");
            return;
        }
        one(b + "ffn_gate_inp", ggml_type::f32, {d, c.n_expert}, p + "mlp.gate.weight");
        if (plan.has(p + "mlp.gate.e_score_correction_bias"))
            one(b + "exp_probs_b.bias", ggml_type::f32, {c.n_expert}, p + "mlp.gate.e_score_correction_bias");
        plan_routed_experts(plan, p, b, c.n_expert, c.d_ff_expert, d, expert_type);
        if (c.n_shared == 0) return;
        const int64_t sh = c.n_shared * c.d_ff_expert;
        one(b + "ffn_gate_shexp", type, {d, sh}, p + "mlp.shared_experts.gate_proj.weight");
        one(b + "ffn_up_shexp", type, {d, sh}, p + "mlp.shared_experts.up_proj.weight");
        one(b + "ffn_down_shexp", type, {sh, d}, p + "mlp.shared_experts.down_proj.weight");
    }
};

// A multi-token-prediction layer (index >= num_hidden_layers) that llama.cpp leaves out too.
bool is_nextn_tensor(const std::string &name, const deepseek_config &c) {
    if (c.n_nextn == 0 || !name.starts_with("model.layers.")) return false;
    const size_t dot = name.find('.', 13);
    const std::string index = name.substr(13, dot == std::string::npos ? std::string::npos : dot - 13);
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos || index.size() > 6) return false;
    const int64_t l = std::stoll(index);
    return l >= c.n_layer && l < c.n_layer + c.n_nextn;
}

}  // namespace

convert_summary convert_deepseek2(const convert_options &opts, const fs::path &dir, const json &cfg) {
    const std::string path = (dir / "config.json").string();
    const json *archs = member(cfg, "architectures");
    const json *mt = member(cfg, "model_type");
    const bool v3 = (archs && archs->dump().find("DeepseekV3ForCausalLM") != std::string::npos) ||
                    (!archs && mt && mt->is_string() && mt->get<std::string>() == "deepseek_v3");
    const deepseek_config c = read_config(cfg, path, v3);
    const hf_vocab voc = read_vocab(dir, c);
    const std::string pre = tokenizer_pre(voc.pre_tokenizer, dir.string());
    const safetensors_set st = safetensors_set::open_dir(dir.string());
    const ggml_type expert_type = opts.expert_type.value_or(opts.type);
    convert_summary sum;
    sum.arch = "deepseek2";
    sum.n_vocab = c.n_vocab;
    sum.n_tokenizer = voc.n_tokenizer;
    sum.file_type = llama_ftype(expert_type);

    tensor_plan plan(st, sum, fp8_block_size(cfg, path));
    layer_planner lp{plan, c, opts.type, expert_type};
    const int64_t d = c.d_model, v = c.n_vocab;
    lp.one("token_embd", opts.type, {d, v}, "model.embed_tokens.weight");
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
        lp.attention(p, b);
        lp.ffn(p, b, l);
    }
    lp.one("output_norm", ggml_type::f32, {d}, "model.norm.weight");
    if (!c.tied) {
        lp.one("output", opts.type, {d, v}, "lm_head.weight");
    } else if (plan.has("lm_head.weight")) {
        plan.mark_used("lm_head.weight");  // a tied copy: llama.cpp drops it too
    }
    plan.check_all_used([&](const std::string &name) { return is_nextn_tensor(name, c); },
                        fmt::format("a DeepSeek model of {} layers", c.n_layer));

    gguf_writer w;
    model_hparams_write(w, hparams_of(c, voc), int32_t(c.d_ff));
    w.set_string("general.type", "model");
    w.set_string("general.name", model_name(opts, dir));
    w.set_u32("general.file_type", sum.file_type);
    w.set_u32("general.quantization_version", 2);
    write_model(w, voc, pre, plan, opts, sum);
    return sum;
}

}  // namespace tandem::convert_detail
