// src/engine/cuda_device.h - one logical CUDA device of a placement plan: the weights of its
// part (its layers, the routed experts it holds in each, the embedding, its rows of the head) in
// their GGUF types, the F32 K/V of its layers for every slot, its step buffers and stream, and
// the launches of each piece of the forward. Several logical devices may share one GPU.
// No CUDA types in this header: the engine front and the tests stay plain C++.
#pragma once

#include "tandem/draw_exact.h"
#include "tandem/engine.h"
#include "tandem/model.h"
#include "tandem/placement.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

class load_meter;

class cuda_device {
public:
    // Rows per step the buffers hold (larger engine calls run as consecutive steps): prompt steps
    // up to max_step_rows (a 2,048-row step gives each expert ~128 rows: full tensor-core tiles);
    // decode steps, and the logits rows of any step, up to max_logit_rows (decode attention's
    // chunk partials and the head output are sized for those).
    static constexpr int32_t max_step_rows = 2048;
    static constexpr int32_t max_logit_rows = 512;
    // Rows one step of this kind may hold for this model (prompt steps whose attention falls back
    // to the decode kernel are held to max_logit_rows as well).
    static int32_t step_rows_limit(const model_hparams &hp, bool prompt);

    // Bytes the device will allocate besides weights and K/V (step buffers, head logits,
    // exchange buffers) for a plan's part: the planner's scratch figure.
    static uint64_t scratch_bytes(const model_hparams &hp, int32_t n_ctx, bool has_head, bool paired);

    // record_traffic: count the rows routed to each expert of this device's layers (hosts and
    // single devices only: a partner routes the same rows). kv: the KV cache's element type
    // (resolved). meter: counts the weights as they upload.
    cuda_device(const model_hparams &hp, const model_tensors &tensors, const placement_device_plan &part,
                int32_t n_slots, int32_t n_ctx, bool record_traffic = false, kv_type kv = kv_type::f32,
                load_meter *meter = nullptr);
    ~cuda_device();
    cuda_device(const cuda_device &) = delete;
    cuda_device &operator=(const cuda_device &) = delete;

    const placement_device_plan &part() const;
    int32_t physical() const;
    const std::string &name() const;
    uint64_t weight_bytes() const;
    uint64_t kv_bytes() const;

    // Every launch below goes to this device's stream (the caller need not select the device).
    // Row arrays: the engine copies tokens / slots / positions / head rows for the whole step
    // (max_step_rows each) from pinned host memory; launches address rows [r0, r0 + n).
    void upload_rows(const int32_t *rows_host_pinned);
    // The kind of the rows the launches below will compute (engine_row::prompt): prompt rows use
    // the tiled products (cuda/matmul_prompt.h), decode rows the matrix-vector ones (cuda/matvec.h),
    // whose inputs the decode-row producers also write pre-split (cuda/x_split.cuh).
    void set_prompt_rows(bool prompt);
    // Whether the step's rows belong to distinct slots (decode steps of the scheduler: one row a
    // session). Decode rows of distinct slots run the attention with the QK norm, RoPE and K/V
    // write fused in (cuda/attention.h); rows sharing a slot need each other's K/V writes first.
    void set_distinct_slots(bool distinct);
    // h rows arrived from another device (their split twin, cuda/x_split.cuh, did not): the next
    // products over h split them themselves (bitwise the same values).
    void h_received();
    // x, h [r0, r0+n) <- embedding rows, then the first layer's attention norm.
    int64_t embed(int32_t r0, int32_t n);
    // Layer l over rows [r0, r0 + n) in the CPU twin's phases, called in this order: x += the
    // attention of h (the attention norm of x); h <- the FFN norm of x, the router, the routing;
    // this device's experts, whose pair outputs land in the expert-output buffer (pairs of experts
    // held elsewhere are stale). Each returns its launches.
    int64_t layer_attention(int32_t layer, int32_t r0, int32_t n);
    int64_t layer_route(int32_t layer, int32_t r0, int32_t n);
    int64_t layer_experts(int32_t layer, int32_t r0, int32_t n);
    // Pairs of experts held by the partner <- the partner's outputs in exchange buffer `parity`.
    int64_t merge_partner(int32_t layer, int32_t r0, int32_t n, int32_t parity);
    // x += the routed experts in slot order; h <- the next layer's attention norm (or the output
    // norm after the last layer).
    int64_t combine(int32_t layer, int32_t r0, int32_t n);
    // This device's head rows of the logits of the n_out rows listed at head-row index r0
    // (relative to r0) into its logits buffer rows [out0, out0 + n_out).
    int64_t head(int32_t r0, int32_t n_out, int32_t out0);
    // Logits rows [0, n_out) -> host rows (pitch n_vocab floats, at this device's head columns).
    void download_logits(float *host_pinned, int32_t n_out);
    // Whether this device reduces its logits rows to summaries (it holds head columns, and no
    // more than the reduction takes), and the launches that do it for rows [0, n_out) (best_only:
    // each row's best token alone, cuda::logits_best).
    bool has_logits_top() const;
    int64_t logits_top(int32_t n_out, bool best_only);
    // Whether this device draws from its logits rows (cuda/logits_draw.h: it holds the head's
    // first columns and reduces its rows; a split head's other columns are sent to
    // logits_rest_rows first); the requests of rows [0, n_out) -> device, before the step; the
    // launches that draw, after logits_top, into the rows' summaries.
    bool can_draw() const;
    void upload_draws(const row_draw *host_pinned, int32_t n_out);
    int64_t logits_draw(int32_t n_out);
    // Logit rules of the logits rows (cuda/logits_rules.h; devices holding head columns): the device
    // pool of at least n_bytes that the rows' descriptors point into (grown between steps, which
    // voids earlier pointers: ask before packing each step); the packed pool and the descriptors of
    // rows [0, n_rows) (cuda::logits_rules_row each) -> device, before the step; the launch that
    // applies them to rows [0, n_out), after the head and before logits_top.
    uint8_t *rules_pool(size_t n_bytes);
    void upload_rules(const void *rows_host_pinned, int32_t n_rows, const void *pool_host_pinned, size_t n_bytes);
    int64_t logits_rules(int32_t n_out);
    // Summaries of rows [0, n_out) -> host (cuda::logits_top_row each, ids of the whole vocabulary).
    void download_logits_top(void *host_pinned, int32_t n_out);
    // The K/V of this device's layers for a slot's positions [t0, t0 + n), enqueued on its stream:
    // to and from pinned host memory laid out as engine.h's blob (token_bytes a token; host
    // holds token t0 first, this device's layers at their place in each token), and from one
    // slot to another on the device (positions [0, n)).
    void kv_download(int32_t slot, int32_t t0, int32_t n, uint8_t *host_pinned, size_t token_bytes);
    void kv_upload(int32_t slot, int32_t t0, int32_t n, const uint8_t *host_pinned, size_t token_bytes);
    void kv_copy(int32_t src, int32_t dst, int32_t n);
    // Adds the number of expert groups routed so far to `total` once the stream is done.
    void download_groups_total(int32_t *host_pinned);
    void synchronize();
    // Adds this device's recorded counts into traffic [n_layer][n_expert] (nothing when it does
    // not record). The device's stream must be idle.
    void add_traffic(std::vector<std::vector<uint64_t>> &traffic) const;

    // Buffers other devices copy from or into (device pointers), offsets in rows.
    float *x_rows(int32_t r0);
    float *h_rows(int32_t r0);
    float *expert_out_rows(int32_t r0);
    float *logits_rows();       // [max_logit_rows][head columns]
    float *logits_rest_rows();  // the drawing device of a split head: [max_logit_rows][n_vocab - head columns]
    float *exchange_rows(int32_t parity, int32_t r0);
    size_t d_model_bytes() const;      // one row of x / h
    size_t pair_row_bytes() const;     // one row of expert outputs (k pairs)

    struct state;  // CUDA objects (opaque here)
    state &impl() { return *s_; }

private:
    // The routed experts of a layer (qwen3moe's and deepseek2's), and deepseek2's layer phases
    // (cuda_layer_deepseek2.cpp).
    int64_t layer_experts_routed(int32_t layer, int32_t r0, int32_t n);
    int64_t layer_attention_mla(int32_t layer, int32_t r0, int32_t n);
    int64_t layer_route_deepseek2(int32_t layer, int32_t r0, int32_t n);
    int64_t layer_experts_deepseek2(int32_t layer, int32_t r0, int32_t n);
    int64_t combine_deepseek2(int32_t layer, int32_t r0, int32_t n);

    std::unique_ptr<state> s_;
};

}  // namespace tandem
