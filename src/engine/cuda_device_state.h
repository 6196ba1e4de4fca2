// src/engine/cuda_device_state.h - the CUDA objects behind a cuda_device, for the engine front
// and the transfers between devices (the public cuda_device.h stays free of CUDA types).
#pragma once

#include "cuda/logits_draw.h"
#include "cuda/logits_rules.h"
#include "cuda/logits_top.h"
#include "cuda/matvec_digits.h"
#include "cuda/moe.h"
#include "cuda_device.h"
#include "tandem/gguf.h"

#include <cuda_runtime.h>

#include <vector>

namespace tandem {

// The router's K parts when its n_in allows (layer_route; the scratch holds their logits).
constexpr int32_t router_k_parts = 4;
// Floats a step row's widest prompt-product input takes: h (d_model), att (heads x d_head) or its
// k SwiGLU outputs (k x d_ff); rounded up to 128-element multiples (matmul_prompt_q4k rows). The
// prompt split scratch holds max_step_rows of them (the digit tiles' rows are carved from it too).
size_t prompt_split_width(const model_hparams &hp);

// A weight matrix on the device: n_mat stacked matrices of n_out rows of n_in elements.
struct cuda_matrix {
    const void *data = nullptr;
    ggml_type type = ggml_type::f32;
    int32_t n_in = 0, n_out = 0;
};

// deepseek2 (cuda_layer_deepseek2.cpp): the always-on FFN's width (shared experts or dense
// layers; 0 for qwen3moe); the step buffers and every layer's absorbed F32 up-projections, in floats
// (0 for qwen3moe); a layer's absorbed up-projections, dequantised as the CPU twin reads them, in
// the layouts mla_head_product takes: W_UK [n_head][kv_lora][d_nope] (attn_k_b's rows, or
// attn_kv_b's key rows transposed) and W_UV [n_head][d_head_v][kv_lora].
size_t ffn_dense_width(const model_hparams &hp);
size_t mla_floats(const model_hparams &hp);
struct mla_absorbed {
    std::vector<float> k_b, v_b;
};
mla_absorbed mla_absorb(const model_hparams &hp, const layer_tensors &lt);

// deepseek2: whether the quantized products (matvec.h, matmul_prompt.h) take w; others are F32,
// F16 or BF16 matrices of other widths, which the plain kernel computes (cuda/ffn_dense.h).
bool mla_tensor_cores(const cuda_matrix &w);

struct cuda_layer {
    const float *attn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr, *ffn_norm = nullptr;
    cuda_matrix wq, wk, wv, wo, router, gate, up, down;  // gate/up/down: the experts held here
    const int32_t *local = nullptr;  // [n_expert] expert -> matrix index here, -1: the partner's or the host tier's; nullptr: all here
    // deepseek2 (cuda_layer_deepseek2.cpp): the latent attention's projections and norms, the
    // absorbed up-projections in F32 (k_b [n_head][kv_lora][d_nope], v_b [n_head][d_head_v][kv_lora]),
    // the routing bias, and the always-on FFN (the shared experts, or a leading layer's dense FFN).
    cuda_matrix wq_a, wq_b, wkv_a, ffn_gate, ffn_up, ffn_down;
    const float *q_a_norm = nullptr, *kv_a_norm = nullptr, *exp_probs_b = nullptr, *k_b = nullptr, *v_b = nullptr;
};
// deepseek2: refuses a layer whose matrices no product on its paths takes, naming the type.
void mla_check_types(const cuda_layer &cl);

struct cuda_device::state {
    const model_hparams *hp = nullptr;
    placement_device_plan part;
    int32_t n_slots = 0, n_ctx = 0;
    bool prompt_rows = false;       // the step's rows are prompt rows (cuda_device::set_prompt_rows)
    bool distinct_slots = true;     // no two rows share a slot (cuda_device::set_distinct_slots)
    int device = 0;
    std::string name;
    cudaStream_t stream = nullptr;
    cudaEvent_t event = nullptr;    // recorded after a send; the receiver's stream waits on it

    uint8_t *weights = nullptr;
    size_t weight_bytes = 0;
    uint8_t *kv = nullptr;          // [layers here][kv_planes][n_slots][n_ctx] rows of floats, halves or q8_0 blocks
    int32_t kv_planes = 2;          // model_kv_shape_of: K and V, or deepseek2's one latent plane
    kv_type kv_elem = kv_type::f32;  // resolved engine_options::kv
    size_t kv_row = 0;              // bytes of one row (kv_row_bytes)
    size_t kv_bytes = 0;
    float *inv_freq = nullptr;
    cuda_matrix tok_embd, head;     // head: this device's vocab rows
    const float *output_norm = nullptr;
    const float *next_norm = nullptr;  // attention norm of layer_end, or the output norm
    std::vector<cuda_layer> layers;    // [layer - layer_begin]
    int32_t n_chunks = 0;  // attention chunk partials a row (cuda::attention_chunks)

    // deepseek2: multi-head latent attention (model_arch::deepseek2), its softmax scale, and its
    // step buffers for max_step_rows rows: the latent + roped key, the q LoRA's rows, the queries
    // and attended values in the latent space, the always-on FFN's gate, up and output.
    bool mla = false;
    float mla_scale = 1.0f;
    float *mla_kv = nullptr, *mla_qa = nullptr, *mla_q_lat = nullptr, *mla_o_lat = nullptr;
    float *ffn_g = nullptr, *ffn_u = nullptr, *ffn_out = nullptr;

    // Step buffers for max_step_rows rows.
    int32_t *rows = nullptr;        // [4][max_step_rows]: tokens, slots, positions, head rows
    float *x = nullptr, *h = nullptr, *q = nullptr, *kb = nullptr, *vb = nullptr, *att = nullptr;
    float *router_logits = nullptr, *route_w = nullptr, *act = nullptr, *eout = nullptr, *partial = nullptr;
    float *exchange[2] = {nullptr, nullptr};  // partner's expert outputs (pairs only)
    int32_t *ids = nullptr, *group_expert = nullptr, *group_off = nullptr, *n_groups = nullptr;
    int32_t *pair_x = nullptr, *pair_y = nullptr, *groups_total = nullptr;
    int32_t *local_maps = nullptr;  // [layers here][n_expert]: the layers' local maps
    // The groups narrowed to the experts held here (layers with local maps).
    int32_t *own_mat = nullptr, *own_off = nullptr, *own_n = nullptr, *own_x = nullptr, *own_y = nullptr;
    float *logits = nullptr;        // [max_logit_rows][head columns]
    // The logits rows' summaries (cuda/logits_top.h) over this device's head columns, and the
    // first pass's candidates; only when the head's columns fit the device reduction.
    uint64_t *top_keys = nullptr;   // [max_logit_rows][slices][logits_top_n]
    float *top_slice_max = nullptr;
    double *top_slice_sum = nullptr;
    int32_t *top_slice_nan = nullptr;  // [max_logit_rows][slices] each
    cuda::logits_top_row *top_rows = nullptr;  // [max_logit_rows]
    // The rows' exact draws (cuda/logits_draw.h): on the device holding the head's first columns.
    row_draw *draws = nullptr;        // [max_logit_rows] requests
    // A split head (a tensor-parallel pair): the other columns' logits rows, sent here for the
    // draws, [max_logit_rows][n_vocab - head columns] (the scratch plan's head rows are whole).
    float *logits_rest = nullptr;
    // The logits rows' rules (cuda/logits_rules.h), on every device holding head columns: a
    // descriptor a row, pointing into a pool of adjustments and masks that grows between steps
    // (the descriptors, uploaded each step, are all a captured graph holds).
    cuda::logits_rules_row *rule_rows = nullptr;  // [max_logit_rows]
    uint8_t *rule_pool = nullptr;
    size_t rule_pool_bytes = 0;
    // Decode rows' split twins (cuda/x_split.cuh), max_logit_rows rows: h, att and the SwiGLU
    // outputs (k rows each) with their 32-element sums. h_split_fresh: h_split holds the rows h
    // holds (the last writer of h was this device's norm or combine in a decode step, not a
    // transfer).
    uint4 *h_split = nullptr, *att_split = nullptr, *act_split = nullptr;
    float *h_sums = nullptr, *att_sums = nullptr, *act_sums = nullptr;
    // The FFN-normalised decode rows as int8 digits (cuda/matvec_digits.h) for the
    // experts' Q4_K gate/up, max_logit_rows rows (d_model a multiple of 256).
    int8_t *h_digits = nullptr;
    float *h_digit_scales = nullptr;
    uint16_t *h_digit_sums = nullptr;
    // The SwiGLU outputs as digits for the experts' Q4_K down of large decode steps (k rows a
    // decode row, max_logit_rows rows; d_ff_expert a multiple of 256).
    int8_t *act_digits = nullptr;
    float *act_digit_scales = nullptr;
    uint16_t *act_digit_sums = nullptr;
    bool h_split_fresh = false;
    // Prompt rows' Q4_K products: their input split once per product (cuda/matmul_prompt_q4k.cu),
    // max_step_rows rows of the widest input (h, att, or a row's k SwiGLU outputs).
    uint4 *prompt_split = nullptr;
    float *prompt_sums = nullptr;
    // Prompt rows: the prompt split scratch holds the digits of h's rows for the next layer's
    // Q/K/V (written by the combine + norm launch before it; any other writer of h clears it).
    bool h_prompt_digits_fresh = false;
    unsigned long long *traffic = nullptr;  // [layers here][n_expert] routed rows, when recording
    // What layer_route decided for the layer_experts that follows it on the same rows.
    struct layer_route_plan {
        bool digits = false;                 // decode gate/up on h's digits (the norm + router launch wrote them)
        bool prompt_digits_gate_up = false;  // prompt rows' Q4_K gate/up and down on digits
        bool prompt_digits_down = false;
        bool ffn_digits = false;             // the FFN norm wrote h's digits for the prompt gate/up
        bool route_in_gate_up = false;       // a one-row step's gate/up routes its row (no moe_route launch)
        cuda::digit_rows h_dig;
        cuda::moe_route_args route;
    };
    layer_route_plan route_plan;

    const int32_t *tokens() const { return rows; }
    const int32_t *slots() const { return rows + max_step_rows; }
    const int32_t *positions() const { return rows + 2 * max_step_rows; }
    const int32_t *head_rows() const { return rows + 3 * max_step_rows; }
    const cuda_layer &layer(int32_t l) const { return layers[size_t(l - part.layer_begin)]; }
    // Prompt rows' digit rows (rows of n_el elements, n_el a multiple of 256) in the prompt split
    // scratch: digits, then sums (16-byte aligned), then scales. Every prompt digit product's input.
    cuda::digit_rows prompt_digit_rows(int32_t rows, int32_t n_el) const;
    // Whether prompt rows take w's product on digits (a Q4_K matrix of whole 256-element blocks,
    // 16-byte aligned): Q/K/V and wo one_group products, and the producers that write their digits.
    bool prompt_dense_on_digits(const cuda_matrix &w) const;
    bool paired() const { return part.partner >= 0; }
    // deepseek2's step buffers (mla_kv .. ffn_out), max_step_rows rows each.
    void mla_alloc();
};

// A product of the step's rows in the engine's choice of kernel family (cuda_layer.cpp): the
// matrix-vector kernels for decode rows (and prompt rows' grouped plain Q6_K products of three
// 256-element blocks a row), the tiled GEMMs for prompt rows, a prompt Q4_K product's input split
// first (split_rows: rows of a.x its x_rows can name). Returns the launches beside the product's own.
int64_t rows_product(cuda_device::state &m, const cuda::matvec_args &a, int32_t split_rows);

}  // namespace tandem
