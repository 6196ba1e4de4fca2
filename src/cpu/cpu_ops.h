// src/cpu/cpu_ops.h - the CPU backend's op families (twins of cuda/*.cu).
// Every op computes each output element with a reduction whose order depends only on the
// element's own inputs, never on how many rows share the call: that is what makes a decode
// row's logits bitwise independent of its batch. Threads split work by output elements.
#pragma once

#include "tandem/quant_blocks.h"
#include "tandem/types.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::cpu {

// How products with quantized weights are computed. exact: each weight dequantised to float and
// multiplied in fp32 (the reference, bitwise what the model's dequantised F32 copy computes).
// digits: activations as int8 digits and integer dot products (digits.h; the GPU's arithmetic on
// Q4_K), for Q4_K, Q6_K and Q8_0 matrices whose rows are whole blocks of 256; the rest stay exact.
enum class cpu_arithmetic : int8_t { exact, digits };

struct cpu_workspace;  // workspace.h: scratch kept across calls (a device owns one)

struct cpu_context {
    int32_t n_threads = 1;
    cpu_arithmetic arithmetic = cpu_arithmetic::exact;
    cpu_workspace *ws = nullptr;  // nullptr: the ops allocate their scratch per call
};

// A weight matrix as stored in the file: n_out rows of n_in elements of `type`.
struct cpu_matrix {
    const uint8_t *data = nullptr;  // [n_out][row_bytes]
    ggml_type type = ggml_type::f32;
    int64_t n_in = 0;
    int64_t n_out = 0;
    size_t row_bytes = 0;

    // Rows [first, first + count) as a matrix of their own (an expert's slice of a stacked tensor).
    cpu_matrix slice_rows(int64_t first, int64_t count) const;
};

// ---- matmul.cpp: y = W x for rows given by pointers (rows may be scattered) ----
struct matmul_args {
    cpu_matrix w;
    const float *const *x;  // [n_rows] -> [w.n_in]
    float *const *y;        // [n_rows] -> [w.n_out]
    int64_t n_rows = 0;
};
// One tile of output features [out_begin, out_end) for all rows, exact arithmetic; serial.
void matmul_tile(const matmul_args &args, int64_t out_begin, int64_t out_end);
// All output features, split over threads, in ctx.arithmetic (digits where digits_apply).
void matmul(const cpu_context &ctx, const matmul_args &args);
// Contiguous convenience form: x [n_rows][n_in], y [n_rows][n_out].
void matmul(const cpu_context &ctx, const cpu_matrix &w, const float *x, float *y, int64_t n_rows);
// Rows per tile of the exact path: a tile's dequantised weights stay in L1/L2 while every row reuses them.
constexpr int64_t matmul_tile_rows = 8;

// ---- norm.cpp ----
// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for n_rows rows of n elements; y may alias x.
void rmsnorm(const float *x, const float *w, float *y, int64_t n_rows, int64_t n, float eps);

// ---- rope.cpp: NeoX-style rotary embedding (rotates element i with i + d_head/2) ----
// x [n_rows][n_heads][d_head], positions [n_rows]; angles in float32 like Hugging Face.
void rope_neox(float *x, const int32_t *positions, int64_t n_rows, int64_t n_heads, int64_t d_head, float theta);

// ---- attention.cpp: causal attention of each row over its slot's cached K/V ----
struct attention_args {
    const float *q;            // [n_rows][n_head][d_head]
    const float *const *k;     // [n_rows] -> that row's slot K cache [n_ctx][n_head_kv][d_head]
    const float *const *v;     // [n_rows] -> that row's slot V cache [n_ctx][n_head_kv][d_head]
    const int32_t *positions;  // [n_rows]: the row attends to cached positions 0..pos
    float *out;                // [n_rows][n_head][d_head]
    int64_t n_rows = 0, n_head = 0, n_head_kv = 0, d_head = 0;
    float scale = 1.0f;
    // A q8_0 cache instead of k and v (then unused): each row's slot K and V caches as ggml's q8_0
    // blocks of its [n_ctx][n_head_kv * d_head] values, each value dequantized as it is loaded
    // (float(q) * float(d), dequantize_row_q8_0's expression), so the arithmetic is that of k and v
    // holding the dequantized floats.
    const block_q8_0 *const *k_q8 = nullptr;
    const block_q8_0 *const *v_q8 = nullptr;
};
void attention(const cpu_context &ctx, const attention_args &args);

// ---- moe.cpp: routing, grouped expert FFN, combination in slot order ----
// Softmax over router logits, top-k (ties: lower expert id first), optional renormalisation.
// logits [n_rows][n_expert] -> ids [n_rows][k], weights [n_rows][k].
void moe_route(const float *logits, int64_t n_rows, int64_t n_expert, int64_t k, bool renormalise,
               int32_t *ids, float *weights);

struct moe_grouped_args {
    cpu_matrix gate_exps;   // [n_expert * d_ff][d_model]
    cpu_matrix up_exps;     // [n_expert * d_ff][d_model]
    cpu_matrix down_exps;   // [n_expert * d_model][d_ff]
    const float *x;         // [n_rows][d_model] normalised hidden states
    const int32_t *ids;     // [n_rows][k] selected experts
    float *out;             // [n_rows][k][d_model] per-slot expert outputs (unweighted)
    int64_t n_rows = 0, k = 0, n_expert = 0, d_model = 0, d_ff = 0;
    const uint8_t *owned = nullptr;  // [n_expert] 1 = computed here; nullptr = every expert
};
// Reads each selected expert's weights once for all (row, slot) pairs routed to it; threads split
// the work by (expert, tile of output rows). Pairs whose expert is not owned are left untouched
// (another device of the pair computes them). Digits: gate/up with the GPU's grouped SwiGLU K split,
// down with its plain one (digits_k_split), so each product's bits are the GPU kernels'.
void moe_grouped(const cpu_context &ctx, const moe_grouped_args &args);
// Distinct experts a call touches among the owned ones (statistics, tests).
int64_t moe_count_experts(const int32_t *ids, int64_t n_pairs, int64_t n_expert, const uint8_t *owned);

// x[r] += sum over slots s = 0..k-1, in that order, of weights[r][s] * out[r][s].
void moe_combine(float *x, const float *out, const float *weights, int64_t n_rows, int64_t k, int64_t d_model);

// ---- rope_yarn.cpp: rotary embedding of adjacent pairs (DeepSeek's layout), YaRN frequencies ----
// Inverse frequency of each rotated pair [d_rope / 2], in float32 as Hugging Face computes it:
// theta^(-2i/d_rope); with yarn_factor > 1, blended with that / yarn_factor by YaRN's ramp between
// the dims that turn beta_fast and beta_slow times over yarn_n_ctx_orig positions.
std::vector<float> rope_inv_freq(float theta, int64_t d_rope, float yarn_factor, int64_t yarn_n_ctx_orig,
                                 float beta_fast, float beta_slow);
// Rotates the pairs (x[2i], x[2i+1]) of every head by angle positions[r] * inv_freq[i], cos and sin
// scaled by mscale. Row r's head h starts at x + r * row_stride + h * head_stride; d_rope elements.
void rope_pairs(float *x, const int32_t *positions, int64_t n_rows, int64_t row_stride, int64_t n_heads,
                int64_t head_stride, const float *inv_freq, int64_t d_rope, float mscale);

// ---- attention_mla.cpp: multi-head latent attention over each row's slot cache ----
// The absorbed form, for every row: scores against the cached latent (no key or value is ever
// decompressed); the caller turns q_nope into q_lat through W_UK and out_lat into values through W_UV.
struct attention_mla_args {
    const float *q_lat;          // [n_rows][n_head][kv_lora]: each head's nope query through W_UK
    const float *q_rope;         // [n_rows][n_head][d_rope]: roped query tails
    const float *const *cache;   // [n_rows] -> that row's slot cache [n_ctx][kv_lora + d_rope] (latent, roped key)
    const int32_t *positions;    // [n_rows]: the row attends to cached positions 0..pos
    float *out_lat;              // [n_rows][n_head][kv_lora]: softmax-weighted sum of the latents
    int64_t n_rows = 0, n_head = 0, kv_lora = 0, d_rope = 0;
    float scale = 1.0f;          // softmax scale (YaRN's mscale^2 / sqrt(d_head) for DeepSeek)
};
void attention_mla(const cpu_context &ctx, const attention_mla_args &args);

// ---- route_grouped.cpp: DeepSeek routing ----
// Scores = softmax or sigmoid of the router logits (float32); selection = scores + bias; with groups,
// only experts of the n_group_used groups whose two best selections sum highest compete; top-k by
// selection (ties: lower id; groups: lower group); weights = the unbiased scores of the chosen,
// divided by their sum when normalise (at least 2^-14, as llama.cpp clamps it), times scale.
struct moe_route_grouped_args {
    const float *logits = nullptr;  // [n_rows][n_expert]
    const float *bias = nullptr;    // [n_expert] selection bias (exp_probs_b), or nullptr
    int32_t *ids = nullptr;         // [n_rows][k], best first
    float *weights = nullptr;       // [n_rows][k]
    int64_t n_rows = 0, n_expert = 0, k = 0, n_group = 1, n_group_used = 1;
    bool sigmoid = false;
    bool normalise = false;
    float scale = 1.0f;
};
void moe_route_grouped(const moe_route_grouped_args &args);

// ---- ffn_dense.cpp: a SwiGLU FFN that every row takes (shared experts, dense layers) ----
struct ffn_swiglu_args {
    cpu_matrix gate;          // [d_ff][d_model]
    cpu_matrix up;            // [d_ff][d_model]
    cpu_matrix down;          // [d_model][d_ff]
    const float *x = nullptr; // [n_rows][d_model] normalised hidden states
    float *out = nullptr;     // [n_rows][d_model] = down(silu(gate x) * up x)
    int64_t n_rows = 0;
};
void ffn_swiglu(const cpu_context &ctx, const ffn_swiglu_args &args);
// x[r] += (sum over slots s = 0..k-1, in that order, of weights[r][s] * out[r][s]) + dense[r]: the
// routed experts, then the always-on FFN, then the residual, as DeepSeek's MoE adds them. k may be 0.
void moe_combine_dense(float *x, const float *out, const float *weights, const float *dense, int64_t n_rows,
                       int64_t k, int64_t d_model);

}  // namespace tandem::cpu
