// cuda/logits_draw.h - a temperature draw from each logits row on the device (the exact draw of
// tandem/draw_exact.h: top_k, min_p and top_p included), so that a temperature request needs only the
// token and the row's summary from the GPU instead of the whole row (0.6 MB for Qwen3).
// Owns: the integer weights, top_k's k-th key and the nucleus's boundary (radix descents over the
// sampler's 64-bit order keys, by count and by mass), the row's total, the pick in id order, for the rows whose request has a
// temperature; the drawn id and logit go into the row's logits_top_row. Its CPU twin is
// tandem::draw_exact (sampler.h), which draws the same id: every sum is of integers, exact in any
// order.
// Does not own: a whole row's max (logits_top, run before it on the same rows; a row in two parts
// takes its own max), the uniform numbers (the host's samplers), gathering a split head's parts
// (the engine sends them here).
#pragma once

#include "logits_top.h"
#include "tandem/draw_exact.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct logits_draw_args {
    const float *logits = nullptr;     // [n_rows][n_cols]: whole rows (vocab id = column), or with
    const float *logits_rest = nullptr;  // set: [n_rows][split] here and ids split.. in [n_rows][n_cols - split]
    int32_t split = 0;                 // with logits_rest: the first id of the rest (0 < split < n_cols)
    int32_t n_rows = 0, n_cols = 0;
    const row_draw *draws = nullptr;   // [n_rows]; temperature <= 0: no draw (drawn = -1)
    logits_top_row *rows = nullptr;    // [n_rows]: max read (logits_top's), drawn and drawn_logit written
    int32_t cluster = 0;               // blocks a row, 1-8 (more than 1: sm_90); 0: logits_draw_cluster's
};

// The blocks a row takes: `requested` when positive, else 8 on a device with clusters (sm_90), 1
// before.
int logits_draw_cluster(int requested);

// A cluster of blocks a row: the total, radix passes for a top_k and a nucleus, the pick. The
// drawn ids do not depend on the cluster's size.
void logits_draw(const logits_draw_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
