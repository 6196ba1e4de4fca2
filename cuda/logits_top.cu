// cuda/logits_top.cu - per logits row: the 64 best (id, logit), the max and the sum of exp(logit - max).
//
// logits_best keeps only each row's largest key: one launch, no selection, no sums.
// Bytes: a 16-row step reads 16 x 152 K floats (9.7 MB, ~3 us at the HBM roof) and writes ~8 KB;
// the work is selection, not arithmetic. Each (logit, id) becomes one 64-bit key that orders as
// the sampler does: the logit's order-preserving bits above, ~id below (a tie goes to the lower
// id), so every key of a row is distinct and "the 64 best" is exactly defined. Selection is a
// radix select of the 64th-largest key, 8 bits a pass (stopping once the 64th key's bin is needed
// whole), over 4,096 keys held 16 per thread: in the first kernel each slice of 4,096 columns keeps
// its 64 best; the second selects the row's 64 best from the slices' (at most 64 x 64) and sorts
// them by rank. Sums are double, each thread's in column order, then a fixed butterfly and the
// warps in order, then the slices in order: the result depends on the row alone, never on the
// step's other rows.
#include "logits_top.h"

#include "cluster.cuh"
#include "cuda_check.h"
#include "launch.cuh"
#include "warp_reduce.cuh"

#include <cmath>

namespace tandem::cuda {
namespace {

constexpr int select_threads = 256;  // 8 warps
constexpr int per_thread = logits_top_slice / select_threads;  // 16 keys a thread
static_assert(logits_top_max_slices * logits_top_n == logits_top_slice, "the merge selects from one slice's worth of keys");
static_assert(logits_top_n <= select_threads, "one output per thread");

// The logit's bits mapped to an unsigned order (negative values reversed), -0 taken as +0 (the
// sampler compares values, and -0 == +0); NaN is flagged separately and never sampled.
__device__ __forceinline__ uint64_t top_key(float v, int32_t id) {
    uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t(u) << 32) | uint64_t(0xFFFFFFFFu - uint32_t(id));
}
__device__ __forceinline__ int32_t key_id(uint64_t key) { return int32_t(0xFFFFFFFFu - uint32_t(key)); }

struct select_smem {
    unsigned hist[256];
    uint64_t keys[logits_top_n];  // the selected keys, unsorted
    int digit, need;
    int count;  // in a pass: 1 when the digit's bin is needed whole; after the passes: keys taken
};

// The logits_top_n largest of the block's 4,096 keys (key 0: an empty place, below every real key)
// -> s.keys, in no particular order. Every thread of the block must call it.
// A pass's histogram is counted a warp at a time: the lanes of one bin are found by a match and
// their leader adds their number, so the first passes, where most keys share a bin (a row's
// logits share their sign and exponent), make one shared atomic a bin a warp instead of one a key
// on the same address. The passes stop as soon as the bin of the 64th key holds exactly the keys
// still needed: then every key from that bin up is taken (for distinct logits, once the keys'
// leading bytes tell them apart).
// The set taken is the same either way (the keys are distinct).
__device__ void select_top(const uint64_t (&key)[per_thread], select_smem &s) {
    const int tid = threadIdx.x, lane = tid & 31;
    uint64_t prefix = 0;  // the digits of the logits_top_n-th key decided so far
    int need = logits_top_n;  // how many keys with that prefix are still to take
    bool whole_bin = false;   // the passes stopped early: take every key >= prefix
    for (int pass = 0; pass < 8; ++pass) {
        const int shift = 56 - 8 * pass;
        const uint64_t high = pass == 0 ? 0ull : ~0ull << (shift + 8);
        s.hist[tid] = 0;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < per_thread; ++k) {
            const bool live = (key[k] & high) == prefix;
            if (!__any_sync(0xFFFFFFFFu, live)) continue;
            const unsigned bin = unsigned(key[k] >> shift) & 255u;
            const unsigned peers = __match_any_sync(0xFFFFFFFFu, live ? bin : 256u);
            if (live && (peers & ((1u << lane) - 1u)) == 0) atomicAdd(&s.hist[bin], unsigned(__popc(peers)));
        }
        __syncthreads();
        if (tid < 32) {
            // Lane l holds bins 255 - 8 l down to 248 - 8 l: the bins in descending order across lanes.
            unsigned c[8], total = 0;
#pragma unroll
            for (int i = 0; i < 8; ++i) total += c[i] = s.hist[255 - 8 * lane - i];
            unsigned incl = total;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
                if (lane >= o) incl += t;
            }
            const unsigned above = incl - total;  // keys in higher bins (of this prefix)
            if (above < unsigned(need) && incl >= unsigned(need)) {
                unsigned run = above;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    if (run + c[i] >= unsigned(need)) {
                        s.digit = 255 - 8 * lane - i;
                        s.need = need - int(run);
                        s.count = run + c[i] == unsigned(need) ? 1 : 0;  // the bin is needed whole
                        break;
                    }
                    run += c[i];
                }
            }
        }
        __syncthreads();
        prefix |= uint64_t(s.digit) << shift;
        need = s.need;
        whole_bin = s.count != 0;
        __syncthreads();  // s.digit, s.need, s.count and s.hist are rewritten next
        if (whole_bin) break;
    }
    // Either prefix is the logits_top_n-th largest key, with logits_top_n - need keys above it, or
    // (whole_bin) exactly logits_top_n keys are at least prefix.
    if (tid == 0) s.count = 0;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < per_thread; ++k)
        if (whole_bin ? key[k] >= prefix : key[k] > prefix) s.keys[atomicAdd(&s.count, 1)] = key[k];
    if (!whole_bin && tid >= logits_top_n - need && tid < logits_top_n) s.keys[tid] = prefix;
    __syncthreads();
}

// Block (slice, row): columns slice * 4096 + 256 k + thread.
__global__ void __launch_bounds__(select_threads) logits_top_slice_kernel(const logits_top_args a, int n_slices) {
    __shared__ select_smem s;
    __shared__ float s_max[select_threads / 32];
    __shared__ double s_sum[select_threads / 32];
    const int slice = blockIdx.x, row = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    pdl_wait();
    pdl_trigger();
    const float *x = a.logits + size_t(row) * size_t(a.n_cols);
    float v[per_thread];
    uint64_t key[per_thread];
    float m = -INFINITY;
    int nan = 0;
#pragma unroll
    for (int k = 0; k < per_thread; ++k) {
        const int col = slice * logits_top_slice + k * select_threads + tid;
        const bool live = col < a.n_cols;
        v[k] = live ? x[col] : -INFINITY;
        const bool is_nan = isnan(v[k]);
        nan |= is_nan ? 1 : 0;
        if (is_nan) v[k] = -INFINITY;  // out of the max and the sum; the flag reports it
        m = fmaxf(m, v[k]);
        key[k] = live && !is_nan ? top_key(v[k], a.first_id + col) : 0ull;
    }
    nan = __syncthreads_or(nan);
    m = warp_max(m);
    if (lane == 0) s_max[warp] = m;
    __syncthreads();
    m = s_max[0];
#pragma unroll
    for (int w = 1; w < select_threads / 32; ++w) m = fmaxf(m, s_max[w]);
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < per_thread; ++k)
        if (v[k] != -INFINITY) sum += exp(double(v[k]) - double(m));
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (lane == 0) s_sum[warp] = sum;
    select_top(key, s);  // synchronises the block: s_sum is complete after it
    const size_t rs = size_t(row) * size_t(n_slices) + size_t(slice);
    if (tid < logits_top_n) a.scratch[rs * logits_top_n + size_t(tid)] = s.keys[tid];
    if (tid == 0) {
        double total = 0.0;
        for (int w = 0; w < select_threads / 32; ++w) total += s_sum[w];
        a.slice_max[rs] = m;
        a.slice_sum[rs] = total;
        a.slice_nan[rs] = nan;
    }
}

// Block row: the row's 64 best of its slices' candidates, sorted by rank; max and sum over slices in order.
__global__ void __launch_bounds__(select_threads) logits_top_merge_kernel(const logits_top_args a, int n_slices) {
    __shared__ select_smem s;
    __shared__ uint64_t s_sorted[logits_top_n];
    __shared__ float s_wmax[select_threads / 32];
    __shared__ double s_term[logits_top_max_slices];
    const int row = blockIdx.x, tid = threadIdx.x;
    pdl_wait();
    pdl_trigger();
    const uint64_t *cand = a.scratch + size_t(row) * size_t(n_slices) * logits_top_n;
    const int n_cand = n_slices * logits_top_n;
    uint64_t key[per_thread];
#pragma unroll
    for (int k = 0; k < per_thread; ++k) {
        const int i = k * select_threads + tid;
        key[k] = i < n_cand ? cand[i] : 0ull;
    }
    // Slice tid's max, sum and NaN flag, loaded with the candidates (one round trip).
    const size_t r0 = size_t(row) * size_t(n_slices);
    float m_i = -INFINITY;
    double sum_i = 0.0;
    int nan_i = 0;
    if (tid < n_slices) {
        m_i = a.slice_max[r0 + tid];
        sum_i = a.slice_sum[r0 + tid];
        nan_i = a.slice_nan[r0 + tid];
    }
    select_top(key, s);
    if (tid < logits_top_n) {
        // Keys are distinct except empty places (0), which take the places after the real ones.
        const uint64_t mine = s.keys[tid];
        int rank = 0;
        for (int j = 0; j < logits_top_n; ++j) {
            const uint64_t other = s.keys[j];
            rank += (other > mine || (other == mine && j < tid)) ? 1 : 0;
        }
        s_sorted[rank] = mine;
    }
    __syncthreads();
    logits_top_row &out = a.out[row];
    const float *x = a.logits + size_t(row) * size_t(a.n_cols);
    if (tid < logits_top_n) {
        const uint64_t k = s_sorted[tid];
        const int32_t id = k == 0 ? -1 : key_id(k);
        out.id[tid] = id;
        out.logit[tid] = id < 0 ? -INFINITY : x[id - a.first_id];
    }
    // The row's max and NaN flag over the slices (order-free), then slice i's term sum_i exp(max_i -
    // max) made by thread i; thread 0 adds the terms in slice order. (Thread 0 walking the slices'
    // loads and exps in turn takes the launch from 16 to 26 us under ncu.)
    float m = warp_max(m_i);
    if ((tid & 31) == 0) s_wmax[tid >> 5] = m;
    const int nan = __syncthreads_or(nan_i);  // also publishes s_wmax
    m = s_wmax[0];
#pragma unroll
    for (int w = 1; w < select_threads / 32; ++w) m = fmaxf(m, s_wmax[w]);
    if (tid < n_slices) s_term[tid] = sum_i > 0.0 ? sum_i * exp(double(m_i) - double(m)) : 0.0;
    __syncthreads();
    if (tid == 0) {
        double sum = 0.0;
        for (int i = 0; i < n_slices; ++i)
            if (s_term[i] != 0.0) sum += s_term[i];
        out.sum_exp = sum;
        out.max = m;
        out.has_nan = nan;
        out.n = a.n_cols < logits_top_n ? a.n_cols : logits_top_n;
        out.drawn = -1;
    }
}


// logits_best: a cluster of C blocks a row (block `rank` the rank-th contiguous C-th of its
// columns), each thread the largest key of its columns, unrolled so that best_unroll loads are in
// flight; then the warps, the block and the cluster (block 0 reads its peers' shared memory).
constexpr int best_threads = 512;
constexpr int best_unroll = 8;

// The larger of two (key, logit) pairs.
__device__ __forceinline__ void best_keep(uint64_t &key, float &value, uint64_t k2, float v2) {
    if (k2 > key) {
        key = k2;
        value = v2;
    }
}

__global__ void __launch_bounds__(best_threads) logits_best_kernel(const logits_best_args a) {
    __shared__ uint64_t s_key[best_threads / 32];
    __shared__ float s_value[best_threads / 32];
    __shared__ uint64_t s_block_key;
    __shared__ float s_block_value;
    __shared__ int s_block_nan;
    const int c = cluster_blocks(), rank = cluster_rank(), row = int(blockIdx.x) / c;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    pdl_wait();
    pdl_trigger();
    const int64_t part = (int64_t(a.n_cols) + c - 1) / c, lo = rank * part;
    const int64_t hi = lo + part < a.n_cols ? lo + part : a.n_cols;
    const float *x = a.logits + size_t(row) * size_t(a.n_cols);
    uint64_t key = 0;  // none: every real key is above 0 (top_key)
    float value = -INFINITY;
    int nan = 0;
    for (int64_t i0 = lo + tid; i0 < hi; i0 += int64_t(best_unroll) * best_threads) {
        float v[best_unroll];
#pragma unroll
        for (int u = 0; u < best_unroll; ++u) {
            const int64_t i = i0 + int64_t(u) * best_threads;
            v[u] = i < hi ? x[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < best_unroll; ++u) {
            const int64_t i = i0 + int64_t(u) * best_threads;
            if (i >= hi) break;
            if (isnan(v[u])) {
                nan = 1;
                continue;
            }
            best_keep(key, value, top_key(v[u], a.first_id + int32_t(i)), v[u]);
        }
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) best_keep(key, value, __shfl_xor_sync(0xFFFFFFFFu, key, o), __shfl_xor_sync(0xFFFFFFFFu, value, o));
    if (lane == 0) {
        s_key[warp] = key;
        s_value[warp] = value;
    }
    nan = __syncthreads_or(nan);  // also publishes s_key and s_value
    if (tid == 0) {
        for (int w = 1; w < best_threads / 32; ++w) best_keep(key, value, s_key[w], s_value[w]);
        s_block_key = key;
        s_block_value = value;
        s_block_nan = nan;
    }
    cluster_sync();
    if (rank == 0 && tid == 0) {
        for (int b = 1; b < c; ++b) {
            best_keep(key, value, *cluster_peer(&s_block_key, b), *cluster_peer(&s_block_value, b));
            nan |= *cluster_peer(&s_block_nan, b);
        }
        logits_top_row &out = a.out[row];
        out.sum_exp = __longlong_as_double(0x7FF8000000000000ll);  // not computed
        out.max = key ? value : -INFINITY;
        out.has_nan = nan;
        out.n = 1;
        out.drawn = -1;
        out.id[0] = key ? key_id(key) : -1;
        out.logit[0] = key ? value : -INFINITY;
        out.drawn_logit = 0.0f;
    }
    cluster_sync();  // no block leaves while block 0 may read its shared memory
}
}  // namespace

int32_t logits_top_slices(int32_t n_cols) {
    const int32_t n = (n_cols + logits_top_slice - 1) / logits_top_slice;
    return n >= 1 && n <= logits_top_max_slices ? n : 0;
}

void logits_top(const logits_top_args &a, cudaStream_t stream) {
    const int32_t n_slices = logits_top_slices(a.n_cols);
    TANDEM_CUDA_REQUIRE(n_slices > 0, "logits_top: 1 .. 262,144 columns a row");
    TANDEM_CUDA_REQUIRE(a.logits && a.scratch && a.slice_max && a.slice_sum && a.slice_nan && a.out,
                        "logits_top: null pointer");
    TANDEM_CUDA_REQUIRE(a.first_id >= 0, "logits_top: negative first id");
    if (a.n_rows <= 0) return;
    launch_pdl(logits_top_slice_kernel, dim3(n_slices, a.n_rows), dim3(select_threads), stream, a, n_slices);
    TANDEM_CUDA_CHECK_LAUNCH();
    launch_pdl(logits_top_merge_kernel, dim3(a.n_rows), dim3(select_threads), stream, a, n_slices);
    TANDEM_CUDA_CHECK_LAUNCH();
}

int logits_best_cluster(int requested) {
    if (requested > 0) return requested;
    return pdl_supported() ? max_cluster : 1;  // PDL's devices (sm_90) are those with clusters
}

void logits_best(const logits_best_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.logits && a.out, "logits_best: null pointer");
    TANDEM_CUDA_REQUIRE(a.n_cols > 0 && a.first_id >= 0 && int64_t(a.first_id) + a.n_cols <= int64_t(INT32_MAX),
                        "logits_best: empty rows, or ids past int32");
    TANDEM_CUDA_REQUIRE(a.cluster >= 0 && a.cluster <= max_cluster, "logits_best: a cluster of 1 to 8 blocks (0: the device's default)");
    if (a.n_rows <= 0) return;
    const int c = logits_best_cluster(a.cluster);
    TANDEM_CUDA_REQUIRE(c == 1 || pdl_supported(), "logits_best: clusters need sm_90");
    if (c == 1)
        launch_pdl(logits_best_kernel, dim3(a.n_rows), dim3(best_threads), stream, a);
    else
        launch_pdl_cluster_smem(logits_best_kernel, dim3(a.n_rows * c), dim3(c), dim3(best_threads), 0, stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
