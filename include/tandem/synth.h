// tandem/synth.h - random-weight models of real shapes (benchmarks, tests, the demo model).
#pragma once

#include "tandem/model.h"
#include "tandem/quantize.h"
#include "tandem/types.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

// deepseek2 shapes: multi-head latent attention, shared experts, grouped routing, YaRN.
struct synth_mla {
    int32_t q_lora_rank = 0;             // 0: plain attn_q
    int32_t kv_lora_rank = 0;
    int32_t d_nope = 0, d_rope = 0, d_v = 0;
    int32_t n_expert_shared = 0, n_dense_lead = 0;
    int32_t n_group = 1, n_group_used = 1;
    bool sigmoid = false;                // gating: sigmoid with a selection bias, else softmax
    float weights_scale = 1.0f;
    bool norm_topk = false;
    float yarn_factor = 0.0f;            // 0: no rope scaling
    int32_t yarn_n_ctx_orig = 0;
    float mscale_all_dim = 0.0f;
};

struct synth_preset {
    std::string name;
    int32_t n_layer, d_model, n_head, n_head_kv, d_head, n_expert, n_expert_used, d_ff_expert, d_ff;
    int32_t n_vocab, n_ctx_train;
    float rope_theta, rms_eps;
    model_arch arch = model_arch::qwen3moe;
    synth_mla mla{};                     // deepseek2 only
};

// "tiny", "qwen3-30b-a3b", "deepseek-v3", ... (synth_preset_names); nullopt for an unknown name.
std::optional<synth_preset> synth_preset_find(const std::string &name);
std::vector<std::string> synth_preset_names();

struct synth_options {
    synth_preset preset;
    ggml_type type = ggml_type::q4_k;   // matrices (attention, experts, embedding, head)
    int32_t n_layer = 0;                // 0: the preset's
    uint64_t seed = 1;
    int32_t n_threads = 0;              // 0: all cores
    // llama.cpp's Q4_K_M mix on top of `type` (q4_k): Q6_K for the head, and for attn_v and the
    // experts' down in the first and last eighth of the layers and every third layer between
    // (llama-quant's use_more_bits), as in published Q4_K_M files.
    bool q4_k_m = false;
    // deepseek2: write the latent's up-projection as one attn_kv_b tensor with llama.cpp's legacy
    // keys, instead of the split attn_k_b/attn_v_b form of its current converter.
    bool mla_kv_b = false;
    uint64_t split_max_bytes = 0;  // > 0: llama.cpp's split files of at most this many bytes each
    // A llama.cpp mix (qwen3moe presets): each tensor gets the type llama-quantize chooses for this
    // file type with an importance matrix (quant_mix_types); `type` is then the mix's base type.
    std::optional<llama_ftype> mix{};
};

// What `tandem synth --type NAME` writes: a ggml type name (q4_K, iq2_xxs: every matrix of that
// type), q4_k_m (the Q4_K_M mix above), or a llama.cpp file type as llama-quantize spells it, in
// capitals (IQ2_XXS, IQ3_M, Q3_K_S: that mix); a file type that is no ggml type's name (iq2_m,
// q3_k_l) in any case. Throws error(config) listing both kinds of name for anything else.
struct synth_type_choice {
    ggml_type type;
    bool q4_k_m = false;
    std::optional<llama_ftype> mix{};
};
synth_type_choice synth_type_parse(const std::string &name);

// Writes the model. Q8_0, Q4_K and Q6_K tensors are written as random blocks directly (no float
// pass), the other quantized types as random floats through their quantizer (far slower), scaled
// so dequantised weights have std ~ 1/sqrt(fan_in) and a near-zero mean. deepseek2 tensors whose
// rows do not fill the type's blocks (attn_k_b's d_nope) fall back as `tandem convert` does.
// Returns the files written (one, or the parts of a split model).
std::vector<std::string> synth_write(const synth_options &options, const std::string &path);

}  // namespace tandem
