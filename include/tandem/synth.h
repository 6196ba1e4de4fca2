// tandem/synth.h - random-weight models of real shapes (benchmarks, tests, the demo model).
#pragma once

#include "tandem/types.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct synth_preset {
    std::string name;
    int32_t n_layer, d_model, n_head, n_head_kv, d_head, n_expert, n_expert_used, d_ff_expert, d_ff;
    int32_t n_vocab, n_ctx_train;
    float rope_theta, rms_eps;
};

// "tiny", "qwen3-30b-a3b", "qwen3-235b-a22b"; nullopt for an unknown name.
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
    uint64_t split_max_bytes = 0;       // > 0: llama.cpp's split files of at most this many bytes each
};

// Writes the model. Quantized tensors are written as random blocks directly (no float pass),
// scaled so dequantised weights have std ~ 1/sqrt(fan_in) and a near-zero mean.
// Returns the files written (one, or the parts of a split model).
std::vector<std::string> synth_write(const synth_options &options, const std::string &path);

}  // namespace tandem
