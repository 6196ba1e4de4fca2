// cuda/logits_draw.cu - the exact draw (tandem/draw_exact.h) of each requested logits row.
//
// A cluster of C blocks of 1,024 threads a row (C = 8 on sm_90, 1 before: logits_draw_args::
// cluster), each block a contiguous C-th of the row's ids (whole, or a row in two parts: a split
// head). The blocks exchange their sums and radix bins through distributed shared memory, and each
// block makes the same decisions from the same integer totals. Bytes: the row's logits (0.6 MB for
// 152 K ids, in L2 right after the head wrote them) are read once a radix pass (up to 8 for a
// top_k beyond the row's summary, whose first pass also counts the candidates; up to 8 for top_p
// < 1, ~4 on random logits, whose first pass also gives the total and whose bins give each warp's
// sum over the nucleus), once for the total without top_p, and once for the pick (a row in two
// parts: once more for its max). Arithmetic: ~20 float operations a weight, made in each pass that
// needs it. Every sum is of integer weights, so neither the warps' nor the blocks' order matters:
// the drawn id is the host twin's and depends on the row and its request alone (not on C).
#include "logits_draw.h"

#include "cluster.cuh"
#include "cuda_check.h"
#include "launch.cuh"

namespace tandem::cuda {
namespace {

constexpr int draw_threads = 1024;
constexpr int draw_warps = draw_threads / 32;
// A radix pass's private bins: each warp's 256 values, then each warp's 256 counts.
constexpr size_t bins_bytes = size_t(draw_warps) * 256 * (sizeof(unsigned long long) + sizeof(unsigned));

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

// A logits row: ids below `split` in lo, the others in hi (a head split across devices, the
// other parts gathered here); split = n for a whole row.
struct row_view {
    const float *lo, *hi;
    int split;
    __device__ __forceinline__ float operator[](int i) const { return i < split ? lo[i] : hi[i - split]; }
};

struct draw_smem {
    // What the cluster's blocks read from each other, two of each: exchange j writes slot j % 2,
    // so a write never meets a read of the exchange before (a cluster barrier stands between).
    unsigned long long share[2];   // a block's sum
    float share_max[2];            // a block's max (a row in two parts)
    unsigned long long bins[2][256];  // a radix pass's values by digit (the block's warps' bins added)
    unsigned counts[2][256];          // and how many tokens with a nonzero value each holds
    unsigned long long cluster_bins[256];  // the cluster's, by digit
    unsigned cluster_counts[256];
    uint64_t rank_base[max_cluster];  // the last exchange: the sum over the blocks before each
    uint64_t rank_value[max_cluster];  // and each block's
    unsigned long long warp_sum[draw_warps];
    float warp_max[draw_warps];
    uint64_t total, above, last_bin;
    unsigned last_count;
    int digit;
    int pick_warp;
    uint64_t pick_base;
    float max_logit;
};

// The ids a part takes when `len` ids are cut into `parts` contiguous parts of whole warp rows.
__device__ __forceinline__ int part_ids(int len, int parts) { return ((len + parts - 1) / parts + 31) / 32 * 32; }

// This block's ids of the row: the rank-th of the cluster's contiguous parts.
struct block_ids {
    int lo, hi;
    __device__ int len() const { return hi > lo ? hi - lo : 0; }
};
__device__ __forceinline__ block_ids ids_of_block(int n) {
    const int part = part_ids(n, cluster_blocks()), lo = cluster_rank() * part;
    return {lo, min(n, lo + part)};
}

// Warp w's `mine` into s.warp_sum[w] (after every earlier reader of it is done).
__device__ __forceinline__ void store_warp_sums(uint64_t mine, draw_smem &s) {
    mine = warp_sum_u64(mine);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.warp_sum[threadIdx.x >> 5] = mine;
    __syncthreads();
}

// The cluster's sum of the blocks' s.warp_sum (store_warp_sums just before), with each block's sum
// and the sum before it left in s.rank_value and s.rank_base. xchg: the exchanges so far (every
// thread counts them alike). Every thread of the cluster must call it.
__device__ uint64_t cluster_sum(draw_smem &s, int &xchg) {
    const int tid = threadIdx.x, lane = tid & 31, slot = xchg++ & 1;
    if (tid < 32) {
        const uint64_t t = warp_sum_u64(s.warp_sum[lane]);
        if (lane == 0) s.share[slot] = t;
    }
    cluster_sync();
    if (tid < 32) {
        const uint64_t v = lane < cluster_blocks() ? *cluster_peer(&s.share[slot], lane) : 0;
        const uint64_t incl = warp_inclusive_u64(v, lane);
        if (lane < cluster_blocks()) s.rank_value[lane] = v, s.rank_base[lane] = incl - v;
        if (lane == 31) s.total = incl;
    }
    __syncthreads();
    return s.total;
}

// The sum of value(i, key) over the row (integers: any order). In each block, warp w sums the
// w-th of draw_warps contiguous parts of the block's ids, and leaves it in s.warp_sum. Every
// thread of the cluster must call it.
template <class Value>
__device__ uint64_t row_sum(const row_view &x, const block_ids &ids, Value value, draw_smem &s, int &xchg) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int part = part_ids(ids.len(), draw_warps), begin = ids.lo + warp * part, end = min(ids.hi, begin + part);
    uint64_t mine = 0;
    for (int i = begin + lane; i < end; i += 32) mine += value(i, draw_key(x[i], i));
    store_warp_sums(mine, s);
    return cluster_sum(s, xchg);
}

// Warp 0 finds the first part w whose running sum base + s.warp_sum[0..w] passes r: s.pick_warp
// (-1: none) and s.pick_base, the running sum before it. Every thread of the block must call it.
__device__ void find_part(uint64_t base, uint64_t r, draw_smem &s) {
    const int lane = threadIdx.x & 31;
    if (threadIdx.x < 32) {
        const uint64_t v = s.warp_sum[lane], incl = base + warp_inclusive_u64(v, lane);
        const unsigned hit = __ballot_sync(0xFFFFFFFFu, incl > r);
        const int w = hit ? __ffs(hit) - 1 : -1;
        if (lane == 0) s.pick_warp = w;
        if (w >= 0 && lane == w) s.pick_base = incl - v;
    }
    __syncthreads();
}

constexpr int radix_batch = 4;  // logits a lane loads ahead in a radix pass

// Warp w's private bins of a radix pass (its values by digit), in the dynamic shared memory.
__device__ __forceinline__ unsigned long long *own_bins(unsigned long long *warp_bins, int warp) { return warp_bins + warp * 256; }

// What radix_boundary found: B, the key of the token at which the best-first running sum of the
// values first reaches need (0 < need < total), and the running sum through it; or `whole`, when
// need >= total (every token: no boundary). total: the row's sum of the values.
struct radix_result {
    uint64_t boundary = 0, through = 0, total = 0;
    bool whole = false;
};

// The boundary for need = need_of(total), digit by digit from the top, 8 bits a pass. Pass 0 bins
// every token, so its bins also give the row's total (no pass of its own). `above` is the sum over
// the tokens whose decided digits beat B's; each pass bins the values of the tokens sharing B's
// decided digits. Once the chosen digit holds a single token (random logits: after ~4 of the 8
// passes), B's undecided digits are left zero: the keys from that B up are the same set. Each warp
// bins row_sum's contiguous part of the block's ids, so the warp's bins above each pass's chosen
// digit (and the final chosen digit) add up to its part's sum over the keys from B up: *mine
// gets the lane's share of it (the whole part's sum when `whole`), which store_warp_sums turns
// into the warp's sum exactly as row_sum over those values would. warp_bins: the dynamic shared
// memory (bins_bytes). Every thread of the cluster must call it.
template <class Value, class Need>
__device__ radix_result radix_boundary(const row_view &x, const block_ids &ids, Need need_of, Value value, draw_smem &s,
                                       unsigned long long *warp_bins, int &xchg, uint64_t *mine) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int part = part_ids(ids.len(), draw_warps), begin = ids.lo + warp * part, end = min(ids.hi, begin + part);
    radix_result res;
    uint64_t prefix = 0, above = 0, need = 0;
    *mine = 0;
    for (int pass = 0; pass < 8; ++pass) {
        const int shift = 56 - 8 * pass, slot = xchg++ & 1;
        const uint64_t high = pass == 0 ? 0ull : ~0ull << (shift + 8);
        // Each warp bins into its own 256 counters (no atomics). Of its 32 ids at a time, a lane
        // alone with its digit adds its value itself; a digit several lanes share (the first
        // pass sees only a few) is summed by shuffles and added by its first lane. The block adds
        // the warps' bins after, and each block the cluster's. (One shared 64-bit atomic a digit
        // change, contended on a few addresses, costs 1.4 ms a row on an H100.)
        unsigned long long *own = own_bins(warp_bins, warp);
        unsigned *own_count = reinterpret_cast<unsigned *>(warp_bins + draw_warps * 256) + warp * 256;
        for (int j = lane; j < 256; j += 32) own[j] = 0, own_count[j] = 0;
        __syncwarp();
        // radix_batch of the lane's logits are loaded before the first is binned: the warp-wide
        // match and ballot keep the compiler from hoisting a later round's load above them, so
        // one load a round would wait out an L2 round trip each.
        for (int base = begin; base < end; base += 32 * radix_batch) {
            float xv[radix_batch];
#pragma unroll
            for (int u = 0; u < radix_batch; ++u) {
                const int i = base + 32 * u + lane;
                xv[u] = i < end ? x[i] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < radix_batch; ++u) {
                const int i = base + 32 * u + lane;
                uint64_t v = 0;
                int digit = -1;
                if (i < end) {
                    const uint64_t key = draw_key(xv[u], i);
                    if ((key & high) == prefix) {
                        v = value(i, key);
                        if (v != 0) digit = int(key >> shift) & 255;
                    }
                }
                const unsigned same = __match_any_sync(0xFFFFFFFFu, digit);
                const bool alone = __popc(same) == 1;
                if (digit >= 0 && alone) own[digit] += v, own_count[digit] += 1;
                unsigned leaders = __ballot_sync(0xFFFFFFFFu, digit >= 0 && !alone && lane == __ffs(same) - 1);
                while (leaders) {
                    const int first = __ffs(leaders) - 1;
                    const int group = __shfl_sync(0xFFFFFFFFu, digit, first);
                    const uint64_t sum = warp_sum_u64(digit == group ? v : 0);
                    if (lane == first) own[group] += sum, own_count[group] += __popc(same);
                    leaders &= leaders - 1;
                }
                __syncwarp();  // this round's bin updates are seen by the next round's lanes
            }
        }
        __syncthreads();
        if (tid < 256) {
            const unsigned *counts = reinterpret_cast<const unsigned *>(warp_bins + draw_warps * 256);
            uint64_t t = 0;
            unsigned c = 0;
            for (int w = 0; w < draw_warps; ++w) t += warp_bins[w * 256 + tid], c += counts[w * 256 + tid];
            s.bins[slot][tid] = t;
            s.counts[slot][tid] = c;
        }
        cluster_sync();
        if (tid < 256) {
            uint64_t t = 0;
            unsigned c = 0;
            // Every peer's value asked for before the first is added (one round trip, not one a
            // block), then every peer's count.
            uint64_t pt[max_cluster];
#pragma unroll
            for (int b = 0; b < max_cluster; ++b) pt[b] = b < cluster_blocks() ? cluster_peer(&s.bins[slot][0], b)[tid] : 0;
#pragma unroll
            for (int b = 0; b < max_cluster; ++b) t += pt[b];
            unsigned pc[max_cluster];
#pragma unroll
            for (int b = 0; b < max_cluster; ++b) pc[b] = b < cluster_blocks() ? cluster_peer(&s.counts[slot][0], b)[tid] : 0;
#pragma unroll
            for (int b = 0; b < max_cluster; ++b) c += pc[b];
            s.cluster_bins[tid] = t;
            s.cluster_counts[tid] = c;
        }
        __syncthreads();
        if (pass == 0) {
            // The row's total: the sum of pass 0's bins, the same in every block of the cluster.
            if (warp == 0) {
                uint64_t t = 0;
#pragma unroll
                for (int i = 0; i < 8; ++i) t += s.cluster_bins[8 * lane + i];
                t = warp_sum_u64(t);
                if (lane == 0) s.total = t;
            }
            __syncthreads();
            res.total = s.total;
            need = need_of(res.total);
            if (need >= res.total) {
                for (int j = lane; j < 256; j += 32) *mine += own_bins(warp_bins, warp)[j];
                res.whole = true;
                res.through = res.total;
                __syncthreads();  // s.total and the cluster's bins are rewritten by the next exchange
                return res;
            }
        }
        if (warp == 0) {
            // Lane l holds digits 255 - 8 l down to 248 - 8 l: descending across the lanes.
            uint64_t c[8], sum = 0;
#pragma unroll
            for (int i = 0; i < 8; ++i) sum += c[i] = s.cluster_bins[255 - 8 * lane - i];
            const uint64_t incl = warp_inclusive_u64(sum, lane), excl = incl - sum;
            if (above + excl < need && above + incl >= need) {
                uint64_t run_above = above + excl;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    if (run_above + c[i] >= need) {
                        s.digit = 255 - 8 * lane - i;
                        s.above = run_above;
                        s.last_bin = c[i];
                        s.last_count = s.cluster_counts[255 - 8 * lane - i];
                        break;
                    }
                    run_above += c[i];
                }
            }
        }
        __syncthreads();
        const int chosen = s.digit;
        prefix |= uint64_t(chosen) << shift;
        above = s.above;
        const bool single = s.last_count == 1;
        // This warp's values from B up: its bins above the chosen digit, and the chosen one once
        // it holds B alone.
        for (int j = lane; j < 256; j += 32)
            if (j > chosen || (single && j == chosen)) *mine += own_bins(warp_bins, warp)[j];
        __syncthreads();  // s.digit, s.above, the cluster's bins and the warps' bins are rewritten next pass
        if (single) break;
    }
    res.boundary = prefix;
    res.through = above + s.last_bin;  // the last pass's bin holds B alone (keys are distinct)
    return res;
}

// The max over the row's ids (NaN skipped, as the merged summary's best: a row with NaN is refused
// by the sampler whatever is drawn). Every thread of the cluster must call it.
__device__ float row_max(const row_view &x, const block_ids &ids, draw_smem &s, int &xchg) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, slot = xchg++ & 1;
    float m = -INFINITY;
    for (int i = ids.lo + tid; i < ids.hi; i += draw_threads) m = fmaxf(m, x[i]);
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    if (lane == 0) s.warp_max[warp] = m;
    __syncthreads();
    if (tid < 32) {
        m = s.warp_max[lane];
#pragma unroll
        for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
        if (lane == 0) s.share_max[slot] = m;
    }
    cluster_sync();
    if (tid < 32) {
        m = lane < cluster_blocks() ? *cluster_peer(&s.share_max[slot], lane) : -INFINITY;
#pragma unroll
        for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
        if (lane == 0) s.max_logit = m;
    }
    __syncthreads();
    return s.max_logit;
}

__global__ void __launch_bounds__(draw_threads) logits_draw_kernel(const logits_draw_args a) {
    __shared__ draw_smem s;
    extern __shared__ unsigned long long warp_bins[];  // bins_bytes: the radix passes' bins
    const int row = blockIdx.x / cluster_blocks(), rank = cluster_rank(), tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    pdl_wait();
    pdl_trigger();
    const row_draw d = a.draws[row];
    logits_top_row &out = a.rows[row];
    if (!(d.temperature > 0.0f)) {  // the whole cluster returns here
        if (rank == 0 && tid == 0) out.drawn = -1;
        return;
    }
    const int n = a.n_cols;
    const int split = a.logits_rest ? a.split : n;
    const row_view x{a.logits + size_t(row) * size_t(split), a.logits_rest ? a.logits_rest + size_t(row) * size_t(n - split) : nullptr, split};
    const block_ids ids = ids_of_block(n);
    int xchg = 0;
    // The row's max: logits_top's for a whole row, else the max over the parts.
    const float max_logit = a.logits_rest ? row_max(x, ids, s, xchg) : out.max;
    const float cutoff = draw_cutoff(max_logit, d);

    // top_k: the k-th best key among the tokens passing the cutoff, when more than k pass (the
    // count of those that pass comes with the boundary's first pass).
    uint64_t kth = 0, unused = 0;
    if (d.top_k > 0) {
        auto passes = [&](int i, uint64_t) -> uint64_t { return draw_passes(x[i], max_logit, cutoff) ? 1 : 0; };
        const radix_result k = radix_boundary(x, ids, [&](uint64_t) { return uint64_t(d.top_k); }, passes, s, warp_bins, xchg, &unused);
        if (!k.whole) kth = k.boundary;
    }
    auto weight = [&](int i, uint64_t key) -> uint64_t { return key >= kth ? draw_weight(x[i], max_logit, cutoff, d) : 0; };

    // The nucleus: every candidate with a key from the boundary's up. Without top_p the total's
    // pass leaves the warps' and blocks' sums the pick reads (row_sum); with it, the boundary's
    // passes leave the nucleus's (its first pass gives the total, so no pass is made for the total
    // nor for the nucleus's sums).
    uint64_t boundary = kth, mass = 0;
    if (d.top_p < 1.0f) {
        uint64_t mine = 0;
        const radix_result b = radix_boundary(x, ids, [&](uint64_t total) { return draw_nucleus_need(total, d.top_p); }, weight, s,
                                              warp_bins, xchg, &mine);
        if (!b.whole) boundary = b.boundary;
        mass = b.through;
        store_warp_sums(mine, s);
        if (cluster_sum(s, xchg) != mass) {  // unreachable: the warps' sums are the nucleus's
            cluster_sync();
            if (rank == 0 && tid == 0) out.drawn = -1;
            return;
        }
    } else {
        mass = row_sum(x, ids, weight, s, xchg);
    }

    // The pick: r = min(trunc(u x M), M - 1), found in four rounds: the block whose running sum
    // passes r, the part of its ids (row_sum's parts), the 32nd of that part, then the id, the
    // chosen warp walking its 32nd 32 ids a step.
    const uint64_t r = draw_pick_threshold(d.u, mass);
    auto nucleus_weight = [&](int i) -> uint64_t {
        const uint64_t key = draw_key(x[i], i);
        return key >= boundary ? weight(i, key) : 0;
    };
    int owner = -1;
    for (int b = 0; b < cluster_blocks() && owner < 0; ++b)
        if (s.rank_base[b] + s.rank_value[b] > r) owner = b;
    cluster_sync();  // no block leaves while another may read its shared memory
    if (owner < 0) {  // unreachable: r < M
        if (rank == 0 && tid == 0) out.drawn = -1;
        return;
    }
    if (rank != owner) return;
    const int part = part_ids(ids.len(), draw_warps);
    find_part(s.rank_base[rank], r, s);
    const int chosen = s.pick_warp;
    const uint64_t chosen_base = s.pick_base;
    if (chosen < 0) {  // unreachable: the block's sum passes r
        if (tid == 0) out.drawn = -1;
        return;
    }
    const int part_begin = ids.lo + chosen * part, part_end = min(ids.hi, part_begin + part);
    const int sub = part_ids(part_end - part_begin, draw_warps);
    const int begin = part_begin + warp * sub, end = min(part_end, begin + sub);
    uint64_t mine = 0;
    for (int i = begin + lane; i < end; i += 32) mine += nucleus_weight(i);
    store_warp_sums(mine, s);  // its first barrier: every thread has read chosen's part
    find_part(chosen_base, r, s);
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

int logits_draw_cluster(int requested) {
    if (requested > 0) return requested;
    return pdl_supported() ? max_cluster : 1;  // PDL's devices (sm_90) are those with clusters
}

void logits_draw(const logits_draw_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.logits && a.draws && a.rows, "logits_draw: null pointer");
    TANDEM_CUDA_REQUIRE(a.n_cols > 0, "logits_draw: empty rows");
    TANDEM_CUDA_REQUIRE(!a.logits_rest || (a.split > 0 && a.split < a.n_cols), "logits_draw: split outside the row");
    TANDEM_CUDA_REQUIRE(a.cluster >= 0 && a.cluster <= max_cluster, "logits_draw: a cluster of 1 to 8 blocks (0: the device's default)");
    if (a.n_rows <= 0) return;
    const int c = logits_draw_cluster(a.cluster);
    TANDEM_CUDA_REQUIRE(c == 1 || pdl_supported(), "logits_draw: clusters need sm_90");
    allow_dynamic_smem(logits_draw_kernel, bins_bytes);
    if (c == 1) {
        launch_pdl_smem(logits_draw_kernel, dim3(a.n_rows), dim3(draw_threads), bins_bytes, stream, a);
    } else {
        launch_pdl_cluster_smem(logits_draw_kernel, dim3(a.n_rows * c), dim3(c), dim3(draw_threads), bins_bytes, stream, a);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
