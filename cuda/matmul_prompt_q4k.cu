// cuda/matmul_prompt_q4k.cu - prompt-row products of Q4_K matrices with the exact quants on the
// tensor cores: the form the decode kernels use (matvec.cu), in block tiles.
//
// Numerics: a Q4_K weight is d q - m per 32-element sub-block. The 4-bit quants are exact in bf16,
// so only the activations are split (hi + lo, x_split.cuh's layout, written once per product input
// by prompt_split_rows) and a sub-block costs 2 mma per k16 step instead of the 3 of a split
// weight. Per K step (128 elements) and output: for each of the 4 sub-blocks, sum = the mma of
// (hi, lo) over its two k16 steps from zero, then acc = fma(d, sum, acc); then one mma adds the
// step's m terms, [sums of x: hi x4 | lo x4 | hi x4 | 0] x [-m: hi x4 | hi x4 | lo x4 | 0]. The
// same operations in the same order in both tile shapes, and no term mixes two rows: prompt rows
// stay invariant to chunking and to the step's other rows, bitwise.
//
// Work per block and K step: the split activations (4 bytes an element: hi and lo bf16) and the
// rows' sub-block sums (split into bf16 hi and lo by the same kernel, in the m-term mma's register
// order) arrive by cp.async into one of two stages while the other is computed; the
// weights' raw bytes (80 a row: the block head and 64 quant bytes) are loaded into registers a
// step ahead and unpacked into a bf16 tile (0x4300 | q minus 128, exact) with each row's d and m.
// The weights are the mma's A operand (ldmatrix from that tile), the activations B: K is permuted
// inside a k16 step (k slots 2t, 2t + 1, 2t + 8, 2t + 9 hold elements 4t .. 4t + 3) so that a
// lane's B registers for a row, hi and lo, are one 16-byte load of the split layout, in the
// order the mma takes them. Large tiles: 128 rows x 128 weight rows, 16 warps of 32 x 32 (at most
// 128 registers: four warps a scheduler). Small tiles (prompt chunks of a few rows): 16 x 64.
// `bench --prompt 2048 --sessions 1`: 1.19x the bf16-split tiles' prefill. Slower: x as the A
// operand (register moves), 8 warps of 64 x 32, the raw weights by cp.async in 2-3 stages.
#include "matmul_prompt.h"

#include "cuda_check.h"
#include "cp_async.cuh"
#include "launch.cuh"
#include "matmul_prompt_tile.cuh"
#include "quant_decode.cuh"
#include "x_split.cuh"

#include "tandem/swiglu.h"

#include <cuda_bf16.h>

#include <utility>

namespace tandem::cuda {
namespace {
using namespace prompt_tile;

constexpr int k_step = 128;              // elements per K step: half a Q4_K block
constexpr int sub_blocks = k_step / 32;  // scale groups per K step
constexpr int a_row_u4 = k_step / 4 + 4;  // a staged row: 36 uint4 = 576 bytes, so rows g and g + 1 of
                                          // a 16-byte load's quarter-warp fall in different banks
constexpr int b_row_elems = k_step + 8;   // bf16 per B row: ldmatrix's 8 rows in different banks

// The mma's A operand is the weights (m16: 16 weight rows, by ldmatrix from the unpacked tile) and
// B the activations (n8: 8 rows): a lane's B registers for a row are one 16-byte load of the split
// layout (hi pair, hi pair, lo pair, lo pair), with no moves to arrange them. A warp computes
// w_frags m16 weight tiles x r_frags n8 row tiles.
template <int warps_r_, int warps_w_, int r_frags_, int w_frags_, int min_blocks_>
struct q4k_tiles {
    static constexpr int warps_r = warps_r_, warps_w = warps_w_, r_frags = r_frags_, w_frags = w_frags_;
    static constexpr int min_blocks = min_blocks_;
    static constexpr int n_threads = 32 * warps_r * warps_w;
    static constexpr int tile_m = 8 * r_frags * warps_r;   // rows (pairs)
    static constexpr int tile_n = 16 * w_frags * warps_w;  // weight rows (SwiGLU: runs of 8 gate, 8 up)
    static constexpr int a_loads = tile_m * (k_step / 4) / n_threads;  // cp.async of 16 bytes a thread and step
    static constexpr int q_loads = 4 * tile_n / n_threads;             // 16-byte quant words a thread and step
    static_assert(a_loads >= 1 && q_loads >= 1 && tile_n <= n_threads && tile_m <= n_threads, "tile and threads disagree");
    static constexpr size_t a_stage = size_t(tile_m) * a_row_u4 * 16;
    static constexpr size_t s_stage = size_t(tile_m) * sub_blocks * 4;
    static constexpr size_t smem_bytes = 2 * (a_stage + s_stage) + size_t(tile_n) * b_row_elems * 2 +
                                         2 * size_t(sub_blocks) * tile_n * 4 + size_t(tile_m) * 2 * sizeof(void *);
};
using q4k_large = q4k_tiles<4, 4, 4, 2, 1>;  // 128 rows x 128 weight rows, 16 warps of 32 x 32
using q4k_small = q4k_tiles<1, 4, 2, 1, 4>;  // 16 rows x 64 weight rows, 4 warps of 16 x 16

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// 16 bytes of shared memory at base + off (off a compile-time constant: one instruction, no address
// arithmetic), volatile: kept in program order with the mmas and ldmatrix.
template <int off>
__device__ __forceinline__ uint4 lds_u4(uint32_t base) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4+%5];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(base), "n"(off));
    return v;
}
template <int off>
__device__ __forceinline__ void ldmatrix_x4_at(uint32_t (&r)[4], uint32_t base) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4+%5];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(base), "n"(off));
}
// Compile-time loops, so the offsets above are constants.
template <int n, class F, int... i>
__device__ __forceinline__ void static_for_impl(F &&f, std::integer_sequence<int, i...>) {
    (f(std::integral_constant<int, i>{}), ...);
}
template <int n, class F>
__device__ __forceinline__ void static_for(F &&f) {
    static_for_impl<n>(f, std::make_integer_sequence<int, n>{});
}
// d = a b (the accumulator starts at zero: no registers to clear) and c += a b, both volatile.
__device__ __forceinline__ void mma_bf16_first(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %10, %10, %10};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}
__device__ __forceinline__ void mma_bf16_ordered(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// v = hi + lo (hi = bf16_rn(v), lo = bf16_rn(v - hi)), negated when `neg` (exact).
__device__ __forceinline__ void split_rn(float v, bool neg, __nv_bfloat16 &hi, __nv_bfloat16 &lo) {
    hi = __float2bfloat16_rn(v);
    lo = __float2bfloat16_rn(__fsub_rn(v, __bfloat162float(hi)));
    if (neg) {
        hi = __hneg(hi);
        lo = __hneg(lo);
    }
}
// Bytes 2h, 2h + 1 of `nibbles` (each 0..15) as the bf16 pair of their exact values.
__device__ __forceinline__ uint32_t nibble_pair(uint32_t nibbles, int h) {
    const uint32_t v = __byte_perm(nibbles, 0x43434343u, h == 0 ? 0x4140u : 0x4342u);
    __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162 *>(&v);
    b = __hsub2(b, __floats2bfloat162_rn(128.0f, 128.0f));
    return *reinterpret_cast<const uint32_t *>(&b);
}

template <bool swiglu, class S>
__global__ void __launch_bounds__(S::n_threads, S::min_blocks) matmul_prompt_q4k_kernel(const matvec_args a, int64_t row_bytes) {
    constexpr int warps_w = S::warps_w, r_frags = S::r_frags, w_frags = S::w_frags, n_threads = S::n_threads;
    constexpr int tile_m = S::tile_m, tile_n = S::tile_n;
    extern __shared__ uint4 smem_words[];
    uint4 *const a_tiles = smem_words;  // [2][tile_m][a_row_u4]
    float *const s_tiles = reinterpret_cast<float *>(a_tiles + 2 * tile_m * a_row_u4);  // [2][tile_m][sub_blocks]
    __nv_bfloat16 *const b_tile = reinterpret_cast<__nv_bfloat16 *>(s_tiles + 2 * tile_m * sub_blocks);  // [tile_n][b_row_elems]
    float *const d_tile = reinterpret_cast<float *>(b_tile + tile_n * b_row_elems);  // [sub_blocks][tile_n]
    // -m split, [tile_n][sub_blocks] bf16 each: a lane's pair of sub-blocks is one 32-bit word.
    __nv_bfloat16 *const m_hi = reinterpret_cast<__nv_bfloat16 *>(d_tile + sub_blocks * tile_n);
    __nv_bfloat16 *const m_lo = m_hi + tile_n * sub_blocks;
    const uint4 **const a_rows = reinterpret_cast<const uint4 **>(m_lo + tile_n * sub_blocks);
    const float **const s_rows = reinterpret_cast<const float **>(a_rows + tile_m);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    pdl_wait();  // groups, rows and the split activations come from the kernels before
    pdl_trigger();
    constexpr int outs_per_block = swiglu ? tile_n / 2 : tile_n;
    block_tile bt;
    if (!resolve_block_tile<tile_m>(a, outs_per_block, bt)) return;
    const int mat = bt.mat, m0 = bt.m0, rows_here = bt.rows_here, j0 = bt.j0;
    const part_view &part = bt.part;
    const int n_k = a.n_in / k_step;

    for (int r = tid; r < tile_m; r += n_threads) {
        const bool live = r < rows_here;
        const int64_t xr = live ? (a.x_rows ? a.x_rows[m0 + r] : m0 + r) : 0;
        a_rows[r] = live ? a.prompt_split + xr * (a.x_stride / 4) : nullptr;
        s_rows[r] = live ? a.prompt_sums + xr * (a.x_stride / 32) : nullptr;
    }
    // Weight row of tile row wr (nullptr past n_out).
    auto w_row = [&](int wr) -> const uint8_t * {
        int j;
        const void *base;
        if constexpr (swiglu) {
            const int q = wr >> 4, within = wr & 15;
            j = j0 + 8 * q + (within & 7);
            base = within < 8 ? part.w : a.w_up;
        } else {
            j = j0 + wr;
            base = part.w;
        }
        return j < part.n_out ? static_cast<const uint8_t *>(base) + (size_t(mat) * part.n_out + size_t(j)) * size_t(row_bytes) : nullptr;
    };
    // Quant word idx = tid + i n_threads: row idx % tile_n, 16 bytes idx / tile_n of the step's 64
    // (consecutive lanes, consecutive rows: their stores into the B tile fall in different banks).
    const uint8_t *q_src[S::q_loads];
#pragma unroll
    for (int i = 0; i < S::q_loads; ++i) q_src[i] = w_row((tid + i * n_threads) % tile_n);
    const uint8_t *head_src = w_row(tid % tile_n);  // every thread: its row's d and m (n_threads % tile_n == 0)
    __syncthreads();  // a_rows, s_rows

    uint4 q_raw[S::q_loads], head_raw = make_uint4(0, 0, 0, 0);
    auto load = [&](int kt) {
        const int st = kt & 1;
#pragma unroll
        for (int i = 0; i < S::a_loads; ++i) {
            const int idx = tid + i * n_threads, r = idx >> 5, u = idx & 31;
            const uint4 *src = a_rows[r];
            cp_async_16(a_tiles + (st * tile_m + r) * a_row_u4 + u, src ? src + kt * (k_step / 4) + u : a.prompt_split, src ? 16 : 0);
        }
        if (tid < tile_m) {
            const float *src = s_rows[tid];
            cp_async_16(s_tiles + (st * tile_m + tid) * sub_blocks, src ? src + kt * sub_blocks : a.prompt_sums, src ? 16 : 0);
        }
        cp_async_commit();
        const size_t blk = size_t(kt >> 1) * 144;
#pragma unroll
        for (int i = 0; i < S::q_loads; ++i) {
            const int part16 = (tid + i * n_threads) / tile_n;
            q_raw[i] = q_src[i] ? *reinterpret_cast<const uint4 *>(q_src[i] + blk + 16 + 64 * (kt & 1) + 16 * part16) : make_uint4(0, 0, 0, 0);
        }
        if (head_src) head_raw = *reinterpret_cast<const uint4 *>(head_src + blk);
    };
    // The step's raw weights -> the B tile (exact quants, K permuted as the A fragments are) and
    // each row's d and m per sub-block.
    auto unpack = [&](int kt) {
#pragma unroll
        for (int i = 0; i < S::q_loads; ++i) {
            const int idx = tid + i * n_threads, wr = idx % tile_n, part16 = idx / tile_n;
            const int c = part16 >> 1, hh = part16 & 1;  // chunk (sub-blocks 2c low, 2c + 1 high), half
            const uint32_t w4[4] = {q_raw[i].x, q_raw[i].y, q_raw[i].z, q_raw[i].w};
            // Word tt holds elements 16 hh + 4 tt .. +3 of both sub-blocks: stored at k slots
            // 2 tt, 2 tt + 1 (pair 0) and 2 tt + 8, 2 tt + 9 (pair 1) of the k16 step.
            uint32_t lo[8], hi[8];
#pragma unroll
            for (int tt = 0; tt < 4; ++tt) {
                const uint32_t nl = w4[tt] & 0x0F0F0F0Fu, nh = (w4[tt] >> 4) & 0x0F0F0F0Fu;
                lo[tt] = nibble_pair(nl, 0);
                lo[4 + tt] = nibble_pair(nl, 1);
                hi[tt] = nibble_pair(nh, 0);
                hi[4 + tt] = nibble_pair(nh, 1);
            }
            __nv_bfloat16 *row = b_tile + wr * b_row_elems;
            __nv_bfloat16 *low = row + 32 * (2 * c) + 16 * hh, *high = row + 32 * (2 * c + 1) + 16 * hh;
            *reinterpret_cast<uint4 *>(low) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
            *reinterpret_cast<uint4 *>(low + 8) = make_uint4(lo[4], lo[5], lo[6], lo[7]);
            *reinterpret_cast<uint4 *>(high) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>(high + 8) = make_uint4(hi[4], hi[5], hi[6], hi[7]);
        }
        {
            const int wr = tid % tile_n;
            const float d = half_bits_to_float(head_raw.x), dmin = half_bits_to_float(head_raw.x >> 16);
#pragma unroll
            for (int u = tid; u < tile_n * sub_blocks; u += n_threads) {
                const int s = u / tile_n;
                float sc, mq;
                q4_k_scale_min_dev(head_raw.y, head_raw.z, head_raw.w, 4 * (kt & 1) + s, sc, mq);
                d_tile[s * tile_n + wr] = __fmul_rn(d, sc);
                split_rn(__fmul_rn(dmin, mq), true, m_hi[wr * sub_blocks + s], m_lo[wr * sub_blocks + s]);
            }
        }
    };

    float acc[w_frags][r_frags][4];
#pragma unroll
    for (int i = 0; i < w_frags; ++i)
#pragma unroll
        for (int j = 0; j < r_frags; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    const int wr = warp / warps_w, ww = warp % warps_w;  // the warp's row tiles and weight tiles
    // n8 row tiles of this warp that hold rows (warp-uniform): the others' mmas are skipped.
    const int r_live = min(r_frags, max(0, (rows_here - 8 * r_frags * wr + 7) / 8));
    const int w0 = 16 * w_frags * ww;  // the warp's first weight row in the tile
    // ldmatrix of an m16 x k16 weight tile: lanes 0-15 rows 0-15 at k 0, lanes 16-31 at k 8.
    const __nv_bfloat16 *const w_src = b_tile + (w0 + (lane & 15)) * b_row_elems + 8 * (lane >> 4);

    auto compute = [&](int st, int live) {
        const uint32_t *sums = reinterpret_cast<const uint32_t *>(s_tiles + st * tile_m * sub_blocks);  // per row: hi pairs, lo pairs
        // Lane (g, t)'s split word of row g of the warp's first row tile (elements 4t ..).
        const uint32_t x_base = smem_u32(a_tiles + (st * tile_m + 8 * r_frags * wr + g) * a_row_u4 + t);
        const uint32_t w_base = smem_u32(w_src);
#pragma unroll 1
        for (int sb = 0; sb < sub_blocks; ++sb) {  // a loop: the next sub-block's loads wait (registers)
            const uint32_t x_sb = x_base + 16 * 8 * sb, w_sb = w_base + 2 * 32 * sb;
            // The sub-block's sums: hi of k16 step 0 (from zero), lo of 0, hi of 1, lo of 1; each
            // pass over all live tiles before the next, so dependent mmas are far apart. Loads and
            // mmas are volatile asm: issued in this order, not hoisted into the next sub-block.
            float sum[w_frags][r_frags][4];
            static_for<2>([&](auto hh_c) {
                constexpr int hh = decltype(hh_c)::value;
                uint32_t wa[w_frags][4];
                static_for<w_frags>([&](auto i_c) {
                    constexpr int i = decltype(i_c)::value;
                    ldmatrix_x4_at<2 * (16 * i * b_row_elems + 16 * hh)>(wa[i], w_sb);
                });
                uint4 xb[r_frags];  // {hi b0, hi b1, lo b0, lo b1}
                static_for<r_frags>([&](auto j_c) {
                    constexpr int j = decltype(j_c)::value;
                    if (j < live) xb[j] = lds_u4<16 * (8 * j * a_row_u4 + 4 * hh)>(x_sb);
                });
#pragma unroll
                for (int part = 0; part < 2; ++part)
#pragma unroll
                    for (int i = 0; i < w_frags; ++i)
#pragma unroll
                        for (int j = 0; j < r_frags; ++j) {
                            if (j >= live) continue;
                            const uint32_t b0 = part ? xb[j].z : xb[j].x, b1 = part ? xb[j].w : xb[j].y;
                            if (hh == 0 && part == 0) mma_bf16_first(sum[i][j], wa[i], b0, b1);
                            else mma_bf16_ordered(sum[i][j], wa[i], b0, b1);
                        }
            });
            // acc += d * sum: element e's weight row is g + 8 (e >> 1) of tile i.
#pragma unroll
            for (int i = 0; i < w_frags; ++i) {
                const float d0 = d_tile[sb * tile_n + w0 + 16 * i + g], d1 = d_tile[sb * tile_n + w0 + 16 * i + g + 8];
#pragma unroll
                for (int j = 0; j < r_frags; ++j) {
                    if (j >= live) continue;
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] = __fmaf_rn(e < 2 ? d0 : d1, sum[i][j][e], acc[i][j][e]);
                }
            }
        }
        // The m terms, one k16 mma: k slots 0-3 hold (sub-blocks 0-3) sum_hi x -m_hi, 4-7 sum_lo x
        // -m_hi, 8-11 sum_hi x -m_lo, 12-15 zero. Lane t holds slots 2t, 2t + 1 and 2t + 8, 2t + 9:
        // sub-blocks s0 = 2 (t & 1), s0 + 1.
        const int s0 = 2 * (t & 1);
        const bool first = t < 2;
        uint32_t am[w_frags][4];
#pragma unroll
        for (int i = 0; i < w_frags; ++i)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = w0 + 16 * i + g + 8 * half;
                am[i][half] = *reinterpret_cast<const uint32_t *>(m_hi + row * sub_blocks + s0);
                am[i][2 + half] = first ? *reinterpret_cast<const uint32_t *>(m_lo + row * sub_blocks + s0) : 0u;
            }
#pragma unroll
        for (int j = 0; j < r_frags; ++j) {
            if (j >= live) continue;
            const uint32_t *sr = sums + (8 * (r_frags * wr + j) + g) * 4;
            const uint32_t hi = sr[t & 1], lo = sr[2 + (t & 1)];
            const uint32_t b0 = first ? hi : lo, b1 = first ? hi : 0u;
#pragma unroll
            for (int i = 0; i < w_frags; ++i) mma_bf16_ordered(acc[i][j], am[i], b0, b1);
        }
    };

    load(0);
    for (int kt = 0; kt < n_k; ++kt) {
        unpack(kt);
        cp_async_wait_all();
        __syncthreads();  // stage kt, the B tile, d and m are in place
        if (kt + 1 < n_k) load(kt + 1);
        if (r_live == r_frags)
            compute(kt & 1, r_frags);
        else if (r_live > 0)
            compute(kt & 1, r_live);
        __syncthreads();  // the B tile and stage kt & 1 are rewritten next
    }
    // Element e of tile (i, j): weight row w0 + 16 i + g + 8 (e >> 1), row 8 (r_frags wr + j) +
    // 2t + (e & 1). SwiGLU: tile i's rows g are the gates, g + 8 the ups, of output 8 (tile) + g.
#pragma unroll
    for (int j = 0; j < r_frags; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int lm = 8 * (r_frags * wr + j) + 2 * t + e;
            if (lm >= rows_here) continue;
            const int p = m0 + lm;
            float *y_row = part.y + int64_t(a.y_rows ? a.y_rows[p] : p) * part.y_stride;
#pragma unroll
            for (int i = 0; i < w_frags; ++i) {
                if constexpr (swiglu) {
                    const int jo = j0 + (w0 + 16 * i) / 2 + g;
                    if (jo >= part.n_out) continue;
                    const float gate = acc[i][j][e], up = acc[i][j][e + 2];
                    y_row[jo] = ::tandem::swiglu(gate, up);  // as matvec writes it
                } else {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int jo = j0 + w0 + 16 * i + g + 8 * h;
                        if (jo >= part.n_out) continue;
                        const float v = acc[i][j][e + 2 * h];
                        y_row[jo] = a.accumulate ? y_row[jo] + v : v;
                    }
                }
            }
        }
}

template <bool swiglu, class S>
void launch_q4k_shape(const matvec_args &a, cudaStream_t stream) {
    auto kernel = matmul_prompt_q4k_kernel<swiglu, S>;
    allow_dynamic_smem(kernel, S::smem_bytes);
    constexpr int outs_per_block = swiglu ? S::tile_n / 2 : S::tile_n;
    launch_pdl_smem(kernel, prompt_grid(a, outs_per_block, S::tile_m), dim3(S::n_threads), S::smem_bytes, stream, a, matvec_row_bytes(a.type, a.n_in));
    TANDEM_CUDA_CHECK_LAUNCH();
}

// One block a row, a warp a 32-element sub-block at a time: x_split.cuh's split of the elements;
// each sub-block's canonical sum split too (hi = bf16_rn, lo = bf16_rn(sum - hi)), by K step of
// 128: 8 bf16 [hi of its 4 sub-blocks, lo of them], the m-term mma's B registers as they are.
__global__ void __launch_bounds__(256) prompt_split_rows_kernel(const float *x, int64_t x_stride, int32_t n_in, uint4 *split, float *sums) {
    pdl_wait();
    pdl_trigger();
    const int64_t row = blockIdx.x;
    const float *xr = x + row * x_stride;
    uint16_t *sr = reinterpret_cast<uint16_t *>(split + row * (x_stride / 4));
    __nv_bfloat16 *mr = reinterpret_cast<__nv_bfloat16 *>(sums + row * (x_stride / 32));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int sb = warp; sb < n_in / 32; sb += 8) {
        const int64_t i = 32 * sb + lane;
        const float v = xr[i];
        const uint32_t hi = __float_as_uint(v) & 0xFFFF0000u;  // as split_store_warp: hi truncated
        uint16_t *group = sr + (i >> 2) * 8 + (i & 3);
        group[0] = uint16_t(hi >> 16);
        group[4] = __bfloat16_as_ushort(__float2bfloat16_rn(v - __uint_as_float(hi)));
        const float sum = sum32_canonical(v);
        if (lane == 0) split_rn(sum, false, mr[8 * (sb >> 2) + (sb & 3)], mr[8 * (sb >> 2) + 4 + (sb & 3)]);
    }
}

}  // namespace

bool matmul_prompt_q4k_applies(const matvec_args &a) {
    return a.type == ggml_type::q4_k && a.prompt_split && a.prompt_sums && a.prompt_split_rows > 0 && a.n_in % 256 == 0 &&
           a.x_stride % 128 == 0 && a.k_parts == 1;
}

void prompt_split_rows(const float *x, int64_t x_stride, int32_t n_rows, int32_t n_in, uint4 *split, float *sums, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(n_in % 32 == 0 && x_stride % 32 == 0 && x_stride >= n_in, "prompt_split_rows: rows of whole 32-element sub-blocks");
    if (n_rows <= 0) return;
    launch_pdl(prompt_split_rows_kernel, dim3(n_rows), dim3(256), stream, x, x_stride, n_in, split, sums);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void matmul_prompt_q4k(const matvec_args &a, bool small, cudaStream_t stream) {
    prompt_split_rows(a.x, a.x_stride, a.prompt_split_rows, a.n_in, a.prompt_split, a.prompt_sums, stream);
    if (a.w_up) {
        if (small) launch_q4k_shape<true, q4k_small>(a, stream);
        else launch_q4k_shape<true, q4k_large>(a, stream);
    } else {
        if (small) launch_q4k_shape<false, q4k_small>(a, stream);
        else launch_q4k_shape<false, q4k_large>(a, stream);
    }
}

}  // namespace tandem::cuda
