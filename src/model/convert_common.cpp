// src/model/convert_common.cpp - the parts of `tandem convert` every architecture shares: config.json
// helpers, the tokenizer's vocabulary as llama.cpp writes it, the tensor plan (FP8 blocks scaled,
// llama.cpp's transposed blocks), and writing the file into place.
#include "convert_internal.h"

#include "tandem/error.h"
#include "tandem/log.h"
#include "tandem/quant.h"

#include <cstring>
#include <fstream>
#include <map>

namespace tandem::convert_detail {

namespace {

// ggml token types (llama_token_type) as llama.cpp's converter assigns them.
constexpr int32_t token_normal = 1, token_control = 3, token_user_defined = 4, token_unused = 5;

}  // namespace

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

const json *member(const json &obj, const char *key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json &obj, const std::string &path, const char *key, std::optional<int64_t> fallback,
                int64_t min) {
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
void read_rope(const json &cfg, hf_common &c) {
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
    if (c.rope_type != "yarn") return;
    c.rope_orig_ctx = get_int(*scaling, c.path, "original_max_position_embeddings", int64_t(0), 0);
    auto optional_num = [&](const char *key) -> std::optional<double> {
        if (!member(*scaling, key)) return std::nullopt;
        return get_num(*scaling, c.path, key, 0.0);
    };
    c.rope_mscale = optional_num("mscale");
    c.rope_mscale_all_dim = optional_num("mscale_all_dim");
    c.rope_beta_fast = optional_num("beta_fast");
    c.rope_beta_slow = optional_num("beta_slow");
}

void read_common(const json &cfg, hf_common &c) {
    c.d_model = get_int(cfg, c.path, "hidden_size");
    c.n_layer = get_int(cfg, c.path, "num_hidden_layers");
    c.n_head = get_int(cfg, c.path, "num_attention_heads");
    c.n_vocab = get_int(cfg, c.path, "vocab_size");
    c.n_ctx = get_int(cfg, c.path, "max_position_embeddings");
    c.rms_eps = get_num(cfg, c.path, "rms_norm_eps", 1e-6);
    if (!(c.rms_eps > 0)) fail(error_kind::file_format, "{}: rms_norm_eps must be positive", c.path);
    c.tied = get_bool(cfg, c.path, "tie_word_embeddings", false);
    read_rope(cfg, c);
    if (const json *act = member(cfg, "hidden_act"); act && !(act->is_string() && act->get<std::string>() == "silu"))
        fail(error_kind::unsupported, "{}: hidden_act {} (only silu)", c.path, act->dump());
    c.bos_id = get_token_id(cfg, "bos_token_id");
    c.eos_id = get_token_id(cfg, "eos_token_id");
    c.pad_id = get_token_id(cfg, "pad_token_id");
}

// ---- tokenizer.json / tokenizer_config.json ----

namespace {

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

}  // namespace

hf_vocab read_vocab(const fs::path &dir, const hf_common &cfg) {
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
    if (pre) voc.pre_tokenizer = *pre;

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

namespace {

bool same_storage(st_dtype src, ggml_type dst) {
    return (src == st_dtype::f32 && dst == ggml_type::f32) || (src == st_dtype::f16 && dst == ggml_type::f16) ||
           (src == st_dtype::bf16 && dst == ggml_type::bf16);
}

// Row `row` of the segment's tensor as float, each FP8 value times its block's scale.
void read_row(const row_segment &seg, int64_t row, float *dst, std::vector<float> &scales) {
    const st_tensor &t = *seg.tensor;
    const int64_t cols = t.shape.back();
    st_read_f32(t, row * cols, cols, dst);
    if (!seg.scale) return;
    const int64_t sc_cols = seg.scale->shape.back();
    scales.resize(size_t(sc_cols));
    st_read_f32(*seg.scale, (row / seg.scale_block) * sc_cols, sc_cols, scales.data());
    for (int64_t c = 0; c < cols; ++c) dst[c] *= scales[size_t(c / seg.scale_block)];
}

// One GGUF row from floats, in the tensor's type.
void emit_row(const planned_tensor &t, const row_segment &seg, int64_t src_row, const float *row, uint8_t *dst) {
    const int64_t row_len = t.ne[0];
    if (t.type == ggml_type::f32) {
        std::memcpy(dst, row, size_t(row_len) * sizeof(float));
        return;
    }
    try {
        quantize_row(t.type, row, dst, row_len);
    } catch (const error &e) {
        fail(e.kind() == error_kind::invalid_request ? error_kind::file_format : e.kind(),
             "{}: tensor '{}' row {} -> {} '{}': {}", seg.tensor->file, seg.tensor->name, src_row,
             ggml_type_name(t.type), t.name, e.what());
    }
}

// Writes the tensor's rows in its GGUF type. Rows whose storage already matches are copied
// bit-exactly; everything else goes through float.
void fill_tensor(const planned_tensor &t, uint8_t *dst) {
    const int64_t row_len = t.ne[0];
    const size_t row_bytes = ggml_row_bytes(t.type, row_len);
    std::vector<float> buf(static_cast<size_t>(row_len)), block, scales;
    for (const row_segment &seg : t.rows) {
        const int64_t cols = seg.tensor->shape.back();
        if (seg.transpose) {
            TANDEM_ASSERT(seg.n_rows == row_len, "transposed block of {} rows for rows of {}", seg.n_rows, row_len);
            block.resize(size_t(seg.n_rows * cols));
            for (int64_t r = 0; r < seg.n_rows; ++r) read_row(seg, seg.first_row + r, block.data() + r * cols, scales);
            for (int64_t c = 0; c < cols; ++c, dst += row_bytes) {
                for (int64_t r = 0; r < seg.n_rows; ++r) buf[size_t(r)] = block[size_t(r * cols + c)];
                emit_row(t, seg, seg.first_row, buf.data(), dst);
            }
            continue;
        }
        for (int64_t r = 0; r < seg.n_rows; ++r, dst += row_bytes) {
            const int64_t row = seg.first_row + r;
            if (!seg.scale && same_storage(seg.tensor->dtype, t.type)) {
                std::memcpy(dst, seg.tensor->data + size_t(row * cols) * st_dtype_bytes(seg.tensor->dtype), row_bytes);
                continue;
            }
            read_row(seg, row, buf.data(), scales);
            emit_row(t, seg, row, buf.data(), dst);
        }
    }
}

}  // namespace

tensor_plan::tensor_plan(const safetensors_set &st, convert_summary &summary, int64_t fp8_block)
    : st_(st), summary_(summary), fp8_block_(fp8_block) {}

const st_tensor &tensor_plan::require(const std::string &hf_name, const std::vector<int64_t> &shape) {
    const st_tensor &t = st_.require(hf_name, shape);
    used_.insert(hf_name);
    return t;
}

row_segment tensor_plan::whole(const std::string &hf_name, const std::vector<int64_t> &shape) {
    const st_tensor &t = require(hf_name, shape);
    row_segment seg{&t, 0, 1};
    for (size_t i = 0; i + 1 < shape.size(); ++i) seg.n_rows *= shape[i];
    if (t.dtype != st_dtype::f8_e4m3) return seg;
    if (fp8_block_ <= 0 || shape.size() != 2)
        fail(error_kind::unsupported, "{}: tensor '{}' is F8_E4M3 but {}", t.file, hf_name,
             fp8_block_ <= 0 ? "config.json has no quantization_config.weight_block_size"
                             : "only matrices carry FP8 block scales");
    const int64_t b = fp8_block_;
    seg.scale = &require(hf_name + "_scale_inv", {(shape[0] + b - 1) / b, (shape[1] + b - 1) / b});
    seg.scale_block = b;
    return seg;
}

void tensor_plan::add(std::string name, ggml_type wanted, std::vector<int64_t> ne, std::vector<row_segment> rows) {
    const ggml_type type = convert_fit_type(wanted, ne[0]);
    if (type != wanted) {
        // One line per tensor class (the block number stripped), not one per layer.
        std::string cls = name.starts_with("blk.") ? name.substr(name.find('.', 4) + 1) : name;
        const std::string note = fmt::format("{}: {} -> {} (row length {})", cls, ggml_type_name(wanted),
                                             ggml_type_name(type), ne[0]);
        if (logged_.insert(note).second) {
            log_info("convert: {}", note);
            summary_.fallbacks.push_back(note);
        }
    }
    // llama.cpp names every weight "<tensor>.weight" (token_embd.weight); a name with its own
    // suffix (exp_probs_b.bias) is kept.
    if (!name.ends_with(".bias")) name += ".weight";
    plan_.push_back({std::move(name), type, std::move(ne), std::move(rows)});
}

void tensor_plan::check_all_used(const std::function<bool(const std::string &)> &skip, const std::string &what) const {
    for (const auto &[name, t] : st_.all()) {
        if (used_.count(name) || name.ends_with("rotary_emb.inv_freq") || skip(name)) continue;
        fail(error_kind::unsupported, "{}: tensor '{}' is not part of {}", t->file, name, what);
    }
}

// ---- the file ----

std::string model_name(const convert_options &opts, const fs::path &dir) {
    std::string name = opts.name;
    if (name.empty()) name = fs::absolute(dir).lexically_normal().filename().string();
    if (name.empty()) name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
    return name;
}

int64_t fp8_block_size(const json &cfg, const std::string &path) {
    const json *q = member(cfg, "quantization_config");
    if (!q) return 0;
    if (!q->is_object()) fail(error_kind::file_format, "{}: 'quantization_config' must be an object", path);
    const json *method = member(*q, "quant_method");
    if (!method || !method->is_string() || method->get<std::string>() != "fp8")
        fail(error_kind::unsupported, "{}: quantization_config.quant_method {} is not supported (fp8)", path,
             method ? method->dump() : "missing");
    const json *block = member(*q, "weight_block_size");
    if (!block || !block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
        (*block)[0] != (*block)[1] || (*block)[0].get<int64_t>() <= 0)
        fail(error_kind::unsupported, "{}: quantization_config.weight_block_size {} (square blocks, e.g. [128, 128])",
             path, block ? block->dump() : "missing");
    return (*block)[0].get<int64_t>();
}

// Written beside the target and renamed, so a failed conversion never leaves a truncated .gguf;
// a split model's parts are renamed to PREFIX-0000i-of-0000n.gguf of the target.
static std::vector<std::string> write_in_place(const gguf_writer &w, const convert_options &opts) {
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

void write_model(gguf_writer &w, const hf_vocab &voc, const std::string &pre, const tensor_plan &plan,
                 const convert_options &opts, convert_summary &sum) {
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre);
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
    for (const planned_tensor &t : plan.tensors())
        w.add_tensor(t.name, t.type, t.ne, [&t](uint8_t *dst) { fill_tensor(t, dst); });
    sum.n_tensors = int64_t(plan.tensors().size());

    sum.paths = write_in_place(w, opts);
    log_info("convert: wrote {} ({}, {} tensors, vocab {} of which {} from the tokenizer, {} / experts {})",
             opts.out_path, sum.arch, sum.n_tensors, sum.n_vocab, sum.n_tokenizer,
             ggml_type_name(opts.type), ggml_type_name(opts.expert_type.value_or(opts.type)));
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

}  // namespace tandem::convert_detail
