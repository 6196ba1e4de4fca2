// cuda/logits_top.h - the best tokens of each logits row and the row's softmax normaliser, on the
// device, so that sampling a decode row needs ~0.5 KB from the GPU instead of the whole row
// (151,936 floats for Qwen3: 0.6 MB a row, 9.7 MB a 16-session step).
// Owns: per row, the logits_top_n best (id, logit) by logit descending then id ascending (the host
// sampler's order: a tie goes to the lower id), the row's largest logit, sum_i exp(logit_i - max)
// in double, and whether the row holds a NaN. Its CPU twin is tandem::logits_top_of (sampler.h),
// which gives the same ids and logits bitwise and the same sum up to double rounding.
// Also each row's best token alone (logits_best), for steps whose rows want nothing more.
// Does not own: sampling (tandem::sampler::sample_top), the merge of a row split across the
// devices of a tensor-parallel pair (the engine front merges their summaries).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

constexpr int32_t logits_top_n = 64;        // tokens kept per row (tandem::logits_top_max)
constexpr int32_t logits_top_slice = 4096;  // columns per block of the first pass
constexpr int32_t logits_top_max_slices = 64;  // the second pass selects from 64 x 64 candidates

// One row's summary, as the host receives it.
struct logits_top_row {
    double sum_exp = 0.0;  // sum over the row's columns of exp(double(logit) - double(max))
    float max = 0.0f;      // the largest logit (NaNs ignored)
    int32_t has_nan = 0;
    int32_t n = 0;         // valid entries: min(logits_top_n, n_cols)
    int32_t drawn = -1;    // the row's exact draw (cuda/logits_draw.h) when one ran, else -1
    int32_t id[logits_top_n];      // vocab ids (first_id + column), best first
    float logit[logits_top_n];
    float drawn_logit = 0.0f;      // the drawn id's logit
};

struct logits_top_args {
    const float *logits = nullptr;   // [n_rows][n_cols]
    int32_t n_rows = 0, n_cols = 0;  // n_cols <= logits_top_slice * logits_top_max_slices
    int32_t first_id = 0;            // vocab id of column 0 (a device's shard of the head)
    uint64_t *scratch = nullptr;     // [n_rows][slices][logits_top_n] candidate keys
    float *slice_max = nullptr;      // [n_rows][slices]
    double *slice_sum = nullptr;     // [n_rows][slices]
    int32_t *slice_nan = nullptr;    // [n_rows][slices]
    logits_top_row *out = nullptr;   // [n_rows]
};

// Blocks of the first pass for a row of n_cols columns (0 when n_cols is too wide for the device path).
int32_t logits_top_slices(int32_t n_cols);
// Two kernels: each 4,096-column slice of each row selects its 64 best and its max and sum; then
// one block per row selects, sorts and combines. Rows are independent (batch invariant).
void logits_top(const logits_top_args &args, cudaStream_t stream);

struct logits_best_args {
    const float *logits = nullptr;   // [n_rows][n_cols]
    int32_t n_rows = 0, n_cols = 0;
    int32_t first_id = 0;            // vocab id of column 0
    logits_top_row *out = nullptr;   // [n_rows]
    int32_t cluster = 0;             // blocks a row, 1-8 (more than 1: sm_90); 0: logits_best_cluster's
};
// The blocks a row takes: `requested` when positive, else 8 on a device with clusters (sm_90), 1
// before.
int logits_best_cluster(int requested);
// Each row's best token only, for steps that need nothing else (greedy rows without logprobs):
// out[r].n = 1, id[0] and logit[0] bitwise logits_top's first entry (the largest logit, the lower
// id on ties, NaNs left out; id -1 and -inf when every logit is NaN), max = logit[0], has_nan as
// logits_top's, sum_exp NaN (not computed), drawn -1. One launch: a cluster of blocks a row, each
// a contiguous part of the row, their bests exchanged through distributed shared memory. The
// largest of distinct keys is the same in any order, so the result depends on the row alone.
void logits_best(const logits_best_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
