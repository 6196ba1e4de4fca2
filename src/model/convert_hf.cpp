// src/model/convert_hf.cpp - `tandem convert`: a Hugging Face checkpoint folder -> GGUF, with the
// metadata keys, tensor names, shapes and tokenizer arrays that llama.cpp's convert_hf_to_gguf.py
// writes. Picks the architecture; Qwen3MoeForCausalLM is converted here, DeepSeek-V2/V3 in
// convert_deepseek2.cpp. Everything is read and validated before the output file is created.
#include "convert_internal.h"

#include "tandem/error.h"
#include "tandem/model.h"

namespace tandem {

namespace convert_detail {

namespace {

struct qwen_config : hf_common {
    int64_t n_head_kv = 0, d_head = 0, n_expert = 0, n_expert_used = 0, d_ff_expert = 0, d_ff = 0;
};

qwen_config read_qwen_config(const json &cfg, const std::string &path) {
    qwen_config c;
    c.path = path;
    read_common(cfg, c);
    c.n_head_kv = get_int(cfg, c.path, "num_key_value_heads", c.n_head);
    if (c.d_model % c.n_head != 0 && !member(cfg, "head_dim"))
        fail(error_kind::file_format, "{}: hidden_size {} is not a multiple of num_attention_heads {} and no head_dim",
             c.path, c.d_model, c.n_head);
    c.d_head = get_int(cfg, c.path, "head_dim", c.d_model / c.n_head);
    if (c.n_head % c.n_head_kv != 0)
        fail(error_kind::file_format, "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
             c.path, c.n_head, c.n_head_kv);
    if (member(cfg, "num_experts") && member(cfg, "num_local_experts") &&
        get_int(cfg, c.path, "num_experts") != get_int(cfg, c.path, "num_local_experts"))
        fail(error_kind::file_format, "{}: num_experts and num_local_experts disagree", c.path);
    c.n_expert = member(cfg, "num_experts") ? get_int(cfg, c.path, "num_experts")
                                             : get_int(cfg, c.path, "num_local_experts");
    c.n_expert_used = get_int(cfg, c.path, "num_experts_per_tok");
    if (c.n_expert_used > c.n_expert)
        fail(error_kind::file_format, "{}: num_experts_per_tok {} exceeds the {} experts", c.path, c.n_expert_used,
             c.n_expert);
    c.d_ff_expert = get_int(cfg, c.path, "moe_intermediate_size");
    c.d_ff = get_int(cfg, c.path, "intermediate_size", int64_t(0), 0);

    // What the engine cannot run is refused here rather than converted into a wrong model.
    if (get_int(cfg, c.path, "decoder_sparse_step", int64_t(1), 0) != 1)
        fail(error_kind::unsupported, "{}: decoder_sparse_step != 1 (dense layers between MoE layers)", c.path);
    if (const json *mlp_only = member(cfg, "mlp_only_layers"); mlp_only && !(mlp_only->is_array() && mlp_only->empty()))
        fail(error_kind::unsupported, "{}: mlp_only_layers {} is not empty (dense layers)", c.path, mlp_only->dump());
    if (!get_bool(cfg, c.path, "norm_topk_prob", false))
        fail(error_kind::unsupported, "{}: norm_topk_prob false (the engine renormalises the top-k weights)", c.path);
    if (get_bool(cfg, c.path, "attention_bias", false))
        fail(error_kind::unsupported, "{}: attention_bias true", c.path);
    if (get_bool(cfg, c.path, "use_sliding_window", false))
        fail(error_kind::unsupported, "{}: use_sliding_window true", c.path);
    if (c.rope_type == "yarn" && (c.rope_mscale || c.rope_mscale_all_dim))
        fail(error_kind::unsupported, "{}: rope_scaling mscale/mscale_all_dim are DeepSeek's, not Qwen3-MoE's", c.path);
    return c;
}

}  // namespace

// Routed experts one by one as published, or fused as transformers 5 saves them
// (experts.gate_up_proj [E, 2F, D], experts.down_proj [E, D, F]).
void plan_routed_experts(tensor_plan &plan, const std::string &p, const std::string &b, int64_t ne_exp, int64_t f,
                         int64_t d, ggml_type type) {
    std::vector<row_segment> gate, up, down;
    const std::string fused_gu = p + "mlp.experts.gate_up_proj", fused_down = p + "mlp.experts.down_proj";
    if (plan.has(fused_gu) && !plan.has(p + "mlp.experts.0.gate_proj.weight")) {
        const st_tensor &gu = plan.require(fused_gu, {ne_exp, 2 * f, d});
        const st_tensor &dn = plan.require(fused_down, {ne_exp, d, f});
        for (int64_t e = 0; e < ne_exp; ++e) {
            gate.push_back({&gu, e * 2 * f, f});
            up.push_back({&gu, e * 2 * f + f, f});
            down.push_back({&dn, e * d, d});
        }
    } else {
        for (int64_t e = 0; e < ne_exp; ++e) {
            const std::string ep = fmt::format("{}mlp.experts.{}.", p, e);
            gate.push_back(plan.whole(ep + "gate_proj.weight", {f, d}));
            up.push_back(plan.whole(ep + "up_proj.weight", {f, d}));
            down.push_back(plan.whole(ep + "down_proj.weight", {d, f}));
        }
    }
    plan.add(b + "ffn_gate_exps", type, {d, f, ne_exp}, std::move(gate));
    plan.add(b + "ffn_up_exps", type, {d, f, ne_exp}, std::move(up));
    plan.add(b + "ffn_down_exps", type, {f, d, ne_exp}, std::move(down));
}

convert_summary convert_qwen3moe(const convert_options &opts, const fs::path &dir, const json &cfg) {
    const qwen_config c = read_qwen_config(cfg, (dir / "config.json").string());
    const hf_vocab voc = read_vocab(dir, c);
    const safetensors_set st = safetensors_set::open_dir(dir.string());
    const ggml_type expert_type = opts.expert_type.value_or(opts.type);
    convert_summary sum;
    sum.arch = "qwen3moe";
    sum.n_vocab = c.n_vocab;
    sum.n_tokenizer = voc.n_tokenizer;
    sum.file_type = llama_ftype(expert_type);

    tensor_plan plan(st, sum, 0);
    auto one = [&](const std::string &gg, ggml_type t, std::vector<int64_t> ne, const std::string &hf) {
        const std::vector<int64_t> shape(ne.rbegin(), ne.rend());
        plan.add(gg, t, std::move(ne), {plan.whole(hf, shape)});
    };
    const int64_t d = c.d_model, v = c.n_vocab, q_dim = c.n_head * c.d_head, kv_dim = c.n_head_kv * c.d_head;
    one("token_embd", opts.type, {d, v}, "model.embed_tokens.weight");
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
        one(b + "attn_norm", ggml_type::f32, {d}, p + "input_layernorm.weight");
        one(b + "attn_q", opts.type, {d, q_dim}, p + "self_attn.q_proj.weight");
        one(b + "attn_k", opts.type, {d, kv_dim}, p + "self_attn.k_proj.weight");
        one(b + "attn_v", opts.type, {d, kv_dim}, p + "self_attn.v_proj.weight");
        one(b + "attn_output", opts.type, {q_dim, d}, p + "self_attn.o_proj.weight");
        one(b + "attn_q_norm", ggml_type::f32, {c.d_head}, p + "self_attn.q_norm.weight");
        one(b + "attn_k_norm", ggml_type::f32, {c.d_head}, p + "self_attn.k_norm.weight");
        one(b + "ffn_norm", ggml_type::f32, {d}, p + "post_attention_layernorm.weight");
        one(b + "ffn_gate_inp", ggml_type::f32, {d, c.n_expert}, p + "mlp.gate.weight");
        plan_routed_experts(plan, p, b, c.n_expert, c.d_ff_expert, d, expert_type);
    }
    one("output_norm", ggml_type::f32, {d}, "model.norm.weight");
    if (!c.tied) {
        one("output", opts.type, {d, v}, "lm_head.weight");
    } else if (plan.has("lm_head.weight")) {
        plan.mark_used("lm_head.weight");  // a tied copy: llama.cpp drops it too
    }
    plan.check_all_used([](const std::string &) { return false; },
                        fmt::format("a Qwen3-MoE model (layer count {}?)", c.n_layer));

    // Metadata, in the order and with the value types of llama.cpp's converter.
    gguf_writer w;
    const std::string arch = "qwen3moe";
    model_hparams hp;
    hp.arch_name = arch;
    hp.n_layer = int32_t(c.n_layer);
    hp.d_model = int32_t(c.d_model);
    hp.n_head = int32_t(c.n_head);
    hp.n_head_kv = int32_t(c.n_head_kv);
    hp.d_head = hp.d_head_v = int32_t(c.d_head);
    hp.n_expert = int32_t(c.n_expert);
    hp.n_expert_used = int32_t(c.n_expert_used);
    hp.d_ff_expert = int32_t(c.d_ff_expert);
    hp.n_ctx_train = int32_t(c.n_ctx);
    hp.rms_eps = float(c.rms_eps);
    hp.rope_theta = float(c.rope_theta);
    model_hparams_write(w, hp, int32_t(c.d_ff));
    w.set_string("general.type", "model");
    w.set_string("general.name", model_name(opts, dir));
    if (c.rope_type != "default") {
        w.set_string(arch + ".rope.scaling.type", c.rope_type);
        w.set_f32(arch + ".rope.scaling.factor", float(c.rope_factor));
        if (c.rope_type == "yarn" && c.rope_orig_ctx > 0)
            w.set_u32(arch + ".rope.scaling.original_context_length", uint32_t(c.rope_orig_ctx));
    }
    w.set_u32("general.file_type", sum.file_type);
    w.set_u32("general.quantization_version", 2);
    write_model(w, voc, "qwen2", plan, opts, sum);
    return sum;
}

}  // namespace convert_detail

namespace {

void check_out_type(ggml_type t, const char *flag) {
    switch (t) {
    case ggml_type::f32: case ggml_type::f16: case ggml_type::bf16:
    case ggml_type::q8_0: case ggml_type::q4_k: case ggml_type::q6_k: return;
    default:
        fail(error_kind::config, "{} {}: the converter writes f32, f16, bf16, q8_0, q4_k or q6_k", flag,
             ggml_type_name(t));
    }
}

// The architecture config.json names (or, when transformers 5 left `architectures` null, its model_type).
std::string hf_architecture(const nlohmann::json &cfg, const std::string &path) {
    using convert_detail::member;
    static const std::pair<const char *, const char *> known[] = {{"Qwen3MoeForCausalLM", "qwen3_moe"},
                                                                  {"DeepseekV2ForCausalLM", "deepseek_v2"},
                                                                  {"DeepseekV3ForCausalLM", "deepseek_v3"}};
    const nlohmann::json *archs = member(cfg, "architectures");
    if (archs && !(archs->is_array() && archs->empty())) {
        if (!archs->is_array()) fail(error_kind::file_format, "{}: 'architectures' must be a list", path);
        for (const nlohmann::json &a : *archs)
            for (const auto &[name, type] : known)
                if (a.is_string() && a.get<std::string>() == name) return name;
        fail(error_kind::unsupported, "{}: architecture {} is not supported (Qwen3MoeForCausalLM, "
             "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM)", path, archs->dump());
    }
    const nlohmann::json *mt = member(cfg, "model_type");
    for (const auto &[name, type] : known)
        if (mt && mt->is_string() && mt->get<std::string>() == type) return name;
    fail(error_kind::unsupported, "{}: no 'architectures' and model_type {} is not qwen3_moe, deepseek_v2 or "
         "deepseek_v3", path, mt ? mt->dump() : "missing");
}

}  // namespace

ggml_type convert_fit_type(ggml_type wanted, int64_t row_len) {
    if ((wanted == ggml_type::q4_k || wanted == ggml_type::q6_k) && row_len % qk_k != 0) wanted = ggml_type::q8_0;
    if (wanted == ggml_type::q8_0 && row_len % qk8_0 != 0) wanted = ggml_type::f16;
    return wanted;
}

convert_summary convert_hf(const convert_options &opts) {
    check_out_type(opts.type, "--type");
    check_out_type(opts.expert_type.value_or(opts.type), "--expert-type");
    if (opts.out_path.empty()) fail(error_kind::config, "--out: no output path");
    const convert_detail::fs::path dir(opts.hf_dir);
    if (!convert_detail::fs::is_directory(dir)) fail(error_kind::config, "--hf {}: not a folder", opts.hf_dir);
    const convert_detail::fs::path p = dir / "config.json";
    if (!convert_detail::fs::exists(p)) fail(error_kind::file_format, "{}: missing", p.string());
    const nlohmann::json cfg = convert_detail::read_json_file(p);
    if (!cfg.is_object()) fail(error_kind::file_format, "{}: not a JSON object", p.string());
    const std::string arch = hf_architecture(cfg, p.string());
    if (arch == "Qwen3MoeForCausalLM") return convert_detail::convert_qwen3moe(opts, dir, cfg);
    return convert_detail::convert_deepseek2(opts, dir, cfg);
}

}  // namespace tandem
