// cuda/attention.h - the attention half of a layer between the projections: per-head QK RMSNorm,
// NeoX RoPE and the K/V cache write (one launch), then causal attention of each row over its
// slot's cache, split into fixed position chunks (partial + combine launches). Decode rows of
// distinct slots do the first launch's work inside the partial launch (attention_args::k_new).
// Owns: the KV cache layout [slot][n_ctx][n_head_kv][d_head] of one layer (floats, halves, or
// ggml's q8_0 blocks of 32 consecutive elements: a head is d_head / 32 whole blocks). The partial
// launch runs on tensor cores for halves or q8_0 blocks with Qwen3's head geometry (attention_mma.h),
// else on CUDA cores (fp32 dots; q8_0 values dequantized as loaded); which one depends on the model
// and the cache type only. Does not own
// the projections (matvec.h). A row's result depends only on its own slot, position and cache:
// the chunking is a function of the row's position (attention_row_chunk), never of the batch or
// the slot size, so decode stays batch invariant.
// Precondition of both launches: `slots` and `positions` are written before the step's first
// kernel (the engine copies them in before it), since the kernels read them before their PDL
// wait (launch.cuh) to overlap the address and angle work with the kernel before.
#pragma once

#include "tandem/host_device.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct qk_rope_kv_args {
    float *q = nullptr;              // [n_rows][n_head][d_head]: normalised and rotated in place
    const float *k = nullptr;        // [n_rows][n_head_kv][d_head] projections
    const float *v = nullptr;        // [n_rows][n_head_kv][d_head]
    const float *q_norm = nullptr;   // [d_head]
    const float *k_norm = nullptr;   // [d_head]
    const float *inv_freq = nullptr; // [d_head / 2] 1 / theta^(2i / d_head), float32 like the CPU
    const int32_t *slots = nullptr;  // [n_rows]; < 0: padding row, nothing written to the cache
    const int32_t *positions = nullptr;  // [n_rows]
    void *k_cache = nullptr;         // this layer: [n_slots][n_ctx][n_head_kv][d_head] floats, halves (kv_f16)
    void *v_cache = nullptr;         // same               or block_q8_0 (kv_q8_0)
    bool kv_f16 = false;             // the cache holds halves (each key and value rounded to nearest)
    bool kv_q8_0 = false;            // the cache holds q8_0 blocks (quantize_row_q8_0's rounding, kv_cache.cuh)
    int32_t n_rows = 0, n_head = 0, n_head_kv = 0, d_head = 0, n_ctx = 0;
    float eps = 1e-6f;
};
void qk_rope_kv(const qk_rope_kv_args &args, cudaStream_t stream);

struct attention_args {
    const float *q = nullptr;        // [n_rows][n_head][d_head] (normalised, rotated; raw when fused)
    void *k_cache = nullptr;         // [n_slots][n_ctx][n_head_kv][d_head] floats, halves or q8_0 blocks;
    void *v_cache = nullptr;         // same; written only when fused
    bool kv_f16 = false, kv_q8_0 = false;  // as in qk_rope_kv_args
    const int32_t *slots = nullptr;  // [n_rows]; < 0: padding row (output zeros)
    const int32_t *positions = nullptr;  // [n_rows]: attends to cached positions 0..pos
    float *partial = nullptr;        // [n_rows][n_head][attention_chunks(n_ctx)][d_head + 2] scratch
    float *out = nullptr;            // [n_rows][n_head][d_head]
    uint4 *out_split = nullptr;      // optional: out split too (x_split.cuh), decode kernel only
    float *out_sums = nullptr;       // [n_rows][n_head * d_head / 32]
    int32_t n_rows = 0, n_head = 0, n_head_kv = 0, d_head = 0, n_ctx = 0;
    float scale = 1.0f;
    // Decode kernel only, rows of distinct slots (the caller checks: cuda_device::set_distinct_slots):
    // with k_new set, qk_rope_kv's work is fused in (one launch fewer), and the positions before a
    // row's own are read before the PDL wait. q, k_new and v_new are then the raw projections
    // ([n_rows][n_head_kv][d_head] for k_new, v_new); the results and the cache writes are bitwise
    // those of qk_rope_kv then attention. Two rows of one slot would need each other's cache
    // writes: such steps take the two launches.
    const float *k_new = nullptr, *v_new = nullptr;
    const float *q_norm = nullptr, *k_norm = nullptr, *inv_freq = nullptr;  // as in qk_rope_kv_args
    float eps = 1e-6f;
};
// The decode kernel splits a row's positions 0..pos into chunks of attention_row_chunk(pos)
// positions (a multiple of 32, at least 64), at most attention_max_chunks of them: the chunking
// depends on the row's own position only, never on the slot size or the other rows (batch and
// placement invariance), and a short context in a large slot still spreads over several blocks.
// 32 chunks at most, not 64: past 32 the merge of the partials costs more than the parallelism
// gains (`bench --prompt 0 --ctx 16384 --decode-prompt 4000 --sessions 1,4,16`: +5-12%).
constexpr int32_t attention_max_chunks = 32;
TANDEM_HOST_DEVICE inline constexpr int32_t attention_row_chunk(int32_t pos) {
    const int32_t per = (pos + attention_max_chunks) / attention_max_chunks;  // ceil((pos + 1) / max chunks)
    const int32_t rounded = (per + 31) / 32 * 32;
    return rounded < 64 ? 64 : rounded;  // short contexts: more blocks, fewer positions per warp
}
// Chunk partials a row of a slot of n_ctx positions may need (attention_args::partial's extent):
// ceil(n_ctx / 64), at most attention_max_chunks.
inline constexpr int32_t attention_chunks(int32_t n_ctx) {
    const int32_t c = (n_ctx + 63) / 64;
    return c < attention_max_chunks ? c : attention_max_chunks;
}
void attention(const attention_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
