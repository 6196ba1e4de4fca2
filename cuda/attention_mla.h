// cuda/attention_mla.h - DeepSeek's multi-head latent attention in the absorbed form, as the CPU
// twins compute it (src/engine/cpu_layer_deepseek2.cpp, src/cpu/attention_mla.cpp, rope_yarn.cpp).
// Owns: the latent's RMSNorm, the RoPE of the key and of the queries' rope tails and the cache
// write (mla_rope_cache); the per-head products with the absorbed up-projections W_UK and W_UV
// (mla_head_product); the attention of each (row, head) over its slot's cached latents and roped
// keys (mla_attention). Does not own the dense projections (matvec.h, matmul_prompt.h).
// Every (row, head) is computed by its own warps in a fixed order, the same for prompt and decode
// rows: no value depends on the step's other rows or on how a prompt is chunked.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

// Largest latent and rope widths the kernels take (DeepSeek-V2/V3: 512 and 64).
constexpr int32_t mla_max_kv_lora = 512;
constexpr int32_t mla_max_d_rope = 64;

struct mla_rope_cache_args {
    float *kv = nullptr;              // [n_rows][kv_lora + d_rope]: the latent (normalised here), then the key (roped here)
    float *q = nullptr;               // [n_rows][n_head * d_head]: each head's last d_rope values roped here
    const float *kv_norm = nullptr;   // [kv_lora]
    const float *inv_freq = nullptr;  // [d_rope / 2] (cpu::rope_inv_freq)
    const int32_t *slots = nullptr;   // [n_rows]; < 0: a padding row (nothing written to the cache)
    const int32_t *positions = nullptr;
    void *cache = nullptr;            // this layer's [n_slots][n_ctx][kv_lora + d_rope] floats or halves
    bool cache_f16 = false;
    int32_t n_rows = 0, n_head = 0, d_head = 0, kv_lora = 0, d_rope = 0, n_ctx = 0;
    float eps = 1e-6f;
};
void mla_rope_cache(const mla_rope_cache_args &args, cudaStream_t stream);

// y[r][h][o] = sum_i w[h][o][i] x[r][h][i] (F32 weights): the queries' nope parts into the latent
// space (W_UK), the attended latents out to the value heads (W_UV).
struct mla_head_product_args {
    const float *w = nullptr;  // [n_head][n_out][n_in]
    const float *x = nullptr;  // row r, head h at x + r * x_stride + h * x_head_stride
    float *y = nullptr;        // row r, head h at y + r * y_stride + h * y_head_stride
    int64_t x_stride = 0, x_head_stride = 0, y_stride = 0, y_head_stride = 0;
    int32_t n_rows = 0, n_head = 0, n_in = 0, n_out = 0;
};
void mla_head_product(const mla_head_product_args &args, cudaStream_t stream);

struct mla_attention_args {
    const float *q_lat = nullptr;  // [n_rows][n_head][kv_lora]
    const float *q = nullptr;      // rope tail of row r, head h at q + r * q_stride + h * d_head + d_head - d_rope
    int64_t q_stride = 0;
    const void *cache = nullptr;   // as mla_rope_cache_args::cache, already holding the step's rows
    bool cache_f16 = false;
    const int32_t *slots = nullptr, *positions = nullptr;  // a row attends to positions 0..pos of its slot
    float *out_lat = nullptr;      // [n_rows][n_head][kv_lora] (zeros for padding rows)
    int32_t n_rows = 0, n_head = 0, d_head = 0, kv_lora = 0, d_rope = 0, n_ctx = 0;
    float scale = 1.0f;
    // Prompt rows (one kernel for every prompt step, another for decode steps: each row's result
    // depends on its own inputs and this flag only).
    bool prompt = false;
};
void mla_attention(const mla_attention_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
