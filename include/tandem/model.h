// tandem/model.h - architecture descriptions read from GGUF metadata, and the model's bytes by
// class (what the placement planner and the memory plan need).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class gguf_file;

enum class model_arch { qwen3moe, deepseek2 };

// Hyper-parameters of a supported architecture, validated for consistency on read.
struct model_hparams {
    model_arch arch = model_arch::qwen3moe;
    std::string arch_name;       // general.architecture
    std::string name;            // general.name (may be empty)
    int32_t n_layer = 0;
    int32_t d_model = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int32_t d_head = 0;          // key/query head size (attention.key_length)
    int32_t d_head_v = 0;        // value head size (attention.value_length)
    int32_t n_expert = 0;
    int32_t n_expert_used = 0;
    int32_t d_ff_expert = 0;     // expert_feed_forward_length
    int32_t n_vocab = 0;         // rows of token_embd
    int32_t n_ctx_train = 0;
    float rms_eps = 1e-6f;
    float rope_theta = 10000.0f;
    bool norm_topk = true;       // renormalise the top-k router weights
};

const char *model_arch_name(model_arch arch);
// Throws file_format/unsupported naming the key when a value is missing or inconsistent.
model_hparams model_hparams_read(const gguf_file &file);

class gguf_writer;
// The inverse of model_hparams_read for the architecture keys (general.architecture and
// <arch>.*; feed_forward_length only when d_ff > 0), in llama.cpp's converter's order and types.
// n_vocab comes from token_embd, name from the caller; neither is written here.
void model_hparams_write(gguf_writer &w, const model_hparams &hp, int32_t d_ff);

// Bytes of the model's tensors by placement class, as stored in the file.
struct model_bytes {
    std::vector<uint64_t> layer_replicated;  // per layer: attention, norms, router, shared experts
    std::vector<uint64_t> layer_experts;     // per layer: routed experts (all of them)
    uint64_t embedding = 0;                  // token_embd
    uint64_t head = 0;                       // output (+ output_norm)
    uint64_t kv_per_token = 0;               // per token, all layers, K and V as the engine stores them
    uint64_t total() const;
};
model_bytes model_bytes_read(const gguf_file &file, const model_hparams &hp, uint32_t kv_elem_bytes);

}  // namespace tandem

namespace tandem {

struct gguf_tensor_info;

// The tensors of one Qwen3-MoE layer, bound by name and checked against the hyper-parameters.
struct layer_tensors {
    const gguf_tensor_info *attn_norm = nullptr;   // [d_model] f32
    const gguf_tensor_info *wq = nullptr;          // [d_model] x [n_head * d_head]
    const gguf_tensor_info *wk = nullptr;          // [d_model] x [n_head_kv * d_head]
    const gguf_tensor_info *wv = nullptr;          // [d_model] x [n_head_kv * d_head]
    const gguf_tensor_info *wo = nullptr;          // [n_head * d_head] x [d_model]
    const gguf_tensor_info *q_norm = nullptr;      // [d_head] f32
    const gguf_tensor_info *k_norm = nullptr;      // [d_head] f32
    const gguf_tensor_info *ffn_norm = nullptr;    // [d_model] f32
    const gguf_tensor_info *router = nullptr;      // [d_model] x [n_expert]
    const gguf_tensor_info *gate_exps = nullptr;   // [d_model] x [d_ff] x [n_expert]
    const gguf_tensor_info *up_exps = nullptr;     // [d_model] x [d_ff] x [n_expert]
    const gguf_tensor_info *down_exps = nullptr;   // [d_ff] x [d_model] x [n_expert]
};

struct model_tensors {
    const gguf_tensor_info *tok_embd = nullptr;     // [d_model] x [n_vocab]
    const gguf_tensor_info *output_norm = nullptr;  // [d_model] f32
    const gguf_tensor_info *output = nullptr;       // [d_model] x [n_vocab]; tok_embd when tied
    std::vector<layer_tensors> layers;
};

// Finds every tensor the architecture needs and checks shapes and types; throws file_format
// naming the tensor that is missing or misshaped, unsupported for a type we cannot compute.
model_tensors model_tensors_bind(const gguf_file &file, const model_hparams &hp);

}  // namespace tandem
