// src/model/convert_hf.cpp - Hugging Face Qwen3MoeForCausalLM folder -> GGUF, with the metadata
// keys, tensor names, shapes and tokenizer arrays that llama.cpp's convert_hf_to_gguf.py writes for
// qwen3moe. Everything is read and validated before the output file is created.
#include "tandem/convert.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/log.h"
#include "tandem/quant.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

namespace tandem {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// ggml token types (llama_token_type) as llama.cpp's converter assigns them.
constexpr int32_t token_normal = 1, token_control = 3, token_user_defined = 4, token_unused = 5;

json read_json_file(const fs::path &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(error_kind::file_format, "{}: cannot open", path.string());
    try {
        return json::parse(in);
    } catch (const json::exception &e) {
        fail(error_kind::file_format, "{}: not valid JSON: {}", path.string(), e.what());
    }
}

// ---- config.json ----

struct hf_config {
    std::string path;
    int64_t d_model = 0, n_layer = 0, n_head = 0, n_head_kv = 0, d_head = 0;
    int64_t n_expert = 0, n_expert_used = 0, d_ff_expert = 0, d_ff = 0;  // d_ff: 0 when absent
    int64_t n_vocab = 0, n_ctx = 0;
    double rms_eps = 1e-6, rope_theta = 10000.0;
    std::string rope_type = "default";
    double rope_factor = 0.0;
    int64_t rope_orig_ctx = 0;
    bool tied = false;
    std::optional<int64_t> bos_id, eos_id, pad_id;
};

const json *member(const json &obj, const char *key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json &obj, const std::string &path, const char *key, std::optional<int64_t> fallback = {},
                int64_t min = 1) {
    const json *v = member(obj, key);
    if (!v) {
        if (fallback) return *fallback;
        fail(error_kind::file_format, "{}: missing '{}'", path, key);
    }
    if (!v->is_number_integer()) fail(error_kind::file_format, "{}: '{}' must be an integer", path, key);
    const int64_t x = v->get<int64_t>();
    if (x < min || x > (int64_t(1) << 31) - 1)
        fail(error_kind::file_format, "{}: '{}' = {} is out of range", path, key, x);
    return x;
}

double get_num(const json &obj, const std::string &path, const char *key, double fallback) {
    const json *v = member(obj, key);
    if (!v) return fallback;
    if (!v->is_number()) fail(error_kind::file_format, "{}: '{}' must be a number", path, key);
    return v->get<double>();
}

bool get_bool(const json &obj, const std::string &path, const char *key, bool fallback) {
    const json *v = member(obj, key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(error_kind::file_format, "{}: '{}' must be true or false", path, key);
    return v->get<bool>();
}

std::optional<int64_t> get_token_id(const json &obj, const char *key) {
    const json *v = member(obj, key);
    if (v && v->is_array() && !v->empty()) v = &(*v)[0];  // eos_token_id may be a list: the first
    if (v && v->is_number_integer() && v->get<int64_t>() >= 0) return v->get<int64_t>();
    return std::nullopt;
}

// Rope scaling in either style: transformers 4 `rope_theta` + `rope_scaling`, transformers 5
// `rope_parameters` {rope_type, rope_theta, factor, ...}.
void read_rope(const json &cfg, hf_config &c) {
    const json *params = member(cfg, "rope_parameters");
    const json *scaling = params ? params : member(cfg, "rope_scaling");
    const char *where = params ? "rope_parameters" : "rope_scaling";
    if (params && !params->is_object())
        fail(error_kind::file_format, "{}: 'rope_parameters' must be an object", c.path);
    c.rope_theta = params ? get_num(*params, c.path, "rope_theta", get_num(cfg, c.path, "rope_theta", 10000.0))
                          : get_num(cfg, c.path, "rope_theta", 10000.0);
    if (!(c.rope_theta > 0)) fail(error_kind::file_format, "{}: rope_theta must be positive", c.path);
    if (!scaling) return;
    if (!scaling->is_object()) fail(error_kind::file_format, "{}: '{}' must be an object", c.path, where);
    const json *type = member(*scaling, "rope_type");
    if (!type) type = member(*scaling, "type");
    c.rope_type = type && type->is_string() ? type->get<std::string>() : "default";
    if (c.rope_type == "default") return;
    if (c.rope_type != "linear" && c.rope_type != "yarn")
        fail(error_kind::unsupported, "{}: {} type '{}' is not supported (default, linear, yarn)", c.path, where,
             c.rope_type);
    c.rope_factor = get_num(*scaling, c.path, "factor", 0.0);
    if (!(c.rope_factor > 0))
        fail(error_kind::file_format, "{}: {} type '{}' needs a positive 'factor'", c.path, where, c.rope_type);
    if (c.rope_type == "yarn")
        c.rope_orig_ctx = get_int(*scaling, c.path, "original_max_position_embeddings", int64_t(0), 0);
}

hf_config read_config(const fs::path &dir) {
    hf_config c;
    const fs::path p = dir / "config.json";
    c.path = p.string();
    if (!fs::exists(p)) fail(error_kind::file_format, "{}: missing", c.path);
    const json cfg = read_json_file(p);
    if (!cfg.is_object()) fail(error_kind::file_format, "{}: not a JSON object", c.path);

    // transformers 5 leaves `architectures` null for a model built from a config: then the
    // model_type decides.
    const json *archs = member(cfg, "architectures");
    if (archs && !(archs->is_array() && archs->empty())) {
        if (!archs->is_array()) fail(error_kind::file_format, "{}: 'architectures' must be a list", c.path);
        bool ok = false;
        for (const json &a : *archs) ok = ok || (a.is_string() && a.get<std::string>() == "Qwen3MoeForCausalLM");
        if (!ok)
            fail(error_kind::unsupported, "{}: architecture {} is not supported (Qwen3MoeForCausalLM)", c.path,
                 archs->dump());
    } else {
        const json *mt = member(cfg, "model_type");
        if (!mt || !mt->is_string() || mt->get<std::string>() != "qwen3_moe")
            fail(error_kind::unsupported, "{}: no 'architectures' and model_type {} is not 'qwen3_moe'", c.path,
                 mt ? mt->dump() : "missing");
    }

    c.d_model = get_int(cfg, c.path, "hidden_size");
    c.n_layer = get_int(cfg, c.path, "num_hidden_layers");
    c.n_head = get_int(cfg, c.path, "num_attention_heads");
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
    c.n_vocab = get_int(cfg, c.path, "vocab_size");
    c.n_ctx = get_int(cfg, c.path, "max_position_embeddings");
    c.rms_eps = get_num(cfg, c.path, "rms_norm_eps", 1e-6);
    if (!(c.rms_eps > 0)) fail(error_kind::file_format, "{}: rms_norm_eps must be positive", c.path);
    c.tied = get_bool(cfg, c.path, "tie_word_embeddings", false);
    read_rope(cfg, c);

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
    if (const json *act = member(cfg, "hidden_act"); act && !(act->is_string() && act->get<std::string>() == "silu"))
        fail(error_kind::unsupported, "{}: hidden_act {} (only silu)", c.path, act->dump());

    c.bos_id = get_token_id(cfg, "bos_token_id");
    c.eos_id = get_token_id(cfg, "eos_token_id");
    c.pad_id = get_token_id(cfg, "pad_token_id");
    return c;
}

// ---- tokenizer.json / tokenizer_config.json ----

struct hf_vocab {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    std::vector<std::string> merges;
    int64_t n_tokenizer = 0;
    std::optional<int64_t> bos_id, eos_id, pad_id;
    std::optional<bool> add_bos, add_eos;
    std::string chat_template;
};

bool contains_byte_level(const json &j) {
    if (j.is_object()) {
        auto t = j.find("type");
        if (t != j.end() && t->is_string() && t->get<std::string>() == "ByteLevel") return true;
        for (const auto &[k, v] : j.items()) if (contains_byte_level(v)) return true;
    } else if (j.is_array()) {
        for (const json &v : j) if (contains_byte_level(v)) return true;
    }
    return false;
}

// llama.cpp's converter marks added tokens that look like control tokens as control even when the
// tokenizer does not flag them special.
bool looks_special(const std::string &t) {
    auto wrapped = [&](std::string_view open, std::string_view close) {
        return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
    };
    return wrapped("<|", "|>") || wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">") ||
           t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]";
}

// A special token named in tokenizer_config.json: a string or an {"content": ...} object.
std::optional<std::string> special_content(const json &tc, const char *key) {
    const json *v = member(tc, key);
    if (v && v->is_string()) return v->get<std::string>();
    if (v && v->is_object() && v->contains("content") && (*v)["content"].is_string())
        return (*v)["content"].get<std::string>();
    return std::nullopt;
}

hf_vocab read_vocab(const fs::path &dir, const hf_config &cfg) {
    hf_vocab voc;
    const fs::path tp = dir / "tokenizer.json";
    const std::string tpath = tp.string();
    if (!fs::exists(tp)) fail(error_kind::file_format, "{}: missing", tpath);
    const json tok = read_json_file(tp);
    const json *model = tok.is_object() ? member(tok, "model") : nullptr;
    if (!model || !model->is_object()) fail(error_kind::file_format, "{}: no 'model' object", tpath);
    if (const json *type = member(*model, "type"); type && !(type->is_string() && type->get<std::string>() == "BPE"))
        fail(error_kind::unsupported, "{}: model type {} is not BPE", tpath, type->dump());
    const json *pre = member(tok, "pre_tokenizer");
    const json *dec = member(tok, "decoder");
    if (!(pre && contains_byte_level(*pre)) && !(dec && contains_byte_level(*dec)))
        fail(error_kind::unsupported, "{}: not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer)", tpath);

    std::map<int64_t, std::string> by_id;
    const json *vocab = member(*model, "vocab");
    if (!vocab || !vocab->is_object()) fail(error_kind::file_format, "{}: model.vocab must be an object", tpath);
    for (const auto &[text, id] : vocab->items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= cfg.n_vocab)
            fail(error_kind::file_format, "{}: token '{}' has id {} outside config vocab_size {}", tpath, text,
                 id.dump(), cfg.n_vocab);
        if (!by_id.emplace(id.get<int64_t>(), text).second)
            fail(error_kind::file_format, "{}: id {} is used by two tokens", tpath, id.get<int64_t>());
    }
    std::map<int64_t, int32_t> added_type;
    if (const json *added = member(tok, "added_tokens")) {
        if (!added->is_array()) fail(error_kind::file_format, "{}: added_tokens must be a list", tpath);
        for (const json &a : *added) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
                !a["content"].is_string())
                fail(error_kind::file_format, "{}: added token {} needs id and content", tpath, a.dump());
            const int64_t id = a["id"].get<int64_t>();
            const std::string content = a["content"].get<std::string>();
            if (id < 0 || id >= cfg.n_vocab)
                fail(error_kind::file_format, "{}: added token '{}' has id {} outside config vocab_size {}", tpath,
                     content, id, cfg.n_vocab);
            auto [it, inserted] = by_id.emplace(id, content);
            if (!inserted && it->second != content)
                fail(error_kind::file_format, "{}: added token '{}' reuses id {} of '{}'", tpath, content, id,
                     it->second);
            const bool special = a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>();
            added_type[id] = special || looks_special(content) ? token_control : token_user_defined;
            if (added_type[id] == token_user_defined) {
                // llama.cpp pre-normalises user-defined tokens: SentencePiece's U+2581 becomes a space.
                std::string &text = by_id[id];
                for (size_t at; (at = text.find("\xe2\x96\x81")) != std::string::npos;) text.replace(at, 3, " ");
            }
        }
    }
    if (by_id.empty()) fail(error_kind::file_format, "{}: empty vocabulary", tpath);
    voc.n_tokenizer = by_id.rbegin()->first + 1;

    // Ids the tokenizer does not define (config vocab_size pads the embedding) become unused
    // "[PAD{id}]" tokens, as llama.cpp writes them.
    voc.tokens.resize(size_t(cfg.n_vocab));
    voc.types.assign(size_t(cfg.n_vocab), token_unused);
    for (int64_t i = 0; i < cfg.n_vocab; ++i) voc.tokens[size_t(i)] = fmt::format("[PAD{}]", i);
    for (const auto &[id, text] : by_id) {
        voc.tokens[size_t(id)] = text;
        auto at = added_type.find(id);
        voc.types[size_t(id)] = at == added_type.end() ? token_normal : at->second;
    }

    const json *merges = member(*model, "merges");
    if (!merges || !merges->is_array()) fail(error_kind::file_format, "{}: model.merges must be a list", tpath);
    voc.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
        const json &m = (*merges)[i];
        // Older files store "a b", newer ones ["a", "b"]; GGUF stores "a b".
        if (m.is_string()) {
            const std::string s = m.get<std::string>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
                fail(error_kind::file_format, "{}: merge {} '{}' is not two tokens separated by one space", tpath, i, s);
            voc.merges.push_back(s);
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            const std::string a = m[0].get<std::string>(), b = m[1].get<std::string>();
            if (a.empty() || b.empty() || a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
                fail(error_kind::file_format, "{}: merge {} {} cannot be written as 'a b'", tpath, i, m.dump());
            voc.merges.push_back(a + " " + b);
        } else {
            fail(error_kind::file_format, "{}: merge {} {} is neither \"a b\" nor [\"a\", \"b\"]", tpath, i, m.dump());
        }
    }

    // Special token ids: tokenizer_config.json names them, config.json's *_token_id fills gaps.
    std::map<std::string, int64_t> id_of;
    for (const auto &[id, text] : by_id) id_of.emplace(text, id);
    json tc = json::object();
    const fs::path tcp = dir / "tokenizer_config.json";
    if (fs::exists(tcp)) {
        tc = read_json_file(tcp);
        if (!tc.is_object()) fail(error_kind::file_format, "{}: not a JSON object", tcp.string());
    }
    auto resolve = [&](const char *key, std::optional<int64_t> fallback) -> std::optional<int64_t> {
        if (auto content = special_content(tc, key)) {
            auto it = id_of.find(*content);
            if (it == id_of.end())
                fail(error_kind::file_format, "{}: {} '{}' is not in the vocabulary", tcp.string(), key, *content);
            return it->second;
        }
        return fallback && *fallback < cfg.n_vocab ? fallback : std::nullopt;
    };
    voc.bos_id = resolve("bos_token", cfg.bos_id);
    voc.eos_id = resolve("eos_token", cfg.eos_id);
    voc.pad_id = resolve("pad_token", cfg.pad_id);
    if (const json *v = member(tc, "add_bos_token"); v && v->is_boolean()) voc.add_bos = v->get<bool>();
    if (const json *v = member(tc, "add_eos_token"); v && v->is_boolean()) voc.add_eos = v->get<bool>();

    if (const json *ct = member(tc, "chat_template")) {
        if (ct->is_string()) {
            voc.chat_template = ct->get<std::string>();
        } else if (ct->is_array()) {  // [{name, template}]: the default one
            for (const json &e : *ct)
                if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
                    e["template"].is_string())
                    voc.chat_template = e["template"].get<std::string>();
        }
    }
    // transformers 5 writes the template to a file of its own.
    if (const fs::path jp = dir / "chat_template.jinja"; voc.chat_template.empty() && fs::exists(jp)) {
        std::ifstream in(jp, std::ios::binary);
        voc.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return voc;
}

// ---- tensors ----

// The rows of one GGUF tensor, gathered from checkpoint tensors in order: segment k contributes
// rows [first_row, first_row + n_rows) of its tensor (all rows ne[0] elements long).
struct row_segment {
    const st_tensor *tensor;
    int64_t first_row, n_rows;
};

struct planned_tensor {
    std::string name;
    ggml_type type;
    std::vector<int64_t> ne;
    std::vector<row_segment> rows;
};

bool same_storage(st_dtype src, ggml_type dst) {
    return (src == st_dtype::f32 && dst == ggml_type::f32) || (src == st_dtype::f16 && dst == ggml_type::f16) ||
           (src == st_dtype::bf16 && dst == ggml_type::bf16);
}

// Writes the tensor's rows in its GGUF type. Rows whose storage already matches are copied
// bit-exactly; everything else goes through float.
void fill_tensor(const planned_tensor &t, uint8_t *dst) {
    const int64_t row_len = t.ne[0];
    const size_t row_bytes = ggml_row_bytes(t.type, row_len);
    std::vector<float> buf(static_cast<size_t>(row_len));
    for (const row_segment &seg : t.rows) {
        for (int64_t r = 0; r < seg.n_rows; ++r, dst += row_bytes) {
            const int64_t first = (seg.first_row + r) * row_len;
            if (same_storage(seg.tensor->dtype, t.type)) {
                std::memcpy(dst, seg.tensor->data + size_t(first) * st_dtype_bytes(seg.tensor->dtype), row_bytes);
                continue;
            }
            st_read_f32(*seg.tensor, first, row_len, buf.data());
            if (t.type == ggml_type::f32) {
                std::memcpy(dst, buf.data(), row_bytes);
                continue;
            }
            try {
                quantize_row(t.type, buf.data(), dst, row_len);
            } catch (const error &e) {
                fail(e.kind() == error_kind::invalid_request ? error_kind::file_format : e.kind(),
                     "{}: tensor '{}' row {} -> {} '{}': {}", seg.tensor->file, seg.tensor->name, seg.first_row + r,
                     ggml_type_name(t.type), t.name, e.what());
            }
        }
    }
}

uint32_t llama_ftype(ggml_type t) {
    switch (t) {
    case ggml_type::f32: return 0;    // LLAMA_FTYPE_ALL_F32
    case ggml_type::f16: return 1;    // MOSTLY_F16
    case ggml_type::q8_0: return 7;   // MOSTLY_Q8_0
    case ggml_type::q4_k: return 15;  // MOSTLY_Q4_K_M: llama-quantize's meaning of "Q4_K"
    case ggml_type::q6_k: return 18;  // MOSTLY_Q6_K
    case ggml_type::bf16: return 32;  // MOSTLY_BF16
    default: return 0;
    }
}

void check_out_type(ggml_type t, const char *flag) {
    switch (t) {
    case ggml_type::f32: case ggml_type::f16: case ggml_type::bf16:
    case ggml_type::q8_0: case ggml_type::q4_k: case ggml_type::q6_k: return;
    default:
        fail(error_kind::config, "{} {}: the converter writes f32, f16, bf16, q8_0, q4_k or q6_k", flag,
             ggml_type_name(t));
    }
}

}  // namespace

ggml_type convert_fit_type(ggml_type wanted, int64_t row_len) {
    if ((wanted == ggml_type::q4_k || wanted == ggml_type::q6_k) && row_len % qk_k != 0) wanted = ggml_type::q8_0;
    if (wanted == ggml_type::q8_0 && row_len % qk8_0 != 0) wanted = ggml_type::f16;
    return wanted;
}

namespace {

// Written beside the target and renamed, so a failed conversion never leaves a truncated .gguf;
// a split model's parts are renamed to PREFIX-0000i-of-0000n.gguf of the target.
std::vector<std::string> write_in_place(const gguf_writer &w, const convert_options &opts) {
    const std::string tmp = opts.out_path + ".partial";
    std::vector<std::string> written;
    try {
        written = w.write(tmp, opts.n_threads, opts.split_max_bytes);
    } catch (...) {
        std::error_code ec;
        fs::remove(tmp, ec);
        // Parts of a failed split write: TMP-0000i-of-0000n.gguf beside the target.
        const fs::path dir = fs::path(tmp).parent_path().empty() ? fs::path(".") : fs::path(tmp).parent_path();
        const std::string stem = fs::path(tmp).filename().string() + "-";
        for (const auto &e : fs::directory_iterator(dir, ec))
            if (e.path().filename().string().starts_with(stem)) fs::remove(e.path(), ec);
        throw;
    }
    const std::string prefix =
        opts.out_path.ends_with(".gguf") ? opts.out_path.substr(0, opts.out_path.size() - 5) : opts.out_path;
    std::vector<std::string> paths;
    for (size_t i = 0; i < written.size(); ++i) {
        const int n = int(written.size());
        const std::string to = n == 1 ? opts.out_path : gguf_split_path(prefix, int(i), n);
        std::error_code ec;
        fs::rename(written[i], to, ec);
        if (ec) {
            for (const std::string &p : written) fs::remove(p, ec);
            fail(error_kind::file_format, "{}: cannot rename {} into place: {}", to, written[i], ec.message());
        }
        paths.push_back(to);
    }
    return paths;
}

}  // namespace

convert_summary convert_hf(const convert_options &opts) {
    check_out_type(opts.type, "--type");
    const ggml_type expert_type = opts.expert_type.value_or(opts.type);
    check_out_type(expert_type, "--expert-type");
    if (opts.out_path.empty()) fail(error_kind::config, "--out: no output path");
    const fs::path dir(opts.hf_dir);
    if (!fs::is_directory(dir)) fail(error_kind::config, "--hf {}: not a folder", opts.hf_dir);

    const hf_config c = read_config(dir);
    const hf_vocab voc = read_vocab(dir, c);
    const safetensors_set st = safetensors_set::open_dir(dir.string());

    convert_summary sum;
    sum.n_vocab = c.n_vocab;
    sum.n_tokenizer = voc.n_tokenizer;
    sum.file_type = llama_ftype(expert_type);

    // Plan every tensor (checkpoint names and shapes checked) before anything is written.
    std::set<std::string> used;
    std::vector<planned_tensor> plan;
    std::set<std::string> logged_fallbacks;
    auto add = [&](std::string name, ggml_type wanted, std::vector<int64_t> ne, std::vector<row_segment> rows) {
        const ggml_type type = convert_fit_type(wanted, ne[0]);
        if (type != wanted) {
            // One line per tensor class (the block number stripped), not one per layer.
            std::string cls = name.starts_with("blk.") ? name.substr(name.find('.', 4) + 1) : name;
            const std::string note = fmt::format("{}: {} -> {} (row length {})", cls, ggml_type_name(wanted),
                                                 ggml_type_name(type), ne[0]);
            if (logged_fallbacks.insert(note).second) {
                log_info("convert: {}", note);
                sum.fallbacks.push_back(note);
            }
        }
        // llama.cpp names every weight "<tensor>.weight" (token_embd.weight, blk.0.attn_q.weight).
        plan.push_back({std::move(name) + ".weight", type, std::move(ne), std::move(rows)});
    };
    auto whole = [&](const std::string &hf_name, const std::vector<int64_t> &shape) {
        const st_tensor &t = st.require(hf_name, shape);
        used.insert(hf_name);
        return std::vector<row_segment>{{&t, 0, shape.size() == 1 ? 1 : shape[0]}};
    };

    const int64_t d = c.d_model, v = c.n_vocab, q_dim = c.n_head * c.d_head, kv_dim = c.n_head_kv * c.d_head;
    const int64_t ne_exp = c.n_expert, f = c.d_ff_expert;
    add("token_embd", opts.type, {d, v}, whole("model.embed_tokens.weight", {v, d}));
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
        add(b + "attn_norm", ggml_type::f32, {d}, whole(p + "input_layernorm.weight", {d}));
        add(b + "attn_q", opts.type, {d, q_dim}, whole(p + "self_attn.q_proj.weight", {q_dim, d}));
        add(b + "attn_k", opts.type, {d, kv_dim}, whole(p + "self_attn.k_proj.weight", {kv_dim, d}));
        add(b + "attn_v", opts.type, {d, kv_dim}, whole(p + "self_attn.v_proj.weight", {kv_dim, d}));
        add(b + "attn_output", opts.type, {q_dim, d}, whole(p + "self_attn.o_proj.weight", {d, q_dim}));
        add(b + "attn_q_norm", ggml_type::f32, {c.d_head}, whole(p + "self_attn.q_norm.weight", {c.d_head}));
        add(b + "attn_k_norm", ggml_type::f32, {c.d_head}, whole(p + "self_attn.k_norm.weight", {c.d_head}));
        add(b + "ffn_norm", ggml_type::f32, {d}, whole(p + "post_attention_layernorm.weight", {d}));
        add(b + "ffn_gate_inp", ggml_type::f32, {d, ne_exp}, whole(p + "mlp.gate.weight", {ne_exp, d}));

        // Published checkpoints store experts one by one; a checkpoint saved fused by transformers 5
        // (experts.gate_up_proj [E, 2F, D], experts.down_proj [E, D, F]) is read too.
        std::vector<row_segment> gate, up, down;
        const std::string fused_gu = p + "mlp.experts.gate_up_proj", fused_down = p + "mlp.experts.down_proj";
        if (st.find(fused_gu) && !st.find(p + "mlp.experts.0.gate_proj.weight")) {
            const st_tensor &gu = st.require(fused_gu, {ne_exp, 2 * f, d});
            const st_tensor &dn = st.require(fused_down, {ne_exp, d, f});
            used.insert(fused_gu);
            used.insert(fused_down);
            for (int64_t e = 0; e < ne_exp; ++e) {
                gate.push_back({&gu, e * 2 * f, f});
                up.push_back({&gu, e * 2 * f + f, f});
                down.push_back({&dn, e * d, d});
            }
        } else {
            for (int64_t e = 0; e < ne_exp; ++e) {
                const std::string ep = fmt::format("{}mlp.experts.{}.", p, e);
                gate.push_back(whole(ep + "gate_proj.weight", {f, d})[0]);
                up.push_back(whole(ep + "up_proj.weight", {f, d})[0]);
                down.push_back(whole(ep + "down_proj.weight", {d, f})[0]);
            }
        }
        add(b + "ffn_gate_exps", expert_type, {d, f, ne_exp}, std::move(gate));
        add(b + "ffn_up_exps", expert_type, {d, f, ne_exp}, std::move(up));
        add(b + "ffn_down_exps", expert_type, {f, d, ne_exp}, std::move(down));
    }
    add("output_norm", ggml_type::f32, {d}, whole("model.norm.weight", {d}));
    if (!c.tied) {
        add("output", opts.type, {d, v}, whole("lm_head.weight", {v, d}));
    } else if (st.find("lm_head.weight")) {
        used.insert("lm_head.weight");  // a tied copy: llama.cpp drops it too
    }
    for (const auto &[name, t] : st.all()) {
        if (used.count(name) || name.ends_with("rotary_emb.inv_freq")) continue;
        fail(error_kind::unsupported, "{}: tensor '{}' is not part of a Qwen3-MoE model (layer count {}?)", t->file,
             name, c.n_layer);
    }

    // Metadata, in the order and with the value types of llama.cpp's converter.
    gguf_writer w;
    const std::string arch = "qwen3moe";
    std::string name = opts.name;
    if (name.empty()) name = fs::absolute(dir).lexically_normal().filename().string();
    if (name.empty()) name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
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
    w.set_string("general.name", name);
    if (c.rope_type != "default") {
        w.set_string(arch + ".rope.scaling.type", c.rope_type);
        w.set_f32(arch + ".rope.scaling.factor", float(c.rope_factor));
        if (c.rope_type == "yarn" && c.rope_orig_ctx > 0)
            w.set_u32(arch + ".rope.scaling.original_context_length", uint32_t(c.rope_orig_ctx));
    }
    w.set_u32("general.file_type", sum.file_type);
    w.set_u32("general.quantization_version", 2);

    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_array_string("tokenizer.ggml.tokens", voc.tokens);
    w.set_array_i32("tokenizer.ggml.token_type", voc.types);
    w.set_array_string("tokenizer.ggml.merges", voc.merges);
    if (voc.eos_id) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(*voc.eos_id));
    if (voc.pad_id) w.set_u32("tokenizer.ggml.padding_token_id", uint32_t(*voc.pad_id));
    if (voc.bos_id) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(*voc.bos_id));
    if (voc.add_bos) w.set_bool("tokenizer.ggml.add_bos_token", *voc.add_bos);
    if (voc.add_eos) w.set_bool("tokenizer.ggml.add_eos_token", *voc.add_eos);
    if (!voc.chat_template.empty()) w.set_string("tokenizer.chat_template", voc.chat_template);

    // The plan outlives write(): the callbacks point into it.
    for (const planned_tensor &t : plan)
        w.add_tensor(t.name, t.type, t.ne, [&t](uint8_t *dst) { fill_tensor(t, dst); });
    sum.n_tensors = int64_t(plan.size());

    sum.paths = write_in_place(w, opts);
    log_info("convert: wrote {} ({} tensors, vocab {} of which {} from the tokenizer, {} / experts {})",
             opts.out_path, sum.n_tensors, sum.n_vocab, sum.n_tokenizer, ggml_type_name(opts.type),
             ggml_type_name(expert_type));
    return sum;
}

}  // namespace tandem
