// tests/unit/convert/test_convert.cpp - `tandem convert` on HF folders built here (both config
// styles, both merge styles, one file and shards) and on the committed HF fixtures: metadata,
// vocabulary padding, tensor names/shapes/types, exact F32 values, quantized values within their
// bounds, and the errors for broken input.
#include "convert_test_util.h"

#include "tandem/convert.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quant.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>

using namespace convert_test;
using tandem::ggml_type;

namespace {

struct converted {
    std::shared_ptr<const tandem::gguf_file> file;
    tandem::convert_summary summary;
};

converted run_convert(const fs::path &hf, ggml_type type, std::optional<ggml_type> expert_type = {}) {
    tandem::convert_options o;
    o.hf_dir = hf.string();
    o.out_path = (hf.parent_path() / (hf.filename().string() + ".gguf")).string();
    o.type = type;
    o.expert_type = expert_type;
    o.n_threads = 2;
    converted c;
    c.summary = tandem::convert_hf(o);
    c.file = tandem::gguf_file::open(o.out_path);
    return c;
}

// The GGUF tensors a tiny model must produce (llama.cpp names: "<tensor>.weight"): name -> (ne,
// values in ggml order). HF matrices are
// row-major [out][in], which is ggml's layout with ne = [in, out]; experts stack as the 3rd dim.
struct expected_tensor {
    std::vector<int64_t> ne;
    std::vector<float> values;
    bool always_f32;
};

std::map<std::string, expected_tensor> expected_tensors(const tiny_model &m) {
    const tiny_spec &s = m.spec;
    std::map<std::string, expected_tensor> out;
    auto one = [&](const std::string &gg, const std::string &hf, bool f32) {
        const auto &shape = m.shapes.at(hf);
        std::vector<int64_t> ne(shape.rbegin(), shape.rend());
        out[gg + ".weight"] = {ne, m.values.at(hf), f32};
    };
    one("token_embd", "model.embed_tokens.weight", false);
    one("output_norm", "model.norm.weight", true);
    if (!s.tied) one("output", "lm_head.weight", false);
    for (int64_t l = 0; l < s.n_layer; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
        one(b + "attn_norm", p + "input_layernorm.weight", true);
        one(b + "attn_q", p + "self_attn.q_proj.weight", false);
        one(b + "attn_k", p + "self_attn.k_proj.weight", false);
        one(b + "attn_v", p + "self_attn.v_proj.weight", false);
        one(b + "attn_output", p + "self_attn.o_proj.weight", false);
        one(b + "attn_q_norm", p + "self_attn.q_norm.weight", true);
        one(b + "attn_k_norm", p + "self_attn.k_norm.weight", true);
        one(b + "ffn_norm", p + "post_attention_layernorm.weight", true);
        one(b + "ffn_gate_inp", p + "mlp.gate.weight", true);
        for (const char *w : {"gate", "up", "down"}) {
            expected_tensor t;
            const bool down = std::string(w) == "down";
            t.ne = down ? std::vector<int64_t>{s.d_ff, s.d_model, s.n_expert}
                        : std::vector<int64_t>{s.d_model, s.d_ff, s.n_expert};
            t.always_f32 = false;
            for (int64_t e = 0; e < s.n_expert; ++e) {
                const auto &v = m.values.at(p + "mlp.experts." + std::to_string(e) + "." + w + "_proj.weight");
                t.values.insert(t.values.end(), v.begin(), v.end());
            }
            out[b + "ffn_" + w + "_exps.weight"] = std::move(t);
        }
    }
    return out;
}

std::vector<float> gguf_values(const tandem::gguf_tensor_info &t) {
    std::vector<float> v(size_t(t.n_elements()));
    tandem::dequantize_rows(t.type, t.data, v.data(), t.n_rows(), t.ne[0]);
    return v;
}

// Runs f and requires a tandem::error of `kind` whose message contains `needle`.
template <class F>
void require_error(F &&f, tandem::error_kind kind, const std::string &needle) {
    try {
        f();
        FAIL("no error; expected one mentioning '" << needle << "'");
    } catch (const tandem::error &e) {
        INFO("message: " << e.what());
        CHECK(e.kind() == kind);
        CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
}

std::vector<std::string> strings_of(const tandem::gguf_file &f, const char *key) { return f.get_array(key).strings; }

// Metadata every conversion of the tiny model writes, whatever the style of the folder.
void check_common_metadata(const tandem::gguf_file &f, const tiny_spec &s) {
    CHECK(f.get_string("general.architecture") == "qwen3moe");
    CHECK(f.get_int("general.quantization_version") == 2);
    CHECK(f.get_int("qwen3moe.block_count") == s.n_layer);
    CHECK(f.get_int("qwen3moe.context_length") == 4096);
    CHECK(f.get_int("qwen3moe.embedding_length") == s.d_model);
    CHECK(f.get_int("qwen3moe.feed_forward_length") == 3 * s.d_ff);
    CHECK(f.get_int("qwen3moe.expert_feed_forward_length") == s.d_ff);
    CHECK(f.get_int("qwen3moe.attention.head_count") == s.n_head);
    CHECK(f.get_int("qwen3moe.attention.head_count_kv") == s.n_head_kv);
    CHECK(f.get_int("qwen3moe.attention.key_length") == s.d_head);
    CHECK(f.get_int("qwen3moe.attention.value_length") == s.d_head);
    CHECK(f.get_float("qwen3moe.attention.layer_norm_rms_epsilon") == double(1e-6f));
    CHECK(f.get_int("qwen3moe.expert_count") == s.n_expert);
    CHECK(f.get_int("qwen3moe.expert_used_count") == s.n_expert_used);
    CHECK_FALSE(f.has("qwen3moe.rope.scaling.type"));

    CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
    CHECK(f.get_string("tokenizer.ggml.pre") == "qwen2");
    const auto tokens = strings_of(f, "tokenizer.ggml.tokens");
    const auto &types = f.get_array("tokenizer.ggml.token_type").ints;
    REQUIRE(tokens.size() == size_t(s.n_vocab));
    REQUIRE(types.size() == size_t(s.n_vocab));
    const std::vector<std::string> defined = {"a", "b", "c", "\xc4\xa0", "ab", "abc", "\xc4\xa0" "a",
                                              "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "<|fake|>"};
    // normal 1, control 3 (special, or looks like <|...|>), user-defined 4, unused padding 5
    const std::vector<int64_t> defined_types = {1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 4, 3};
    for (size_t i = 0; i < tokens.size(); ++i) {
        INFO("token " << i);
        if (i < defined.size()) {
            CHECK(tokens[i] == defined[i]);
            CHECK(types[i] == defined_types[i]);
        } else {
            CHECK(tokens[i] == "[PAD" + std::to_string(i) + "]");
            CHECK(types[i] == 5);
        }
    }
    CHECK(strings_of(f, "tokenizer.ggml.merges") == std::vector<std::string>{"a b", "ab c", "\xc4\xa0 a"});
    CHECK(f.get_int("tokenizer.ggml.eos_token_id") == 9);      // tokenizer_config eos_token
    CHECK(f.get_int("tokenizer.ggml.padding_token_id") == 7);  // tokenizer_config pad_token
    CHECK(f.get_int("tokenizer.ggml.bos_token_id") == 7);      // config.json bos_token_id
    CHECK(f.get_bool("tokenizer.ggml.add_bos_token", true) == false);
    CHECK(f.get_string("tokenizer.chat_template") == chat_template);
}

// Every tensor present with its shape; F32-held tensors (and all of them when `type` is f32)
// bit-equal to the checkpoint values.
void check_tensors(const tandem::gguf_file &f, const tiny_model &m, ggml_type type) {
    const auto expected = expected_tensors(m);
    CHECK(f.tensors().size() == expected.size());
    for (const auto &[name, e] : expected) {
        INFO("tensor " << name);
        const tandem::gguf_tensor_info *t = f.find_tensor(name);
        REQUIRE(t != nullptr);
        CHECK(t->ne == e.ne);
        const ggml_type want = e.always_f32 ? ggml_type::f32 : tandem::convert_fit_type(type, e.ne[0]);
        CHECK(t->type == want);
        if (t->type == ggml_type::f32) CHECK(gguf_values(*t) == e.values);
    }
}

}  // namespace

TEST_CASE("convert: transformers-4 folder (one file, \"a b\" merges) to F32", "[convert]") {
    temp_dir tmp("v4");
    const fs::path hf = tmp.path / "tiny-moe";
    fs::create_directories(hf);
    tiny_model m = make_model(tiny_spec{}, 11);
    write_folder(hf, m, folder_style{});
    const converted c = run_convert(hf, ggml_type::f32);
    check_common_metadata(*c.file, m.spec);
    CHECK(c.file->get_string("general.name") == "tiny-moe");
    CHECK(c.file->get_int("general.file_type") == 0);
    CHECK(c.file->get_float("qwen3moe.rope.freq_base") == 1e6);
    check_tensors(*c.file, m, ggml_type::f32);
    CHECK(c.summary.n_vocab == 16);
    CHECK(c.summary.n_tokenizer == 12);
    CHECK(c.summary.fallbacks.empty());
    CHECK_FALSE(fs::exists(hf.parent_path() / "tiny-moe.gguf.partial"));
}

TEST_CASE("convert: transformers-5 folder (shards + index, pair merges, chat_template.jinja)", "[convert]") {
    temp_dir tmp("v5");
    const fs::path hf = tmp.path / "tiny5";
    fs::create_directories(hf);
    tiny_spec s;
    s.n_layer = 3;
    s.n_vocab = 64;
    tiny_model m = make_model(s, 12);
    folder_style st;
    st.n_shards = 3;
    st.config_v5 = true;  // architectures null, num_local_experts, rope_parameters
    st.merges_as_pairs = true;
    st.template_in_file = true;
    write_folder(hf, m, st);
    REQUIRE(fs::exists(hf / "model-00003-of-00003.safetensors"));
    const converted c = run_convert(hf, ggml_type::f32);
    check_common_metadata(*c.file, s);
    CHECK(c.file->get_float("qwen3moe.rope.freq_base") == 10000.0);
    check_tensors(*c.file, m, ggml_type::f32);
}

TEST_CASE("convert: BF16 and F16 checkpoints: copies are bit-exact, conversions round once", "[convert]") {
    temp_dir tmp("bf16");
    for (const char *dtype : {"BF16", "F16"}) {
        const fs::path hf = tmp.path / dtype;
        fs::create_directories(hf);
        tiny_model m = make_model(tiny_spec{}, 13);
        folder_style st;
        st.dtype = dtype;
        write_folder(hf, m, st);  // m.values now hold the stored (rounded) values
        const auto expected = expected_tensors(m);
        for (ggml_type out : {ggml_type::f32, ggml_type::bf16, ggml_type::f16}) {
            INFO(dtype << " -> " << tandem::ggml_type_name(out));
            const converted c = run_convert(hf, out);
            CHECK(c.file->get_int("general.file_type") == (out == ggml_type::f32 ? 0 : out == ggml_type::f16 ? 1 : 32));
            for (const auto &[name, e] : expected) {
                INFO("tensor " << name);
                const auto &t = c.file->tensor(name);
                REQUIRE(t.type == (e.always_f32 ? ggml_type::f32 : out));
                std::vector<float> want = e.values;
                // Widening is exact; narrowing BF16 to F16 (or back) rounds each value once.
                if (t.type == ggml_type::f16)
                    for (float &x : want) x = tandem::fp16_to_fp32(tandem::fp32_to_fp16(x));
                if (t.type == ggml_type::bf16)
                    for (float &x : want) x = tandem::bf16_to_fp32(tandem::fp32_to_bf16(x));
                CHECK(gguf_values(t) == want);
            }
        }
    }
}

TEST_CASE("convert: Q8_0 values within half a quantization step; short rows fall back to F16", "[convert]") {
    temp_dir tmp("q8");
    const fs::path hf = tmp.path / "q8";
    fs::create_directories(hf);
    tiny_spec s;
    s.d_model = 48;  // rows of 48 cannot hold Q8_0 blocks of 32: those matrices fall back to F16
    s.d_head = 16;
    tiny_model m = make_model(s, 14);
    write_folder(hf, m, folder_style{});
    const converted c = run_convert(hf, ggml_type::q8_0);
    CHECK(c.file->get_int("general.file_type") == 7);
    CHECK_FALSE(c.summary.fallbacks.empty());
    for (const auto &[name, e] : expected_tensors(m)) {
        INFO("tensor " << name);
        const auto &t = c.file->tensor(name);
        const std::vector<float> got = gguf_values(t);
        if (e.always_f32) {
            CHECK(t.type == ggml_type::f32);
        } else if (e.ne[0] % 32 != 0) {
            CHECK(t.type == ggml_type::f16);
            for (size_t i = 0; i < got.size(); ++i)
                CHECK(got[i] == tandem::fp16_to_fp32(tandem::fp32_to_fp16(e.values[i])));
        } else {
            CHECK(t.type == ggml_type::q8_0);
            // Q8_0: per block of 32, d = amax / 127 stored as fp16, q = round(x / d) in [-127, 127].
            // |x - q * fp16(d)| <= d/2 + 127 * |d - fp16(d)| <= d/2 + 127 * d * 2^-11 < 0.57 d.
            for (size_t b = 0; b < got.size() / 32; ++b) {
                float amax = 0;
                for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(e.values[32 * b + i]));
                const float bound = 0.57f * amax / 127.0f + 1e-12f;
                for (size_t i = 0; i < 32; ++i) CHECK(std::fabs(got[32 * b + i] - e.values[32 * b + i]) <= bound);
            }
        }
    }
}

TEST_CASE("convert: K-quants on rows of 256, Q8_0 fallback for shorter rows, --expert-type", "[convert]") {
    temp_dir tmp("kq");
    const fs::path hf = tmp.path / "kq";
    fs::create_directories(hf);
    tiny_spec s;
    s.d_model = 256;
    s.d_head = 64;
    s.d_ff = 64;      // down_exps rows are 64 long: no K-quant, Q8_0 instead
    s.n_layer = 1;
    s.n_expert = 2;
    s.n_expert_used = 1;
    tiny_model m = make_model(s, 15);
    write_folder(hf, m, folder_style{});
    const converted c = run_convert(hf, ggml_type::q6_k, ggml_type::q4_k);
    CHECK(c.file->get_int("general.file_type") == 15);  // the expert type: most of the bytes
    const auto expected = expected_tensors(m);
    for (const auto &[name, e] : expected) {
        INFO("tensor " << name);
        const auto &t = c.file->tensor(name);
        const bool expert = name.find("_exps") != std::string::npos;
        const ggml_type wanted = expert ? ggml_type::q4_k : ggml_type::q6_k;
        if (e.always_f32) {
            CHECK(t.type == ggml_type::f32);
            continue;
        }
        CHECK(t.type == (e.ne[0] % 256 == 0 ? wanted : ggml_type::q8_0));
        // Relative RMS error for Gaussian rows. Q4_K: 16 levels over a 32-value sub-block whose
        // range is about 4.5 sigma -> step ~0.3 sigma, RMS step/sqrt(12) ~0.09 sigma; Q6_K: 64
        // levels -> ~0.02 sigma; Q8_0 ~0.005. Scrambled rows or a wrong layout give ~1.4.
        const double bound = t.type == ggml_type::q4_k ? 0.12 : t.type == ggml_type::q6_k ? 0.03 : 0.01;
        const std::vector<float> got = gguf_values(t);
        double num = 0, den = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            num += double(got[i] - e.values[i]) * (got[i] - e.values[i]);
            den += double(e.values[i]) * e.values[i];
        }
        CHECK(std::sqrt(num / den) < bound);
    }
    bool logged_down = false;
    for (const auto &f : c.summary.fallbacks) logged_down = logged_down || f.find("ffn_down_exps") == 0;
    CHECK(logged_down);
    CHECK(c.summary.fallbacks.size() == 1);  // logged once, not once per layer or tensor
}

TEST_CASE("convert: a fused transformers-5 expert layout converts like the per-expert one", "[convert]") {
    temp_dir tmp("fused");
    tiny_model m = make_model(tiny_spec{}, 16);
    const fs::path per = tmp.path / "per", fused = tmp.path / "fused";
    fs::create_directories(per);
    fs::create_directories(fused);
    write_folder(per, m, folder_style{});
    write_folder(fused, m, folder_style{});
    // Rewrite the fused folder's safetensors: experts.gate_up_proj [E, 2F, D], experts.down_proj [E, D, F].
    const tiny_spec &s = m.spec;
    std::vector<st_entry> entries;
    for (const std::string &name : m.order) {
        if (name.find(".mlp.experts.") != std::string::npos) continue;
        std::vector<float> v = m.values[name];
        entries.push_back({name, "F32", m.shapes[name], encode(v, "F32")});
    }
    for (int64_t l = 0; l < s.n_layer; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
        std::vector<float> gu, dn;
        for (int64_t e = 0; e < s.n_expert; ++e) {
            const std::string ep = p + std::to_string(e) + ".";
            for (const char *w : {"gate_proj.weight", "up_proj.weight"})
                gu.insert(gu.end(), m.values[ep + w].begin(), m.values[ep + w].end());
            dn.insert(dn.end(), m.values[ep + "down_proj.weight"].begin(), m.values[ep + "down_proj.weight"].end());
        }
        entries.push_back({p + "gate_up_proj", "F32", {s.n_expert, 2 * s.d_ff, s.d_model}, encode(gu, "F32")});
        entries.push_back({p + "down_proj", "F32", {s.n_expert, s.d_model, s.d_ff}, encode(dn, "F32")});
    }
    write_safetensors(fused / "model.safetensors", entries);
    const converted a = run_convert(per, ggml_type::f32), b = run_convert(fused, ggml_type::f32);
    for (const auto &t : a.file->tensors()) {
        INFO("tensor " << t.name);
        const auto &u = b.file->tensor(t.name);
        REQUIRE(u.n_bytes == t.n_bytes);
        CHECK(std::memcmp(u.data, t.data, t.n_bytes) == 0);
    }
}

TEST_CASE("convert: rope scaling keys as llama.cpp writes them", "[convert]") {
    temp_dir tmp("rope");
    const fs::path hf = tmp.path / "rope";
    fs::create_directories(hf);
    tiny_model m = make_model(tiny_spec{}, 17);
    write_folder(hf, m, folder_style{});
    json cfg = config_json(m.spec, false);
    cfg["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
    write_json(hf / "config.json", cfg);
    const converted c = run_convert(hf, ggml_type::f32);
    CHECK(c.file->get_string("qwen3moe.rope.scaling.type") == "yarn");
    CHECK(c.file->get_float("qwen3moe.rope.scaling.factor") == 4.0);
    CHECK(c.file->get_int("qwen3moe.rope.scaling.original_context_length") == 32768);

    cfg["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
    write_json(hf / "config.json", cfg);
    require_error([&] { run_convert(hf, ggml_type::f32); }, tandem::error_kind::unsupported, "dynamic");
}

TEST_CASE("convert: tied embeddings write no output tensor", "[convert]") {
    temp_dir tmp("tied");
    const fs::path hf = tmp.path / "tied";
    fs::create_directories(hf);
    tiny_spec s;
    s.tied = true;
    tiny_model m = make_model(s, 18);
    write_folder(hf, m, folder_style{});
    const converted c = run_convert(hf, ggml_type::f32);
    CHECK(c.file->find_tensor("output.weight") == nullptr);
    CHECK(c.file->find_tensor("token_embd.weight") != nullptr);
    check_tensors(*c.file, m, ggml_type::f32);
}

TEST_CASE("convert: --split-max-size writes llama.cpp's split files that load as the whole model", "[convert]") {
    temp_dir tmp("split");
    const fs::path hf = tmp.path / "tiny-split";
    fs::create_directories(hf);
    tiny_model m = make_model(tiny_spec{}, 13);
    write_folder(hf, m, folder_style{});
    tandem::convert_options o;
    o.hf_dir = hf.string();
    o.out_path = (tmp.path / "tiny-split.gguf").string();
    o.type = ggml_type::f32;
    o.n_threads = 2;
    o.split_max_bytes = 4096;  // smaller than most tensors: many parts
    const tandem::convert_summary sum = tandem::convert_hf(o);
    REQUIRE(sum.paths.size() > 2);
    CHECK(sum.paths.front() == (tmp.path / fmt::format("tiny-split-00001-of-{:05d}.gguf", sum.paths.size())).string());
    CHECK_FALSE(fs::exists(o.out_path));
    const auto file = tandem::gguf_file::open(sum.paths.front());
    CHECK(file->n_parts() == sum.paths.size());
    check_common_metadata(*file, m.spec);
    check_tensors(*file, m, ggml_type::f32);
    for (const auto &e : fs::directory_iterator(tmp.path))
        CHECK(e.path().filename().string().find(".partial") == std::string::npos);
}
