// tests/unit/convert/test_convert_deepseek2.cpp - `tandem convert` on DeepSeek-V2/V3 folders built
// here: the deepseek2 keys and tensors llama.cpp writes (attn_k_b transposed from kv_b_proj,
// exp_probs_b.bias, shared experts, dense layers), FP8 checkpoints dequantised by their blocks,
// multi-token-prediction layers left out, and the refusals that name the key or tensor.
#include "convert_test_util.h"

#include "tandem/convert.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace convert_test;
using tandem::error_kind;
using tandem::ggml_type;

namespace {

struct ds_spec {
    bool v3 = true;                     // q LoRA, sigmoid + bias, groups, YaRN; else V2-Lite's layout
    int64_t d_model = 32, n_layer = 3, n_head = 2, q_lora = 16, kv_lora = 8, nope = 4, rope = 4, dv = 6;
    int64_t n_expert = 8, n_used = 2, n_shared = 1, d_ff_expert = 8, d_ff = 24, n_dense = 1, n_vocab = 16;
    int64_t n_nextn = 0;                // extra model.layers.N tensors of a multi-token-prediction layer
};

// HF tensors of a tiny DeepSeek model, as published (per-expert).
tiny_model make_ds_model(const ds_spec &s, uint32_t seed) {
    tiny_model m;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto add = [&](const std::string &name, std::vector<int64_t> shape, float offset = 0.0f) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        for (float &x : v) x = offset + 0.1f * normal(rng);
        m.shapes[name] = std::move(shape);
        m.values[name] = std::move(v);
        m.order.push_back(name);
    };
    const int64_t d = s.d_model, nh = s.n_head, dk = s.nope + s.rope;
    add("model.embed_tokens.weight", {s.n_vocab, d});
    for (int64_t l = 0; l < s.n_layer + s.n_nextn; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {d}, 1.0f);
        if (s.q_lora > 0) {
            add(p + "self_attn.q_a_proj.weight", {s.q_lora, d});
            add(p + "self_attn.q_a_layernorm.weight", {s.q_lora}, 1.0f);
            add(p + "self_attn.q_b_proj.weight", {nh * dk, s.q_lora});
        } else {
            add(p + "self_attn.q_proj.weight", {nh * dk, d});
        }
        add(p + "self_attn.kv_a_proj_with_mqa.weight", {s.kv_lora + s.rope, d});
        add(p + "self_attn.kv_a_layernorm.weight", {s.kv_lora}, 1.0f);
        add(p + "self_attn.kv_b_proj.weight", {nh * (s.nope + s.dv), s.kv_lora});
        add(p + "self_attn.o_proj.weight", {d, nh * s.dv});
        add(p + "post_attention_layernorm.weight", {d}, 1.0f);
        if (l < s.n_dense) {
            add(p + "mlp.gate_proj.weight", {s.d_ff, d});
            add(p + "mlp.up_proj.weight", {s.d_ff, d});
            add(p + "mlp.down_proj.weight", {d, s.d_ff});
            continue;
        }
        add(p + "mlp.gate.weight", {s.n_expert, d});
        if (s.v3) add(p + "mlp.gate.e_score_correction_bias", {s.n_expert});
        for (int64_t e = 0; e < s.n_expert; ++e) {
            const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
            add(ep + "gate_proj.weight", {s.d_ff_expert, d});
            add(ep + "up_proj.weight", {s.d_ff_expert, d});
            add(ep + "down_proj.weight", {d, s.d_ff_expert});
        }
        const int64_t sh = s.n_shared * s.d_ff_expert;
        add(p + "mlp.shared_experts.gate_proj.weight", {sh, d});
        add(p + "mlp.shared_experts.up_proj.weight", {sh, d});
        add(p + "mlp.shared_experts.down_proj.weight", {d, sh});
    }
    add("model.norm.weight", {d}, 1.0f);
    add("lm_head.weight", {s.n_vocab, d});
    return m;
}

json ds_config(const ds_spec &s) {
    json c = {
        {"architectures", {s.v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"}},
        {"model_type", s.v3 ? "deepseek_v3" : "deepseek_v2"}, {"hidden_size", s.d_model},
        {"num_hidden_layers", s.n_layer}, {"num_attention_heads", s.n_head}, {"num_key_value_heads", s.n_head},
        {"q_lora_rank", s.q_lora > 0 ? json(s.q_lora) : json(nullptr)}, {"kv_lora_rank", s.kv_lora},
        {"qk_nope_head_dim", s.nope}, {"qk_rope_head_dim", s.rope}, {"v_head_dim", s.dv},
        {"n_routed_experts", s.n_expert}, {"num_experts_per_tok", s.n_used}, {"n_shared_experts", s.n_shared},
        {"moe_intermediate_size", s.d_ff_expert}, {"intermediate_size", s.d_ff}, {"first_k_dense_replace", s.n_dense},
        {"vocab_size", s.n_vocab}, {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", false}, {"hidden_act", "silu"},
        {"bos_token_id", 7}, {"eos_token_id", 9}, {"rope_theta", 10000.0}, {"moe_layer_freq", 1},
    };
    if (s.v3) {
        c.update({{"n_group", 4}, {"topk_group", 2}, {"topk_method", "noaux_tc"}, {"scoring_func", "sigmoid"},
                  {"norm_topk_prob", true}, {"routed_scaling_factor", 2.5}, {"max_position_embeddings", 4096},
                  {"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024},
                                    {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}}});
    } else {
        c.update({{"n_group", 1}, {"topk_group", 1}, {"topk_method", "greedy"}, {"norm_topk_prob", false},
                  {"routed_scaling_factor", 1.0}, {"max_position_embeddings", 2048}, {"rope_scaling", nullptr}});
    }
    if (s.n_nextn > 0) c["num_nextn_predict_layers"] = s.n_nextn;
    return c;
}

// tokenizer_json's vocabulary with DeepSeek-V3's split regexes.
json ds_tokenizer() {
    json tok = tokenizer_json(false);
    const json split = [](const char *pattern) {
        return json{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
    }("\\p{N}{1,3}");
    json cjk = split;
    cjk["pattern"]["Regex"] = "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+";
    tok["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", {split, cjk, {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                            {"use_regex", false}}}}};
    return tok;
}

void write_ds_folder(const fs::path &dir, tiny_model &m, const ds_spec &s, const std::string &dtype) {
    write_json(dir / "config.json", ds_config(s));
    write_json(dir / "tokenizer.json", ds_tokenizer());
    write_json(dir / "tokenizer_config.json", {{"add_bos_token", true}, {"bos_token", "<|endoftext|>"},
                                               {"eos_token", "<|im_end|>"}});
    std::vector<st_entry> all;
    for (const std::string &name : m.order)
        all.push_back({name, name.ends_with("e_score_correction_bias") ? "F32" : dtype, m.shapes[name],
                       encode(m.values[name], name.ends_with("e_score_correction_bias") ? "F32" : dtype)});
    write_safetensors(dir / "model.safetensors", all);
}

std::shared_ptr<const tandem::gguf_file> convert(const fs::path &hf, ggml_type type) {
    tandem::convert_options o;
    o.hf_dir = hf.string();
    o.out_path = (hf.parent_path() / (hf.filename().string() + ".gguf")).string();
    o.type = type;
    o.n_threads = 2;
    tandem::convert_hf(o);
    return tandem::gguf_file::open(o.out_path);
}

std::vector<float> f32_values(const tandem::gguf_file &f, const std::string &name) {
    const tandem::gguf_tensor_info &t = f.tensor(name);
    REQUIRE(t.type == ggml_type::f32);
    const float *p = reinterpret_cast<const float *>(t.data);
    return {p, p + t.n_bytes / 4};
}

// The expected GGUF data of attn_k_b: per head h, per latent dim c, the nope key rows' column c.
std::vector<float> expected_k_b(const std::vector<float> &kv_b, const ds_spec &s) {
    std::vector<float> out;
    for (int64_t h = 0; h < s.n_head; ++h)
        for (int64_t c = 0; c < s.kv_lora; ++c)
            for (int64_t j = 0; j < s.nope; ++j) out.push_back(kv_b[size_t((h * (s.nope + s.dv) + j) * s.kv_lora + c)]);
    return out;
}

std::vector<float> expected_v_b(const std::vector<float> &kv_b, const ds_spec &s) {
    std::vector<float> out;
    for (int64_t h = 0; h < s.n_head; ++h)
        for (int64_t i = 0; i < s.dv; ++i)
            for (int64_t c = 0; c < s.kv_lora; ++c)
                out.push_back(kv_b[size_t((h * (s.nope + s.dv) + s.nope + i) * s.kv_lora + c)]);
    return out;
}

}  // namespace

TEST_CASE("convert deepseek2: a DeepSeek-V3 folder gets llama.cpp's keys and tensors, values exact", "[convert][deepseek2]") {
    temp_dir tmp("ds3");
    ds_spec s;
    s.n_nextn = 1;  // an MTP layer, left out as llama.cpp leaves it out
    tiny_model m = make_ds_model(s, 11);
    const fs::path hf = tmp.path / "v3";
    fs::create_directories(hf);
    write_ds_folder(hf, m, s, "F32");
    auto f = convert(hf, ggml_type::f32);

    const std::string a = "deepseek2.";
    CHECK(f->get_string("general.architecture") == "deepseek2");
    CHECK(f->get_string("tokenizer.ggml.pre") == "deepseek-v3");
    CHECK(f->get_int(a + "block_count") == s.n_layer);
    CHECK(f->get_int(a + "leading_dense_block_count") == s.n_dense);
    CHECK(f->get_int(a + "feed_forward_length") == s.d_ff);
    CHECK(f->get_int(a + "attention.head_count_kv") == 1);
    CHECK(f->get_int(a + "attention.q_lora_rank") == s.q_lora);
    CHECK(f->get_int(a + "attention.kv_lora_rank") == s.kv_lora);
    CHECK(f->get_int(a + "attention.key_length") == s.kv_lora + s.rope);
    CHECK(f->get_int(a + "attention.value_length") == s.kv_lora);
    CHECK(f->get_int(a + "attention.key_length_mla") == s.nope + s.rope);
    CHECK(f->get_int(a + "attention.value_length_mla") == s.dv);
    CHECK(f->get_int(a + "rope.dimension_count") == s.rope);
    CHECK(f->get_int(a + "expert_shared_count") == s.n_shared);
    CHECK(f->get_int(a + "expert_gating_func") == 2);
    CHECK(f->get_int(a + "expert_group_count") == 4);
    CHECK(f->get_int(a + "expert_group_used_count") == 2);
    CHECK(f->get_bool(a + "expert_weights_norm", false));
    CHECK(f->get_float(a + "expert_weights_scale") == Approx(2.5));
    CHECK(f->get_int(a + "vocab_size") == s.n_vocab);
    CHECK(f->get_string(a + "rope.scaling.type") == "yarn");
    CHECK(f->get_float(a + "rope.scaling.factor") == Approx(4.0));
    CHECK(f->get_int(a + "rope.scaling.original_context_length") == 1024);
    CHECK(f->get_float(a + "rope.scaling.yarn_log_multiplier") == Approx(0.1));
    CHECK_FALSE(f->find_tensor("blk.3.attn_norm.weight"));  // the MTP layer

    const tandem::model_hparams hp = tandem::model_hparams_read(*f);
    CHECK(hp.arch == tandem::model_arch::deepseek2);
    CHECK(hp.yarn_params.mscale_all_dim == Approx(1.0f));
    const tandem::model_tensors t = tandem::model_tensors_bind(*f, hp);
    REQUIRE(t.layers.size() == size_t(s.n_layer));
    CHECK(t.layers[0].ffn_gate);
    CHECK(t.layers[1].exp_probs_b);
    CHECK(t.layers[2].gate_shexp);

    for (int64_t l = 0; l < s.n_layer; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
        INFO("layer " << l);
        const auto &kv_b = m.values.at(p + "self_attn.kv_b_proj.weight");
        CHECK(f32_values(*f, b + "attn_k_b.weight") == expected_k_b(kv_b, s));
        CHECK(f32_values(*f, b + "attn_v_b.weight") == expected_v_b(kv_b, s));
        CHECK(f32_values(*f, b + "attn_q_a.weight") == m.values.at(p + "self_attn.q_a_proj.weight"));
        CHECK(f32_values(*f, b + "attn_kv_a_mqa.weight") == m.values.at(p + "self_attn.kv_a_proj_with_mqa.weight"));
        if (l < s.n_dense) {
            CHECK(f32_values(*f, b + "ffn_down.weight") == m.values.at(p + "mlp.down_proj.weight"));
            continue;
        }
        CHECK(f32_values(*f, b + "exp_probs_b.bias") == m.values.at(p + "mlp.gate.e_score_correction_bias"));
        CHECK(f32_values(*f, b + "ffn_up_shexp.weight") == m.values.at(p + "mlp.shared_experts.up_proj.weight"));
        const std::vector<float> down = f32_values(*f, b + "ffn_down_exps.weight");
        const auto &e5 = m.values.at(p + "mlp.experts.5.down_proj.weight");
        CHECK(std::equal(e5.begin(), e5.end(), down.begin() + 5 * s.d_model * s.d_ff_expert));
    }
}

TEST_CASE("convert deepseek2: a DeepSeek-V2-Lite folder: plain q, softmax, no groups or bias", "[convert][deepseek2]") {
    temp_dir tmp("ds2");
    ds_spec s;
    s.v3 = false;
    s.q_lora = 0;
    s.n_shared = 2;
    tiny_model m = make_ds_model(s, 12);
    const fs::path hf = tmp.path / "v2";
    fs::create_directories(hf);
    write_ds_folder(hf, m, s, "BF16");
    auto f = convert(hf, ggml_type::bf16);
    const std::string a = "deepseek2.";
    CHECK(f->get_int(a + "expert_gating_func") == 1);
    CHECK(f->get_int(a + "attention.q_lora_rank") == 0);
    CHECK_FALSE(f->has(a + "expert_group_count"));
    CHECK_FALSE(f->has(a + "expert_weights_norm"));
    CHECK_FALSE(f->has(a + "rope.scaling.type"));
    CHECK(f->find_tensor("blk.1.attn_q.weight"));
    CHECK_FALSE(f->find_tensor("blk.1.attn_q_a.weight"));
    CHECK_FALSE(f->find_tensor("blk.1.exp_probs_b.bias"));
    // BF16 copied bit for bit; attn_k_b's transposed rows are the same bf16 values.
    const tandem::gguf_tensor_info &kb = f->tensor("blk.1.attn_k_b.weight");
    REQUIRE(kb.type == ggml_type::bf16);
    std::vector<float> got(size_t(kb.n_bytes / 2));
    tandem::dequantize_rows(ggml_type::bf16, kb.data, got.data(), 1, int64_t(got.size()));
    CHECK(got == expected_k_b(m.values.at("model.layers.1.self_attn.kv_b_proj.weight"), s));
    const tandem::model_hparams hp = tandem::model_hparams_read(*f);
    CHECK(hp.gating == tandem::expert_gating::softmax);
    CHECK(tandem::model_tensors_bind(*f, hp).layers[1].wq);
}

TEST_CASE("convert deepseek2: FP8 weights are dequantised by their weight_scale_inv blocks", "[convert][deepseek2]") {
    // E4M3FN decodes: 1.0, 2.0, -1.0, the smallest subnormal, the largest finite value.
    const std::pair<uint8_t, float> known[] = {{0x38, 1.0f}, {0x40, 2.0f}, {0xb8, -1.0f}, {0x01, 0.001953125f},
                                               {0x7e, 448.0f}};
    temp_dir tmp("ds_fp8");
    ds_spec s;
    tiny_model m = make_ds_model(s, 13);
    const fs::path hf = tmp.path / "fp8";
    fs::create_directories(hf);
    json cfg = ds_config(s);
    cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {16, 16}}};
    write_json(hf / "config.json", cfg);
    write_json(hf / "tokenizer.json", ds_tokenizer());
    // Matrices of the attention and the experts in FP8 with random codes (no NaN) and random block
    // scales; everything else F32, as DeepSeek publishes it.
    std::mt19937 rng(5);
    std::vector<st_entry> all;
    std::map<std::string, std::vector<float>> want;  // dequantised values
    float o_scale = 0.0f;                            // o_proj's first block scale
    for (const std::string &name : m.order) {
        const auto &shape = m.shapes[name];
        const bool fp8 = shape.size() == 2 && name.find("self_attn") != std::string::npos;
        if (!fp8) {
            all.push_back({name, "F32", shape, encode(m.values[name], "F32")});
            continue;
        }
        const int64_t rows = shape[0], cols = shape[1], br = (rows + 15) / 16, bc = (cols + 15) / 16;
        std::vector<uint8_t> codes(size_t(rows * cols));
        for (uint8_t &c : codes) do c = uint8_t(rng()); while ((c & 0x7f) == 0x7f);
        if (name == "model.layers.0.self_attn.o_proj.weight")
            for (size_t i = 0; i < std::size(known); ++i) codes[i] = known[i].first;
        std::vector<float> scales(size_t(br * bc));
        for (float &v : scales) v = 0.001f * float(1 + rng() % 1000);
        if (name == "model.layers.0.self_attn.o_proj.weight") o_scale = scales[0];
        std::vector<float> &w = want[name];
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                float v = 0.0f;
                const uint8_t code = codes[size_t(r * cols + c)];
                const int e = (code >> 3) & 0xf, mnt = code & 7;
                v = e == 0 ? std::ldexp(float(mnt), -9) : std::ldexp(1.0f + float(mnt) / 8.0f, e - 7);
                if (code & 0x80) v = -v;
                w.push_back(v * scales[size_t((r / 16) * bc + c / 16)]);
            }
        all.push_back({name, "F8_E4M3", shape, codes});
        all.push_back({name + "_scale_inv", "F32", {br, bc}, encode(scales, "F32")});
    }
    write_safetensors(hf / "model.safetensors", all);
    auto f = convert(hf, ggml_type::f32);
    const std::vector<float> o = f32_values(*f, "blk.0.attn_output.weight");
    for (size_t i = 0; i < std::size(known); ++i) {
        INFO("code " << int(known[i].first));
        CHECK(o[i] == known[i].second * o_scale);
    }
    CHECK(o == want["model.layers.0.self_attn.o_proj.weight"]);
    CHECK(f32_values(*f, "blk.2.attn_q_b.weight") == want["model.layers.2.self_attn.q_b_proj.weight"]);
    CHECK(f32_values(*f, "blk.1.attn_k_b.weight") == expected_k_b(want["model.layers.1.self_attn.kv_b_proj.weight"], s));
    CHECK(f32_values(*f, "blk.1.attn_v_b.weight") == expected_v_b(want["model.layers.1.self_attn.kv_b_proj.weight"], s));

    // Without the block size, or without a tensor's scales, the FP8 tensor is refused by name.
    cfg.erase("quantization_config");
    write_json(hf / "config.json", cfg);
    CHECK_THROWS_WITH(convert(hf, ggml_type::f32), Catch::Contains("model.layers.0.self_attn.q_a_proj.weight") &&
                                                       Catch::Contains("weight_block_size"));
}

TEST_CASE("convert deepseek2: what the engine cannot run is refused, naming the key or tensor", "[convert][deepseek2]") {
    temp_dir tmp("ds_err");
    ds_spec s;
    tiny_model m = make_ds_model(s, 14);
    const fs::path hf = tmp.path / "bad";
    fs::create_directories(hf);
    auto expect = [&](const std::function<void(json &)> &edit, error_kind kind, const std::string &needle) {
        write_ds_folder(hf, m, s, "F32");
        json cfg = ds_config(s);
        edit(cfg);
        write_json(hf / "config.json", cfg);
        INFO("expecting " << needle);
        try {
            convert(hf, ggml_type::f32);
            FAIL("converted");
        } catch (const tandem::error &e) {
            CHECK(e.kind() == kind);
            CHECK_THAT(e.what(), Catch::Contains(needle));
        }
    };
    expect([](json &c) { c["scoring_func"] = "relu"; }, error_kind::unsupported, "scoring_func");
    expect([](json &c) { c["topk_method"] = "random"; }, error_kind::unsupported, "topk_method");
    expect([](json &c) { c["n_group"] = 3; }, error_kind::file_format, "n_group 3");
    expect([](json &c) { c["moe_layer_freq"] = 2; }, error_kind::unsupported, "moe_layer_freq");
    expect([](json &c) { c["rope_scaling"]["mscale"] = 0.7; }, error_kind::unsupported, "mscale");
    expect([](json &c) { c["max_position_embeddings"] = 8192; }, error_kind::file_format, "rope_scaling factor");
    expect([](json &c) { c.erase("kv_lora_rank"); }, error_kind::file_format, "kv_lora_rank");
    expect([](json &c) { c["num_hidden_layers"] = 2; }, error_kind::unsupported, "model.layers.2.");
    // An MTP layer's tensors are only left out when the config says it has one.
    write_ds_folder(hf, m, s, "F32");
    ds_spec more = s;
    more.n_nextn = 1;
    tiny_model with_mtp = make_ds_model(more, 14);
    write_ds_folder(hf, with_mtp, s, "F32");
    CHECK_THROWS_WITH(convert(hf, ggml_type::f32), Catch::Contains("model.layers.3."));
    // A missing tensor is named.
    tiny_model missing = make_ds_model(s, 14);
    missing.order.erase(std::find(missing.order.begin(), missing.order.end(), "model.layers.1.self_attn.kv_b_proj.weight"));
    write_ds_folder(hf, missing, s, "F32");
    CHECK_THROWS_WITH(convert(hf, ggml_type::f32), Catch::Contains("model.layers.1.self_attn.kv_b_proj.weight"));
}
