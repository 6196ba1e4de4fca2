// cuda/matmul_prompt.cu - prompt-row products on tensor cores (mma.sync m16n8k16, bf16 hi/lo
// split, fp32 accumulate), any GGUF weight type, dense or grouped by expert.
//
// Work: a 2,048-token prompt of qwen3-30b-a3b is ~13.5 TFLOP of products; the split triples the
// tensor-core work (~40 TFLOP of bf16 mma). Block tile: 128 rows (pairs) x 128 weight rows
// (SwiGLU: 64 gate + 64 up), 8 warps of 64 x 32. Per 128-element K step the block dequantises
// its weight rows and converts its activation rows into bf16 hi/lo tiles in shared memory, then
// each warp runs 8 k16 steps of 4 x 4 mma tiles x 3 split products. The next step's global
// loads (raw weight bytes, fp32 activations) are issued into registers before this step's mmas,
// so they arrive while the tensor cores work. Shared memory (137 KB) and registers (up to 255)
// leave one block per multiprocessor. Measured on an H200 (the [.bench] case of
// tests/kernels/test_cuda_matmul_prompt.cpp), this beat 64 x 128 tiles at two blocks per
// multiprocessor (4 or 8 warps) and 16 warps of 32 x 32 by 4-20%; Q4_K's int-to-float through
// 2^23 (store_q4_k) saved 11% against the I2F of decode_q4_k. Steps of few rows (a prompt chunk
// beside decoding sessions) take a small tile of 16 rows x 64 weight rows instead (tile_shape).
#include "matmul_prompt.h"

#include "cuda_check.h"
#include "launch.cuh"
#include "ldmatrix.cuh"
#include "matmul_prompt_tile.cuh"
#include "quant_decode.cuh"

#include "tandem/swiglu.h"

#include <cuda_bf16.h>

namespace tandem::cuda {
namespace {
using namespace prompt_tile;

constexpr int tile_k = 128;  // items 4t .. 4t + 3 of every row cover elements 128t .. 128t + 127 in
                             // every type (half a Q4_K/Q6_K block, four Q8_0 blocks)
constexpr int row_elems = tile_k + 8;  // bf16 per shared row: +16 bytes, so the 8 rows an ldmatrix
                                       // reads (and 8 threads' 16-byte stores) start in different banks

// Block tile shapes. Every output's arithmetic is the same in both (one accumulator, K tiles
// ascending, hi.hi, hi.lo, lo.hi per k16 step), so the shape may follow the step's size.
// Large: 128 rows x 128 weight rows, 8 warps of 64 x 32 (16 accumulator tiles, 64 registers), one
// block per multiprocessor: prompts in hundreds of rows. Small: 16 rows x 64 weight rows, 4 warps
// of 16 x 16, 44 KB of shared memory, four blocks per multiprocessor: prompt chunks of a few rows
// beside decoding sessions, and experts that get a row or two each, where the large tile
// converted 128 weight rows for one row on one block per multiprocessor (`bench --prompt 1024
// --prefill-chunk 16` on the 30b synth: 1.55 s against the large tile's 3.40).
template <int warps_m_, int warps_n_, int m_frags_, int n_frags_, int min_blocks_>
struct tile_shape {
    static constexpr int warps_m = warps_m_, warps_n = warps_n_;
    static constexpr int m_frags = m_frags_;  // m16 tiles per warp
    static constexpr int n_frags = n_frags_;  // n8 tiles per warp: (gate, up) pairs in SwiGLU mode
    static constexpr int min_blocks = min_blocks_;
    static constexpr int n_threads = 32 * warps_m * warps_n;
    static constexpr int tile_m = 16 * m_frags * warps_m;  // rows (pairs) per block
    static constexpr int tile_n = 8 * n_frags * warps_n;   // weight rows per block (SwiGLU: gate and up by runs of 8)
    // Per thread and K step: x_loads float4 of one activation column (rows warp + n_warps i), and
    // w_items consecutive items of one weight row.
    static constexpr int x_loads = tile_m * (tile_k / 4) / n_threads;
    static constexpr int w_items = tile_n * (tile_k / 32) / n_threads;
    static constexpr int w_threads_per_row = 4 / w_items;
    static_assert(x_loads >= 1 && w_items >= 1 && 4 % w_items == 0 && n_frags % 2 == 0, "tile shape and thread count disagree");
    static constexpr size_t smem_tiles = size_t(2 * (tile_m + tile_n) * row_elems) * sizeof(__nv_bfloat16);
    static constexpr size_t smem_bytes = smem_tiles + size_t(tile_m) * sizeof(const float *);
};
using large_tiles = tile_shape<2, 4, 4, 4, 1>;
using small_tiles = tile_shape<1, 4, 1, 2, 4>;

// v = hi + lo for two floats at once: hi = bf16(v), lo = bf16(v - hi), packed low element first.
__device__ __forceinline__ void split2(float a, float b, uint32_t &hi, uint32_t &lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    const float2 hf = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(__fsub_rn(a, hf.x), __fsub_rn(b, hf.y));
    hi = *reinterpret_cast<const uint32_t *>(&h);
    lo = *reinterpret_cast<const uint32_t *>(&l);
}

// Eight floats to their hi and lo parts, stored as one 16-byte word each.
__device__ __forceinline__ void split_store8(const float *v, __nv_bfloat16 *hi, __nv_bfloat16 *lo) {
    uint32_t h[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) split2(v[2 * i], v[2 * i + 1], h[i], l[i]);
    *reinterpret_cast<uint4 *>(hi) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4 *>(lo) = make_uint4(l[0], l[1], l[2], l[3]);
}

__device__ __forceinline__ void zero_store(__nv_bfloat16 *p, int n) {
    for (int i = 0; i < n; i += 8) *reinterpret_cast<uint4 *>(p + i) = make_uint4(0, 0, 0, 0);
}

// float(q) for a 4-bit q without I2F (a quarter-rate conversion): q is the low mantissa of 2^23 + q.
// `m` holds q in byte k, the rest of the byte's bits clear; exact, as float(q) is.
__device__ __forceinline__ float nibble_float(uint32_t m, int k) {
    return __fsub_rn(__uint_as_float(__byte_perm(m, 0x4B000000u, 0x7440u | k)), 8388608.0f);
}

// One Q4_K item (quant_decode.cuh's item layout) dequantised to decode_q4_k's values, bitwise,
// split and stored at its four runs' columns. d1 = d * sc is exact (11 x 6 significant bits), so
// is d1 * q (+ 4 bits): fma(d1, q, -m1) rounds once, as fsub(fmul(d1, q), m1) does.
__device__ __forceinline__ void store_q4_k(const q4_k_raw &r, int item, __nv_bfloat16 *hi, __nv_bfloat16 *lo) {
    const int u = item & 7, c = u >> 1, hf = u & 1;
    const q4_k_item_scales k = q4_k_scales_of(r, item);
    const float d1 = k.d1, m1 = k.m1, d2 = k.d2, m2 = k.m2;
    const uint32_t qw[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
    const int col = 64 * (c & 1) + 16 * hf;  // within the K step: runs at +0, +8 (low), +32, +40 (high)
#pragma unroll
    for (int run = 0; run < 4; ++run) {
        const bool high = run >= 2;
        const float dd = high ? d2 : d1, mm = high ? m2 : m1;
        float v[8];
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            const uint32_t m = (qw[2 * (run & 1) + w] >> (high ? 4 : 0)) & 0x0F0F0F0Fu;
#pragma unroll
            for (int k = 0; k < 4; ++k) v[4 * w + k] = __fmaf_rn(dd, nibble_float(m, k), -mm);
        }
        const int at = col + 8 * (run & 1) + 32 * (run >> 1);
        split_store8(v, hi + at, lo + at);
    }
}

// The raw bytes of a thread's w_items consecutive items of one row (all in one Q4_K block),
// loaded a K step ahead: Q4_K the block's d, dmin and scales once, then each item's 16 quant
// bytes; other types load while decoding.
template <ggml_type T, int w_items>
struct w_raw {
    const uint8_t *row;
};
template <int w_items>
struct w_raw<ggml_type::q4_k, w_items> {
    uint4 head, q[w_items];
};
template <ggml_type T, int w_items>
__device__ __forceinline__ w_raw<T, w_items> load_w_raw(const uint8_t *row, int item0) {
    if constexpr (T == ggml_type::q4_k) {
        const uint8_t *blk = row + size_t(item0 >> 3) * sizeof(block_q4_k);
        w_raw<T, w_items> r;
        r.head = *reinterpret_cast<const uint4 *>(blk);
#pragma unroll
        for (int ii = 0; ii < w_items; ++ii) r.q[ii] = *reinterpret_cast<const uint4 *>(blk + 16 + 16 * ((item0 + ii) & 7));
        return r;
    } else {
        return {row};
    }
}

// c += a b for one m16n8k16 tile (a: 16 x 16 row-major, b: 16 x 8 column-major, bf16; c fp32).
// Not volatile: registers in and out only, so the compiler may move it among the ldmatrix loads.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A warp's accumulators to the outputs. Element e of tile (i, j): row 16 (m_frags wm + i) + g +
// 8 (e >> 1) of the block tile, weight row 8 (n_frags wn + j) + t2 + (e & 1) of it (g = lane >> 2,
// t2 = 2 (lane & 3)). SwiGLU: n-tile 2q holds gate and 2q + 1 up of the same 8 outputs.
template <bool swiglu, int m_frags, int n_frags>
__device__ __forceinline__ void store_tile(const matvec_args &a, const part_view &part, const float (&acc)[m_frags][n_frags][4],
                                           int wm, int wn, int j0, int m0, int rows_here) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t2 = 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < m_frags; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int lm = 16 * (m_frags * wm + i) + g + 8 * (e >> 1);
            if (lm >= rows_here) continue;
            const int p = m0 + lm;
            float *y_row = part.y + int64_t(a.y_rows ? a.y_rows[p] : p) * part.y_stride;
#pragma unroll
            for (int j = 0; j < n_frags; ++j) {
                if constexpr (swiglu) {
                    if (j & 1) continue;
                    const int jo = j0 + 8 * ((n_frags * wn + j) >> 1) + t2 + (e & 1);
                    if (jo >= part.n_out) continue;
                    const float gate = acc[i][j][e], up = acc[i][j + 1][e];
                    y_row[jo] = ::tandem::swiglu(gate, up);  // as matvec writes it
                } else {
                    const int jo = j0 + 8 * (n_frags * wn + j) + t2 + (e & 1);
                    if (jo >= part.n_out) continue;
                    y_row[jo] = a.accumulate ? y_row[jo] + acc[i][j][e] : acc[i][j][e];
                }
            }
        }
}


template <ggml_type T, bool swiglu, class S>
__global__ void __launch_bounds__(S::n_threads, S::min_blocks) matmul_prompt_kernel(const matvec_args a, int64_t row_bytes) {
    constexpr int warps_n = S::warps_n, m_frags = S::m_frags, n_frags = S::n_frags, n_threads = S::n_threads;
    constexpr int tile_m = S::tile_m, tile_n = S::tile_n, x_loads = S::x_loads, w_items = S::w_items;
    constexpr int w_threads_per_row = S::w_threads_per_row;
    extern __shared__ uint4 smem_words[];
    __nv_bfloat16 *const x_hi = reinterpret_cast<__nv_bfloat16 *>(smem_words);
    __nv_bfloat16 *const x_lo = x_hi + tile_m * row_elems;
    __nv_bfloat16 *const w_hi = x_lo + tile_m * row_elems;
    __nv_bfloat16 *const w_lo = w_hi + tile_n * row_elems;
    const float **const x_src = reinterpret_cast<const float **>(w_lo + tile_n * row_elems);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    // Groups, rows and activations come from the kernels before. Settled (dense): they were written
    // two or more launches back, so the blocks compute beside their predecessor and wait on it only
    // before leaving (their successor then sees both done).
    const bool settled = a.inputs_settled && !a.group_off;
    if (!settled) pdl_wait();
    pdl_trigger();
    constexpr int outs_per_block = swiglu ? tile_n / 2 : tile_n;
    block_tile bt;
    if (!resolve_block_tile<tile_m>(a, outs_per_block, bt)) {
        if (settled) pdl_wait();
        return;
    }
    const int mat = bt.mat, m0 = bt.m0, rows_here = bt.rows_here, j0 = bt.j0;
    // K part blockIdx.z (matvec_args::k_parts): K steps [kt_begin, kt_end), sums at its own y.
    if (blockIdx.z > 0) bt.part.y += int64_t(blockIdx.z) * a.y_part_stride;
    const part_view &part = bt.part;
    const int n_items = a.n_in / 32, n_k_tiles = (a.n_in + tile_k - 1) / tile_k;
    const int kt_begin = int(blockIdx.z) * n_k_tiles / int(gridDim.z), kt_end = int(blockIdx.z + 1) * n_k_tiles / int(gridDim.z);

    for (int r = tid; r < tile_m; r += n_threads) {
        const int p = m0 + r;
        x_src[r] = r < rows_here ? a.x + int64_t(a.x_rows ? a.x_rows[p] : p) * a.x_stride : nullptr;
    }

    // This thread's weight row: 8 consecutive threads take 8 different rows (conflict-free
    // stores); the row's w_threads_per_row (1, 2 or 4) threads take w_items consecutive items each.
    const int wr = (tid & 7) + 8 * (tid >> (3 + w_threads_per_row / 2));
    const int w_part = (tid >> 3) & (w_threads_per_row - 1);
    const uint8_t *w_row = nullptr;
    {
        int j;
        const void *base;
        if constexpr (swiglu) {
            const int q = wr >> 4, within = wr & 15;  // runs of 8: gate j .. j + 7, then up j .. j + 7
            j = j0 + 8 * q + (within & 7);
            base = within < 8 ? part.w : a.w_up;
        } else {
            j = j0 + wr;
            base = part.w;
        }
        if (j < part.n_out) w_row = static_cast<const uint8_t *>(base) + (size_t(mat) * part.n_out + size_t(j)) * size_t(row_bytes);
    }
    __syncthreads();  // x_src

    // The next K step's global data, in flight while this one's mmas run.
    float4 xv[x_loads];
    w_raw<T, w_items> wv;
    auto load = [&](int kt) {
        const int col = kt * tile_k + 4 * lane;
#pragma unroll
        for (int i = 0; i < x_loads; ++i) {
            const float *src = x_src[warp + (n_threads / 32) * i];
            xv[i] = src && col < a.n_in ? *reinterpret_cast<const float4 *>(src + col) : make_float4(0, 0, 0, 0);
        }
        const int item0 = 4 * kt + w_items * w_part;
        if (w_row && item0 < n_items) wv = load_w_raw<T, w_items>(w_row, item0);
    };
    load(kt_begin);

    float acc[m_frags][n_frags][4];
#pragma unroll
    for (int i = 0; i < m_frags; ++i)
#pragma unroll
        for (int j = 0; j < n_frags; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    const int wm = warp / warps_n, wn = warp % warps_n;
    // m16 tiles of this warp that hold rows (warp-uniform): the others' mmas are skipped.
    const int m_live = min(m_frags, max(0, (rows_here - 16 * m_frags * wm + 15) / 16));
    // ldmatrix sources. A (rows): lanes 0-15 rows 0-15 at k 0, lanes 16-31 rows 0-15 at k 8.
    // B (weight rows, k contiguous = column-major B): matrices (n 0-7, k 0), (n 0-7, k 8),
    // (n 8-15, k 0), (n 8-15, k 8): b0, b1 of n-tile 2jj, then of n-tile 2jj + 1.
    const __nv_bfloat16 *const a_src = x_hi + (16 * m_frags * wm + (lane & 15)) * row_elems + 8 * (lane >> 4);
    const __nv_bfloat16 *const b_src =
        w_hi + (8 * n_frags * wn + (lane & 7) + 8 * (lane >> 4)) * row_elems + 8 * ((lane >> 3) & 1);
    using a_frags = uint32_t[m_frags][4];
    using b_frags = uint32_t[n_frags / 2][4];
    // `lo`: the lo tile (the hi tile's rows + tile_m or tile_n); the first `live` m16 tiles only.
    auto load_a = [&](a_frags &f, bool lo, int ks, int live) {
#pragma unroll
        for (int i = 0; i < m_frags; ++i)
            if (i < live) ldsm_x4(f[i], a_src + ((lo ? tile_m : 0) + 16 * i) * row_elems + 16 * ks);
    };
    auto load_b = [&](b_frags &f, bool lo, int ks) {
#pragma unroll
        for (int jj = 0; jj < n_frags / 2; ++jj) ldsm_x4(f[jj], b_src + ((lo ? tile_n : 0) + 16 * jj) * row_elems + 16 * ks);
    };
    // One pass of the three split products over all tiles: m_frags x n_frags independent mmas
    // between two into the same accumulator, which takes hi.hi, hi.lo, lo.hi in that order.
    auto mma_pass = [&](const a_frags &fa, const b_frags &fb, int live) {
#pragma unroll
        for (int i = 0; i < m_frags; ++i)
#pragma unroll
            for (int j = 0; j < n_frags; ++j)
                if (i < live) mma_bf16(acc[i][j], fa[i], fb[j >> 1][2 * (j & 1)], fb[j >> 1][2 * (j & 1) + 1]);
    };
    // One K step's 8 k16 steps. (Loading the next k16 step's fragments during this one's last
    // pass measured the same: the scheduler already overlaps them.)
    auto mma_k_step = [&](int live) {
        a_frags ah, al;
        b_frags bh, bl;
#pragma unroll
        for (int ks = 0; ks < tile_k / 16; ++ks) {
            load_b(bh, false, ks);
            load_b(bl, true, ks);
            load_a(ah, false, ks, live);
            load_a(al, true, ks, live);
            mma_pass(ah, bh, live);
            mma_pass(ah, bl, live);
            mma_pass(al, bh, live);
        }
    };

    for (int kt = kt_begin; kt < kt_end; ++kt) {
        // Activations: one float4 of each of this thread's rows (zeros past the rows or n_in).
#pragma unroll
        for (int i = 0; i < x_loads; ++i) {
            const int r = warp + (n_threads / 32) * i;
            uint2 h, l;
            split2(xv[i].x, xv[i].y, h.x, l.x);
            split2(xv[i].z, xv[i].w, h.y, l.y);
            *reinterpret_cast<uint2 *>(x_hi + r * row_elems + 4 * lane) = h;
            *reinterpret_cast<uint2 *>(x_lo + r * row_elems + 4 * lane) = l;
        }
        // Weights: this thread's items of row wr, dequantised as matvec does, split into hi/lo.
#pragma unroll
        for (int ii = 0; ii < w_items; ++ii) {
            const int item = 4 * kt + w_items * w_part + ii;
            __nv_bfloat16 *hi = w_hi + wr * row_elems, *lo = w_lo + wr * row_elems;
            if (w_row && item < n_items) {
                if constexpr (T == ggml_type::q4_k) {
                    store_q4_k({wv.q[ii], wv.head.x, wv.head.y, wv.head.z, wv.head.w}, item, hi, lo);
                } else {
                    float v[32];
                    int start[4];
                    decode_item<T>(wv.row, item, v, start);
#pragma unroll
                    for (int t = 0; t < 4; ++t) split_store8(v + 8 * t, hi + start[t] - kt * tile_k, lo + start[t] - kt * tile_k);
                }
            } else {
                // A missing row's threads zero all 128 columns between them; an item past n_in
                // (32-element types only) is columns 32 (item - 4 kt) ..
                const int col = 32 * (item - 4 * kt);
                zero_store(hi + col, 32);
                zero_store(lo + col, 32);
            }
        }
        __syncthreads();
        if (kt + 1 < kt_end) load(kt + 1);
        if (m_live == m_frags)
            mma_k_step(m_frags);  // the common case: no row checks
        else if (m_live > 0)
            mma_k_step(m_live);
        __syncthreads();  // the tiles are rewritten by the next K step
    }

    store_tile<swiglu, m_frags, n_frags>(a, part, acc, wm, wn, j0, m0, rows_here);
    if (settled) pdl_wait();
}

template <ggml_type T, bool swiglu, class S>
void launch_matmul_prompt_shape(const matvec_args &a, cudaStream_t stream) {
    auto kernel = matmul_prompt_kernel<T, swiglu, S>;
    allow_dynamic_smem(kernel, S::smem_bytes);
    constexpr int outs_per_block = swiglu ? S::tile_n / 2 : S::tile_n;
    dim3 grid = prompt_grid(a, outs_per_block, S::tile_m);
    grid.z = unsigned(a.k_parts);
    launch_pdl_smem(kernel, grid, dim3(S::n_threads), S::smem_bytes, stream, a, matvec_row_bytes(a.type, a.n_in));
    TANDEM_CUDA_CHECK_LAUNCH();
}

// Small tiles for steps of few rows: dense up to 64 rows, grouped up to one small tile (16 rows)
// an expert on average (`bench --prompt 1024 --prefill-chunk C --sessions 1`, C of 16-256); steps
// between the two shapes' regimes (~130-2,000 rows) keep the large tile. A dense launch of up to
// 128 rows that would get fewer large tiles than the GPU has multiprocessors takes the small ones
// too (the F32 router of a 96- or 128-row chunk: 4 large blocks); from 256 rows small tiles lose.
bool small_step(const matvec_args &a) {
    if (a.prompt_tile_rows > 0) return a.prompt_tile_rows == small_tiles::tile_m;
    if (a.group_off) return int64_t(a.n_pairs) <= int64_t(small_tiles::tile_m) * a.max_groups;
    if (a.n_pairs <= 64) return true;
    if (a.n_pairs > 128) return false;
    const dim3 large = prompt_grid(a, large_tiles::tile_n, large_tiles::tile_m);
    return int64_t(large.x) * large.y * a.k_parts < int64_t(multiprocessor_count());
}

template <ggml_type T>
void launch_matmul_prompt_type(const matvec_args &a, cudaStream_t stream) {
    const bool small = small_step(a);
    if (a.w_up) {
        if (small) launch_matmul_prompt_shape<T, true, small_tiles>(a, stream);
        else launch_matmul_prompt_shape<T, true, large_tiles>(a, stream);
    } else {
        if (small) launch_matmul_prompt_shape<T, false, small_tiles>(a, stream);
        else launch_matmul_prompt_shape<T, false, large_tiles>(a, stream);
    }
}

}  // namespace

void matmul_prompt(const matvec_args &args, cudaStream_t stream) {
    const matvec_args &a = args;
    TANDEM_CUDA_REQUIRE(a.n_in > 0 && a.n_in % 32 == 0, "matmul_prompt: n_in must be a positive multiple of 32");
    TANDEM_CUDA_REQUIRE(a.n_out > 0 && a.w && a.x && a.y, "matmul_prompt: empty output or null pointer");
    TANDEM_CUDA_REQUIRE(a.x_stride % 4 == 0 && a.x_stride >= a.n_in, "matmul_prompt: x rows must be 16-byte aligned");
    TANDEM_CUDA_REQUIRE(!a.group_off || (a.group_mat && a.n_groups && a.max_groups >= 1 && a.n_pairs >= 0),
                        "matmul_prompt: grouped mode needs group_mat, n_groups, max_groups >= 1 and a pair bound");
    TANDEM_CUDA_REQUIRE(!(a.w_up && a.accumulate), "matmul_prompt: SwiGLU and accumulate do not combine");
    TANDEM_CUDA_REQUIRE(a.n_extra >= 0 && a.n_extra <= 2 && (a.n_extra == 0 || (!a.group_off && !a.w_up)),
                        "matmul_prompt: up to 2 extra matrices, dense and without SwiGLU only");
    for (int i = 0; i < a.n_extra; ++i)
        TANDEM_CUDA_REQUIRE(a.extra[i].w && a.extra[i].y && a.extra[i].n_out > 0, "matmul_prompt: empty extra matrix");
    TANDEM_CUDA_REQUIRE(a.k_parts >= 1 && (a.k_parts == 1 || (!a.group_off && !a.w_up && !a.accumulate && a.n_extra == 0 &&
                                                             !a.y_rows && a.y_part_stride >= int64_t(a.n_pairs) * a.y_stride &&
                                                             (a.n_in + tile_k - 1) / tile_k >= a.k_parts)),
                        "matmul_prompt: k_parts is for dense products without SwiGLU, accumulate, extra matrices or "
                        "y_rows, with parts that do not overlap and at least one 128-element K step each");
    if (a.n_pairs == 0) return;
    TANDEM_CUDA_REQUIRE(a.prompt_tile_rows == 0 || a.prompt_tile_rows == small_tiles::tile_m || a.prompt_tile_rows == large_tiles::tile_m,
                        "matmul_prompt: prompt_tile_rows is 0 (chosen by the step), 16 or 128");
    if (matvec_block_elems(a.type) == 256 && a.n_in % 256 != 0)
        TANDEM_CUDA_REQUIRE(false, "matmul_prompt: K-quant rows are whole 256-element blocks");
    if (matmul_prompt_q4k_applies(a)) {
        TANDEM_CUDA_REQUIRE(!a.x_rows || a.prompt_split_rows > 0, "matmul_prompt: prompt_split_rows must cover x_rows");
        matmul_prompt_q4k(a, small_step(a), stream);
        return;
    }
    // Extra matrices (Q, K, V together in matvec) continue the grid's column blocks: one launch.
    switch (a.type) {
    case ggml_type::q4_k: launch_matmul_prompt_type<ggml_type::q4_k>(a, stream); break;
    case ggml_type::q6_k: launch_matmul_prompt_type<ggml_type::q6_k>(a, stream); break;
    case ggml_type::q8_0: launch_matmul_prompt_type<ggml_type::q8_0>(a, stream); break;
    // Generic paths only (items dequantised into the shared tiles).
    case ggml_type::q5_k: launch_matmul_prompt_type<ggml_type::q5_k>(a, stream); break;
    case ggml_type::q3_k: launch_matmul_prompt_type<ggml_type::q3_k>(a, stream); break;
    case ggml_type::q2_k: launch_matmul_prompt_type<ggml_type::q2_k>(a, stream); break;
    case ggml_type::q4_0: launch_matmul_prompt_type<ggml_type::q4_0>(a, stream); break;
    case ggml_type::q4_1: launch_matmul_prompt_type<ggml_type::q4_1>(a, stream); break;
    case ggml_type::q5_0: launch_matmul_prompt_type<ggml_type::q5_0>(a, stream); break;
    case ggml_type::q5_1: launch_matmul_prompt_type<ggml_type::q5_1>(a, stream); break;
    case ggml_type::iq4_nl: launch_matmul_prompt_type<ggml_type::iq4_nl>(a, stream); break;
    case ggml_type::iq4_xs: launch_matmul_prompt_type<ggml_type::iq4_xs>(a, stream); break;
    case ggml_type::mxfp4: launch_matmul_prompt_type<ggml_type::mxfp4>(a, stream); break;
    case ggml_type::iq2_xxs: launch_matmul_prompt_type<ggml_type::iq2_xxs>(a, stream); break;
    case ggml_type::iq2_xs: launch_matmul_prompt_type<ggml_type::iq2_xs>(a, stream); break;
    case ggml_type::iq2_s: launch_matmul_prompt_type<ggml_type::iq2_s>(a, stream); break;
    case ggml_type::iq3_xxs: launch_matmul_prompt_type<ggml_type::iq3_xxs>(a, stream); break;
    case ggml_type::iq3_s: launch_matmul_prompt_type<ggml_type::iq3_s>(a, stream); break;
    case ggml_type::iq1_s: launch_matmul_prompt_type<ggml_type::iq1_s>(a, stream); break;
    case ggml_type::iq1_m: launch_matmul_prompt_type<ggml_type::iq1_m>(a, stream); break;
    case ggml_type::f16: launch_matmul_prompt_type<ggml_type::f16>(a, stream); break;
    case ggml_type::bf16: launch_matmul_prompt_type<ggml_type::bf16>(a, stream); break;
    case ggml_type::f32: launch_matmul_prompt_type<ggml_type::f32>(a, stream); break;
    default: TANDEM_CUDA_REQUIRE(false, "matmul_prompt: weight type not supported on CUDA");
    }
}

}  // namespace tandem::cuda
