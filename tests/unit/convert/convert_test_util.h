// tests/unit/convert/convert_test_util.h - builds small Hugging Face checkpoint folders for the
// converter tests: a minimal safetensors writer, config.json in both styles, tokenizer files.
#pragma once

#include "tandem/quant.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace convert_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A folder under the system temp dir, removed when the test ends.
struct temp_dir {
    fs::path path;
    explicit temp_dir(const std::string &tag) {
        std::random_device rd;
        path = fs::temp_directory_path() / ("tandem_convert_" + tag + "_" + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

struct st_entry {
    std::string name, dtype;          // "F32", "F16", "BF16" (or anything, for error tests)
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

// Writes a safetensors file: u64 header length, JSON header padded with spaces to 8 bytes (as the
// reference writer does), then the tensors back to back in the given order.
inline void write_safetensors(const fs::path &path, const std::vector<st_entry> &entries) {
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t off = 0;
    for (const st_entry &e : entries) {
        header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
        off += e.bytes.size();
    }
    std::string h = header.dump();
    while (h.size() % 8) h.push_back(' ');
    std::ofstream out(path, std::ios::binary);
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
    out.write(h.data(), std::streamsize(h.size()));
    for (const st_entry &e : entries) out.write(reinterpret_cast<const char *>(e.bytes.data()), std::streamsize(e.bytes.size()));
}

struct tiny_spec {
    int64_t d_model = 64, n_layer = 2, n_head = 4, d_head = 16, n_head_kv = 2;
    int64_t n_expert = 4, n_expert_used = 2, d_ff = 32, n_vocab = 16;
    bool tied = false;
};

// HF tensors of a tiny Qwen3-MoE model: name -> (shape, values). Values are rounded to the
// storage dtype when written, so tests compare against what the file holds.
struct tiny_model {
    tiny_spec spec;
    std::map<std::string, std::vector<int64_t>> shapes;
    std::map<std::string, std::vector<float>> values;
    std::vector<std::string> order;  // insertion order, for deterministic shards
};

inline tiny_model make_model(const tiny_spec &s, uint32_t seed) {
    tiny_model m;
    m.spec = s;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto add = [&](const std::string &name, std::vector<int64_t> shape, float scale, float offset) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        for (float &x : v) x = offset + scale * normal(rng);
        m.shapes[name] = std::move(shape);
        m.values[name] = std::move(v);
        m.order.push_back(name);
    };
    const int64_t d = s.d_model, q = s.n_head * s.d_head, kv = s.n_head_kv * s.d_head;
    add("model.embed_tokens.weight", {s.n_vocab, d}, 1.0f, 0.0f);
    for (int64_t l = 0; l < s.n_layer; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {d}, 0.1f, 1.0f);
        add(p + "self_attn.q_proj.weight", {q, d}, 0.1f, 0.0f);
        add(p + "self_attn.k_proj.weight", {kv, d}, 0.1f, 0.0f);
        add(p + "self_attn.v_proj.weight", {kv, d}, 0.1f, 0.0f);
        add(p + "self_attn.o_proj.weight", {d, q}, 0.1f, 0.0f);
        add(p + "self_attn.q_norm.weight", {s.d_head}, 0.1f, 1.0f);
        add(p + "self_attn.k_norm.weight", {s.d_head}, 0.1f, 1.0f);
        add(p + "post_attention_layernorm.weight", {d}, 0.1f, 1.0f);
        add(p + "mlp.gate.weight", {s.n_expert, d}, 0.1f, 0.0f);
        for (int64_t e = 0; e < s.n_expert; ++e) {
            const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
            add(ep + "gate_proj.weight", {s.d_ff, d}, 0.1f, 0.0f);
            add(ep + "up_proj.weight", {s.d_ff, d}, 0.1f, 0.0f);
            add(ep + "down_proj.weight", {d, s.d_ff}, 0.1f, 0.0f);
        }
    }
    add("model.norm.weight", {d}, 0.1f, 1.0f);
    if (!s.tied) add("lm_head.weight", {s.n_vocab, d}, 0.1f, 0.0f);
    return m;
}

// Encodes values in a safetensors dtype and rounds `values` to what was stored.
inline std::vector<uint8_t> encode(std::vector<float> &values, const std::string &dtype) {
    std::vector<uint8_t> bytes;
    if (dtype == "F32") {
        bytes.resize(values.size() * 4);
        std::memcpy(bytes.data(), values.data(), bytes.size());
        return bytes;
    }
    bytes.resize(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
        uint16_t h = dtype == "BF16" ? tandem::fp32_to_bf16(values[i]) : tandem::fp32_to_fp16(values[i]);
        values[i] = dtype == "BF16" ? tandem::bf16_to_fp32(h) : tandem::fp16_to_fp32(h);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
    return bytes;
}

struct folder_style {
    std::string dtype = "F32";
    int n_shards = 1;              // > 1: model-0000k-of-0000n.safetensors + index
    bool config_v5 = false;        // rope_parameters, num_local_experts, architectures null
    bool merges_as_pairs = false;
    bool template_in_file = false; // chat_template.jinja instead of tokenizer_config.json
};

constexpr const char *chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";

// The tokenizer: 7 byte-level tokens, 3 merges, 5 added tokens; ids 0..11.
inline json tokenizer_json(bool merges_as_pairs) {
    json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"\xc4\xa0", 3}, {"ab", 4}, {"abc", 5}, {"\xc4\xa0" "a", 6}};
    json merges = merges_as_pairs ? json::array({json::array({"a", "b"}), json::array({"ab", "c"}),
                                                 json::array({"\xc4\xa0", "a"})})
                                  : json::array({"a b", "ab c", "\xc4\xa0 a"});
    auto added = [](int id, const char *text, bool special) {
        return json{{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false},
                    {"rstrip", false}, {"normalized", false}, {"special", special}};
    };
    return {
        {"version", "1.0"},
        {"added_tokens", {added(7, "<|endoftext|>", true), added(8, "<|im_start|>", true), added(9, "<|im_end|>", true),
                          added(10, "<think>", false), added(11, "<|fake|>", false)}},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer", {{"type", "Sequence"},
                           {"pretokenizers", {{{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false}},
                                              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
    };
}

inline json config_json(const tiny_spec &s, bool v5) {
    json c = {
        {"model_type", "qwen3_moe"}, {"hidden_size", s.d_model}, {"num_hidden_layers", s.n_layer},
        {"num_attention_heads", s.n_head}, {"num_key_value_heads", s.n_head_kv}, {"head_dim", s.d_head},
        {"moe_intermediate_size", s.d_ff}, {"intermediate_size", 3 * s.d_ff}, {"num_experts_per_tok", s.n_expert_used},
        {"vocab_size", s.n_vocab}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6},
        {"tie_word_embeddings", s.tied}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
        {"mlp_only_layers", json::array()}, {"hidden_act", "silu"}, {"bos_token_id", 7}, {"eos_token_id", 9},
    };
    if (v5) {
        c["architectures"] = nullptr;
        c["num_local_experts"] = s.n_expert;
        c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
    } else {
        c["architectures"] = {"Qwen3MoeForCausalLM"};
        c["num_experts"] = s.n_expert;
        c["rope_theta"] = 1000000.0;
        c["rope_scaling"] = nullptr;
    }
    return c;
}

inline void write_json(const fs::path &path, const json &j) {
    std::ofstream out(path, std::ios::binary);
    out << j.dump(2);
}

// Writes the whole folder; rounds m.values to the stored dtype.
inline void write_folder(const fs::path &dir, tiny_model &m, const folder_style &st) {
    write_json(dir / "config.json", config_json(m.spec, st.config_v5));
    write_json(dir / "tokenizer.json", tokenizer_json(st.merges_as_pairs));
    json tc = {{"add_bos_token", false}, {"bos_token", nullptr}, {"eos_token", "<|im_end|>"},
               {"pad_token", "<|endoftext|>"}, {"tokenizer_class", "Qwen2Tokenizer"}};
    if (st.template_in_file) {
        std::ofstream(dir / "chat_template.jinja", std::ios::binary) << chat_template;
    } else {
        tc["chat_template"] = chat_template;
    }
    write_json(dir / "tokenizer_config.json", tc);

    std::vector<st_entry> all;
    for (const std::string &name : m.order)
        all.push_back({name, st.dtype, m.shapes[name], encode(m.values[name], st.dtype)});
    if (st.n_shards == 1) {
        write_safetensors(dir / "model.safetensors", all);
        return;
    }
    json weight_map = json::object();
    const size_t per = (all.size() + size_t(st.n_shards) - 1) / size_t(st.n_shards);
    for (int k = 0; k < st.n_shards; ++k) {
        char fname[64];
        std::snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, st.n_shards);
        std::vector<st_entry> part;
        for (size_t i = size_t(k) * per; i < std::min(all.size(), size_t(k + 1) * per); ++i) {
            part.push_back(all[i]);
            weight_map[all[i].name] = fname;
        }
        write_safetensors(dir / fname, part);
    }
    write_json(dir / "model.safetensors.index.json", {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
}

}  // namespace convert_test
