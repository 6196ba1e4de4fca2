// cuda/attention.cu - QK norm + RoPE + KV write, and chunked causal attention over each row's
// slot cache (flash-decoding style: chunk partials with their own max and sum, merged in chunk
// order). One block handles every query head of a KV head (GQA), so K/V are read once per group;
// its 8 warps split the chunk's positions and load them all at once (short decode contexts are
// latency-bound: one dependent round trip per position was the cost).
#include "attention.h"

#include "attention_mma.h"

#include "cuda_check.h"
#include "kv_cache.cuh"
#include "launch.cuh"
#include "qk_norm_rope.cuh"
#include "warp_reduce.cuh"
#include "x_split.cuh"

#include <algorithm>
#include <cmath>

namespace tandem::cuda {
namespace {

constexpr int rope_warps = 8;       // heads per block; blocks over (row, head group)
constexpr int attn_warps = 8;       // warps per (row, KV head, chunk); positions interleave over them
constexpr int attn_threads = attn_warps * 32;

// Q and K: norm_rope_head; V copied. The row's slot and position, the angles' cos/sin and the
// norm weights do not depend on the previous kernel (slots and positions are written before the
// step's first kernel, attention.h), so they are computed before the PDL wait, overlapping the
// projection that precedes. KV: the cache's element type (kv_cache.cuh).
template <class KV>
__global__ void __launch_bounds__(rope_warps * 32) qk_rope_kv_kernel(const qk_rope_kv_args a) {
    const int r = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int slot = a.slots[r], pos = a.positions[r];
    const int dh = a.d_head, dpl = dh / 32, kv_dim = a.n_head_kv * dh;
    const int n_heads_all = a.n_head + 2 * a.n_head_kv;
    // The row's cos/sin (rope_angles' values), made once a block, thread i for lane i % 32's slot
    // i / 32, instead of by every warp: 1/8 of the double sincos (most of which hides before the
    // PDL wait).
    static_assert(rope_warps * 32 >= 32 * (max_dpl / 2), "a thread for every angle slot");
    __shared__ float s_cs[max_dpl / 2][32], s_sn[max_dpl / 2][32];
    if (threadIdx.x < 32 * (max_dpl / 2))
        rope_angle(pos, a.inv_freq, dpl, threadIdx.x & 31, threadIdx.x >> 5, s_cs[threadIdx.x >> 5][threadIdx.x & 31],
                   s_sn[threadIdx.x >> 5][threadIdx.x & 31]);
    float cs[max_dpl / 2], sn[max_dpl / 2], qn[max_dpl], kn[max_dpl];
    load_norm_weights(a.q_norm, a.k_norm, dpl, lane, qn, kn);
    __syncthreads();
#pragma unroll
    for (int t = 0; t < max_dpl / 2; ++t) {
        cs[t] = s_cs[t][lane];
        sn[t] = s_sn[t][lane];
    }
    pdl_wait();
    pdl_trigger();
    // blockIdx.y picks a group of rope_warps heads: every head of the row in flight at once.
    for (int hh = blockIdx.y * rope_warps + warp; hh < n_heads_all; hh += rope_warps * gridDim.y) {
        const float *src;
        float *dst_q = nullptr;
        void *dst_kv = nullptr;  // the K or V plane; the head starts at element e0
        int64_t e0 = 0;
        bool norm = false, is_q = false;
        if (hh < a.n_head) {
            src = a.q + (int64_t(r) * a.n_head + hh) * dh;
            dst_q = a.q + (int64_t(r) * a.n_head + hh) * dh;
            norm = is_q = true;
        } else {
            if (slot < 0) continue;
            const bool is_k = hh < a.n_head + a.n_head_kv;
            const int kh = is_k ? hh - a.n_head : hh - a.n_head - a.n_head_kv;
            src = (is_k ? a.k : a.v) + (int64_t(r) * a.n_head_kv + kh) * dh;
            dst_kv = is_k ? a.k_cache : a.v_cache;
            e0 = (int64_t(slot) * a.n_ctx + pos) * kv_dim + int64_t(kh) * dh;
            norm = is_k;
        }
        float val[max_dpl];
#pragma unroll
        for (int t = 0; t < max_dpl; ++t) val[t] = t < dpl ? src[lane + 32 * t] : 0.0f;
        if (norm) {
            float nw[max_dpl];  // chosen element by element: a choice of arrays would put them on the stack
#pragma unroll
            for (int t = 0; t < max_dpl; ++t) nw[t] = is_q ? qn[t] : kn[t];
            norm_rope_head(val, nw, cs, sn, dpl, lane, a.eps);
        }
        if (!is_q) {
            kv_put_head<KV>(val, dpl, lane, dst_kv, e0);
            continue;
        }
#pragma unroll
        for (int t = 0; t < max_dpl; ++t)
            if (t < dpl) dst_q[lane + 32 * t] = val[t];
    }
}

// Positions of a chunk are taken in tiles; tile * d_head floats of the per-warp accumulators are
// merged through shared memory at the end, so the tile bounds the registers, not shared memory.
template <int dpl>
constexpr int attn_tile() { return dpl == 8 ? 32 : 64; }

// One block per (query-head group of a KV head, row, run of chunks), 8 warps; the row's chunks are
// attention_row_chunk(pos) positions long. Per tile of positions: (A) warp w takes positions
// w, w + 8, ... of the tile, has all their K and V loads in flight at once, and computes the scores of
// all `group` query heads with one transposing warp sum per position; (B) warp g runs the online
// softmax of head g over the tile (one max and rescale per tile, shared by every warp); (C) each
// warp adds p * V for its own positions to its registers. The warps' accumulators are summed in
// warp order at the end, and the chunk partial (unnormalised output, max, sum) goes to `partial`.
// fused (attention_args::k_new): the block first normalises and rotates its query heads (and, in
// the chunk holding the row's position, the new key; the value as it is) with qk_rope_kv's code,
// so its values are bitwise that kernel's; the first block of the KV head writes them to the cache.
// The new position's key and value come from shared memory: no other block's write is awaited.
template <int dpl, int group, bool fused, class KV>
__global__ void __launch_bounds__(attn_threads) attention_partial_kernel(const attention_args a, int n_chunks) {
    constexpr int dh = dpl * 32, tile = attn_tile<dpl>(), ppw = tile / attn_warps;
    static_assert(tile % attn_warps == 0 && tile <= 64, "a lane holds at most 2 scores of a tile in phase B");
    static_assert(group <= attn_warps, "phase B: one warp per query head of the group");
    __shared__ float s_p[tile][group];                  // scores, then probabilities
    __shared__ float s_corr[group];
    __shared__ float s_acc[attn_warps][group * dh];     // per-warp accumulators for the final sum
    // blockIdx.x picks `group` query heads; with more query heads per KV head than that (e.g. 16),
    // several blocks share one KV head, each with its own run of query heads.
    // blockIdx.z: the block takes the row's chunks blockIdx.z, blockIdx.z + gridDim.z, ... in turn
    // (gridDim.z is the launch's choice; each chunk's partial is the same whichever block makes it).
    const int qb = blockIdx.x, kh = qb / (a.n_head / (a.n_head_kv * group)), c0 = blockIdx.z, r = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // Slots and positions are written before the step's first kernel (attention.h).
    const int slot = a.slots[r], pos = a.positions[r], chunk = attention_row_chunk(pos), row_chunks = pos / chunk + 1;
    // Blocks with no chunk of the row leave at once: the grid covers the whole slot (one graph
    // serves every step), so a short context leaves many (`bench --prompt 2048 --sessions 16`:
    // +7%, with the chunks slowest in the grid). Chunk 0 of a live
    // row is never past it and padding rows stay, so blocks of every row still wait for the launch
    // before (the PDL chain: a grid none of whose blocks waits could finish first).
    if (slot >= 0 && c0 >= row_chunks) return;
    // Fused: the block whose chunks include the row's own position's makes the new key and value.
    [[maybe_unused]] const bool holds_new = (row_chunks - 1 - c0) % int(gridDim.z) == 0;
    [[maybe_unused]] float cs[max_dpl / 2], sn[max_dpl / 2], qn[max_dpl], kn[max_dpl];
    if constexpr (fused) {
        rope_angles(pos, a.inv_freq, dpl, lane, cs, sn);
        load_norm_weights(a.q_norm, a.k_norm, dpl, lane, qn, kn);
    }
    int p_begin = c0 * chunk, p_end = min(p_begin + chunk, pos + 1);  // the chunk in hand
    const int kv_dim = a.n_head_kv * dh;
    const int64_t kv_base = int64_t(slot < 0 ? 0 : slot) * a.n_ctx * kv_dim + int64_t(kh) * dh + lane;  // padding rows load nothing
    // A tile's keys (into kv) or values (into vv): every load of this warp's positions in flight
    // together, positions from `end` on as zeros. Fused, the new position comes from shared memory
    // (set below; `with_new` false: left for later). The tile loop loads the next tile's keys once
    // the scores have used this one's, and its values once p * V has: the loads run under the
    // softmax and the other phase, with no registers added. The tiles stay in the cache's type until
    // used (halves converted at each use), so no conversion waits on a load before the next issues;
    // q8_0 values are dequantized as they arrive (kv_reg).
    using reg = kv_reg<KV>;
    reg kv[ppw][dpl], vv[ppw][dpl];
    [[maybe_unused]] const float *new_kv = nullptr;  // fused: the new key, then value, in shared memory
    auto load_part = [&](reg (&dst)[ppw][dpl], const void *src, int new_off, int t0, int end, bool with_new) {
#pragma unroll
        for (int i = 0; i < ppw; ++i) {
            const int p = t0 + warp + attn_warps * i;
#pragma unroll
            for (int t = 0; t < dpl; ++t) {
                if (fused && p == pos)  // warp-uniform: the new position, not yet in the cache
                    dst[i][t] = kv_from_float<reg>(with_new ? new_kv[new_off + lane + 32 * t] : 0.0f);
                else
                    dst[i][t] = p < end ? kv_load<KV>(src, kv_base + int64_t(p) * kv_dim + 32 * t) : kv_from_float<reg>(0.0f);
            }
        }
    };
    auto load_keys = [&](int t0, int end, bool with_new) { load_part(kv, a.k_cache, 0, t0, end, with_new); };
    auto load_values = [&](int t0, int end, bool with_new) { load_part(vv, a.v_cache, dh, t0, end, with_new); };
    // Fused, the rows' slots are distinct, so positions before the row's own were written by
    // earlier steps: the first tile's keys and values are loaded before the wait.
    if (fused && slot >= 0 && p_begin <= pos) {
        load_keys(p_begin, p_end, false);
        load_values(p_begin, p_end, false);
    }
    pdl_wait();
    pdl_trigger();
    if (slot < 0) return;

    float qv[group][dpl], acc[group][dpl];
    if constexpr (fused) {
        __shared__ float s_q[group][dh], s_new[2][dh];  // the block's query heads; the new key and value
        new_kv = &s_new[0][0];
        const bool writer = holds_new && qb % (a.n_head / (a.n_head_kv * group)) == 0;
        for (int hh = warp; hh < group + 2; hh += attn_warps) {
            if (hh >= group && !holds_new) break;  // warp-uniform
            const float *src = hh < group ? a.q + (int64_t(r) * a.n_head + qb * group + hh) * dh
                                          : (hh == group ? a.k_new : a.v_new) + (int64_t(r) * a.n_head_kv + kh) * dh;
            float val[max_dpl];
#pragma unroll
            for (int t = 0; t < max_dpl; ++t) val[t] = t < dpl ? src[lane + 32 * t] : 0.0f;
            if (hh <= group) {
                float nw[max_dpl];  // element by element, as in qk_rope_kv_kernel
#pragma unroll
                for (int t = 0; t < max_dpl; ++t) nw[t] = hh < group ? qn[t] : kn[t];
                norm_rope_head(val, nw, cs, sn, dpl, lane, a.eps);
            }
            // The new key and value as the cache holds them, so the row attends to what later
            // steps (and the unfused launches) read back; the writer block stores them.
            if (hh >= group)
                kv_put_head<KV>(val, dpl, lane, writer ? (hh == group ? a.k_cache : a.v_cache) : nullptr,
                                (int64_t(slot) * a.n_ctx + pos) * kv_dim + int64_t(kh) * dh);
            float *dst = hh < group ? s_q[hh] : s_new[hh - group];
#pragma unroll
            for (int t = 0; t < dpl; ++t) dst[lane + 32 * t] = val[t];
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < group; ++g)
#pragma unroll
            for (int t = 0; t < dpl; ++t) qv[g][t] = s_q[g][lane + 32 * t];
    } else {
#pragma unroll
        for (int g = 0; g < group; ++g) {
            const float *q = a.q + (int64_t(r) * a.n_head + qb * group + g) * dh;
#pragma unroll
            for (int t = 0; t < dpl; ++t) qv[g][t] = q[lane + 32 * t];
        }
    }
    if (!fused) {
        load_keys(p_begin, p_end, true);
        load_values(p_begin, p_end, true);
    }
    for (int c = c0; c < row_chunks; c += gridDim.z) {
        p_begin = c * chunk;
        p_end = min(p_begin + chunk, pos + 1);
        [[maybe_unused]] const bool has_new = p_end == pos + 1;  // this chunk holds the row's own position
#pragma unroll
        for (int g = 0; g < group; ++g)
#pragma unroll
            for (int t = 0; t < dpl; ++t) acc[g][t] = 0.0f;
        float m_run = -INFINITY, l_run = 0.0f;  // head `warp`'s running max and sum (warps < group)
        for (int t0 = p_begin; t0 < p_end; t0 += tile) {
            // kv and vv hold this tile. The next one: the chunk's, else the block's next chunk's first.
            const int c_next = c + int(gridDim.z);
            const int nt0 = t0 + tile < p_end ? t0 + tile : c_next < row_chunks ? c_next * chunk : -1;
            const int n_end = t0 + tile < p_end ? p_end : min(nt0 + chunk, pos + 1);
            if (fused && t0 == p_begin && c == c0 && has_new && pos - t0 < tile && (pos - t0) % attn_warps == warp) {
                // the block's first tile, loaded before the wait: the new position only
                const int i = (pos - t0) / attn_warps;
#pragma unroll
                for (int ii = 0; ii < ppw; ++ii)
                    if (ii == i)
#pragma unroll
                        for (int t = 0; t < dpl; ++t) {
                            kv[ii][t] = kv_from_float<reg>(new_kv[lane + 32 * t]);
                            vv[ii][t] = kv_from_float<reg>(new_kv[dh + lane + 32 * t]);
                        }
            }
#pragma unroll
            for (int i = 0; i < ppw; ++i) {
                const int p = t0 + warp + attn_warps * i;
                if (p >= p_end) continue;  // warp-uniform
                float part[group];
#pragma unroll
                for (int g = 0; g < group; ++g) {
                    float d = 0.0f;
#pragma unroll
                    for (int t = 0; t < dpl; ++t) d = fmaf(qv[g][t], kv_to_float(kv[i][t]), d);
                    part[g] = d;
                }
                const float sc = warp_sum_transposed<group>(part);
                if (lane % (32 / group) == 0) s_p[p - t0][lane / (32 / group)] = sc * a.scale;
            }
            if (nt0 >= 0) load_keys(nt0, n_end, true);
            __syncthreads();
            // (B) head `warp`: tile max, rescale factor, probabilities, running sum.
            if (warp < group) {
                float sv[2];
                float tmax = -INFINITY;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int idx = lane + 32 * j;
                    sv[j] = idx < tile && t0 + idx < p_end ? s_p[idx][warp] : -INFINITY;
                    tmax = fmaxf(tmax, sv[j]);
                }
                tmax = warp_max(tmax);
                const float m_new = fmaxf(m_run, tmax);
                const float corr = expf(m_run - m_new);  // 0 on the first tile (m_run = -inf)
                float psum = 0.0f;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int idx = lane + 32 * j;
                    const float pr = idx < tile && t0 + idx < p_end ? expf(sv[j] - m_new) : 0.0f;
                    if (idx < tile) s_p[idx][warp] = pr;
                    psum += pr;
                }
                psum = warp_sum_fixed(psum);
                l_run = l_run * corr + psum;
                m_run = m_new;
                if (lane == 0) s_corr[warp] = corr;
            }
            __syncthreads();
            // (C) rescale, then p * V for this warp's positions.
#pragma unroll
            for (int g = 0; g < group; ++g) {
                const float cg = s_corr[g];
#pragma unroll
                for (int t = 0; t < dpl; ++t) acc[g][t] *= cg;
            }
#pragma unroll
            for (int i = 0; i < ppw; ++i) {
                const int p = t0 + warp + attn_warps * i;
                if (p >= p_end) continue;
#pragma unroll
                for (int g = 0; g < group; ++g) {
                    const float pr = s_p[p - t0][g];
#pragma unroll
                    for (int t = 0; t < dpl; ++t) acc[g][t] = fmaf(pr, kv_to_float(vv[i][t]), acc[g][t]);
                }
            }
            if (nt0 >= 0) load_values(nt0, n_end, true);
            __syncthreads();  // s_p and s_corr are rewritten by the next tile
        }
#pragma unroll
        for (int g = 0; g < group; ++g)
#pragma unroll
            for (int t = 0; t < dpl; ++t) s_acc[warp][g * dh + lane + 32 * t] = acc[g][t];
        if (warp < group && lane == 0) {
            float *dst = a.partial + ((int64_t(r) * a.n_head + qb * group + warp) * n_chunks + c) * (dh + 2);
            dst[dh] = m_run;
            dst[dh + 1] = l_run;
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < group * dh; idx += attn_threads) {
            const int g = idx / dh, e = idx % dh;
            float out = 0.0f;
#pragma unroll
            for (int w = 0; w < attn_warps; ++w) out += s_acc[w][idx];
            a.partial[((int64_t(r) * a.n_head + qb * group + g) * n_chunks + c) * (dh + 2) + e] = out;
        }
        __syncthreads();  // s_acc is rewritten by the next chunk
    }
}

// One block per (query head, row): merges the row's chunk partials in chunk order.
__global__ void attention_combine_kernel(const attention_args a, int n_chunks) {
    const int h = blockIdx.x, r = blockIdx.y, dh = a.d_head;
    const int slot = a.slots[r], pos = a.positions[r];  // written before the step (attention.h)
    pdl_wait();
    pdl_trigger();
    float *out = a.out + (int64_t(r) * a.n_head + h) * dh;
    // The split twin: one thread per element (blockDim.x == d_head, whole warps).
    const int64_t row_elems = int64_t(a.n_head) * dh, e_row = int64_t(h) * dh + threadIdx.x;
    auto store_split = [&](float v) {
        if (a.out_split)
            split_store_warp(reinterpret_cast<uint16_t *>(a.out_split) + int64_t(r) * row_elems * 2,
                             a.out_sums ? a.out_sums + int64_t(r) * (row_elems / 32) : nullptr, e_row, v);
    };
    if (slot < 0) {
        for (int e = threadIdx.x; e < dh; e += blockDim.x) out[e] = 0.0f;
        store_split(0.0f);
        return;
    }
    const int nc = pos / attention_row_chunk(pos) + 1;
    const float *part = a.partial + (int64_t(r) * a.n_head + h) * n_chunks * (dh + 2);
    // Every element's chunk values are loaded at once, while the first warp loads the chunks'
    // maxima and sums (one round trip), takes the maximum (exact in any order) and makes chunk c's
    // factor exp(max_c - max) once a block, not once a thread; each element then sums its chunks,
    // and each thread the chunks' sums, in chunk order.
    static_assert(attention_max_chunks <= 32, "one warp holds every chunk's maximum");
    __shared__ float s_f[attention_max_chunks], s_sum[attention_max_chunks];
    const int e = threadIdx.x;  // blockDim.x == d_head
    float v[attention_max_chunks];
#pragma unroll
    for (int c = 0; c < attention_max_chunks; ++c) v[c] = c < nc ? part[c * (dh + 2) + e] : 0.0f;
    if (threadIdx.x < 32) {
        const int c = threadIdx.x;
        const float m_c = c < nc ? part[c * (dh + 2) + dh] : -INFINITY;
        const float sum_c = c < nc ? part[c * (dh + 2) + dh + 1] : 0.0f;
        const float mx = warp_max(m_c);
        const float f = c < nc ? expf(m_c - mx) : 0.0f;
        s_f[c] = f;
        s_sum[c] = sum_c * f;
    }
    __syncthreads();
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int c = 0; c < attention_max_chunks; ++c) {
        if (c >= nc) break;
        sum += s_sum[c];
        acc += v[c] * s_f[c];
    }
    const float out_v = acc * (1.0f / sum);
    out[e] = out_v;
    store_split(out_v);
}

// Chunk blocks a row: every chunk its own block for steps of few rows, else each block takes
// several chunks in turn (the prologue - query norm and RoPE, the first tile before the wait - paid
// once, fewer blocks with nothing to do), aiming at attn_live_blocks blocks. The partials are the
// same bits either way. 256 by `bench --prompt 0 --ctx 16384 --decode-prompt 1000 --sessions
// 1,4,16`: 132-528 tie at 1-4 sessions, 256 is best at 16 (see docs/performance.md).
constexpr int attn_live_blocks = 256;

// Blocks along z for row_blocks blocks of (row, query-head group) (attn_live_blocks above).
int attention_chunk_blocks(int row_blocks, int n_chunks) {
    return std::min(n_chunks, std::max(1, (attn_live_blocks + row_blocks - 1) / row_blocks));
}

template <int dpl, int group, class KV>
void launch_attention_partial_kv(const attention_args &a, int n_chunks, cudaStream_t stream) {
    const int chunk_blocks = attention_chunk_blocks(a.n_head / group * a.n_rows, n_chunks);
    const dim3 grid(a.n_head / group, a.n_rows, chunk_blocks);  // chunks slowest: the live ones dispatch first
    if (a.k_new)
        launch_pdl(attention_partial_kernel<dpl, group, true, KV>, grid, dim3(attn_threads), stream, a, n_chunks);
    else
        launch_pdl(attention_partial_kernel<dpl, group, false, KV>, grid, dim3(attn_threads), stream, a, n_chunks);
}

template <int dpl, int group>
void launch_attention_partial(const attention_args &a, int n_chunks, cudaStream_t stream) {
    if (a.kv_q8_0)
        launch_attention_partial_kv<dpl, group, block_q8_0>(a, n_chunks, stream);
    else if (a.kv_f16)
        launch_attention_partial_kv<dpl, group, __half>(a, n_chunks, stream);
    else
        launch_attention_partial_kv<dpl, group, float>(a, n_chunks, stream);
}

template <int dpl>
void launch_attention_dpl(const attention_args &a, int group, int n_chunks, cudaStream_t stream) {
    switch (group) {
    case 1: launch_attention_partial<dpl, 1>(a, n_chunks, stream); break;
    case 2: launch_attention_partial<dpl, 2>(a, n_chunks, stream); break;
    case 4: launch_attention_partial<dpl, 4>(a, n_chunks, stream); break;
    default:
        // 8, or a multiple of 8 (qwen3-235b-a22b: 16) as blocks of 8 query heads per KV head.
        if constexpr (dpl <= 4) {
            if (group % 8 == 0) {
                launch_attention_partial<dpl, 8>(a, n_chunks, stream);
                break;
            }
        }
        TANDEM_CUDA_REQUIRE(false, "attention: query heads per KV head must be 1, 2, 4 or a multiple of 8 (d_head <= 128 "
                                   "from 8)");
    }
}

// The partials on CUDA cores (fp32 dots), every shape attention() takes.
void launch_attention_cuda_cores(const attention_args &a, int n_chunks, cudaStream_t stream) {
    const int group = a.n_head / a.n_head_kv;
    switch (a.d_head) {
    case 32: launch_attention_dpl<1>(a, group, n_chunks, stream); break;
    case 64: launch_attention_dpl<2>(a, group, n_chunks, stream); break;
    case 128: launch_attention_dpl<4>(a, group, n_chunks, stream); break;
    case 256: launch_attention_dpl<8>(a, group, n_chunks, stream); break;
    default: TANDEM_CUDA_REQUIRE(false, "attention: d_head must be 32, 64, 128 or 256");
    }
}

}  // namespace

void qk_rope_kv(const qk_rope_kv_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE((a.d_head == 32 || a.d_head % 64 == 0) && a.d_head <= 32 * max_dpl,
                        "qk_rope_kv: d_head must be 32, 64, 128, 192 or 256");
    TANDEM_CUDA_REQUIRE(a.q && a.k && a.v && a.q_norm && a.k_norm && a.inv_freq && a.slots && a.positions &&
                            a.k_cache && a.v_cache, "qk_rope_kv: null pointer");
    if (a.n_rows == 0) return;
    const int head_groups = (a.n_head + 2 * a.n_head_kv + rope_warps - 1) / rope_warps;
    TANDEM_CUDA_REQUIRE(!(a.kv_f16 && a.kv_q8_0), "qk_rope_kv: the cache holds halves or q8_0 blocks, not both");
    if (a.kv_q8_0)
        launch_pdl(qk_rope_kv_kernel<block_q8_0>, dim3(a.n_rows, head_groups), dim3(rope_warps * 32), stream, a);
    else if (a.kv_f16)
        launch_pdl(qk_rope_kv_kernel<__half>, dim3(a.n_rows, head_groups), dim3(rope_warps * 32), stream, a);
    else
        launch_pdl(qk_rope_kv_kernel<float>, dim3(a.n_rows, head_groups), dim3(rope_warps * 32), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void attention(const attention_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0, "attention: n_head must be a multiple of n_head_kv");
    TANDEM_CUDA_REQUIRE(!a.out_sums || a.out_split, "attention: out_sums is written with out_split only");
    TANDEM_CUDA_REQUIRE(!(a.kv_f16 && a.kv_q8_0), "attention: the cache holds halves or q8_0 blocks, not both");
    TANDEM_CUDA_REQUIRE(!a.k_new || (a.v_new && a.q_norm && a.k_norm && a.inv_freq),
                        "attention: the fused QK norm and RoPE need v_new, q_norm, k_norm and inv_freq");
    if (a.n_rows == 0) return;
    const int n_chunks = attention_chunks(a.n_ctx);
    TANDEM_CUDA_REQUIRE(a.n_rows <= 65535, "attention: too many rows for one launch");
    if (attention_mma_applies(a))  // halves, d_head 128, 8k query heads a KV head: tensor cores
        attention_partial_mma(a, n_chunks, stream);
    else
        launch_attention_cuda_cores(a, n_chunks, stream);
    TANDEM_CUDA_CHECK_LAUNCH();
    launch_pdl(attention_combine_kernel, dim3(a.n_head, a.n_rows), dim3(a.d_head), stream, a, n_chunks);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
