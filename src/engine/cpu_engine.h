// src/engine/cpu_engine.h - the CPU reference engine: Qwen3-MoE forward over rows, KV slots.
#pragma once

#include "src/cpu/cpu_ops.h"
#include "tandem/engine.h"
#include "tandem/gguf.h"
#include "tandem/model.h"

#include <memory>
#include <vector>

namespace tandem {

// What one CPU (virtual) device computes: a contiguous range of layers, the routed experts it
// owns in each of them, and optionally the embedding and a range of the vocab head.
struct cpu_part {
    int32_t layer_begin = 0, layer_end = 0;
    std::vector<std::vector<uint8_t>> owned;  // [layer - layer_begin][n_expert]; empty = all
    bool embedding = false;
    int64_t head_begin = 0, head_end = 0;     // vocab rows of the head computed here
};

class cpu_engine final : public engine {
public:
    cpu_engine(std::shared_ptr<const gguf_file> file, const engine_options &options);
    ~cpu_engine() override;

    const model_hparams &hparams() const override { return hp_; }
    int32_t n_slots() const override { return n_slots_; }
    int32_t n_ctx() const override { return n_ctx_; }
    void forward(std::span<const engine_row> rows, std::vector<float> &logits) override;
    int32_t slot_length(int32_t slot) const override;
    void slot_truncate(int32_t slot, int32_t n_keep) override;
    std::string layout() const override;
    std::map<std::string, double> counters() const override;

    // Building blocks, public for the multi-device driver and tests.
    // x [n][d_model] <- embedding rows of the tokens.
    void embed(std::span<const engine_row> rows, float *x) const;
    // Attention half of layer l (writes K/V of the rows into the slot caches), residual added.
    void layer_attention(int32_t layer, std::span<const engine_row> rows, float *x);
    // Router of layer l: h [n][d_model] normalised input, ids/weights [n][k].
    void layer_route(int32_t layer, int64_t n, const float *x, float *h, int32_t *ids, float *weights);
    // Per-slot outputs of the owned experts of layer l: out [n][k][d_model].
    void layer_experts(int32_t layer, int64_t n, const float *h, const int32_t *ids, const uint8_t *owned, float *out);
    // Final norm and head rows [row_begin, row_end) for rows wanting logits: out [n_out][row_end-row_begin].
    void head(std::span<const engine_row> rows, const float *x, int64_t row_begin, int64_t row_end,
              std::vector<float> &out);
    void validate(std::span<const engine_row> rows) const;

private:
    float *k_cache(int32_t layer, int32_t slot) const;
    float *v_cache(int32_t layer, int32_t slot) const;
    cpu::cpu_matrix matrix(const gguf_tensor_info *t, int64_t n_in, int64_t n_out) const;

    std::shared_ptr<const gguf_file> file_;
    model_hparams hp_;
    model_tensors tensors_;
    cpu::cpu_context ctx_;
    int32_t n_slots_ = 0, n_ctx_ = 0;
    int64_t kv_dim_ = 0;
    std::vector<int32_t> slot_len_;
    float *kv_ = nullptr;     // [n_layer][2][n_slots][n_ctx][kv_dim], untouched pages stay unmapped
    size_t kv_bytes_ = 0;
    double experts_touched_ = 0;  // distinct experts per layer in the last forward (average)
};

}  // namespace tandem
