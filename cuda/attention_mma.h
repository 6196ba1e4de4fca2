// cuda/attention_mma.h - the decode attention's chunk partials on tensor cores, for a KV cache of
// halves (attention_args::kv_f16) with d_head 128 and 8 or a multiple of 8 query heads per KV head
// (every Qwen3-MoE), or of ggml's q8_0 blocks with the same geometry. attention() takes it whenever
// it applies, so which kernel a row gets depends on the model and the cache type only, never on the
// step. Same grid, chunking and partial layout as the fp32 kernel (attention.cu), whose combine
// launch merges the partials.
//
// Numerics: keys and values enter the mma exactly (halves; or a q8_0 block's quants, integers of 8
// bits, with its scale applied outside: float(q) * float(d) needs up to 19 significant bits, more
// than a half holds). The queries and the softmax probabilities are split into f16 hi + lo (~22
// significant bits) and the two parts ride in the upper and lower 8 rows of one m16n8k16 product,
// so each score and each output element is (hi part) + (lo part) with fp32 accumulation. q8_0: a
// score is the sum over the head's 4 blocks of d * (q . quants); P * V takes, per value block,
// the probabilities times that position's scale as its fp32 operand. Scores, softmax (expf) and the
// merge are fp32 as in the CUDA-core kernel; each row's result depends only on its own position
// and cache.
// Owns: the tensor-core partial kernel. Does not own: the chunk schedule (attention.h), the merge.
#pragma once

#include "attention.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

// Whether attention_partial_mma takes these arguments (q8_0 caches: planes on 8-byte boundaries,
// as every allocation is, for the 8-byte copies of 136-byte heads).
inline bool attention_mma_applies(const attention_args &a) {
    const bool q8_aligned = (reinterpret_cast<uintptr_t>(a.k_cache) | reinterpret_cast<uintptr_t>(a.v_cache)) % 8 == 0;
    return (a.kv_f16 || (a.kv_q8_0 && q8_aligned)) && a.d_head == 128 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0 &&
           (a.n_head / a.n_head_kv) % 8 == 0;
}

// The chunk partials of every row (attention_args::partial, n_chunks per head), launched with
// attention_mma_chunk_blocks blocks a (row, group of 8 query heads) along z.
void attention_partial_mma(const attention_args &a, int n_chunks, cudaStream_t stream);

// Blocks along z for row_blocks blocks of (row, query-head group) and n_chunks chunks a row: at
// most one wave of the GPU (wave = its SMs times this kernel's blocks an SM), each block's run of
// chunks as short as that allows, and no more blocks than that run needs. Which block takes a
// chunk changes no bit of its partial.
int attention_mma_chunk_blocks(int row_blocks, int n_chunks, int wave);

}  // namespace tandem::cuda
