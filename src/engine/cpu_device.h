// src/engine/cpu_device.h - one CPU (virtual) device of a placement: its layers, the routed
// experts it owns in each, its share of the head, and the cache of its layers for every slot
// (K and V, or deepseek2's latent and roped key: model_kv_shape_of).
#pragma once

#include "src/cpu/cpu_ops.h"
#include "src/cpu/workspace.h"
#include "tandem/engine.h"
#include "tandem/model.h"

#include <span>
#include <string>
#include <vector>

namespace tandem {

// What one device computes (from the placement plan; a single device has everything).
struct cpu_part {
    int32_t layer_begin = 0, layer_end = 0;
    std::vector<std::vector<uint8_t>> owned;  // [layer - layer_begin][n_expert]; empty = all experts
    bool embedding = false;
    int64_t head_begin = 0, head_end = 0;     // vocab rows of the head computed here
};

class cpu_device {
public:
    // kv (resolved): f32; f16: keys and values are rounded to halves as they enter the cache (kept
    // as f32); q8_0: the cache holds ggml's q8_0 blocks of each row (quantize_row_q8_0), and the
    // attention dequantizes them as it loads them. arithmetic: how quantized products are computed.
    cpu_device(const model_hparams &hp, const model_tensors &tensors, cpu_part part, int32_t n_slots, int32_t n_ctx,
               int32_t n_threads, kv_type kv = kv_type::f32, cpu::cpu_arithmetic arithmetic = cpu::cpu_arithmetic::exact);
    ~cpu_device();
    cpu_device(const cpu_device &) = delete;
    cpu_device &operator=(const cpu_device &) = delete;

    const cpu_part &part() const { return part_; }
    size_t kv_bytes() const { return kv_bytes_; }
    int32_t n_threads() const { return ctx_.n_threads; }

    // x [n_rows][d_model] <- embedding rows of the tokens.
    void embed(std::span<const engine_row> rows, float *x) const;
    // Attention half of `layer` for the rows: writes their K/V into the slot caches, then adds
    // the attention output to x [n_rows][d_model].
    void layer_attention(int32_t layer, std::span<const engine_row> rows, float *x);
    // h [n][d_model] <- ffn_norm(x); ids/weights [n][k] <- the router's top-k (k of the layer's
    // recipe; nothing for a dense layer).
    void layer_route(int32_t layer, int64_t n, const float *x, float *h, int32_t *ids, float *weights);
    // out [n][d_model] <- the FFN every row of `layer` takes (shared experts, or a dense layer's
    // FFN); every device of a pair computes it. Only for recipes other than layer_ffn::routed.
    void layer_dense(int32_t layer, int64_t n, const float *h, float *out);
    // out [n][k][d_model]: per-slot outputs of the experts this device owns (others untouched).
    void layer_experts(int32_t layer, int64_t n, const float *h, const int32_t *ids, float *out);
    // Whether this device owns expert e of `layer`.
    bool owns(int32_t layer, int32_t expert) const;
    // out [n_out][head_end - head_begin]: logits of this device's head rows for the rows that
    // want logits (final norm applied to x [n_rows][d_model] first).
    void head(std::span<const engine_row> rows, const float *x, std::vector<float> &out);

    // The K/V of this device's layers for a slot's positions [0, n) to and from a blob in
    // engine.h's layout (token_bytes a token; this device's layers at their place in each token),
    // and from one slot to another.
    void kv_export(int32_t slot, int32_t n, uint8_t *blob, size_t token_bytes) const;
    void kv_import(int32_t slot, int32_t n, const uint8_t *blob, size_t token_bytes);
    void kv_copy(int32_t src, int32_t dst, int32_t n);

private:
    uint8_t *kv_plane(int32_t layer, int32_t plane, int32_t slot) const;  // [n_ctx] rows of kv_row_ bytes
    // The slot's cache row of position pos <- x [kv_dim] as the cache's type holds it.
    void kv_write(int32_t layer, int32_t plane, int32_t slot, int32_t pos, const float *x) const;
    // A plane of the slot as floats for positions [0, n_pos): in place (f32, f16), or dequantized
    // into buf (q8_0).
    const float *kv_floats(int32_t layer, int32_t plane, int32_t slot, int32_t n_pos, std::vector<float> &buf) const;
    // deepseek2 (cpu_layer_deepseek2.cpp): tables made once, the latent attention and the router.
    void mla_prepare();
    void layer_attention_mla(int32_t layer, std::span<const engine_row> rows, float *x);
    void layer_route_grouped(int32_t layer, int64_t n, const float *h, int32_t *ids, float *weights);
    cpu::cpu_matrix matrix(const gguf_tensor_info *t, int64_t n_in, int64_t n_out) const;

    const model_hparams &hp_;
    const model_tensors &tensors_;
    cpu_part part_;
    cpu::cpu_context ctx_;
    int32_t n_slots_ = 0, n_ctx_ = 0;
    kv_type cache_type_ = kv_type::f32;
    int64_t kv_dim_ = 0;     // values a token leaves in one plane of a layer's cache
    int32_t kv_planes_ = 0;  // K and V, or deepseek2's one plane of latent and roped key
    size_t kv_row_ = 0;      // bytes of a cached row: kv_dim floats (f32, f16), or q8_0 blocks
    uint8_t *kv_ = nullptr;  // [layer_end - layer_begin][kv_planes][n_slots][n_ctx] rows; lazily backed
    size_t kv_bytes_ = 0;
    // Scratch kept across calls (they only grow): the ops' workspace and the layer's activations.
    cpu::cpu_workspace ws_;
    std::vector<float> h_, q_, k_, v_, att_, o_, router_logits_;
    std::vector<int32_t> pos_;
    std::vector<const float *> kc_, vc_;
    std::vector<const block_q8_0 *> kq_, vq_;
    std::vector<size_t> picked_;
    // deepseek2: rope frequencies, the softmax scale, and per layer the key half of attn_kv_b
    // transposed to attn_k_b's layout [n_head][kv_lora][d_nope] (empty for the split form).
    std::vector<float> rope_freq_;
    float mla_scale_ = 1.0f;
    std::vector<std::vector<float>> mla_k_b_;
};

}  // namespace tandem
