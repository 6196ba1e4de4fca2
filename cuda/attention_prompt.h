// cuda/attention_prompt.h - causal attention for prompt (prefill) rows on tensor cores,
// flash-attention style: a block takes 64 (row, query head) pairs of one KV head, streams that
// KV head's keys in tiles of fixed absolute positions and keeps an online softmax per pair.
// Owns: prompt-step attention. Does not own QK norm, RoPE or the cache write (attention.h's
// qk_rope_kv, which runs first) nor decode steps (attention.h's attention, cheaper for a few rows).
//
// Contract: the same as attention() (attention.h): q [n_rows][n_head][d_head] normalised and
// rotated, F32 caches [n_slots][n_ctx][n_head_kv][d_head] that already hold this step's K/V,
// any mix of (slot, position) per row, slot < 0 a padding row whose output is zeros; `slots` and
// `positions` written before the step's first kernel (read before the PDL wait).
// Numerics: Q.K^T and P.V as bf16 mma.sync with fp32 accumulation, each fp32 operand split into
// hi = bf16(x) and lo = bf16(x - hi) and the product taken as hi.hi + hi.lo + lo.hi (~16
// significant bits per operand); softmax in fp32 with expf. Relative L2 error vs the CPU twin is
// 1e-5..5e-5, growing with context (tests/kernels/gpu_test_util.h, tolerance::attention_prompt).
// Invariance: a row's output is bitwise independent of the other rows of the launch (keys are
// taken in tiles at fixed absolute positions, ascending; a tile wholly masked for a row leaves its
// running max, sum and accumulator unchanged), so prefill chunking does not change results.
// Shapes: d_head 32, 64 or 128 and up to 64 query heads per KV head run here; any other shape
// (d_head 256) falls back to attention(), which then needs `partial` and `chunk`; otherwise those
// two fields are ignored.
#pragma once

#include "attention.h"

#include <cuda_runtime.h>

namespace tandem::cuda {

// Whether this head shape runs on tensor cores here (else the call falls back to attention()).
bool attention_prompt_native(int32_t n_head, int32_t n_head_kv, int32_t d_head);
void attention_prompt(const attention_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
