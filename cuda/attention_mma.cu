// cuda/attention_mma.cu - decode attention chunk partials on tensor cores over a cache of halves
// or q8_0 blocks (attention_mma.h). Why: the fp32 kernel (attention.cu) is bound by its instruction latency, not
// by bytes (halving the cache's bytes alone gains nothing); here a product of 16 positions with 8
// query heads is 16 mma.sync for the scores and 16 for P * V, with no shuffles a position
// (`bench --prompt 0 --ctx 16384 --decode-prompt 4000 --sessions 16 --kv-type f16`: 1.7x fp32).
//
// Work per (row, KV head) position: Q.K^T and P.V of 8 query heads, 2 * 128 * 8 * 2 = 4,096 flops,
// on 512 bytes of f16 key and value. Per block (4 warps): one (row, 8 query heads, run of chunks).
// Warp w takes the chunk's subtiles of 16 positions w, w + 4, ... and keeps its own online softmax
// over them; each subtile's keys and values arrive by cp.async into the warp's own two stages
// while the previous one is computed (no block barrier inside a chunk). At the chunk's end the
// four warps' (max, sum, output) are merged in warp order into the chunk partial.
//
// Fragments (m16n8k16, lane = 4 g + t): scores S = A B with A rows g = the hi parts of query head
// g, rows g + 8 its lo parts (k = 16 dimensions), B = K^T (n = 8 positions; ldmatrix of the staged
// keys), so S[g] + S[g + 8] is head g's score. The same C layout is the A layout of P * V: rows g
// and g + 8 carry the hi and lo parts of head g's probabilities over 16 positions, B = V (n = 8
// dimensions; ldmatrix.trans), and O[g] + O[g + 8] is head g's output.
// q8_0 (272 bytes a position instead of 512): the subtile's blocks arrive raw, the warp converts the
// quants to halves in its second stage, and the products above run per 32-dimension block with the
// block scales applied in fp32 (attention_mma.h).
#include "attention_mma.h"

#include "cp_async.cuh"
#include "cuda_check.h"
#include "kv_cache.cuh"
#include "launch.cuh"
#include "ldmatrix.cuh"
#include "mma_f16.cuh"
#include "qk_norm_rope.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

namespace tandem::cuda {
namespace {

constexpr int am_warps = 4;
constexpr int am_threads = am_warps * 32;
constexpr int am_dh = 128;     // d_head
constexpr int am_group = 8;    // query heads a block (of one KV head)
constexpr int am_sub = 16;     // positions a warp's subtile
constexpr int am_row = am_dh + 8;  // halves a staged row: 272 bytes = 17 x 16 (odd), so the 8 rows
                                   // of an ldmatrix phase hit distinct banks
constexpr uint32_t full_mask = 0xFFFFFFFFu;
constexpr int max_devices = 64;  // devices whose wave attention_partial_mma keeps

struct am_stage {
    __half k[am_sub][am_row];
    __half v[am_sub][am_row];
};
// A warp's state at a chunk's end, written into its free stage for the merge.
// o's rows are padded by 4 floats: lane (g, t) writes o[g][8 n + 2 t + e], so rows 4 banks apart
// put the warp's 32 stores of a (n, e) in 32 banks (unpadded, the 8 heads' rows share banks).
constexpr int am_merge_row = am_dh + 4;
struct am_merge {
    float m[am_group], l[am_group], o[am_group][am_merge_row];
};
static_assert(sizeof(am_merge) <= sizeof(am_stage), "the merge state fits a stage");

// q8_0 caches: a subtile's blocks as they lie in the cache (a head is 4 blocks of 34 bytes), two of
// them in a warp's first stage (the cp.async double buffer); the second stage holds the subtile's
// quants converted to halves (exact: integers of at most 8 bits), which the f16 fragments read.
constexpr int am_q8_head = am_dh / 32 * 34;  // 136 bytes
struct am_q8_raw {
    uint8_t k[am_sub][am_q8_head];
    uint8_t v[am_sub][am_q8_head];
};
static_assert(2 * sizeof(am_q8_raw) <= sizeof(am_stage), "a q8_0 warp's two raw stages fit its first stage");
// P * V folds each value block's scale into the probabilities; times 2^7 they keep the hi + lo
// split's precision of P (a scale is its block's amax / 127), and the output is scaled back exactly.
constexpr float am_q8_v_gain = 128.0f;

struct am_smem {
    am_stage stage[am_warps][2];   // 69,632 bytes: 3 blocks an SM
    float q[am_group][am_dh];      // fused: the block's normalised, rotated query heads
    float fresh[2][am_dh];         // fused: the row's new key and value, as the cache holds them
    int merge_stage[am_warps];     // which stage holds warp w's merge state
};

__device__ __forceinline__ am_q8_raw &raw_stage(am_smem &sm, int warp, int b) {
    return reinterpret_cast<am_q8_raw *>(&sm.stage[warp][0])[b];
}
__device__ __forceinline__ float q8_scale_at(const uint8_t *block) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(block)));
}
// Four signed quants (a word) as two pairs of halves, exactly: 1024 + (q + 128) is a half whose low
// byte is q + 128, and minus 1152 leaves q.
__device__ __forceinline__ void q8_to_halves(uint32_t w, uint32_t &lo, uint32_t &hi) {
    const uint32_t u = w ^ 0x80808080u;
    const __half2 bias = __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480));  // 1152
    uint32_t a = __byte_perm(u, 0x64646464u, 0x5140), b = __byte_perm(u, 0x64646464u, 0x5342);
    const __half2 ha = __hsub2(*reinterpret_cast<const __half2 *>(&a), bias);
    const __half2 hb = __hsub2(*reinterpret_cast<const __half2 *>(&b), bias);
    lo = *reinterpret_cast<const uint32_t *>(&ha);
    hi = *reinterpret_cast<const uint32_t *>(&hb);
}
// A raw subtile's quants into the stage of halves: lane (p, plane) converts position p's four blocks
// of keys (lanes 0-15) or values (16-31), the values' blocks rotated by two so the halves' loads
// fall in other banks (same parity, so the aligned and unaligned block forms stay warp-uniform).
__device__ __forceinline__ void q8_convert(const am_q8_raw &rw, am_stage &st, int lane) {
    const int p = lane & 15, plane = lane >> 4;
    const uint8_t *src_row = plane ? rw.v[p] : rw.k[p];
    __half *dst_row = plane ? st.v[p] : st.k[p];
#pragma unroll
    for (int bi = 0; bi < am_dh / 32; ++bi) {
        const int b = plane ? (bi + 2) & 3 : bi;
        const uint8_t *blk = src_row + 34 * b;
        uint32_t w[8];
        if ((bi & 1) == 0) {  // block at a multiple of 4 bytes: its quants start 2 bytes into a word
            const uint32_t *x = reinterpret_cast<const uint32_t *>(blk);
            uint32_t prev = x[0];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t next = x[j + 1];
                w[j] = __funnelshift_r(prev, next, 16);
                prev = next;
            }
        } else {  // block 2 bytes past a word: its quants are word aligned
            const uint32_t *x = reinterpret_cast<const uint32_t *>(blk + 2);
#pragma unroll
            for (int j = 0; j < 8; ++j) w[j] = x[j];
        }
        uint4 *dst = reinterpret_cast<uint4 *>(dst_row + 32 * b);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            uint4 h;
            q8_to_halves(w[2 * j], h.x, h.y);
            q8_to_halves(w[2 * j + 1], h.z, h.w);
            dst[j] = h;
        }
    }
}

template <bool fused, bool q8>
__global__ void __launch_bounds__(am_threads, 3) attention_partial_mma_kernel(const attention_args a, int n_chunks) {
    extern __shared__ __align__(16) unsigned char am_raw[];
    am_smem &sm = *reinterpret_cast<am_smem *>(am_raw);
    const int blocks_per_kv = a.n_head / (a.n_head_kv * am_group);
    const int qb = blockIdx.x, kh = qb / blocks_per_kv, c0 = blockIdx.z, r = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int n_z = int(gridDim.z);
    // Slots and positions are written before the step's first kernel (attention.h).
    const int slot = a.slots[r], pos = a.positions[r], chunk = attention_row_chunk(pos), row_chunks = pos / chunk + 1;
    if (slot >= 0 && c0 >= row_chunks) return;  // as attention.cu: no chunk of the row here
    [[maybe_unused]] const bool holds_new = (row_chunks - 1 - c0) % n_z == 0;
    [[maybe_unused]] float cs[max_dpl / 2], sn[max_dpl / 2], qn[max_dpl], kn[max_dpl];
    constexpr int dpl = am_dh / 32;
    if constexpr (fused) {
        rope_angles(pos, a.inv_freq, dpl, lane, cs, sn);
        load_norm_weights(a.q_norm, a.k_norm, dpl, lane, qn, kn);
    }
    const int kv_dim = a.n_head_kv * am_dh;
    const int64_t kv_base = int64_t(slot < 0 ? 0 : slot) * a.n_ctx * kv_dim + int64_t(kh) * am_dh;
    const __half *kb = static_cast<const __half *>(a.k_cache) + kv_base, *vb = static_cast<const __half *>(a.v_cache) + kv_base;
    // q8_0: the same element offsets in 34-byte blocks of 32 (a head starts on a block).
    [[maybe_unused]] const int64_t q8_row = int64_t(kv_dim) / 32 * 34;
    [[maybe_unused]] const uint8_t *kq = static_cast<const uint8_t *>(a.k_cache) + kv_base / 32 * 34;
    [[maybe_unused]] const uint8_t *vq = static_cast<const uint8_t *>(a.v_cache) + kv_base / 32 * 34;
    auto chunk_end = [&](int c) { return min(c * chunk + chunk, pos + 1); };
    // The warp's next subtile from (c, s) on: subtile s of chunk c, else the first of the block's
    // later chunks that has one for this warp (c == row_chunks or more: none left).
    auto settle = [&](int &c, int &s) {
        while (c < row_chunks && c * chunk + am_sub * s >= chunk_end(c)) {
            c += n_z;
            s = warp;
        }
    };
    // Subtile (c, s)'s keys and values into stage b: 512 copies of 16 bytes, 16 a lane; positions
    // from the chunk's end on as zeros (unwritten cache may hold NaN; 0 * NaN is NaN), and fused,
    // the row's own position too (patched from shared memory once it has arrived).
    auto issue = [&](int c, int s, int b) {
        const int p0 = c * chunk + am_sub * s, pe = chunk_end(c);
        if constexpr (q8) {  // 2 x 16 heads of 136 bytes: 544 copies of 8 bytes, 17 a lane
            am_q8_raw &rw = raw_stage(sm, warp, b);
#pragma unroll
            for (int j = 0; j < 17; ++j) {
                const int idx = lane + 32 * j, is_v = idx >= 272, rem = idx - 272 * is_v, row = rem / 17, piece = rem - 17 * row;
                const int p = p0 + row;
                const bool ok = p < pe && !(fused && p == pos);
                const uint8_t *src = (is_v ? vq : kq) + int64_t(ok ? p : 0) * q8_row + 8 * piece;
                cp_async_8((is_v ? rw.v[row] : rw.k[row]) + 8 * piece, src, ok ? 8 : 0);
            }
            return;
        }
        am_stage &st = sm.stage[warp][b];
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int idx = lane + 32 * j, is_v = idx >> 8, row = (idx >> 4) & 15, col = (idx & 15) * 8, p = p0 + row;
            const bool ok = p < pe && !(fused && p == pos);
            const __half *src = (is_v ? vb : kb) + int64_t(ok ? p : 0) * kv_dim + col;
            cp_async_16(is_v ? &st.v[row][col] : &st.k[row][col], src, ok ? 16 : 0);
        }
    };
    int cur_c = c0, cur_s = warp, buf = 0;
    settle(cur_c, cur_s);
    // Fused, the rows' slots are distinct: positions before the row's own were written by earlier
    // steps, so the first subtile may load before the wait.
    if (fused && slot >= 0 && cur_c < row_chunks) issue(cur_c, cur_s, 0);
    cp_async_commit();
    pdl_wait();
    pdl_trigger();
    if (slot < 0) {
        cp_async_wait_all();
        return;
    }
    if constexpr (fused) {
        const bool writer = holds_new && qb % blocks_per_kv == 0;
        // Warp w takes heads w, w + 4, w + 8 of the block's query heads, then the new key and
        // value (in the block that holds the row's position): all loads first, so the rounds'
        // round trips overlap.
        constexpr int rounds = (am_group + 2 + am_warps - 1) / am_warps;
        float val[rounds][max_dpl];
#pragma unroll
        for (int k = 0; k < rounds; ++k) {
            const int hh = warp + am_warps * k;
            const bool live = hh < am_group || (hh < am_group + 2 && holds_new);
            const float *src = hh < am_group ? a.q + (int64_t(r) * a.n_head + qb * am_group + hh) * am_dh
                                             : (hh == am_group ? a.k_new : a.v_new) + (int64_t(r) * a.n_head_kv + kh) * am_dh;
#pragma unroll
            for (int i = 0; i < max_dpl; ++i) val[k][i] = live && i < dpl ? src[lane + 32 * i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < rounds; ++k) {
            const int hh = warp + am_warps * k;
            if (!(hh < am_group || (hh < am_group + 2 && holds_new))) continue;  // warp-uniform
            if (hh <= am_group) {
                float nw[max_dpl];  // element by element, as in attention.cu
#pragma unroll
                for (int i = 0; i < max_dpl; ++i) nw[i] = hh < am_group ? qn[i] : kn[i];
                norm_rope_head(val[k], nw, cs, sn, dpl, lane, a.eps);
            }
            if (q8 && hh >= am_group) {
                // The head's blocks as qk_rope_kv writes them (kv_put_head), kept raw for the patch.
                uint8_t *fr = reinterpret_cast<uint8_t *>(sm.fresh[hh - am_group]);
                block_q8_0 *cache = static_cast<block_q8_0 *>(hh == am_group ? a.k_cache : a.v_cache) +
                                    ((int64_t(slot) * a.n_ctx + pos) * kv_dim + int64_t(kh) * am_dh) / 32;
#pragma unroll
                for (int i = 0; i < dpl; ++i) {
                    uint16_t d_bits;
                    const int8_t qv = q8_0_quantize_warp(val[k][i], d_bits);
                    fr[34 * i + 2 + lane] = uint8_t(qv);
                    if (lane == 0) *reinterpret_cast<uint16_t *>(fr + 34 * i) = d_bits;
                    if (writer) {
                        cache[i].qs[lane] = qv;
                        if (lane == 0) cache[i].d = d_bits;
                    }
                }
                continue;
            }
            if (hh >= am_group) {
#pragma unroll
                for (int i = 0; i < max_dpl; ++i) val[k][i] = kv_round<__half>(val[k][i]);
            }
            float *dst = hh < am_group ? sm.q[hh] : sm.fresh[hh - am_group];
#pragma unroll
            for (int i = 0; i < dpl; ++i) dst[lane + 32 * i] = val[k][i];
            if (writer && hh >= am_group) {
                __half *cache = static_cast<__half *>(hh == am_group ? a.k_cache : a.v_cache) +
                                (int64_t(slot) * a.n_ctx + pos) * kv_dim + int64_t(kh) * am_dh;
#pragma unroll
                for (int i = 0; i < dpl; ++i) kv_store(cache + lane + 32 * i, val[k][i]);
            }
        }
        __syncthreads();
    } else {
        if (cur_c < row_chunks) issue(cur_c, cur_s, 0);
        cp_async_commit();
    }
    // The query fragments of the whole run: k-step kk covers dimensions 16 kk .. 16 kk + 15.
    uint32_t qa[am_dh / 16][4];
    {
        const float *q = fused ? sm.q[g] : a.q + (int64_t(r) * a.n_head + qb * am_group + g) * am_dh;
#pragma unroll
        for (int kk = 0; kk < am_dh / 16; ++kk) {
            const float2 x0 = *reinterpret_cast<const float2 *>(q + 16 * kk + 2 * t);
            const float2 x1 = *reinterpret_cast<const float2 *>(q + 16 * kk + 2 * t + 8);
            split_f16(x0.x, x0.y, qa[kk][0], qa[kk][1]);
            split_f16(x1.x, x1.y, qa[kk][2], qa[kk][3]);
        }
    }
    // ldmatrix row addresses: keys (non-transposed) matrices (positions 0-7 | 8-15) x (dims +0 | +8),
    // lanes 8i.. give matrix i = (dims half i & 1, positions half i >> 1); values (transposed)
    // matrix i = (positions half i & 1, dims half i >> 1).
    const int k_row = (lane & 7) + ((lane >> 4) << 3), k_col = ((lane >> 3) & 1) * 8;
    const int v_row = (lane & 7) + (((lane >> 3) & 1) << 3), v_col = (lane >> 4) * 8;

    for (int c = c0; c < row_chunks; c += n_z) {
        const int pe = chunk_end(c);
        float o[am_dh / 8][4];
#pragma unroll
        for (int n = 0; n < am_dh / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
        float m_run = -INFINITY, l_run = 0.0f;  // head g's running max; this lane's share of its sum
        while (cur_c == c) {
            int next_c = cur_c, next_s = cur_s + am_warps;
            settle(next_c, next_s);
            if (next_c < row_chunks) issue(next_c, next_s, buf ^ 1);
            cp_async_commit();
            cp_async_wait_pending<1>();
            __syncwarp();
            am_stage &st = sm.stage[warp][q8 ? 1 : buf];
            am_q8_raw &rw = raw_stage(sm, warp, buf);
            const int p0 = c * chunk + am_sub * cur_s;
            if (fused && pos >= p0 && pos < p0 + am_sub) {  // warp-uniform: the new position
                const int row = pos - p0;
                if constexpr (q8) {
                    const uint32_t *fk = reinterpret_cast<const uint32_t *>(sm.fresh[0]), *fv = reinterpret_cast<const uint32_t *>(sm.fresh[1]);
                    for (int w = lane; w < 2 * am_q8_head / 4; w += 32) {
                        constexpr int hw = am_q8_head / 4;
                        uint32_t *dst = reinterpret_cast<uint32_t *>(w < hw ? rw.k[row] : rw.v[row]);
                        dst[w < hw ? w : w - hw] = w < hw ? fk[w] : fv[w - hw];
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        st.k[row][4 * lane + i] = __float2half_rn(sm.fresh[0][4 * lane + i]);
                        st.v[row][4 * lane + i] = __float2half_rn(sm.fresh[1][4 * lane + i]);
                    }
                }
                __syncwarp();
            }
            if constexpr (q8) {
                q8_convert(rw, st, lane);
                __syncwarp();
            }
            // Scores of positions p0 + 8 n + 2 t + e (n-tile n), hi part in sc[n][e], lo in sc[n][2 + e].
            // q8_0: each block's product of quants (exact halves) is scaled by its position's scale.
            float sc[2][4] = {};
            if constexpr (q8) {
#pragma unroll
                for (int blk = 0; blk < am_dh / 32; ++blk) {
                    float acc[2][4] = {};
#pragma unroll
                    for (int kk = 2 * blk; kk < 2 * blk + 2; ++kk) {
                        uint32_t b[4];
                        ldsm_x4(b, &st.k[k_row][16 * kk + k_col]);
                        mma_f16(acc[0], qa[kk], b[0], b[1]);
                        mma_f16(acc[1], qa[kk], b[2], b[3]);
                    }
#pragma unroll
                    for (int n = 0; n < 2; ++n)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const float d = q8_scale_at(rw.k[8 * n + 2 * t + e] + 34 * blk);
                            sc[n][e] = fmaf(acc[n][e], d, sc[n][e]);
                            sc[n][2 + e] = fmaf(acc[n][2 + e], d, sc[n][2 + e]);
                        }
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < am_dh / 16; ++kk) {
                    uint32_t b[4];
                    ldsm_x4(b, &st.k[k_row][16 * kk + k_col]);
                    mma_f16(sc[0], qa[kk], b[0], b[1]);
                    mma_f16(sc[1], qa[kk], b[2], b[3]);
                }
            }
            float s[4], tmax = -INFINITY;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int n = i >> 1, e = i & 1, p = p0 + 8 * n + 2 * t + e;
                s[i] = p < pe ? (sc[n][e] + sc[n][2 + e]) * a.scale : -INFINITY;
                tmax = fmaxf(tmax, s[i]);
            }
            tmax = fmaxf(tmax, __shfl_xor_sync(full_mask, tmax, 1));
            tmax = fmaxf(tmax, __shfl_xor_sync(full_mask, tmax, 2));
            const float m_new = fmaxf(m_run, tmax);  // finite: the subtile's first position is live
            const float corr = expf(m_run - m_new);  // 0 on the chunk's first subtile
            // The outputs are rescaled only where a head's maximum moved: on the chunk's first
            // subtile they are all +0 and its corr 0, and where corr is 1 the products are the
            // values themselves, so skipping either changes no bit.
            const bool rescale = __any_sync(full_mask, m_run != -INFINITY && corr != 1.0f);
            float pr[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) pr[i] = expf(s[i] - m_new);
            l_run = l_run * corr + ((pr[0] + pr[1]) + (pr[2] + pr[3]));
            m_run = m_new;
            if (rescale) {
#pragma unroll
                for (int n = 0; n < am_dh / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) o[n][e] *= corr;
            }
            // The A fragment's positions: 2 t + e (pr[e]) and 8 + 2 t + e (pr[2 + e]).
#pragma unroll
            for (int blk = 0; blk < (q8 ? am_dh / 32 : 1); ++blk) {
                float pb[4];
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    pb[i] = q8 ? pr[i] * (q8_scale_at(rw.v[8 * (i >> 1) + 2 * t + (i & 1)] + 34 * blk) * am_q8_v_gain) : pr[i];
                uint32_t pa[4];
                split_f16(pb[0], pb[1], pa[0], pa[1]);
                split_f16(pb[2], pb[3], pa[2], pa[3]);
                constexpr int j_per = q8 ? 2 : am_dh / 16;  // q8_0: a block's 32 dimensions
#pragma unroll
                for (int j = j_per * blk; j < j_per * blk + j_per; ++j) {
                    uint32_t b[4];
                    ldsm_x4_trans(b, &st.v[v_row][16 * j + v_col]);
                    mma_f16(o[2 * j], pa, b[0], b[1]);
                    mma_f16(o[2 * j + 1], pa, b[2], b[3]);
                }
            }
            __syncwarp();  // the stage is refilled two subtiles on
            buf ^= 1;
            cur_c = next_c;
            cur_s = next_s;
        }
        // The warp's state into its free stage (its next subtile, if any, is arriving in the other).
        // q8_0: the stage of halves is free at a chunk's end; raw stages hold what is arriving.
        {
            const int free_stage = q8 ? 1 : buf ^ 1;
            am_merge &mg = *reinterpret_cast<am_merge *>(&sm.stage[warp][free_stage]);
            float l = l_run + __shfl_xor_sync(full_mask, l_run, 1);
            l += __shfl_xor_sync(full_mask, l, 2);
            if (t == 0) {
                mg.m[g] = m_run;
                mg.l[g] = l;
            }
#pragma unroll
            for (int n = 0; n < am_dh / 8; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) mg.o[g][8 * n + 2 * t + e] = (o[n][e] + o[n][2 + e]) * (q8 ? 1.0f / am_q8_v_gain : 1.0f);
            if (lane == 0) sm.merge_stage[warp] = free_stage;
        }
        __syncthreads();
        // Merge in warp order (a warp with no subtile here has max -inf, sum and output 0): thread
        // e takes dimension e of every head. The 32 factors exp(m[head][w] - max) are made once a
        // warp (lane 4 head + w) and read by shuffles: the same values, added in the same order.
        {
            static_assert(am_threads == am_dh, "a thread a dimension");
            static_assert(am_group * am_warps == 32, "a lane a (head, warp) factor");
            const int e = threadIdx.x;
            const am_merge *mg[am_warps];
#pragma unroll
            for (int w = 0; w < am_warps; ++w) mg[w] = reinterpret_cast<const am_merge *>(&sm.stage[w][sm.merge_stage[w]]);
            const int hq = lane >> 2, wq = lane & 3;
            const float m_q = reinterpret_cast<const am_merge *>(&sm.stage[wq][sm.merge_stage[wq]])->m[hq];
            float mx_q = -INFINITY;
#pragma unroll
            for (int w = 0; w < am_warps; ++w) mx_q = fmaxf(mx_q, __shfl_sync(full_mask, m_q, (lane & ~3) | w));
            const float f_q = expf(m_q - mx_q);
#pragma unroll
            for (int hg = 0; hg < am_group; ++hg) {
                float f[am_warps];
#pragma unroll
                for (int w = 0; w < am_warps; ++w) f[w] = __shfl_sync(full_mask, f_q, am_warps * hg + w);
                const float mx = __shfl_sync(full_mask, mx_q, am_warps * hg);
                float out = 0.0f;
#pragma unroll
                for (int w = 0; w < am_warps; ++w) out += mg[w]->o[hg][e] * f[w];
                float *dst = a.partial + ((int64_t(r) * a.n_head + qb * am_group + hg) * n_chunks + c) * (am_dh + 2);
                dst[e] = out;
                if (e == 0) {
                    float sum = 0.0f;
#pragma unroll
                    for (int w = 0; w < am_warps; ++w) sum += mg[w]->l[hg] * f[w];
                    dst[am_dh] = mx;
                    dst[am_dh + 1] = sum;
                }
            }
        }
        __syncthreads();  // the merge stages are refilled by later subtiles
    }
    cp_async_wait_all();
}

}  // namespace

int attention_mma_chunk_blocks(int row_blocks, int n_chunks, int wave) {
    const int most = std::min(n_chunks, std::max(1, wave / std::max(1, row_blocks)));
    const int run = (n_chunks + most - 1) / most;  // chunks a block, at the most blocks
    return (n_chunks + run - 1) / run;
}

void attention_partial_mma(const attention_args &a, int n_chunks, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(attention_mma_applies(a), "attention_partial_mma: needs halves or q8_0 blocks, d_head 128, 8k query "
                                                  "heads a KV head");
    constexpr size_t smem = sizeof(am_smem);
    auto go = [&](auto kernel) {
        allow_dynamic_smem(kernel, smem);
        // One wave at this kernel's occupancy (an H200: 132 SMs x 3 blocks). Sixteen rows after
        // 4,000-position prompts take 6 blocks a row and head group instead of the fp32 kernel's
        // 4 (attn_live_blocks): `bench --decode-prompt 4000 --sessions 16` +1.2%.
        // Queried once a device (launches outside a graph would pay the queries every layer).
        static std::atomic<int> waves[max_devices] = {};
        int device = 0;
        TANDEM_CUDA_CHECK(cudaGetDevice(&device));
        int wave = device < max_devices ? waves[device].load(std::memory_order_relaxed) : 0;
        if (wave == 0) {
            int sms = 0, per_sm = 0;
            TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
            TANDEM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, am_threads, smem));
            wave = std::max(1, sms * per_sm);
            if (device < max_devices) waves[device].store(wave, std::memory_order_relaxed);
        }
        const int row_blocks = a.n_head / am_group * a.n_rows;
        const dim3 grid(a.n_head / am_group, a.n_rows, attention_mma_chunk_blocks(row_blocks, n_chunks, wave));
        launch_pdl_smem(kernel, grid, dim3(am_threads), smem, stream, a, n_chunks);  // chunks slowest, as attention.cu
    };
    if (a.kv_q8_0)
        a.k_new ? go(attention_partial_mma_kernel<true, true>) : go(attention_partial_mma_kernel<false, true>);
    else
        a.k_new ? go(attention_partial_mma_kernel<true, false>) : go(attention_partial_mma_kernel<false, false>);
}

}  // namespace tandem::cuda
