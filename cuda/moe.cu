// cuda/moe.cu - routing (one warp per row) and the counting sort of pairs by expert (one block
// for the whole step, so no host round trip), and the fused combine + RMSNorm.
#include "moe.h"

#include "cuda_check.h"
#include "launch.cuh"
#include "warp_reduce.cuh"

#include <cmath>

namespace tandem::cuda {
namespace {

constexpr int route_threads = 1024;  // one block routes and sorts the whole step
constexpr int max_epl = 16;          // experts per lane: n_expert up to 512
constexpr int max_k = 32;

__global__ void __launch_bounds__(route_threads) moe_route_kernel(const moe_route_args a) {
    __shared__ int32_t s_count[max_epl * 32], s_cursor[max_epl * 32];
    pdl_wait();
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n_warps = route_threads / 32;
    for (int r = warp; r < a.n_rows; r += n_warps) {
        int32_t *ids = a.ids + int64_t(r) * a.k;
        float *wts = a.weights + int64_t(r) * a.k;
        if (a.slots[r] < 0) {
            for (int s = lane; s < a.k; s += 32) {
                ids[s] = -1;
                wts[s] = 0.0f;
            }
            continue;
        }
        const float *l = a.logits + int64_t(r) * a.n_expert;
        float p[max_epl];
        float mx = -INFINITY;
#pragma unroll
        for (int t = 0; t < max_epl; ++t) {
            p[t] = lane + 32 * t < a.n_expert ? l[lane + 32 * t] : -INFINITY;
            mx = fmaxf(mx, p[t]);
        }
        mx = warp_max(mx);
        float sum = 0.0f;
#pragma unroll
        for (int t = 0; t < max_epl; ++t) {
            p[t] = lane + 32 * t < a.n_expert ? expf(p[t] - mx) : 0.0f;
            sum += p[t];
        }
        sum = warp_sum_fixed(sum);
#pragma unroll
        for (int t = 0; t < max_epl; ++t) p[t] = lane + 32 * t < a.n_expert ? p[t] / sum : -1.0f;  // -1: never chosen
        for (int s = 0; s < a.k; ++s) {
            // Lane's best (highest probability, lowest id on ties), then the warp's.
            float best = -2.0f;
            int best_id = 0x7FFFFFFF;
#pragma unroll
            for (int t = 0; t < max_epl; ++t)
                if (p[t] > best) {  // strict: the earlier (lower) id wins a tie inside the lane
                    best = p[t];
                    best_id = lane + 32 * t;
                }
#pragma unroll
            for (int w = 16; w >= 1; w >>= 1) {
                const float ob = __shfl_xor_sync(0xFFFFFFFFu, best, w);
                const int oid = __shfl_xor_sync(0xFFFFFFFFu, best_id, w);
                if (ob > best || (ob == best && oid < best_id)) {
                    best = ob;
                    best_id = oid;
                }
            }
#pragma unroll
            for (int t = 0; t < max_epl; ++t)
                if (lane + 32 * t == best_id) p[t] = -1.0f;
            if (lane == 0) {
                ids[s] = best_id;
                wts[s] = best;
            }
        }
        if (lane == 0 && a.renormalise) {
            float top = 0.0f;
            for (int s = 0; s < a.k; ++s) top += wts[s];  // slot order, like the CPU twin
            for (int s = 0; s < a.k; ++s) wts[s] = wts[s] / top;
        }
    }
    for (int e = threadIdx.x; e < a.n_expert; e += route_threads) s_count[e] = 0;
    __syncthreads();
    const int n_pairs = a.n_rows * a.k;
    for (int p = threadIdx.x; p < n_pairs; p += route_threads) {
        const int e = a.ids[p];
        if (e >= 0) atomicAdd(&s_count[e], 1);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        // Warp 0: exclusive scans of the counts and of the non-empty flags, 32 experts at a time.
        const int lane = threadIdx.x;
        int off_base = 0, g_base = 0;
        for (int e0 = 0; e0 < a.n_expert; e0 += 32) {
            const int e = e0 + lane;
            const int c = e < a.n_expert ? s_count[e] : 0;
            int sc = c, sg = c > 0 ? 1 : 0;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int tc = __shfl_up_sync(0xFFFFFFFFu, sc, o), tg = __shfl_up_sync(0xFFFFFFFFu, sg, o);
                if (lane >= o) {
                    sc += tc;
                    sg += tg;
                }
            }
            const int excl = sc - c, gexcl = sg - (c > 0 ? 1 : 0);
            if (e < a.n_expert) s_cursor[e] = off_base + excl;
            if (c > 0) {
                a.group_expert[g_base + gexcl] = e;
                a.group_off[g_base + gexcl] = off_base + excl;
            }
            off_base += __shfl_sync(0xFFFFFFFFu, sc, 31);
            g_base += __shfl_sync(0xFFFFFFFFu, sg, 31);
        }
        if (lane == 0) {
            a.group_off[g_base] = off_base;
            *a.n_groups = g_base;
            if (a.groups_total) *a.groups_total += g_base;
        }
    }
    __syncthreads();
    // Order inside a group is whatever the atomics give: each pair's product is computed on its
    // own (matvec.h), so the order changes no value.
    for (int p = threadIdx.x; p < n_pairs; p += route_threads) {
        const int e = a.ids[p];
        if (e < 0) continue;
        const int at = atomicAdd(&s_cursor[e], 1);
        a.pair_x[at] = p / a.k;
        a.pair_y[at] = p;
    }
}

constexpr int combine_threads = 1024;  // latency-bound: few elements (round trips) per thread
constexpr int combine_max_d = 8192;  // row held in shared memory for the norm

__global__ void __launch_bounds__(combine_threads) moe_combine_kernel(const moe_combine_args a) {
    __shared__ float s_x[combine_max_d];
    __shared__ float s_inv;
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.x;
    float *x = a.x + int64_t(r) * a.d_model;
    const bool real = a.slots[r] >= 0;
    const float *o = a.out + int64_t(r) * a.k * a.d_model;
    const float *w = a.weights + int64_t(r) * a.k;
    for (int i = threadIdx.x; i < a.d_model; i += combine_threads) {
        float xi = x[i];
        if (real) {
            float prod[max_k];
#pragma unroll
            for (int s = 0; s < max_k; ++s) prod[s] = s < a.k ? __fmul_rn(w[s], o[int64_t(s) * a.d_model + i]) : 0.0f;
            float acc = 0.0f;  // fixed slot order, no FMA: bitwise the CPU twin's moe_combine
#pragma unroll
            for (int s = 0; s < max_k; ++s)
                if (s < a.k) acc = __fadd_rn(acc, prod[s]);
            xi = __fadd_rn(xi, acc);
            x[i] = xi;
        }
        s_x[i] = xi;
    }
    if (!a.norm) return;
    __syncthreads();
    // RMSNorm of the updated row in the CPU twin's order (warp 0: element i in lane i % 32).
    if (threadIdx.x < 32) {
        float sq = 0.0f;
#pragma unroll 8
        for (int i = threadIdx.x; i < a.d_model; i += 32) sq = __fadd_rn(sq, __fmul_rn(s_x[i], s_x[i]));
        sq = warp_sum_fixed(sq);
        if (threadIdx.x == 0) {
            const float mean_sq = __fdiv_rn(sq, float(a.d_model));
            s_inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, a.eps)));
        }
    }
    __syncthreads();
    const float inv = s_inv;
    float *h = a.h + int64_t(r) * a.d_model;
    for (int i = threadIdx.x; i < a.d_model; i += combine_threads) h[i] = __fmul_rn(__fmul_rn(s_x[i], inv), a.norm[i]);
}

}  // namespace

void moe_route(const moe_route_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.n_expert >= 1 && a.n_expert <= 32 * max_epl, "moe_route: n_expert must be in 1..512");
    TANDEM_CUDA_REQUIRE(a.k >= 1 && a.k <= a.n_expert && a.k <= max_k, "moe_route: k must be in 1..min(n_expert, 32)");
    if (a.n_rows == 0) return;
    launch_pdl(moe_route_kernel, dim3(1), dim3(route_threads), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_combine(const moe_combine_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.x && a.out && a.weights && a.slots && (!a.norm || a.h), "moe_combine: null pointer");
    TANDEM_CUDA_REQUIRE(a.k >= 1 && a.k <= max_k && a.d_model <= combine_max_d, "moe_combine: k up to 32, d_model up to 8192");
    if (a.n_rows == 0) return;
    launch_pdl(moe_combine_kernel, dim3(a.n_rows), dim3(combine_threads), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
