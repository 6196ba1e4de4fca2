// cuda/logits_rules.cu - logit rules on the head's rows, in place (cuda/logits_rules.h).
//
// A grid of (column tiles, rows): each block reads its row's rules (uploaded before the step, so
// read before the PDL wait), writes -infinity over the masked columns of its tile, and applies a
// share of the row's adjustments to the columns that stay allowed. The two writes never meet a
// column (an adjusted column is allowed, a masked one is not), and a column's id appears once in
// the adjustments, so no two threads write one value. Bytes: a ruled row's logits read and written
// once (0.6 MB for 152 K ids, in L2 after the head) plus its mask (19 KB); unruled rows cost a block
// each that exits.
#include "logits_rules.h"

#include "cuda_check.h"
#include "launch.cuh"

namespace tandem::cuda {
namespace {

constexpr int rules_threads = 256;
// Columns a block covers: 8 a thread, so a 152 K row takes 75 blocks and its masked writes stream.
constexpr int rules_tile = rules_threads * 8;

__global__ void __launch_bounds__(rules_threads) logits_rules_kernel(logits_rules_args a) {
    const logits_rules_row r = a.rules[blockIdx.y];
    pdl_wait();
    pdl_trigger();
    if (r.n_adjust == 0 && r.allowed == nullptr) return;
    float *row = a.logits + size_t(blockIdx.y) * size_t(a.n_cols);
    if (r.allowed) {
        const int end = min(a.n_cols, int(blockIdx.x + 1) * rules_tile);
        for (int c = int(blockIdx.x) * rules_tile + int(threadIdx.x); c < end; c += rules_threads)
            if (!token_allowed(r.allowed, a.first_id + c)) row[c] = -INFINITY;
    }
    const int stride = int(gridDim.x) * rules_threads;
    for (int k = int(blockIdx.x) * rules_threads + int(threadIdx.x); k < r.n_adjust; k += stride) {
        const token_adjust t = r.adjust[k];
        const int c = t.id - a.first_id;
        if (c < 0 || c >= a.n_cols || (r.allowed && !token_allowed(r.allowed, t.id))) continue;
        row[c] = token_adjust_apply(t, row[c]);
    }
}

}  // namespace

void logits_rules(const logits_rules_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.logits && a.rules && a.n_rows >= 0 && a.n_rows <= 65535 && a.n_cols > 0 && a.first_id >= 0,
                        "logits_rules: logits, rules, 0..65535 rows, columns and a first id >= 0");
    if (a.n_rows == 0) return;
    const int tiles = (a.n_cols + rules_tile - 1) / rules_tile;
    launch_pdl(logits_rules_kernel, dim3(unsigned(tiles), unsigned(a.n_rows)), dim3(rules_threads), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
