// cuda/logits_draw.cu - the exact draw (tandem/draw_exact.h) of each requested logits row.
//
// One block of 1,024 threads a row. Bytes: the row's logits (0.6 MB for 152 K ids, in L2 right
// after the head wrote them) are read once for the total, once a radix pass (8 for a top_k beyond
// the row's summary, with a count first; 8 for top_p < 1) and once for the pick. Arithmetic: ~20 float operations a weight, made in each pass
// that needs it. Every sum is of integer weights, so the atomics' and the warps' order does not
// matter: the drawn id is the host twin's and depends on the row and its request alone.
#include "logits_draw.h"

#include "cuda_check.h"
#include "launch.cuh"

namespace tandem::cuda {
namespace {

constexpr int draw_threads = 1024;
constexpr int draw_warps = draw_threads / 32;

__device__ __forceinline__ uint64_t warp_sum_u64(uint64_t v) {
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

__device__ __forceinline__ uint64_t warp_inclusive_u64(uint64_t v, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint64_t t = __shfl_up_sync(0xFFFFFFFFu, v, o);
        if (lane >= o) v += t;
    }
    return v;
}

struct draw_smem {
    unsigned long long bins[256];  // a radix pass's values by digit
    unsigned long long warp_sum[draw_warps];
    uint64_t total, above, last_bin;
    int digit;
    int pick_warp;
    uint64_t pick_base;
};

// The sum of value(i, key) over the row (integers: any order). Every thread must call it.
template <class Value>
__device__ uint64_t block_sum(const float *x, int n, Value value, draw_smem &s) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint64_t mine = 0;
    for (int i = tid; i < n; i += draw_threads) mine += value(i, draw_key(x[i], i));
    mine = warp_sum_u64(mine);
    __syncthreads();  // s.warp_sum's earlier readers are done
    if (lane == 0) s.warp_sum[warp] = mine;
    __syncthreads();
    if (tid == 0) {
        uint64_t t = 0;
        for (int w = 0; w < draw_warps; ++w) t += s.warp_sum[w];
        s.total = t;
    }
    __syncthreads();
    return s.total;
}

// The key B of the token at which the best-first running sum of value(i, key) first reaches
// need (0 < need <= the row's sum), digit by digit from the top, 8 bits a pass; *through: the
// running sum through B. `above` is the sum over the tokens whose decided digits beat B's; each
// pass bins the values of the tokens sharing B's decided digits. Every thread must call it.
template <class Value>
__device__ uint64_t radix_boundary(const float *x, int n, uint64_t need, Value value, draw_smem &s, uint64_t *through) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint64_t prefix = 0, above = 0;
    for (int pass = 0; pass < 8; ++pass) {
        const int shift = 56 - 8 * pass;
        const uint64_t high = pass == 0 ? 0ull : ~0ull << (shift + 8);
        if (tid < 256) s.bins[tid] = 0;
        __syncthreads();
        // Runs of one digit are added up in a register first: early passes see few digits.
        int run_digit = -1;
        uint64_t run = 0;
        for (int i = tid; i < n; i += draw_threads) {
            const uint64_t key = draw_key(x[i], i);
            if ((key & high) != prefix) continue;
            const uint64_t v = value(i, key);
            if (v == 0) continue;
            const int digit = int(key >> shift) & 255;
            if (digit != run_digit) {
                if (run_digit >= 0) atomicAdd(&s.bins[run_digit], (unsigned long long)run);
                run_digit = digit;
                run = 0;
            }
            run += v;
        }
        if (run_digit >= 0) atomicAdd(&s.bins[run_digit], (unsigned long long)run);
        __syncthreads();
        if (warp == 0) {
            // Lane l holds digits 255 - 8 l down to 248 - 8 l: descending across the lanes.
            uint64_t c[8], sum = 0;
#pragma unroll
            for (int i = 0; i < 8; ++i) sum += c[i] = s.bins[255 - 8 * lane - i];
            const uint64_t incl = warp_inclusive_u64(sum, lane), excl = incl - sum;
            if (above + excl < need && above + incl >= need) {
                uint64_t run_above = above + excl;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    if (run_above + c[i] >= need) {
                        s.digit = 255 - 8 * lane - i;
                        s.above = run_above;
                        s.last_bin = c[i];
                        break;
                    }
                    run_above += c[i];
                }
            }
        }
        __syncthreads();
        prefix |= uint64_t(s.digit) << shift;
        above = s.above;
        __syncthreads();  // s.digit, s.above and the bins are rewritten next pass
    }
    *through = above + s.last_bin;  // keys are distinct: the last pass's bin holds B alone
    return prefix;
}

__global__ void __launch_bounds__(draw_threads) logits_draw_kernel(const logits_draw_args a) {
    __shared__ draw_smem s;
    const int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    pdl_wait();
    pdl_trigger();
    const row_draw d = a.draws[row];
    logits_top_row &out = a.rows[row];
    if (!(d.temperature > 0.0f)) {
        if (tid == 0) out.drawn = -1;
        return;
    }
    const int n = a.n_cols;
    const float *x = a.logits + size_t(row) * size_t(n);
    const float max_logit = out.max;
    const float cutoff = draw_cutoff(max_logit, d);

    // top_k: the k-th best key among the tokens passing the cutoff, when more than k pass.
    uint64_t kth = 0;
    if (d.top_k > 0) {
        auto passes = [&](int i, uint64_t) -> uint64_t { return draw_passes(x[i], max_logit, cutoff) ? 1 : 0; };
        const uint64_t n_pass = block_sum(x, n, passes, s);
        uint64_t unused = 0;
        if (uint64_t(d.top_k) < n_pass) kth = radix_boundary(x, n, uint64_t(d.top_k), passes, s, &unused);
    }
    auto weight = [&](int i, uint64_t key) -> uint64_t { return key >= kth ? draw_weight(x[i], max_logit, cutoff, d) : 0; };
    const uint64_t total = block_sum(x, n, weight, s);
    const uint64_t need = draw_nucleus_need(total, d.top_p);

    // The nucleus: every candidate with a key from the boundary's up.
    uint64_t boundary = kth, mass = total;
    if (need < total) boundary = radix_boundary(x, n, need, weight, s, &mass);

    // The pick: r = min(trunc(u x M), M - 1); warp w sums the nucleus's weights over its
    // contiguous range of ids, warp 0 finds the range holding r, whose warp walks it 32 ids a step.
    const uint64_t r = draw_pick_threshold(d.u, mass);
    const int seg = ((n + draw_warps - 1) / draw_warps + 31) / 32 * 32;
    const int begin = warp * seg, end = min(n, begin + seg);
    auto nucleus_weight = [&](int i) -> uint64_t {
        const uint64_t key = draw_key(x[i], i);
        return key >= boundary ? weight(i, key) : 0;
    };
    uint64_t mine = 0;
    for (int i = begin + lane; i < end; i += 32) mine += nucleus_weight(i);
    mine = warp_sum_u64(mine);
    __syncthreads();  // block_sum's readers of s.warp_sum are done
    if (lane == 0) s.warp_sum[warp] = mine;
    __syncthreads();
    if (warp == 0) {
        const uint64_t v = s.warp_sum[lane], incl = warp_inclusive_u64(v, lane);
        const unsigned hit = __ballot_sync(0xFFFFFFFFu, incl > r);
        const int w = hit ? __ffs(hit) - 1 : -1;
        if (lane == 0) s.pick_warp = w;
        if (w >= 0 && lane == w) s.pick_base = incl - v;
    }
    __syncthreads();
    if (warp != s.pick_warp) {
        if (tid == 0 && s.pick_warp < 0) out.drawn = -1;  // unreachable: r < M
        return;
    }
    uint64_t base = s.pick_base;
    int drawn = -1;
    for (int start = begin; start < end && drawn < 0; start += 32) {
        const int i = start + lane;
        const uint64_t w = i < end ? nucleus_weight(i) : 0;
        const uint64_t incl = warp_inclusive_u64(w, lane);
        const unsigned hit = __ballot_sync(0xFFFFFFFFu, base + incl > r);
        if (hit) drawn = start + __ffs(hit) - 1;
        base += __shfl_sync(0xFFFFFFFFu, incl, 31);
    }
    if (lane == 0) {
        out.drawn = drawn;
        out.drawn_logit = drawn >= 0 ? x[drawn] : 0.0f;
    }
}

}  // namespace

void logits_draw(const logits_draw_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.logits && a.draws && a.rows, "logits_draw: null pointer");
    TANDEM_CUDA_REQUIRE(a.n_cols > 0, "logits_draw: empty rows");
    if (a.n_rows <= 0) return;
    launch_pdl(logits_draw_kernel, dim3(a.n_rows), dim3(draw_threads), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
