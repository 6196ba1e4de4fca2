// src/model/model_tensors.cpp - binds a model file's tensors by name and checks their shapes
// (qwen3moe here; deepseek2 in model_deepseek2.cpp).
#include "model_internal.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/quant.h"

#include <string>
#include <vector>

namespace tandem {

namespace model_detail {

std::string shape_text(const std::vector<int64_t> &ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

const gguf_tensor_info *bind(const gguf_file &file, const std::string &name, std::vector<int64_t> shape,
                             bool must_be_f32) {
    const gguf_tensor_info &t = file.tensor(name);
    if (t.ne != shape)
        fail(error_kind::file_format, "{}: tensor {} has shape {}, expected {}", file.path(), name, shape_text(t.ne),
             shape_text(shape));
    if (must_be_f32 && t.type != ggml_type::f32)
        fail(error_kind::unsupported, "{}: tensor {} must be f32, found {}", file.path(), name, ggml_type_name(t.type));
    if (!ggml_type_info(t.type).computable)
        fail(error_kind::unsupported, "{}: tensor {} has type {}, which Tandem cannot compute with", file.path(), name,
             ggml_type_name(t.type));
    const int64_t bad = find_nonfinite_scale(t.type, t.data, t.n_elements() / ggml_type_info(t.type).block_elems);
    if (bad >= 0)
        fail(error_kind::file_format, "{}: tensor {} ({}) block {} has a non-finite scale", file.path(), name,
             ggml_type_name(t.type), bad);
    return &t;
}

}  // namespace model_detail

model_tensors model_tensors_bind(const gguf_file &file, const model_hparams &hp) {
    using model_detail::bind;
    const int64_t d = hp.d_model, q_dim = int64_t(hp.n_head) * hp.d_head, kv_dim = int64_t(hp.n_head_kv) * hp.d_head;
    const int64_t ff = hp.d_ff_expert, ne = hp.n_expert, nv = hp.n_vocab;
    model_tensors t;
    t.tok_embd = bind(file, "token_embd.weight", {d, nv}, false);
    t.output_norm = bind(file, "output_norm.weight", {d}, true);
    t.output = file.find_tensor("output.weight") ? bind(file, "output.weight", {d, nv}, false) : t.tok_embd;
    if (hp.arch == model_arch::deepseek2) {
        model_detail::deepseek2_tensors_bind(file, hp, t);
        return t;
    }
    for (int32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        layer_tensors lt;
        lt.attn_norm = bind(file, p + "attn_norm.weight", {d}, true);
        lt.wq = bind(file, p + "attn_q.weight", {d, q_dim}, false);
        lt.wk = bind(file, p + "attn_k.weight", {d, kv_dim}, false);
        lt.wv = bind(file, p + "attn_v.weight", {d, kv_dim}, false);
        lt.wo = bind(file, p + "attn_output.weight", {q_dim, d}, false);
        lt.q_norm = bind(file, p + "attn_q_norm.weight", {hp.d_head}, true);
        lt.k_norm = bind(file, p + "attn_k_norm.weight", {hp.d_head}, true);
        lt.ffn_norm = bind(file, p + "ffn_norm.weight", {d}, true);
        lt.router = bind(file, p + "ffn_gate_inp.weight", {d, ne}, false);
        lt.gate_exps = bind(file, p + "ffn_gate_exps.weight", {d, ff, ne}, false);
        lt.up_exps = bind(file, p + "ffn_up_exps.weight", {d, ff, ne}, false);
        lt.down_exps = bind(file, p + "ffn_down_exps.weight", {ff, d, ne}, false);
        t.layers.push_back(lt);
    }
    return t;
}

}  // namespace tandem
