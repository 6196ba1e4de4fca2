// cuda/logits_draw.h - a temperature draw from each logits row on the device (the draw by chunks of
// tandem/draw_chunks.h), so that a temperature request needs only the token and the row's
// summary from the GPU instead of the whole row (0.6 MB for Qwen3's vocabulary).
// Owns: the weights, chunk sums, group sums and the walk of draw_chunks.h, for the rows whose
// request has a temperature; the drawn id and logit go into the row's logits_top_row. Its CPU twin
// is tandem::draw_by_chunks (sampler.h), which draws the same id.
// Does not own: the row's max (logits_top, run before it on the same rows), the uniform numbers
// (the host's samplers), rows split across devices (the engine draws those on the host).
#pragma once

#include "logits_top.h"
#include "tandem/draw_chunks.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct logits_draw_args {
    const float *logits = nullptr;     // [n_rows][n_cols]: whole rows (vocab id = column)
    int32_t n_rows = 0, n_cols = 0;
    const row_draw *draws = nullptr;   // [n_rows]; temperature <= 0: no draw (drawn = -1)
    double *chunk_sum = nullptr;       // [n_rows][logits_draw_chunks(n_cols)] scratch
    logits_top_row *rows = nullptr;    // [n_rows]: max read (logits_top's), drawn and drawn_logit written
};

int32_t logits_draw_chunks(int32_t n_cols);
// Two kernels: the chunk sums (a warp a chunk), then one warp a row walks groups, chunks and ids.
void logits_draw(const logits_draw_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
