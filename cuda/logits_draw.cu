// cuda/logits_draw.cu - the draw by chunks (tandem/draw_chunks.h) of each requested logits row.
//
// Bytes: a row's 152 K logits (0.6 MB, in L2 right after the head wrote them) are read twice at
// most: once for the chunk sums, 256 of them again for the walk. Arithmetic: ~20 float operations
// a weight. The sums' order is draw_chunks.h's: each lane's 8 ids in order, the butterfly, the
// chunks of a group in order, the groups in order; so the drawn id is the host twin's and depends
// on the row and its request alone (batch invariant).
#include "logits_draw.h"

#include "cuda_check.h"
#include "launch.cuh"

namespace tandem::cuda {
namespace {

constexpr int sums_warps = 8;  // chunks a block of the first kernel

// Block (chunk block, row): warp w sums chunk blockIdx.x * 8 + w.
__global__ void __launch_bounds__(32 * sums_warps) logits_draw_sums_kernel(const logits_draw_args a, int n_chunks) {
    const int row = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int chunk = blockIdx.x * sums_warps + warp;
    pdl_wait();
    pdl_trigger();
    const row_draw d = a.draws[row];
    if (!(d.temperature > 0.0f) || chunk >= n_chunks) return;
    const float max_logit = a.rows[row].max;
    const float cutoff = draw_cutoff(max_logit, d);
    const float *x = a.logits + size_t(row) * size_t(a.n_cols);
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < draw_lane_ids; ++k) {
        const int id = chunk * draw_chunk + 32 * k + lane;
        sum += double(id < a.n_cols ? draw_weight(x[id], max_logit, cutoff, d) : 0.0f);
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (lane == 0) a.chunk_sum[size_t(row) * size_t(n_chunks) + size_t(chunk)] = sum;
}

// Block row, one warp: the group sums (lane g sums group g's chunks; lanes take 32 groups a round),
// the total and the walk by lane 0, the chosen chunk's weights by the warp into shared memory.
__global__ void __launch_bounds__(32) logits_draw_pick_kernel(const logits_draw_args a, int n_chunks) {
    constexpr int max_groups = 64;  // 64 x 8,192 ids: logits_draw checks the row fits
    __shared__ double s_group[max_groups];
    __shared__ float s_w[draw_chunk];
    __shared__ int s_chunk, s_fallback_begin, s_fallback_end;
    __shared__ double s_acc, s_r;
    const int row = blockIdx.x, lane = threadIdx.x;
    pdl_wait();
    pdl_trigger();
    const row_draw d = a.draws[row];
    logits_top_row &out = a.rows[row];
    if (!(d.temperature > 0.0f)) {
        if (lane == 0) out.drawn = -1;
        return;
    }
    const int n_groups = (n_chunks + draw_group_chunks - 1) / draw_group_chunks;
    const double *cs = a.chunk_sum + size_t(row) * size_t(n_chunks);
    for (int g = lane; g < n_groups; g += 32) {
        double s = 0.0;
        const int end = min(n_chunks, (g + 1) * draw_group_chunks);
        for (int c = g * draw_group_chunks; c < end; ++c) s += cs[c];
        s_group[g] = s;
    }
    __syncwarp();
    const float max_logit = out.max;
    const float cutoff = draw_cutoff(max_logit, d);
    const float *x = a.logits + size_t(row) * size_t(a.n_cols);
    if (lane == 0) {
        double total = 0.0;
        for (int g = 0; g < n_groups; ++g) total += s_group[g];
        const double r = d.u * total;
        double acc = 0.0;
        int g = 0;
        while (g < n_groups && !(acc + s_group[g] > r)) acc += s_group[g++];
        int chunk = -1, fb_begin = 0, fb_end = a.n_cols;  // the fallback's id range when the walk runs out
        if (g < n_groups) {
            const int c_end = min(n_chunks, (g + 1) * draw_group_chunks);
            int c = g * draw_group_chunks;
            while (c < c_end && !(acc + cs[c] > r)) acc += cs[c++];
            if (c < c_end) {
                chunk = c;
                fb_begin = c * draw_chunk;
                fb_end = min(a.n_cols, (c + 1) * draw_chunk);
            } else {
                fb_begin = g * draw_group_chunks * draw_chunk;
                fb_end = min(a.n_cols, c_end * draw_chunk);
            }
        }
        s_chunk = chunk;
        s_fallback_begin = fb_begin;
        s_fallback_end = fb_end;
        s_acc = acc;
        s_r = r;
    }
    __syncwarp();
    const int chunk = s_chunk;
    int drawn = -1;
    if (chunk >= 0) {
        for (int k = 0; k < draw_lane_ids; ++k) {
            const int i = 32 * k + lane, id = chunk * draw_chunk + i;
            s_w[i] = id < a.n_cols ? draw_weight(x[id], max_logit, cutoff, d) : 0.0f;
        }
        __syncwarp();
        if (lane == 0) {
            double acc = s_acc;
            const double r = s_r;
            for (int i = 0; i < draw_chunk && chunk * draw_chunk + i < a.n_cols; ++i) {
                acc += double(s_w[i]);
                if (acc > r) {
                    drawn = chunk * draw_chunk + i;
                    break;
                }
            }
        }
    }
    drawn = __shfl_sync(0xFFFFFFFFu, drawn, 0);
    if (drawn < 0) {
        // The walk ran out: the last id of positive weight in the range, found by the warp from
        // the end (the highest lane with one in each 32-id window).
        const int begin = s_fallback_begin;
        for (int base = s_fallback_end - 1; base >= begin && drawn < 0; base -= 32) {
            const int id = base - lane;
            const bool positive = id >= begin && draw_weight(x[id], max_logit, cutoff, d) > 0.0f;
            const unsigned hit = __ballot_sync(0xFFFFFFFFu, positive);
            if (hit) drawn = base - (__ffs(hit) - 1);
        }
        if (drawn < 0) drawn = begin;
    }
    if (lane == 0) {
        out.drawn = drawn;
        out.drawn_logit = x[drawn];
    }
}

}  // namespace

int32_t logits_draw_chunks(int32_t n_cols) { return (n_cols + draw_chunk - 1) / draw_chunk; }

void logits_draw(const logits_draw_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.logits && a.draws && a.chunk_sum && a.rows, "logits_draw: null pointer");
    const int32_t n_chunks = logits_draw_chunks(a.n_cols);
    TANDEM_CUDA_REQUIRE(a.n_cols > 0 && n_chunks <= 64 * draw_group_chunks, "logits_draw: 1 .. 524,288 columns a row");
    if (a.n_rows <= 0) return;
    launch_pdl(logits_draw_sums_kernel, dim3((n_chunks + sums_warps - 1) / sums_warps, a.n_rows), dim3(32 * sums_warps), stream, a,
               int(n_chunks));
    TANDEM_CUDA_CHECK_LAUNCH();
    launch_pdl(logits_draw_pick_kernel, dim3(a.n_rows), dim3(32), stream, a, int(n_chunks));
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
