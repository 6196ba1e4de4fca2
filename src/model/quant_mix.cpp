// src/model/quant_mix.cpp - llama.cpp's quant mixes: the ftype table and llama-quantize's choice
// of each tensor's type (llama_tensor_get_type: categories, per-layer bumps, MoE rules, fallbacks).
#include "tandem/error.h"
#include "tandem/quantize.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <regex>

namespace tandem {
namespace {

using ft = llama_ftype;
using gt = ggml_type;

// llama-quantize's QUANT_OPTIONS (the quantizing ones) and llama_ftype_get_default_type.
constexpr std::array<quant_ftype, 34> ftype_table = {{
    {"Q4_0", ft::q4_0, gt::q4_0},        {"Q4_1", ft::q4_1, gt::q4_1},
    {"MXFP4_MOE", ft::mxfp4_moe, gt::mxfp4}, {"Q5_0", ft::q5_0, gt::q5_0},
    {"Q5_1", ft::q5_1, gt::q5_1},        {"IQ2_XXS", ft::iq2_xxs, gt::iq2_xxs},
    {"IQ2_XS", ft::iq2_xs, gt::iq2_xs},  {"IQ2_S", ft::iq2_s, gt::iq2_xs},
    {"IQ2_M", ft::iq2_m, gt::iq2_s},     {"IQ1_S", ft::iq1_s, gt::iq1_s},
    {"IQ1_M", ft::iq1_m, gt::iq1_m},     {"Q2_K", ft::q2_k, gt::q2_k},
    {"Q2_K_S", ft::q2_k_s, gt::q2_k},    {"IQ3_XXS", ft::iq3_xxs, gt::iq3_xxs},
    {"IQ3_S", ft::iq3_s, gt::iq3_s},     {"IQ3_M", ft::iq3_m, gt::iq3_s},
    {"Q3_K", ft::q3_k_m, gt::q3_k},      {"IQ3_XS", ft::iq3_xs, gt::iq3_s},
    {"Q3_K_S", ft::q3_k_s, gt::q3_k},    {"Q3_K_M", ft::q3_k_m, gt::q3_k},
    {"Q3_K_L", ft::q3_k_l, gt::q3_k},    {"IQ4_NL", ft::iq4_nl, gt::iq4_nl},
    {"IQ4_XS", ft::iq4_xs, gt::iq4_xs},  {"Q4_K", ft::q4_k_m, gt::q4_k},
    {"Q4_K_S", ft::q4_k_s, gt::q4_k},    {"Q4_K_M", ft::q4_k_m, gt::q4_k},
    {"Q5_K", ft::q5_k_m, gt::q5_k},      {"Q5_K_S", ft::q5_k_s, gt::q5_k},
    {"Q5_K_M", ft::q5_k_m, gt::q5_k},    {"Q6_K", ft::q6_k, gt::q6_k},
    {"Q8_0", ft::q8_0, gt::q8_0},        {"F16", ft::f16, gt::f16},
    {"BF16", ft::bf16, gt::bf16},        {"F32", ft::all_f32, gt::f32},
}};

enum class category { token_embd, attn_q, attn_v, attn_k, attn_qkv, attn_kv_b, attn_output, ffn_up, ffn_gate, ffn_down, output, other };

// tensor_get_category: the first match wins, in this order.
category category_of(const std::string &name) {
    if (name == "output.weight") return category::output;
    if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return category::token_embd;
    static const std::array<std::pair<const char *, category>, 9> parts = {{
        {"attn_qkv.weight", category::attn_qkv}, {"attn_kv_b.weight", category::attn_kv_b},
        {"attn_v.weight", category::attn_v},     {"attn_k.weight", category::attn_k},
        {"attn_q.weight", category::attn_q},     {"attn_output.weight", category::attn_output},
        {"ffn_up", category::ffn_up},            {"ffn_gate", category::ffn_gate},
        {"ffn_down", category::ffn_down},
    }};
    for (const auto &[part, cat] : parts)
        if (name.find(part) != std::string::npos) return cat;
    return category::other;
}

bool is_attn_v_like(category c) { return c == category::attn_v || c == category::attn_qkv || c == category::attn_kv_b; }

int n_dims(const std::vector<int64_t> &ne) {
    int n = 1;
    for (size_t i = 0; i < ne.size(); ++i)
        if (ne[i] > 1) n = int(i) + 1;
    return n;
}

// tensor_allows_quantization: matrices named *weight, except norms, routers and the small or
// positional tensors llama-quantize keeps (other architectures' names included, so a file of
// any architecture gets llama-quantize's choice).
bool allows_quantization(const quant_mix_tensor &t) {
    if (n_dims(t.ne) < 2 || !t.name.ends_with("weight")) return false;
    static const std::array<const char *, 31> kept = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
        "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", ".rel_pos",
        ".patch_embd", ".patch_merger", "a.rvq.codebook"};
    for (const char *part : kept)
        if (t.name.find(part) != std::string::npos) return false;
    return t.name != "position_embd.weight" && t.name != "token_types.weight";
}

// The layer number of blk.N.*, or -1 (sscanf("blk.%d.") as llama.cpp reads it).
int layer_of(const std::string &name) {
    if (!name.starts_with("blk.")) return -1;
    const char *begin = name.c_str() + 4;
    char *end = nullptr;
    const long v = std::strtol(begin, &end, 10);
    return end == begin ? -1 : int(v);
}

bool is_quantized(gt t) { return ggml_type_info(t).block_elems > 1; }

// llama-quantize's per-file state: counters advanced as tensors are visited.
struct mix_state {
    const quant_mix_model &m;
    const quant_mix_options &o;
    int n_attn_v = 0, i_attn_v = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
    bool tied_embeddings = true;  // until output.weight is seen
    int n_fallback = 0;

    int n_gqa() const { return m.n_head_kv > 0 ? m.n_head / m.n_head_kv : 0; }
    bool any(std::initializer_list<ft> set) const { return std::find(set.begin(), set.end(), o.ftype) != set.end(); }
    // layer_info: in an MoE model experts are not consecutive, so the layer comes from the name.
    int layer(int counter, const std::string &name) const {
        if (m.n_expert <= 1) return counter;
        const int l = layer_of(name);
        if (l < 0) fail(error_kind::config, "quantize: cannot determine the layer of tensor {}", name);
        if (l >= m.n_layer) fail(error_kind::config, "quantize: bad layer {} for tensor {} (the model has {})", l, name, m.n_layer);
        return l;
    }
};

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The head (and a tied embedding table): Q8_0 where rows are not whole K-blocks, Q5_K for the
// IQ1/IQ2 mixes, else Q6_K.
gt rule_output(const mix_state &s, gt t, const quant_mix_tensor &tensor, const std::string &arch) {
    if (s.o.output_type) return *s.o.output_type;
    if (s.o.ftype == ft::mxfp4_moe) return gt::q8_0;
    if (arch == "falcon" || tensor.ne[0] % ggml_type_info(t).block_elems != 0) return gt::q8_0;
    if (s.any({ft::iq2_xxs, ft::iq2_xs, ft::iq3_xxs, ft::iq1_s, ft::iq2_s, ft::iq2_m, ft::iq1_m})) return gt::q5_k;
    return t != gt::q8_0 ? gt::q6_k : t;
}

gt rule_token_embd(const mix_state &s, gt t) {
    if (s.o.token_embd_type) return *s.o.token_embd_type;
    if (s.any({ft::iq2_xxs, ft::iq2_xs, ft::iq1_s, ft::iq1_m})) return gt::q2_k;
    if (s.any({ft::iq2_s, ft::iq2_m, ft::iq3_xxs})) return gt::iq3_s;
    return t;
}

// The IQ1/IQ2 mixes: attn_v and the first eighth of ffn_down get more bits.
gt rule_low_bit(mix_state &s, gt t, category c) {
    const bool iq2_sm = s.any({ft::iq2_s, ft::iq2_m});
    if (is_attn_v_like(c)) {
        ++s.i_attn_v;
        if (s.n_gqa() >= 4 || s.m.n_expert >= 4) return gt::q4_k;
        return iq2_sm ? gt::iq3_s : gt::q2_k;
    }
    if (s.m.n_expert == 8 && c == category::attn_k) return gt::q4_k;
    if (c == category::ffn_down) {
        // Counted over ffn_down tensors, not parsed from the name, as llama.cpp does here.
        const bool early = s.i_ffn_down < s.m.n_layer / 8;
        ++s.i_ffn_down;
        return early ? (iq2_sm ? gt::iq3_s : gt::q2_k) : t;
    }
    if (c == category::attn_output) {
        if (s.m.n_expert == 8) return gt::q5_k;
        if (s.any({ft::iq1_s, ft::iq1_m})) return gt::iq2_xxs;
        if (iq2_sm) return gt::iq3_s;
    }
    return t;
}

gt rule_attn_v(mix_state &s, gt t, bool llama_70b) {
    const int gqa = s.n_gqa();
    const ft f = s.o.ftype;
    if (f == ft::q2_k) t = gqa >= 4 ? gt::q4_k : gt::q3_k;
    else if (f == ft::q2_k_s && gqa >= 4) t = gt::q4_k;
    else if (f == ft::iq3_xxs) t = gqa >= 4 ? gt::q4_k : !s.o.has_imatrix ? gt::iq3_s : gt::iq3_xxs;
    else if (s.any({ft::iq3_xs, ft::iq3_s}) && gqa >= 4) t = gt::q4_k;
    else if (f == ft::iq3_m) t = gt::q4_k;
    else if (f == ft::q3_k_m) t = s.i_attn_v < 2 ? gt::q5_k : gt::q4_k;
    else if (f == ft::q3_k_l) t = gt::q5_k;
    else if (s.any({ft::iq4_nl, ft::iq4_xs}) && gqa >= 4) t = gt::q5_k;
    else if (s.any({ft::q4_k_m, ft::q5_k_m}) && use_more_bits(s.i_attn_v, s.n_attn_v)) t = gt::q6_k;
    else if (f == ft::q4_k_s && s.i_attn_v < 4) t = gt::q5_k;
    // A 70B llama's attn_v is 8x smaller than attn_q: more bits cost little.
    if (llama_70b && (t == gt::q3_k || t == gt::q4_k)) t = gt::q5_k;
    if (s.m.n_expert == 8) t = gt::q8_0;
    ++s.i_attn_v;
    return t;
}

gt rule_ffn_down(mix_state &s, gt t, const std::string &name, bool falcon) {
    const int i = s.layer(s.i_ffn_down, name), n = s.m.n_layer;
    const ft f = s.o.ftype;
    ++s.i_ffn_down;
    if (f == ft::q2_k) return gt::q3_k;
    if (f == ft::q2_k_s) return i < n / 8 ? gt::q4_k : t;
    if (f == ft::iq3_xxs && !s.o.has_imatrix) return i < n / 8 ? gt::q4_k : gt::q3_k;
    if (f == ft::q3_k_m) return i < n / 16 ? gt::q5_k : !falcon || use_more_bits(i, n) ? gt::q4_k : gt::q3_k;
    if (f == ft::iq3_m && (i < n / 8 || (s.m.n_expert == 8 && use_more_bits(i, n)))) return gt::q4_k;
    if (f == ft::q3_k_l) return falcon ? gt::q4_k : gt::q5_k;
    if (f == ft::q4_k_m) {
        if (falcon) return i < n / 16 ? gt::q6_k : use_more_bits(i, n) ? gt::q5_k : gt::q4_k;
        return use_more_bits(i, n) ? gt::q6_k : t;
    }
    if (i < n / 8 && s.any({ft::iq4_nl, ft::iq4_xs}) && !s.o.has_imatrix) return gt::q5_k;
    if (f == ft::q5_k_m && use_more_bits(i, n)) return gt::q6_k;
    if (f == ft::q4_k_s && !falcon && i < n / 8) return gt::q5_k;
    // Q4_1/Q5_1 guard the first ffn_down layers only with an imatrix (without one they go wrong there).
    if (s.any({ft::q4_0, ft::q5_0}) && s.o.has_imatrix && i < n / 8) return f == ft::q4_0 ? gt::q4_1 : gt::q5_1;
    return t;
}

gt rule_attn_output(const mix_state &s, gt t, bool falcon) {
    const ft f = s.o.ftype;
    if (falcon) return f == ft::q3_k_l ? gt::q4_k : t;
    if (s.m.n_expert == 8) {
        const bool bump = s.any({ft::q2_k, ft::iq3_xs, ft::iq3_xxs, ft::q3_k_s, ft::q3_k_m, ft::iq4_nl, ft::q4_k_s,
                                 ft::q4_k_m, ft::iq3_s, ft::iq3_m, ft::iq4_xs});
        return bump ? gt::q5_k : t;
    }
    if (f == ft::q2_k) return gt::q3_k;
    if (f == ft::iq3_xxs) return gt::iq3_s;
    if (f == ft::q3_k_m || f == ft::iq3_m) return gt::q4_k;
    if (f == ft::q3_k_l) return gt::q5_k;
    return t;
}

// llama_tensor_get_type_impl: the rule of the tensor's category for the file's ftype.
gt rule_type(mix_state &s, gt t, const quant_mix_tensor &tensor, category c, const std::string &arch) {
    const ft f = s.o.ftype;
    const bool falcon = arch == "falcon";
    const bool llama_70b = arch == "llama" && s.m.n_layer == 80 && s.m.n_head != s.m.n_head_kv;
    if (c == category::output || (s.tied_embeddings && c == category::token_embd)) return rule_output(s, t, tensor, arch);
    // MXFP4_MOE: expert tensors (3-D) MXFP4, everything else Q8_0.
    if (f == ft::mxfp4_moe) return tensor.ne.size() > 2 && tensor.ne[2] > 1 ? gt::mxfp4 : gt::q8_0;
    if (c == category::token_embd) return rule_token_embd(s, t);
    if (s.any({ft::iq2_xxs, ft::iq2_xs, ft::iq1_s, ft::iq2_s, ft::iq2_m, ft::iq1_m})) return rule_low_bit(s, t, c);
    if (is_attn_v_like(c)) return rule_attn_v(s, t, llama_70b);
    switch (c) {
    case category::attn_k:
        if (s.m.n_expert == 8) return gt::q8_0;
        return f == ft::iq3_xs ? gt::iq3_xxs : f == ft::iq3_xxs ? gt::iq2_s : t;
    case category::attn_q: return f == ft::iq3_xs ? gt::iq3_xxs : f == ft::iq3_xxs ? gt::iq2_s : t;
    case category::ffn_down: return rule_ffn_down(s, t, tensor.name, falcon);
    case category::attn_output: return rule_attn_output(s, t, falcon);
    case category::attn_qkv:  // unreachable: attn_v-like
    case category::attn_kv_b: return t;
    case category::ffn_gate:
    case category::ffn_up: {
        int &counter = c == category::ffn_gate ? s.i_ffn_gate : s.i_ffn_up;
        const int i = s.layer(counter, tensor.name), n = s.m.n_layer;
        ++counter;
        return f == ft::iq3_xs && i >= n / 8 && i < 7 * n / 8 ? gt::iq3_xxs : t;
    }
    default: return t;
    }
}

// tensor_type_fallback: a type whose block does not divide the row length is replaced by one of
// 32-element blocks, or F16 when even that does not fit.
gt fallback_type(mix_state &s, gt t, const quant_mix_tensor &tensor, bool &fell_back) {
    const int64_t n_cols = tensor.ne[0];
    if (n_cols % ggml_type_info(t).block_elems == 0) return t;
    ++s.n_fallback;
    fell_back = true;
    gt r;
    switch (t) {
    case gt::iq1_s: case gt::iq1_m: case gt::iq2_xxs: case gt::iq2_xs: case gt::iq2_s: case gt::iq3_xxs:
    case gt::iq3_s: case gt::iq4_xs: r = gt::iq4_nl; break;
    case gt::q2_k: case gt::q3_k: case gt::tq1_0: case gt::tq2_0: r = gt::q4_0; break;
    case gt::q4_k: r = gt::q5_0; break;
    case gt::q5_k: r = gt::q5_1; break;
    case gt::q6_k: r = gt::q8_0; break;
    default:
        fail(error_kind::config, "quantize: tensor {} has rows of {} elements and no fallback exists for {}", tensor.name,
             n_cols, ggml_type_name(t));
    }
    return n_cols % ggml_type_info(r).block_elems == 0 ? r : gt::f16;
}

}  // namespace

std::optional<quant_ftype> quant_ftype_find(std::string_view name) {
    for (const quant_ftype &f : ftype_table) {
        const std::string_view known = f.name;
        if (known.size() != name.size()) continue;
        bool same = true;
        for (size_t i = 0; i < name.size() && same; ++i)
            same = std::toupper(static_cast<unsigned char>(name[i])) == known[i];
        if (same) return f;
    }
    return std::nullopt;
}

std::vector<std::string> quant_ftype_names() {
    std::vector<std::string> names;
    for (const quant_ftype &f : ftype_table) names.emplace_back(f.name);
    return names;
}

std::vector<size_t> quant_mix_order(const std::vector<std::string> &names) {
    std::vector<size_t> order(names.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const int la = layer_of(names[a]), lb = layer_of(names[b]);
        return la != lb ? la < lb : names[a] < names[b];
    });
    return order;
}

bool quant_mix_requires_imatrix(const std::string &name, ggml_type type, llama_ftype ftype) {
    if (name == "token_embd.weight" || name == "per_layer_token_embd.weight" || name == "output.weight") return false;
    switch (type) {
    case gt::iq3_xxs: case gt::iq2_xxs: case gt::iq2_xs: case gt::iq2_s: case gt::iq1_m: case gt::iq1_s: return true;
    case gt::q2_k: return ftype == ft::q2_k_s;  // only a Q2_K_S file's Q2_K needs one
    default: return false;
    }
}

std::vector<quant_mix_choice> quant_mix_types(const quant_mix_model &model, const quant_mix_options &options,
                                              const std::vector<quant_mix_tensor> &tensors) {
    const std::string &arch = model.arch;
    const quant_ftype *base = nullptr;
    for (const quant_ftype &f : ftype_table)
        if (f.ftype == options.ftype) base = &f;
    if (!base) fail(error_kind::config, "quantize: file type {} has no quantization rules", uint32_t(options.ftype));
    std::vector<std::pair<std::regex, gt>> patterns;
    for (const auto &[pattern, type] : options.overrides) {
        std::string lower = pattern;
        for (char &ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        try {
            patterns.emplace_back(std::regex(lower), type);
        } catch (const std::regex_error &e) {
            fail(error_kind::config, "--tensor-type: '{}' is not a valid regular expression ({})", pattern, e.what());
        }
    }
    mix_state s{model, options};
    for (const quant_mix_tensor &t : tensors) {
        const category c = category_of(t.name);
        s.n_attn_v += is_attn_v_like(c);
        if (c == category::output) s.tied_embeddings = false;
    }
    std::vector<quant_mix_choice> out;
    for (const quant_mix_tensor &t : tensors) {
        quant_mix_choice choice{t.type};
        const category c = category_of(t.name);
        if (!allows_quantization(t)) choice.type = t.type;
        else if (options.token_embd_type && c == category::token_embd) choice.type = *options.token_embd_type;
        else if (options.output_type && c == category::output) choice.type = *options.output_type;
        else if (!is_quantized(base->base)) choice.type = base->base;
        else {
            gt type = base->base;
            bool manual = false;
            for (const auto &[re, over] : patterns)
                if (std::regex_search(t.name, re)) {
                    type = over;
                    manual = true;
                    break;
                }
            if (!manual && !options.pure) type = rule_type(s, type, t, c, arch);
            choice.type = fallback_type(s, type, t, choice.fallback);
        }
        out.push_back(choice);
    }
    return out;
}

}  // namespace tandem
