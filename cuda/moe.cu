// cuda/moe.cu - routing and the counting sort of pairs by expert (one warp for a one-row step,
// one block for a small step, parallel routing blocks then one sorting block for a large one; no
// host round trip), and the fused combine + RMSNorm.
// Routing: a warp per row computes the softmax, keeps the few experts that can be in the row's
// top k (select_top_k) and ranks each of those among them (higher probability first, lower id on
// ties) in one pass, instead of k dependent warp-wide argmax rounds, and renormalises its row's
// weights itself; the histogram, one warp's scan and the scatter follow on shared memory.
#include "moe.h"

#include "cuda_check.h"
#include "digits.cuh"
#include "launch.cuh"
#include "moe_route.cuh"
#include "warp_reduce.cuh"
#include "x_split.cuh"

#include <cmath>

namespace tandem::cuda {
namespace {

constexpr int route_threads = 1024;  // the routing blocks of large steps (small steps: route_small_warps)
constexpr int route_warps = route_threads / 32;
constexpr int max_epl = 16;          // experts per lane: n_expert up to 512
constexpr int max_experts = 32 * max_epl;
constexpr int max_k = 32;
constexpr int route_prob_cap = 4096;  // probabilities of one batch of rows in shared memory (16 KiB)
constexpr int route_unroll = 8;       // the sort's pairs a thread loads before adding them up
constexpr int route_ids_cap = 4096;   // pair experts kept in shared memory up to this many pairs (16 KiB)
static_assert(route_prob_cap >= max_experts, "a batch holds at least one row");
// Steps up to this many rows route and sort in one block (decode steps: one launch, no gap);
// larger ones route batches in parallel blocks, then sort in one (a 2,048-row prompt step took
// 2 ms per layer in the single block: 64 batches one after another).
constexpr int route_single_block_rows = 64;

struct route_shared {
    float prob[route_prob_cap];           // [rows of the batch][n_expert]
    float w[route_warps][max_k];          // selected probabilities, slot order
    int32_t ids[route_ids_cap];           // [n_pairs] expert of each pair (when it fits)
    uint16_t cand[route_warps][route_cand_cap];  // each warp's row's top-k candidates (select_top_k)
    int32_t count[max_experts], cursor[max_experts];
    bool pad[route_warps];
};

// Rows a block of `warps` warps routes at once (one a warp, as many as s_prob holds): the large
// steps' routing blocks take one such batch each.
__host__ __device__ constexpr int route_batch(int n_expert, int warps = route_warps) {
    return warps < route_prob_cap / n_expert ? warps : route_prob_cap / n_expert;
}
// Warps of the small steps' one routing block: a warp a row (up to 32; barriers of 32 warps cost
// a 16-row step's chain more than its work needs), at least 4 (128 threads zero the histogram and
// scatter the pairs in a pass or two).
constexpr int route_small_warps(int n_rows) { return n_rows < 4 ? 4 : n_rows > route_warps ? route_warps : n_rows; }

// The row's top k (route_select_top_k) into its slots: ids, the selected probabilities in slot
// order, and with `count` the histogram.
template <int epl>
__device__ void select_top_k(const moe_route_args &a, const float (&p)[epl], const float *row, uint16_t *cand, int r,
                             int rb, route_shared &sm, bool count, bool ids_shared) {
    const int k = a.k;
    route_select_top_k<epl>(p, row, cand, a.n_expert, k, [&](int rank, int e, float pe) {
        a.ids[int64_t(r) * k + rank] = e;
        if (ids_shared) sm.ids[r * k + rank] = e;
        sm.w[rb][rank] = pe;
        if (count) atomicAdd(&sm.count[e], 1);
    });
}

// Routes rows [row_begin, row_end): ids and weights; with `count`, the histogram of experts in
// sm.count (and, with ids_shared, each pair's expert in sm.ids).
template <int epl>
__device__ void route_rows(const moe_route_args &a, int row_begin, int row_end, route_shared &sm, bool count,
                           bool ids_shared) {
    float *const s_prob = sm.prob;
    auto &s_w = sm.w;
    int32_t *const s_ids = sm.ids;
    bool *const s_pad = sm.pad;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ne = a.n_expert, k = a.k;
    // Rows in batches whose probabilities fit s_prob, at most one row per warp.
    const int batch = route_batch(ne, int(blockDim.x) >> 5);
    for (int r0 = row_begin; r0 < row_end; r0 += batch) {
        const int nb = min(batch, row_end - r0);
        if (warp < nb) {
            const int r = r0 + warp;
            // One round trip for the row: its slot is asked for first, then every K part of the
            // lane's experts' logits before any is added (route_load_logits). Every row of the step
            // has router logits; padding rows' are just not used.
            const int32_t slot = a.slots[r];
            float p[epl];
            route_load_logits<epl>(a.logits + int64_t(r) * ne, a.n_logit_parts, a.logit_part_stride, ne, p);
            const bool pad = slot < 0;
            if (lane == 0) s_pad[warp] = pad;
            if (pad) {
                for (int s = lane; s < k; s += 32) {
                    a.ids[int64_t(r) * k + s] = -1;
                    a.weights[int64_t(r) * k + s] = 0.0f;
                    if (ids_shared) s_ids[r * k + s] = -1;
                }
            } else {
                route_softmax<epl>(p, ne, s_prob + warp * ne);
                select_top_k<epl>(a, p, s_prob + warp * ne, sm.cand[warp], r, warp, sm, count, ids_shared);
                // Weights: renormalised over the slots in slot order, like the CPU twin, by the
                // row's own warp (a lane a slot, each adding the row's sum in the same order).
                __syncwarp();
                for (int s = lane; s < k; s += 32) {
                    float top = 0.0f;
                    for (int j = 0; j < k; ++j) top += s_w[warp][j];
                    a.weights[int64_t(r) * k + s] = a.renormalise ? s_w[warp][s] / top : s_w[warp][s];
                }
            }
        }
        if (r0 + batch < row_end) __syncthreads();  // s_prob, s_w and s_pad are reused by the next batch
    }
}

// From the histogram in sm.count: the groups and the scatter of pairs by expert.
__device__ void sort_pairs(const moe_route_args &a, route_shared &sm, bool ids_shared) {
    int32_t *const s_ids = sm.ids, *const s_count = sm.count, *const s_cursor = sm.cursor;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n_threads = int(blockDim.x);
    const int ne = a.n_expert, k = a.k, n_pairs = a.n_rows * a.k;
    // Exclusive scans of the counts and of the non-empty flags by warp 0 alone (no block barrier
    // between the warps' scans): lane l takes experts l * per .. l * per + per - 1 in order, then
    // a warp scan of the lanes' totals.
    if (warp == 0) {
        const int per = (ne + 31) / 32, e0 = lane * per;
        int tc = 0, tg = 0;
        for (int i = 0; i < per; ++i) {
            const int e = e0 + i;
            const int c = e < ne ? s_count[e] : 0;
            tc += c;
            tg += c > 0 ? 1 : 0;
        }
        int sc = tc, sg = tg;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int uc = __shfl_up_sync(0xFFFFFFFFu, sc, o), ug = __shfl_up_sync(0xFFFFFFFFu, sg, o);
            if (lane >= o) {
                sc += uc;
                sg += ug;
            }
        }
        int off = sc - tc, g = sg - tg;  // exclusive: the experts before this lane's first
        for (int i = 0; i < per; ++i) {
            const int e = e0 + i;
            if (e >= ne) break;
            const int c = s_count[e];
            s_cursor[e] = off;
            if (c > 0) {
                a.group_expert[g] = e;
                a.group_off[g] = off;
                ++g;
            }
            off += c;
        }
        if (lane == 31) {
            a.group_off[sg] = sc;
            *a.n_groups = sg;
            if (a.groups_total) atomicAdd(a.groups_total, sg);  // no round trip: the result is unused
        }
    }
    __syncthreads();
    // Order inside a group is whatever the atomics give: each pair's product is computed on its
    // own (matvec.h), so the order changes no value. a.ids written above by this block are
    // visible after the barrier.
    // A thread's pairs in runs of route_unroll, each run's experts loaded before its atomics (a
    // prompt step's ids come from L2: one round trip a run instead of one a pair).
    for (int p0 = threadIdx.x; p0 < n_pairs; p0 += route_unroll * n_threads) {
        int e[route_unroll];
#pragma unroll
        for (int i = 0; i < route_unroll; ++i) {
            const int p = p0 + i * n_threads;
            e[i] = p < n_pairs ? (ids_shared ? s_ids[p] : a.ids[p]) : -1;
        }
#pragma unroll
        for (int i = 0; i < route_unroll; ++i) {
            if (e[i] < 0) continue;
            const int p = p0 + i * n_threads, at = atomicAdd(&s_cursor[e[i]], 1);
            a.pair_x[at] = p / k;
            a.pair_y[at] = p;
        }
    }
}

// Small steps: one block routes and sorts the whole step (no second launch).
template <int epl>
__global__ void __launch_bounds__(route_threads) moe_route_kernel(const moe_route_args a) {
    __shared__ route_shared sm;
    const bool ids_shared = a.n_rows * a.k <= route_ids_cap;
    for (int e = threadIdx.x; e < a.n_expert; e += blockDim.x) sm.count[e] = 0;
    // Every count is zero before any warp adds to it (route_rows counts as it selects; found by
    // compute-sanitizer racecheck, which delays warps enough to lose a row's counts).
    __syncthreads();
    pdl_wait();
    pdl_trigger();
    route_rows<epl>(a, 0, a.n_rows, sm, true, ids_shared);
    __syncthreads();
    sort_pairs(a, sm, ids_shared);
}

// One-row steps (a single decoding session): one warp routes the row with the same code, and its
// groups are its k experts in ascending order, one pair each (the slot), so the scans, the
// histogram and the barriers of 32 warps are skipped (about 3 us a layer less on an H200).
template <int epl>
__global__ void __launch_bounds__(32) moe_route_one_kernel(const moe_route_args a) {
    __shared__ route_shared sm;
    pdl_wait();
    pdl_trigger();
    route_rows<epl>(a, 0, 1, sm, false, true);
    __syncwarp();
    const int lane = threadIdx.x, k = a.k;
    const bool pad = sm.pad[0];
    const int e = !pad && lane < k ? sm.ids[lane] : 0;
    const int g = route_one_row_group(e, k);
    route_one_row_write_groups(pad, e, g, k, a.group_expert, a.group_off, a.n_groups, a.pair_x, a.pair_y, a.groups_total);
}

// Large steps (prompt steps of thousands of rows): blocks route a batch of rows each ...
template <int epl>
__global__ void __launch_bounds__(route_threads) moe_route_rows_kernel(const moe_route_args a) {
    __shared__ route_shared sm;
    pdl_wait();
    pdl_trigger();
    const int r0 = blockIdx.x * route_batch(a.n_expert);
    route_rows<epl>(a, r0, min(a.n_rows, r0 + route_batch(a.n_expert)), sm, false, false);
}

// ... then one block counts the pairs' experts and sorts them.
__global__ void __launch_bounds__(route_threads) moe_route_sort_kernel(const moe_route_args a) {
    __shared__ route_shared sm;
    for (int e = threadIdx.x; e < a.n_expert; e += route_threads) sm.count[e] = 0;
    pdl_wait();
    pdl_trigger();
    __syncthreads();
    const int n_pairs = a.n_rows * a.k;
    for (int p0 = threadIdx.x; p0 < n_pairs; p0 += route_unroll * route_threads) {  // as sort_pairs' runs
        int e[route_unroll];
#pragma unroll
        for (int i = 0; i < route_unroll; ++i) e[i] = p0 + i * route_threads < n_pairs ? a.ids[p0 + i * route_threads] : -1;
#pragma unroll
        for (int i = 0; i < route_unroll; ++i)
            if (e[i] >= 0) atomicAdd(&sm.count[e[i]], 1);
    }
    __syncthreads();
    sort_pairs(a, sm, false);
}

constexpr int combine_threads = 1024;  // latency-bound: few elements (round trips) per thread
constexpr int combine_max_d = 8192;    // squares held in shared memory for the norm
// Slots whose loads a thread has in flight before their sums: 16 values at most (the 1,024-thread
// blocks allow 64 registers a thread).
__host__ __device__ constexpr int combine_batch(int per) { return per >= 16 ? 1 : 16 / per; }

// One block per row; `per` = ceil(d_model / combine_threads) elements per thread, kept in
// registers from the loads to the stores. The norm's weights are immutable and read before the
// PDL wait. Sums in fixed slot order without FMA, and the norm in the CPU twin's order (warp 0:
// element i in lane i % 32): bitwise the CPU's moe_combine then rmsnorm.
template <int per>
__global__ void __launch_bounds__(combine_threads) moe_combine_kernel(const moe_combine_args a) {
    __shared__ float s_sq[combine_max_d];
    __shared__ float s_inv;
    const int r = blockIdx.x, d = a.d_model;
    float nw[per];
#pragma unroll
    for (int t = 0; t < per; ++t) {
        const int i = threadIdx.x + t * combine_threads;
        nw[t] = a.norm && i < d ? a.norm[i] : 0.0f;
    }
    const bool live = a.slots[r] >= 0;  // written before the step's first kernel (attention.h)
    pdl_wait();
    pdl_trigger();
    float *x = a.x + int64_t(r) * d;
    float xv[per], acc[per];
#pragma unroll
    for (int t = 0; t < per; ++t) {
        const int i = threadIdx.x + t * combine_threads;
        xv[t] = i < d ? x[i] : 0.0f;
        acc[t] = 0.0f;
    }
    // A batch of slots' weights and outputs is asked for before any of their sums (one round trip
    // a batch, not one a slot: in-order issue stalls at the first use); the sums keep slot order.
    // A padding row's sums (of whatever its buffer holds) are dropped below.
    const float *o = a.out + int64_t(r) * a.k * d;
    const float *w = a.weights + int64_t(r) * a.k;
    constexpr int batch = combine_batch(per);
    for (int s0 = 0; s0 < a.k; s0 += batch) {
        float ws[batch], ov[batch][per];
#pragma unroll
        for (int b = 0; b < batch; ++b) {
            const bool in = s0 + b < a.k;
            ws[b] = in ? w[s0 + b] : 0.0f;
#pragma unroll
            for (int t = 0; t < per; ++t) {
                const int i = threadIdx.x + t * combine_threads;
                ov[b][t] = in && i < d ? o[int64_t(s0 + b) * d + i] : 0.0f;
            }
        }
#pragma unroll
        for (int b = 0; b < batch; ++b)
            if (s0 + b < a.k)
#pragma unroll
                for (int t = 0; t < per; ++t) acc[t] = __fadd_rn(acc[t], __fmul_rn(ws[b], ov[b][t]));
    }
    if (live) {
#pragma unroll
        for (int t = 0; t < per; ++t) {
            const int i = threadIdx.x + t * combine_threads;
            xv[t] = __fadd_rn(xv[t], acc[t]);
            if (i < d) x[i] = xv[t];
        }
    }
    if (!a.norm) return;
#pragma unroll
    for (int t = 0; t < per; ++t) {
        const int i = threadIdx.x + t * combine_threads;
        if (i < d) s_sq[i] = __fmul_rn(xv[t], xv[t]);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        float sq = 0.0f;
#pragma unroll 16
        for (int i = threadIdx.x; i < d; i += 32) sq = __fadd_rn(sq, s_sq[i]);
        sq = warp_sum_fixed(sq);
        if (threadIdx.x == 0) {
            const float mean_sq = __fdiv_rn(sq, float(d));
            s_inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, a.eps)));
        }
    }
    __syncthreads();
    const float inv = s_inv;
    float *h = a.h + int64_t(r) * d;
#pragma unroll
    for (int t = 0; t < per; ++t) {
        const int i = threadIdx.x + t * combine_threads;
        if (i >= d) continue;
        const float v = __fmul_rn(__fmul_rn(xv[t], inv), nw[t]);
        h[i] = v;
        if (a.h_split)  // whole warps (d % 32 == 0): the sub-block sum shuffles
            split_store_warp(reinterpret_cast<uint16_t *>(a.h_split) + int64_t(r) * d * 2,
                             a.h_sums ? a.h_sums + int64_t(r) * (d / 32) : nullptr, i, v);
    }
}

// The combine + norm with digits (prompt rows): one block of d_model / 8 threads a row, each holding
// eight contiguous elements (rmsnorm_digits_block) loaded 16 bytes at a time, a few slots' loads in
// flight before their sums. Each element's sums are moe_combine_kernel's (slot order, no FMA), the
// norm is its order, and the digits are digits_quantize's of h: one launch instead of two.
constexpr int combine_digit_batch = 2;  // slots whose outputs a thread loads before adding them
__global__ void __launch_bounds__(combine_max_d / 8) moe_combine_digits_kernel(const moe_combine_args a) {
    __shared__ __align__(16) float s_sq[combine_max_d];
    __shared__ float s_inv;
    const int r = blockIdx.x, d = a.d_model, i0 = 8 * threadIdx.x;
    float nw[8];
    load8(a.norm + i0, nw);
    pdl_wait();
    pdl_trigger();
    float *x = a.x + int64_t(r) * d;
    float xv[8], acc[8] = {};
    load8(x + i0, xv);
    const float *o = a.out + int64_t(r) * a.k * d + i0;
    const float *w = a.weights + int64_t(r) * a.k;
    for (int s0 = 0; s0 < a.k; s0 += combine_digit_batch) {
        float ov[combine_digit_batch][8], ws[combine_digit_batch];
#pragma unroll
        for (int b = 0; b < combine_digit_batch; ++b)
            if (s0 + b < a.k) {
                ws[b] = w[s0 + b];
                load8(o + int64_t(s0 + b) * d, ov[b]);
            }
#pragma unroll
        for (int b = 0; b < combine_digit_batch; ++b)
            if (s0 + b < a.k)
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(ws[b], ov[b][i]));
    }
    if (a.slots[r] >= 0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) xv[i] = __fadd_rn(xv[i], acc[i]);
        *reinterpret_cast<float4 *>(x + i0) = make_float4(xv[0], xv[1], xv[2], xv[3]);
        *reinterpret_cast<float4 *>(x + i0 + 4) = make_float4(xv[4], xv[5], xv[6], xv[7]);
    }
    rmsnorm_digits_block(xv, nw, s_sq, &s_inv, d, a.eps, a.h + int64_t(r) * d, a.h_digits, r);
}

__global__ void moe_count_kernel(const moe_count_args a) {
    const int p = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (p >= a.n_rows * a.k || a.slots[p / a.k] < 0) return;
    const int32_t e = a.ids[p];
    if (e >= 0) atomicAdd(a.counts + e, 1ull);
}

// epl: experts per lane, n_expert <= 32 * epl (each lane's loops over its experts unrolled to that).
template <int epl>
void launch_route(const moe_route_args &a, cudaStream_t stream) {
    if (a.n_rows == 1) {
        launch_pdl(moe_route_one_kernel<epl>, dim3(1), dim3(32), stream, a);
    } else if (a.n_rows <= route_single_block_rows) {
        launch_pdl(moe_route_kernel<epl>, dim3(1), dim3(32 * route_small_warps(a.n_rows)), stream, a);
    } else {
        const int batch = route_batch(a.n_expert);
        launch_pdl(moe_route_rows_kernel<epl>, dim3((a.n_rows + batch - 1) / batch), dim3(route_threads), stream, a);
        TANDEM_CUDA_CHECK_LAUNCH();
        launch_pdl(moe_route_sort_kernel, dim3(1), dim3(route_threads), stream, a);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_count(const moe_count_args &a, cudaStream_t stream) {
    if (a.n_rows == 0) return;
    const int pairs = a.n_rows * a.k;
    moe_count_kernel<<<(pairs + 255) / 256, 256, 0, stream>>>(a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_route(const moe_route_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.n_expert >= 1 && a.n_expert <= 32 * max_epl, "moe_route: n_expert must be in 1..512");
    TANDEM_CUDA_REQUIRE(a.k >= 1 && a.k <= a.n_expert && a.k <= max_k, "moe_route: k must be in 1..min(n_expert, 32)");
    TANDEM_CUDA_REQUIRE(a.n_logit_parts >= 1 && a.n_logit_parts <= route_max_logit_parts &&
                            (a.n_logit_parts == 1 || a.logit_part_stride >= int64_t(a.n_rows) * a.n_expert),
                        "moe_route: logit parts must be 1..4 and must not overlap");
    if (a.n_rows == 0) return;
    if (a.n_expert <= 128)
        launch_route<4>(a, stream);
    else if (a.n_expert <= 256)
        launch_route<8>(a, stream);
    else
        launch_route<max_epl>(a, stream);
}

void moe_group_pairs(const moe_route_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.n_expert >= 1 && a.n_expert <= max_experts && a.k >= 1 && a.k <= max_k,
                        "moe_group_pairs: n_expert up to 512, k up to 32");
    if (a.n_rows == 0) return;
    launch_pdl(moe_route_sort_kernel, dim3(1), dim3(route_threads), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

bool moe_combine_digits_applies(const moe_combine_args &a) {
    return a.norm && a.h && !a.h_split && a.d_model % 256 == 0 &&
           (reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.out) | reinterpret_cast<uintptr_t>(a.norm) |
            reinterpret_cast<uintptr_t>(a.h)) % 16 == 0;
}

void moe_combine(const moe_combine_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.x && a.out && a.weights && a.slots && (!a.norm || a.h), "moe_combine: null pointer");
    TANDEM_CUDA_REQUIRE(a.k >= 1 && a.k <= max_k && a.d_model <= combine_max_d, "moe_combine: k up to 32, d_model up to 8192");
    TANDEM_CUDA_REQUIRE(!a.h_split || (a.norm && a.d_model % 32 == 0), "moe_combine: a split h needs the norm and d_model a multiple of 32");
    TANDEM_CUDA_REQUIRE(!a.h_sums || a.h_split, "moe_combine: h_sums is written with h_split only");
    if (a.n_rows == 0) return;
    TANDEM_CUDA_REQUIRE(!a.h_digits.digits || (moe_combine_digits_applies(a) && a.h_digits.scales && a.h_digits.sums),
                        "moe_combine: digits need the norm, d_model a multiple of 256, scales and sums, 16-byte aligned rows, "
                        "and no split h");
    static_assert(combine_max_d == 8 * combine_threads, "moe_combine: per-thread variants cover 1, 2, 4 and 8 elements");
    if (a.h_digits.digits) {
        launch_pdl(moe_combine_digits_kernel, dim3(a.n_rows), dim3(a.d_model / 8), stream, a);
        TANDEM_CUDA_CHECK_LAUNCH();
        return;
    }
    const dim3 grid(a.n_rows), block(combine_threads);
    switch ((a.d_model + combine_threads - 1) / combine_threads) {
    case 1: launch_pdl(moe_combine_kernel<1>, grid, block, stream, a); break;
    case 2: launch_pdl(moe_combine_kernel<2>, grid, block, stream, a); break;
    case 3:
    case 4: launch_pdl(moe_combine_kernel<4>, grid, block, stream, a); break;
    default: launch_pdl(moe_combine_kernel<8>, grid, block, stream, a); break;
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
