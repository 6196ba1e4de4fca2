// tandem/model.h - architecture descriptions read from GGUF metadata, and the model's bytes by
// class (what the placement planner and the memory plan need).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class gguf_file;

enum class model_arch { qwen3moe, deepseek2 };

// How a router's logits become expert scores (llama.cpp's expert_gating_func values).
enum class expert_gating : uint8_t { softmax = 1, sigmoid = 2 };

// YaRN rope scaling as DeepSeek uses it (rope.scaling.type "yarn").
struct rope_yarn {
    float factor = 1.0f;          // rope.scaling.factor: trained context / original context
    int32_t n_ctx_orig = 0;       // rope.scaling.original_context_length
    float beta_fast = 32.0f;      // rope.scaling.yarn_beta_fast: rotations above which dims extrapolate
    float beta_slow = 1.0f;       // rope.scaling.yarn_beta_slow: rotations below which dims interpolate
    float mscale_all_dim = 0.0f;  // rope.scaling.yarn_log_multiplier / 0.1 (llama.cpp's deepseek2 convention)
};

// Hyper-parameters of a supported architecture, validated for consistency on read.
struct model_hparams {
    model_arch arch = model_arch::qwen3moe;
    std::string arch_name;       // general.architecture
    std::string name;            // general.name (may be empty)
    int32_t n_layer = 0;
    int32_t d_model = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;       // as the file says (deepseek2: 1 in the MLA form, n_head in the legacy form)
    int32_t d_head = 0;          // key/query head size (deepseek2: the nope part + d_rope)
    int32_t d_head_v = 0;        // value head size
    int32_t n_expert = 0;
    int32_t n_expert_used = 0;
    int32_t d_ff_expert = 0;     // expert_feed_forward_length
    int32_t n_vocab = 0;         // rows of token_embd
    int32_t n_ctx_train = 0;
    float rms_eps = 1e-6f;
    float rope_theta = 10000.0f;
    bool norm_topk = true;       // renormalise the top-k router weights

    // deepseek2 only (multi-head latent attention, shared experts, grouped routing); zero otherwise.
    int32_t q_lora_rank = 0;     // 0: queries through one attn_q matrix
    int32_t kv_lora_rank = 0;    // width of the cached latent
    int32_t d_rope = 0;          // rotated tail of each query/key head (rope.dimension_count)
    int32_t n_expert_shared = 0; // always-on experts: one FFN of n_expert_shared * d_ff_expert
    int32_t n_dense_lead = 0;    // leading layers with a dense FFN of d_ff instead of experts
    int32_t d_ff = 0;            // feed_forward_length (the dense layers)
    int32_t n_expert_group = 1;  // routing picks n_expert_group_used groups first, then experts in them
    int32_t n_expert_group_used = 1;
    expert_gating gating = expert_gating::softmax;
    float expert_weights_scale = 1.0f;  // routed weights are multiplied by it (routed_scaling_factor)
    bool yarn = false;           // rope scaling by yarn_params
    rope_yarn yarn_params;

    int32_t d_nope() const { return d_head - d_rope; }  // deepseek2: the unrotated part of a query head
};

// What one layer computes: the one switch over architectures the engines take.
enum class layer_attention : uint8_t { gqa_qk_norm, mla };
enum class layer_router : uint8_t {
    softmax_topk,  // softmax, top-k, optional renormalisation (qwen3moe)
    grouped,       // softmax or sigmoid, selection bias, group-limited top-k, scaled (deepseek2)
    none,          // a dense layer
};
enum class layer_ffn : uint8_t { routed, routed_shared, dense };
struct layer_recipe {
    layer_attention attention;
    layer_router router;
    layer_ffn ffn;
    int32_t n_expert_used;       // routed experts a row takes in this layer (0: dense FFN)
};
layer_recipe model_layer_recipe(const model_hparams &hp, int32_t layer);

// What one token leaves in one layer's cache: n_planes planes of `width` values. qwen3moe: K and V,
// n_head_kv * d_head each; deepseek2: one plane, the normalised latent then the roped key.
struct model_kv_shape {
    int32_t n_planes = 0;
    int64_t width = 0;
    int64_t per_token() const { return int64_t(n_planes) * width; }
};
model_kv_shape model_kv_shape_of(const model_hparams &hp);
// deepseek2: the attention's softmax scale, 1/sqrt(d_head) times YaRN's mscale(factor, mscale_all_dim)^2.
float model_mla_softmax_scale(const model_hparams &hp);

const char *model_arch_name(model_arch arch);
// Throws file_format/unsupported naming the key when a value is missing or inconsistent.
model_hparams model_hparams_read(const gguf_file &file);

class gguf_writer;
// The inverse of model_hparams_read for the architecture keys (general.architecture and
// <arch>.*; qwen3moe: feed_forward_length only when d_ff > 0), in llama.cpp's converter's order and
// types. n_vocab comes from token_embd, name from the caller; neither is written here (deepseek2
// writes vocab_size from hp.n_vocab, as llama.cpp's converter does).
void model_hparams_write(gguf_writer &w, const model_hparams &hp, int32_t d_ff);

// Bytes of the model's tensors by placement class, as stored in the file.
struct model_bytes {
    std::vector<uint64_t> layer_replicated;  // per layer: attention, norms, router, shared experts, dense FFN
    std::vector<uint64_t> layer_experts;     // per layer: routed experts (all of them)
    uint64_t embedding = 0;                  // token_embd
    uint64_t head = 0;                       // output (+ output_norm)
    uint64_t kv_per_token = 0;               // per token, all layers, the cache as the engine stores it
                                             // (K and V, or deepseek2's latent and roped key)
    uint64_t total() const;
};
model_bytes model_bytes_read(const gguf_file &file, const model_hparams &hp, double kv_elem_bytes);

}  // namespace tandem

namespace tandem {

struct gguf_tensor_info;

// The tensors of one layer, bound by name and checked against the hyper-parameters. Pointers an
// architecture (or a layer kind) does not use stay null. Shapes in ggml order (ne[0] first).
struct layer_tensors {
    const gguf_tensor_info *attn_norm = nullptr;   // [d_model] f32
    const gguf_tensor_info *wq = nullptr;          // [d_model] x [n_head * d_head] (deepseek2: without q LoRA)
    const gguf_tensor_info *wk = nullptr;          // [d_model] x [n_head_kv * d_head]
    const gguf_tensor_info *wv = nullptr;          // [d_model] x [n_head_kv * d_head]
    const gguf_tensor_info *wo = nullptr;          // [n_head * d_head_v] x [d_model]
    const gguf_tensor_info *q_norm = nullptr;      // [d_head] f32
    const gguf_tensor_info *k_norm = nullptr;      // [d_head] f32
    const gguf_tensor_info *ffn_norm = nullptr;    // [d_model] f32
    const gguf_tensor_info *router = nullptr;      // [d_model] x [n_expert]
    const gguf_tensor_info *gate_exps = nullptr;   // [d_model] x [d_ff] x [n_expert]
    const gguf_tensor_info *up_exps = nullptr;     // [d_model] x [d_ff] x [n_expert]
    const gguf_tensor_info *down_exps = nullptr;   // [d_ff] x [d_model] x [n_expert]

    // deepseek2: multi-head latent attention
    const gguf_tensor_info *wq_a = nullptr;        // attn_q_a [d_model] x [q_lora_rank]
    const gguf_tensor_info *q_a_norm = nullptr;    // attn_q_a_norm [q_lora_rank] f32
    const gguf_tensor_info *wq_b = nullptr;        // attn_q_b [q_lora_rank] x [n_head * d_head]
    const gguf_tensor_info *wkv_a = nullptr;       // attn_kv_a_mqa [d_model] x [kv_lora_rank + d_rope]
    const gguf_tensor_info *kv_a_norm = nullptr;   // attn_kv_a_norm [kv_lora_rank] f32
    // The latent's up-projection, in one of two forms: attn_kv_b [kv_lora_rank] x [n_head * (d_nope +
    // d_head_v)] (per head d_nope key rows, then d_head_v value rows), or llama.cpp's split form
    // attn_k_b [d_nope] x [kv_lora_rank] x [n_head] (transposed key rows) and attn_v_b
    // [kv_lora_rank] x [d_head_v] x [n_head].
    const gguf_tensor_info *wkv_b = nullptr;
    const gguf_tensor_info *wk_b = nullptr;
    const gguf_tensor_info *wv_b = nullptr;
    // deepseek2: routing bias, shared experts, dense FFN of the leading layers
    const gguf_tensor_info *exp_probs_b = nullptr; // exp_probs_b.bias [n_expert] f32; may be null
    const gguf_tensor_info *gate_shexp = nullptr;  // [d_model] x [n_expert_shared * d_ff_expert]
    const gguf_tensor_info *up_shexp = nullptr;    // [d_model] x [n_expert_shared * d_ff_expert]
    const gguf_tensor_info *down_shexp = nullptr;  // [n_expert_shared * d_ff_expert] x [d_model]
    const gguf_tensor_info *ffn_gate = nullptr;    // [d_model] x [d_ff]
    const gguf_tensor_info *ffn_up = nullptr;      // [d_model] x [d_ff]
    const gguf_tensor_info *ffn_down = nullptr;    // [d_ff] x [d_model]
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
