// cuda/attention_prompt.cu - causal attention of prompt rows on tensor cores (flash-attention
// style). Why: prefill through the decode kernel re-reads K/V from L2 for every row and does all
// dot products on fp32 CUDA cores; here a block loads a tile of keys once for 128 (row, query
// head) pairs of one KV head and multiplies with mma.sync.
//
// Work: per (row, query head) with position p, Q.K^T and P.V cost 2 * d_head * (p + 1) flops
// each. A 2,048-token prompt at positions 0..2047 of qwen3-30b-a3b (32 query heads, d_head 128):
// 4 * 128 * (2048 * 2049 / 2) * 32 = 34.4 GFLOP per layer, 1.65 TFLOP over 48 layers; the hi/lo
// split issues 3 bf16 mmas per product (~103 GFLOP of tensor work per layer), plus the masked
// part of the diagonal key tiles. A cache of halves (attention_args::kv_f16) takes f16 mmas instead:
// keys and values enter exactly, Q and P as f16 hi + lo, 2 mmas per product and no split pass. A
// cache of q8_0 blocks (kv_q8_0) is dequantized into the float stage and takes the float path.
//
// Layout of a block (8 warps): blockIdx.y is the KV head, blockIdx.x a tile of 128 / group rows
// of the step; (row, head) pair m = row_in_tile * group + head_in_group, warp w owns pairs
// 16w..16w+15 (one m16 tile). The block's rows are grouped by slot into passes; a pass streams
// its slot's keys 0..(largest position of its rows) in tiles of ap_keys at fixed absolute
// positions, ascending; the next tile's floats arrive by cp.async while one is computed. Per key
// tile: S = Q.K^T (fp32), mask (other slot, key > position), online softmax per pair, O += P.V.
// Invariance: a pair's state changes only in its own slot's pass and only through key tiles at
// the same absolute positions whatever the launch, in the same order. A tile wholly masked for a
// pair leaves it unchanged: its scores become -inf by selection (never computed from garbage),
// m_new = max(m, -inf) = m so the correction is exactly 1 (or 1 by test while m is still -inf,
// avoiding -inf - -inf), p = 0 exactly, and the P.V mma adds exact zeros (K/V past the pass's
// last key are loaded as zeros: unwritten cache may hold NaN, and 0 * NaN is NaN). mma.sync
// computes each output element from its own row and column only, so the other pairs of the tile
// do not enter. The one residue: an accumulator element that is exactly zero could change the
// sign of its zero.
#include "attention_prompt.h"

#include "cuda_check.h"
#include "cp_async.cuh"
#include "kv_cache.cuh"
#include "ldmatrix.cuh"
#include "mma_f16.cuh"
#include "launch.cuh"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace tandem::cuda {
namespace {

// Warps a block (W), each one m16 tile of (row, query head) pairs: 8 for steps of at least
// ap_wide_rows rows (250 registers: one block an SM; a key tile loaded and split once for 128
// pairs), else 4 (two blocks an SM; more blocks for a short step). The same arithmetic either way.
constexpr int ap_max_warps = 8;
constexpr int ap_max_pairs = ap_max_warps * 16;
constexpr int ap_min_pairs = 4 * 16;
constexpr int ap_wide_rows = 512;
constexpr int ap_keys = 32;                // keys per tile
constexpr int ap_pad = 8;                  // bf16 per smem row of padding: a row is 16 bytes * odd, so
                                           // the 8 rows of an ldmatrix phase hit distinct banks
constexpr uint32_t full_mask = 0xFFFFFFFFu;

// Dynamic shared memory (67 KiB for d_head 128): the split tile being computed, and the next
// tile's raw floats arriving by cp.async meanwhile. A cache of halves uses k and v as two tile
// buffers of halves instead ([buffer][key][d]: one computed, the next arriving) and leaves stage
// unused.
template <int dh>
struct ap_smem {
    __nv_bfloat16 k[2][ap_keys][dh + ap_pad];  // [hi, lo][key][d] (halves: [buffer][key][d])
    __nv_bfloat16 v[2][ap_keys][dh + ap_pad];
    float stage[2][ap_keys][dh];               // [K, V][key][d] of the next tile (floats only)
    int row_slot[ap_max_pairs], row_pos[ap_max_pairs];  // the tile's rows (at most 128 with group 1)
    int pass_slot[ap_max_pairs], pass_end[ap_max_pairs];  // passes: slot, keys [0, end)
    int n_pass;
};
static_assert(((128 + ap_pad) * 2) % 16 == 0 && ((128 + ap_pad) * 2 / 16) % 2 == 1, "ldmatrix rows: 16-byte aligned, odd");

// Splits (a, b) into hi = bf16 and lo = bf16(x - hi), packed with a in the low half as mma
// fragments expect. x - hi is exact in fp32.
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t &hi, uint32_t &lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    const float2 hf = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
    hi = *reinterpret_cast<const uint32_t *>(&h);
    lo = *reinterpret_cast<const uint32_t *>(&l);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a.b with a = a_hi + a_lo, b = b_hi + b_lo, dropping lo.lo (2^-18 relative).
__device__ __forceinline__ void mma_split(float (&d)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                          const uint32_t *b_hi, const uint32_t *b_lo) {
    mma_bf16(d, a_hi, b_hi[0], b_hi[1]);
    mma_bf16(d, a_hi, b_lo[0], b_lo[1]);
    mma_bf16(d, a_lo, b_hi[0], b_hi[1]);
}

// 2^x by the special function unit (relative error ~2^-22; results below 2^-126 flush to zero).
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// This thread's share of a tile: float4 `it` of the tile is key idx / per_key, column 4 (idx % per_key).
template <int dh, int W>
struct ap_tile_share {
    static constexpr int per_key = dh / 4, n = ap_keys * per_key / (32 * W);
    static_assert(ap_keys * per_key % (32 * W) == 0, "whole float4 rounds per thread");
};

// Keys [t0, t0 + ap_keys) of one KV head (src: key 0 of the slot and head, key_stride floats
// apart), K and V, by cp.async into stage; keys from `end` on are zeros (a cache of floats).
template <int dh, int W>
__device__ __forceinline__ void stage_kv_tile(const float *k_src, const float *v_src, int64_t key_stride, int t0, int end,
                                              float (&stage)[2][ap_keys][dh]) {
    using share = ap_tile_share<dh, W>;
#pragma unroll
    for (int it = 0; it < share::n; ++it) {
        const int idx = threadIdx.x + it * 32 * W, key = idx / share::per_key, col = 4 * (idx % share::per_key);
        const bool live = t0 + key < end;
        const int64_t off = live ? (t0 + key) * key_stride + col : 0;
        cp_async_16(&stage[0][key][col], k_src + off, live ? 16 : 0);
        cp_async_16(&stage[1][key][col], v_src + off, live ? 16 : 0);
    }
    cp_async_commit();
}

// A cache of q8_0 blocks: keys [t0, t0 + ap_keys) dequantized (kv_load: float(q) * float(d)) into
// stage by plain loads, keys from `end` on as zeros; the float path's split then takes the stage.
// base: element of key 0 of the slot and head in each plane.
template <int dh, int W>
__device__ __forceinline__ void stage_q8_tile(const void *k_plane, const void *v_plane, int64_t base, int64_t key_stride,
                                              int t0, int end, float (&stage)[2][ap_keys][dh]) {
    using share = ap_tile_share<dh, W>;
#pragma unroll
    for (int it = 0; it < share::n; ++it) {
        const int idx = threadIdx.x + it * 32 * W, key = idx / share::per_key, col = 4 * (idx % share::per_key);
        const bool live = t0 + key < end;
        const int64_t e = base + (t0 + key) * key_stride + col;
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            const void *plane = m == 0 ? k_plane : v_plane;
            float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (live)
                f = make_float4(kv_load<block_q8_0>(plane, e), kv_load<block_q8_0>(plane, e + 1),
                                kv_load<block_q8_0>(plane, e + 2), kv_load<block_q8_0>(plane, e + 3));
            *reinterpret_cast<float4 *>(&stage[m][key][col]) = f;
        }
    }
}

// A cache of halves needs no split: keys [t0, t0 + ap_keys) go by cp.async straight into one of two
// ldmatrix buffers (the hi/lo pair's storage, [buffer][key][d] 16-bit, padded rows), keys from
// `end` on as zeros, while the other buffer is computed.
template <int dh, int W>
__device__ __forceinline__ void stage_half_tile(const __half *k_src, const __half *v_src, int64_t key_stride, int t0, int end,
                                                __nv_bfloat16 (&k)[ap_keys][dh + ap_pad], __nv_bfloat16 (&v)[ap_keys][dh + ap_pad]) {
    constexpr int per_key = dh / 8;
    for (int idx = threadIdx.x; idx < ap_keys * per_key; idx += 32 * W) {
        const int key = idx / per_key, col = 8 * (idx % per_key);
        const bool live = t0 + key < end;
        const int64_t off = live ? (t0 + key) * key_stride + col : 0;
        cp_async_16(&k[key][col], k_src + off, live ? 16 : 0);
        cp_async_16(&v[key][col], v_src + off, live ? 16 : 0);
    }
    cp_async_commit();
}

// The staged tile (after the caller's wait and barrier) split into hi/lo bf16 for ldmatrix.
template <int dh, int W>
__device__ __forceinline__ void split_kv_tile(const float (&stage)[2][ap_keys][dh], __nv_bfloat16 (&k)[2][ap_keys][dh + ap_pad],
                                              __nv_bfloat16 (&v)[2][ap_keys][dh + ap_pad]) {
    using share = ap_tile_share<dh, W>;
#pragma unroll
    for (int it = 0; it < share::n; ++it) {
        const int idx = threadIdx.x + it * 32 * W, key = idx / share::per_key, col = 4 * (idx % share::per_key);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            const float4 f = *reinterpret_cast<const float4 *>(&stage[m][key][col]);
            uint2 hi, lo;
            split_bf16(f.x, f.y, hi.x, lo.x);
            split_bf16(f.z, f.w, hi.y, lo.y);
            auto &dst = m == 0 ? k : v;
            *reinterpret_cast<uint2 *>(&dst[0][key][col]) = hi;
            *reinterpret_cast<uint2 *>(&dst[1][key][col]) = lo;
        }
    }
}

// Fragment coordinates (PTX m16n8k16): lane = 4 * g + t; A and C rows g and g + 8, C columns
// 2t, 2t + 1; this thread's pairs are m = 16 * warp + g + 8 * i, i = 0, 1.
template <int dh, int W, class KV>
__global__ void __launch_bounds__(32 * W, 8 / W) attention_prompt_kernel(const attention_args a) {
    constexpr int ap_pairs = 16 * W;
    constexpr int ksteps = dh / 16;       // Q.K^T: k steps over d_head
    constexpr int dtiles = dh / 8;        // P.V: n tiles over d_head
    constexpr int ntiles = ap_keys / 8;   // Q.K^T: n tiles over the key tile
    static_assert(ntiles % 2 == 0 && dtiles % 2 == 0, "ldmatrix.x4 loads two n tiles");
    extern __shared__ __align__(16) unsigned char ap_raw[];
    ap_smem<dh> &sm = *reinterpret_cast<ap_smem<dh> *>(ap_raw);

    const int group = a.n_head / a.n_head_kv, rows_per_tile = ap_pairs / group;
    const int row0 = (gridDim.x - 1 - blockIdx.x) * rows_per_tile;  // last rows (longest keys) first
    const int kh = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

    // Slots and positions are written before the step's first kernel (attention.h): before the wait.
    if (threadIdx.x < rows_per_tile) {
        const int r = row0 + threadIdx.x;
        sm.row_slot[threadIdx.x] = r < a.n_rows ? a.slots[r] : -1;
        sm.row_pos[threadIdx.x] = r < a.n_rows ? a.positions[r] : 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // passes in order of first appearance; a row of another slot is masked
        int n = 0;
        for (int rl = 0; rl < rows_per_tile; ++rl) {
            const int slot = sm.row_slot[rl];
            if (slot < 0) continue;
            int j = 0;
            while (j < n && sm.pass_slot[j] != slot) ++j;
            if (j == n) {
                sm.pass_slot[n] = slot;
                sm.pass_end[n++] = 0;
            }
            sm.pass_end[j] = max(sm.pass_end[j], min(sm.row_pos[rl] + 1, a.n_ctx));
        }
        sm.n_pass = n;
    }
    __syncthreads();
    int my_row[2], my_head[2], my_slot[2], my_pos[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int m = 16 * warp + g + 8 * i, rl = m / group;
        const bool in = rl < rows_per_tile && row0 + rl < a.n_rows;
        my_row[i] = in ? row0 + rl : -1;
        my_head[i] = kh * group + m % group;
        my_slot[i] = in ? sm.row_slot[rl] : -1;
        my_pos[i] = in ? sm.row_pos[rl] : -1;
    }
    pdl_wait();
    pdl_trigger();

    // A cache of halves: keys and values enter f16 mma exactly, so only Q and P are split (into f16
    // hi + lo: two mma a product instead of the bf16 split's three, and no per-tile split pass).
    constexpr bool halves = sizeof(KV) == 2;
    uint32_t q_hi[ksteps][4], q_lo[ksteps][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float *q = my_slot[i] >= 0 ? a.q + (int64_t(my_row[i]) * a.n_head + my_head[i]) * dh : nullptr;
#pragma unroll
        for (int ks = 0; ks < ksteps; ++ks)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float2 x = q ? *reinterpret_cast<const float2 *>(q + 16 * ks + 8 * half + 2 * t) : make_float2(0, 0);
                if constexpr (halves)
                    split_f16(x.x, x.y, q_hi[ks][i + 2 * half], q_lo[ks][i + 2 * half]);
                else
                    split_bf16(x.x, x.y, q_hi[ks][i + 2 * half], q_lo[ks][i + 2 * half]);
            }
    }
    float o[dtiles][4] = {};
    const float scale2 = a.scale * 1.44269504088896341f;  // log2 e
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const int64_t kv_dim = int64_t(a.n_head_kv) * dh;

    // The tiles in order: passes, and keys 0, ap_keys, ... < pass_end in each. Tile i + 1 arrives
    // by cp.async while tile i is computed (halves: into the other of sm.k / sm.v's two buffers).
    int buf = 0;
    auto stage = [&](int ps, int t0) {
        const int64_t base = int64_t(sm.pass_slot[ps]) * a.n_ctx * kv_dim + int64_t(kh) * dh;
        if constexpr (halves)
            stage_half_tile<dh, W>(static_cast<const __half *>(a.k_cache) + base, static_cast<const __half *>(a.v_cache) + base,
                                   kv_dim, t0, sm.pass_end[ps], sm.k[buf], sm.v[buf]);
        else if constexpr (std::is_same_v<KV, block_q8_0>)
            stage_q8_tile<dh, W>(a.k_cache, a.v_cache, base, kv_dim, t0, sm.pass_end[ps], sm.stage);
        else
            stage_kv_tile<dh, W>(static_cast<const float *>(a.k_cache) + base, static_cast<const float *>(a.v_cache) + base,
                                 kv_dim, t0, sm.pass_end[ps], sm.stage);
    };
    if (sm.n_pass > 0) stage(0, 0);
    for (int ps = 0, t0 = 0; ps < sm.n_pass;) {
        const int slot = sm.pass_slot[ps], end = sm.pass_end[ps];
        cp_async_wait_all();
        __syncthreads();  // the previous tile's ldmatrix reads are done
        if constexpr (!halves) {
            split_kv_tile<dh, W>(sm.stage, sm.k, sm.v);
            __syncthreads();  // the split tile is complete; the stage is free
        }
        const int cur = buf;  // halves: the buffer holding this tile
        const int this_t0 = t0;
        t0 += ap_keys;
        if (t0 >= end) {
            ++ps;
            t0 = 0;
        }
        if (ps < sm.n_pass) {
            if constexpr (halves) buf ^= 1;
            stage(ps, t0);
        }
        {
            const int t0 = this_t0;
            // A warp none of whose pairs needs this tile skips it: a masked tile changes nothing.
            const bool need = (my_slot[0] == slot && my_pos[0] >= t0) || (my_slot[1] == slot && my_pos[1] >= t0);
            if (!__any_sync(full_mask, need)) continue;

            float s[ntiles][4] = {};
#pragma unroll
            for (int ks = 0; ks < ksteps; ++ks)
#pragma unroll
                for (int nt = 0; nt < ntiles; nt += 2) {
                    // matrices: (keys +0, d +0), (keys +0, d +8), (keys +8, d +0), (keys +8, d +8)
                    const int key = 8 * nt + 8 * (lane >> 4) + (lane & 7), col = 16 * ks + 8 * ((lane >> 3) & 1);
                    uint32_t bh[4], bl[4];
                    if constexpr (halves) {
                        ldsm_x4(bh, &sm.k[cur][key][col]);
                        mma_f16(s[nt], q_hi[ks], bh[0], bh[1]);
                        mma_f16(s[nt], q_lo[ks], bh[0], bh[1]);
                        mma_f16(s[nt + 1], q_hi[ks], bh[2], bh[3]);
                        mma_f16(s[nt + 1], q_lo[ks], bh[2], bh[3]);
                    } else {
                        ldsm_x4(bh, &sm.k[0][key][col]);
                        ldsm_x4(bl, &sm.k[1][key][col]);
                        mma_split(s[nt], q_hi[ks], q_lo[ks], bh, bl);
                        mma_split(s[nt + 1], q_hi[ks], q_lo[ks], bh + 2, bl + 2);
                    }
                }
            // Online softmax of pair i (C rows g + 8i: elements 2i, 2i + 1 of each n tile); the
            // four lanes of a quad hold a row's 32 scores, reduced in a fixed butterfly order.
            // Scores in base-2 units (scale log2 e folded in), so each weight is one ex2 (expf's
            // range checks, branches around each call, were a quarter of the kernel's time);
            // masked scores stay -inf and become weight 0 by selection, never by ex2(-inf - -inf).
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < ntiles; ++nt)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int key = t0 + 8 * nt + 2 * t + j;
                        float &sv = s[nt][2 * i + j];
                        sv = my_slot[i] == slot && key <= my_pos[i] ? sv * scale2 : -INFINITY;
                        mx = fmaxf(mx, sv);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(full_mask, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(full_mask, mx, 2));
                const float m_new = fmaxf(m_run[i], mx);
                const float corr = m_new == m_run[i] ? 1.0f : exp2_approx(m_run[i] - m_new);
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < ntiles; ++nt)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        float &sv = s[nt][2 * i + j];
                        sv = sv == -INFINITY ? 0.0f : exp2_approx(sv - m_new);
                        sum += sv;
                    }
                sum += __shfl_xor_sync(full_mask, sum, 1);
                sum += __shfl_xor_sync(full_mask, sum, 2);
                l_run[i] = l_run[i] * corr + sum;
                m_run[i] = m_new;
#pragma unroll
                for (int dt = 0; dt < dtiles; ++dt) {
                    o[dt][2 * i] *= corr;
                    o[dt][2 * i + 1] *= corr;
                }
            }
            // O += P.V: the score accumulators of n tiles 2kk, 2kk + 1 are the A fragment of k step kk.
#pragma unroll
            for (int kk = 0; kk < ap_keys / 16; ++kk) {
                uint32_t ph[4], pl[4];
                auto split = [&](float x, float y, uint32_t &hi, uint32_t &lo) {
                    if constexpr (halves)
                        split_f16(x, y, hi, lo);
                    else
                        split_bf16(x, y, hi, lo);
                };
                split(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
                split(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
                split(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
                split(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
#pragma unroll
                for (int dt = 0; dt < dtiles; dt += 2) {
                    // transposed matrices: (keys +0, d +0), (keys +8, d +0), (keys +0, d +8), (keys +8, d +8)
                    const int key = 16 * kk + 8 * ((lane >> 3) & 1) + (lane & 7), col = 8 * dt + 8 * (lane >> 4);
                    uint32_t vh[4], vl[4];
                    if constexpr (halves) {
                        ldsm_x4_trans(vh, &sm.v[cur][key][col]);
                        mma_f16(o[dt], ph, vh[0], vh[1]);
                        mma_f16(o[dt], pl, vh[0], vh[1]);
                        mma_f16(o[dt + 1], ph, vh[2], vh[3]);
                        mma_f16(o[dt + 1], pl, vh[2], vh[3]);
                    } else {
                        ldsm_x4_trans(vh, &sm.v[0][key][col]);
                        ldsm_x4_trans(vl, &sm.v[1][key][col]);
                        mma_split(o[dt], ph, pl, vh, vl);
                        mma_split(o[dt + 1], ph, pl, vh + 2, vl + 2);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (my_row[i] < 0) continue;
        float *dst = a.out + (int64_t(my_row[i]) * a.n_head + my_head[i]) * dh + 2 * t;
        const bool pad = my_slot[i] < 0;
        const float inv = pad ? 0.0f : 1.0f / l_run[i];
#pragma unroll
        for (int dt = 0; dt < dtiles; ++dt)
            *reinterpret_cast<float2 *>(dst + 8 * dt) =
                pad ? make_float2(0.0f, 0.0f) : make_float2(o[dt][2 * i] * inv, o[dt][2 * i + 1] * inv);
    }
}

template <int dh, int W>
void launch_attention_prompt_w(const attention_args &a, cudaStream_t stream) {
    const int rows_per_tile = 16 * W / (a.n_head / a.n_head_kv);
    const dim3 grid((a.n_rows + rows_per_tile - 1) / rows_per_tile, a.n_head_kv);
    constexpr size_t smem = sizeof(ap_smem<dh>);
    auto go = [&](auto kernel) {
        allow_dynamic_smem(kernel, smem);
        launch_pdl_smem(kernel, grid, dim3(32 * W), smem, stream, a);
    };
    if (a.kv_q8_0)
        go(attention_prompt_kernel<dh, W, block_q8_0>);
    else if (a.kv_f16)
        go(attention_prompt_kernel<dh, W, __half>);
    else
        go(attention_prompt_kernel<dh, W, float>);
}

template <int dh>
void launch_attention_prompt(const attention_args &a, cudaStream_t stream) {
    if (a.n_rows >= ap_wide_rows)
        launch_attention_prompt_w<dh, 8>(a, stream);
    else
        launch_attention_prompt_w<dh, 4>(a, stream);
}

}  // namespace

bool attention_prompt_native(int32_t n_head, int32_t n_head_kv, int32_t d_head) {
    return n_head_kv > 0 && n_head % n_head_kv == 0 && n_head / n_head_kv <= ap_min_pairs &&
           (d_head == 32 || d_head == 64 || d_head == 128);
}

void attention_prompt(const attention_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0,
                        "attention_prompt: n_head must be a multiple of n_head_kv");
    TANDEM_CUDA_REQUIRE(a.q && a.k_cache && a.v_cache && a.slots && a.positions && a.out, "attention_prompt: null pointer");
    TANDEM_CUDA_REQUIRE(a.n_rows >= 0 && a.n_ctx > 0 && a.n_head_kv <= 65535, "attention_prompt: bad row, context or head count");
    TANDEM_CUDA_REQUIRE(!a.k_new, "attention_prompt: prompt rows take qk_rope_kv first (several rows may share a slot)");
    TANDEM_CUDA_REQUIRE(!(a.kv_f16 && a.kv_q8_0), "attention_prompt: the cache holds halves or q8_0 blocks, not both");
    if (a.n_rows == 0) return;
    if (!attention_prompt_native(a.n_head, a.n_head_kv, a.d_head)) {
        // A block holds every query head of a KV head for at least one row; d_head 256: Q and O
        // fragments would not fit in registers.
        attention(a, stream);
        return;
    }
    switch (a.d_head) {
    case 32: launch_attention_prompt<32>(a, stream); break;
    case 64: launch_attention_prompt<64>(a, stream); break;
    case 128: launch_attention_prompt<128>(a, stream); break;
    default: TANDEM_CUDA_REQUIRE(false, "attention_prompt: unreachable head size");
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
