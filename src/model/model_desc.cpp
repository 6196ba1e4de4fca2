// src/model/model_desc.cpp - reads and validates architecture hyper-parameters from GGUF
// metadata (qwen3moe here, deepseek2 in model_deepseek2.cpp), says what each layer computes and
// what it caches, and sums the model's bytes by placement class.
#include "model_internal.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"

#include <cmath>
#include <string>

namespace tandem {

const char *model_arch_name(model_arch arch) {
    switch (arch) {
    case model_arch::qwen3moe: return "qwen3moe";
    case model_arch::deepseek2: return "deepseek2";
    }
    return "unknown";
}

uint64_t model_bytes::total() const {
    uint64_t sum = embedding + head;
    for (uint64_t b : layer_replicated) sum += b;
    for (uint64_t b : layer_experts) sum += b;
    return sum;
}

namespace model_detail {

int32_t read_positive(const gguf_file &file, const std::string &key, int64_t max_value) {
    const int64_t v = file.get_int(key);
    if (v <= 0 || v > max_value)
        fail(error_kind::file_format, "{}: {} = {} is out of range (1..{})", file.path(), key, v, max_value);
    return static_cast<int32_t>(v);
}

int32_t read_count(const gguf_file &file, const std::string &key, int64_t max_value, int32_t fallback) {
    if (!file.has(key)) return fallback;
    const int64_t v = file.get_int(key);
    if (v < 0 || v > max_value)
        fail(error_kind::file_format, "{}: {} = {} is out of range (0..{})", file.path(), key, v, max_value);
    return static_cast<int32_t>(v);
}

void qwen3moe_hparams_read(const gguf_file &file, model_hparams &hp) {
    const std::string a = hp.arch_name + ".";
    if (file.has(a + "attention.key_length")) {
        hp.d_head = read_positive(file, a + "attention.key_length", 65536);
    } else {
        if (hp.d_model % hp.n_head != 0)
            fail(error_kind::file_format, "{}: {}attention.key_length missing and embedding_length {} is not a multiple "
                 "of head_count {}", file.path(), a, hp.d_model, hp.n_head);
        hp.d_head = hp.d_model / hp.n_head;
    }
    hp.d_head_v = file.has(a + "attention.value_length") ? read_positive(file, a + "attention.value_length", 65536)
                                                         : hp.d_head;
    hp.norm_topk = file.get_bool(a + "expert_weights_norm", true);
    if (hp.n_head % hp.n_head_kv != 0)
        fail(error_kind::file_format, "{}: head_count {} is not a multiple of head_count_kv {}", file.path(), hp.n_head,
             hp.n_head_kv);
    if (hp.d_head % 2 != 0)
        fail(error_kind::file_format, "{}: key_length {} must be even for RoPE", file.path(), hp.d_head);
    if (hp.d_head_v != hp.d_head)
        fail(error_kind::unsupported, "{}: value_length {} != key_length {} is not supported for qwen3moe", file.path(),
             hp.d_head_v, hp.d_head);
    if (file.has(a + "rope.scaling.type")) {
        const std::string type = file.get_string(a + "rope.scaling.type");
        if (type != "none")
            fail(error_kind::unsupported, "{}: rope scaling '{}' is not supported for qwen3moe yet", file.path(), type);
    }
}

}  // namespace model_detail

model_hparams model_hparams_read(const gguf_file &file) {
    using namespace model_detail;
    model_hparams hp;
    hp.arch_name = file.get_string("general.architecture");
    if (hp.arch_name == "qwen3moe") {
        hp.arch = model_arch::qwen3moe;
    } else if (hp.arch_name == "deepseek2") {
        hp.arch = model_arch::deepseek2;
    } else {
        fail(error_kind::unsupported, "{}: architecture '{}' is not supported (supported: qwen3moe, deepseek2)",
             file.path(), hp.arch_name);
    }
    hp.name = file.get_string("general.name", "");
    const std::string a = hp.arch_name + ".";
    constexpr int64_t big = 1 << 20;
    hp.n_layer = read_positive(file, a + "block_count", 4096);
    hp.d_model = read_positive(file, a + "embedding_length", big);
    hp.n_head = read_positive(file, a + "attention.head_count", 4096);
    hp.n_head_kv = read_positive(file, a + "attention.head_count_kv", 4096);
    hp.n_expert = read_positive(file, a + "expert_count", 65536);
    hp.n_expert_used = read_positive(file, a + "expert_used_count", 65536);
    hp.d_ff_expert = read_positive(file, a + "expert_feed_forward_length", big);
    hp.n_ctx_train = read_positive(file, a + "context_length", int64_t{1} << 30);
    hp.rms_eps = static_cast<float>(file.get_float(a + "attention.layer_norm_rms_epsilon", 1e-6));
    hp.rope_theta = static_cast<float>(file.get_float(a + "rope.freq_base", 10000.0));
    if (hp.n_expert_used > hp.n_expert)
        fail(error_kind::file_format, "{}: expert_used_count {} exceeds expert_count {}", file.path(), hp.n_expert_used,
             hp.n_expert);
    if (!(hp.rms_eps > 0.0f) || !(hp.rope_theta > 0.0f))
        fail(error_kind::file_format, "{}: rms epsilon and rope.freq_base must be positive", file.path());
    if (hp.arch == model_arch::qwen3moe)
        qwen3moe_hparams_read(file, hp);
    else
        deepseek2_hparams_read(file, hp);
    const gguf_tensor_info &embd = file.tensor("token_embd.weight");
    if (embd.ne.size() != 2 || embd.ne[0] != hp.d_model)
        fail(error_kind::file_format, "{}: token_embd.weight must be [{}, n_vocab]", file.path(), hp.d_model);
    hp.n_vocab = static_cast<int32_t>(embd.ne[1]);
    return hp;
}

void model_hparams_write(gguf_writer &w, const model_hparams &hp, int32_t d_ff) {
    if (hp.arch == model_arch::deepseek2) return model_detail::deepseek2_hparams_write(w, hp);
    const std::string a = hp.arch_name + ".";
    w.set_string("general.architecture", hp.arch_name);
    w.set_u32(a + "block_count", uint32_t(hp.n_layer));
    w.set_u32(a + "context_length", uint32_t(hp.n_ctx_train));
    w.set_u32(a + "embedding_length", uint32_t(hp.d_model));
    if (d_ff > 0) w.set_u32(a + "feed_forward_length", uint32_t(d_ff));
    w.set_u32(a + "attention.head_count", uint32_t(hp.n_head));
    w.set_u32(a + "attention.head_count_kv", uint32_t(hp.n_head_kv));
    w.set_f32(a + "rope.freq_base", hp.rope_theta);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", hp.rms_eps);
    w.set_u32(a + "expert_used_count", uint32_t(hp.n_expert_used));
    w.set_u32(a + "attention.key_length", uint32_t(hp.d_head));
    w.set_u32(a + "attention.value_length", uint32_t(hp.d_head_v));
    w.set_u32(a + "expert_count", uint32_t(hp.n_expert));
    w.set_u32(a + "expert_feed_forward_length", uint32_t(hp.d_ff_expert));
}

layer_recipe model_layer_recipe(const model_hparams &hp, int32_t layer) {
    switch (hp.arch) {
    case model_arch::qwen3moe:
        return {layer_attention::gqa_qk_norm, layer_router::softmax_topk, layer_ffn::routed, hp.n_expert_used};
    case model_arch::deepseek2:
        if (layer < hp.n_dense_lead) return {layer_attention::mla, layer_router::none, layer_ffn::dense, 0};
        return {layer_attention::mla, layer_router::grouped,
                hp.n_expert_shared > 0 ? layer_ffn::routed_shared : layer_ffn::routed, hp.n_expert_used};
    }
    TANDEM_ASSERT(false, "unknown architecture");
}

model_kv_shape model_kv_shape_of(const model_hparams &hp) {
    switch (hp.arch) {
    case model_arch::qwen3moe: return {2, int64_t(hp.n_head_kv) * hp.d_head};
    case model_arch::deepseek2: return {1, int64_t(hp.kv_lora_rank) + hp.d_rope};
    }
    TANDEM_ASSERT(false, "unknown architecture");
}

float model_mla_softmax_scale(const model_hparams &hp) {
    double scale = 1.0 / std::sqrt(double(hp.d_head));
    const rope_yarn &y = hp.yarn_params;
    if (hp.yarn && y.factor > 1.0f && y.mscale_all_dim > 0.0f) {
        const double m = 0.1 * double(y.mscale_all_dim) * std::log(double(y.factor)) + 1.0;
        scale *= m * m;
    }
    return float(scale);
}

model_bytes model_bytes_read(const gguf_file &file, const model_hparams &hp, double kv_elem_bytes) {
    model_bytes bytes;
    bytes.layer_replicated.assign(hp.n_layer, 0);
    bytes.layer_experts.assign(hp.n_layer, 0);
    for (const gguf_tensor_info &t : file.tensors()) {
        const std::string &n = t.name;
        if (n.rfind("blk.", 0) == 0) {
            int layer = -1;
            const size_t dot = n.find('.', 4);
            if (dot != std::string::npos && dot > 4 && dot - 4 <= 6 &&
                n.find_first_not_of("0123456789", 4) == dot)
                layer = std::stoi(n.substr(4, dot - 4));
            if (layer < 0 || layer >= hp.n_layer)
                fail(error_kind::file_format, "{}: tensor {} names a layer outside 0..{}", file.path(), n, hp.n_layer - 1);
            // Routed experts split across a pair; shared experts (_shexp) and dense FFNs are replicated.
            const bool routed = n.find("_exps.") != std::string::npos;
            (routed ? bytes.layer_experts : bytes.layer_replicated)[layer] += t.n_bytes;
        } else if (n == "token_embd.weight") {
            bytes.embedding += t.n_bytes;
        } else {
            bytes.head += t.n_bytes;  // output, output_norm
        }
    }
    if (!file.find_tensor("output.weight")) bytes.head += file.tensor("token_embd.weight").n_bytes;  // tied head
    bytes.kv_per_token = uint64_t(std::ceil(double(uint64_t(hp.n_layer) * uint64_t(model_kv_shape_of(hp).per_token())) * kv_elem_bytes));
    return bytes;
}

}  // namespace tandem
