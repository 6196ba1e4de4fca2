// cuda/matvec_kernel.cuh - the decode products' kernel (matvec.h), as a block body (matvec_body)
// and its plain launch (matvec_kernel): matvec.cu launches the one, matvec_mixed.cu runs two bodies
// of different weight types in one launch.
//
// Tensor cores with the activations on the narrow side: an m16n8k16 tile multiplies 16 weight
// rows (A) by 8 rows of the step (B), so the weights are dequantised once for every row of a
// group and the activations are read once per 16 weight rows (the fp32 kernel this replaces
// re-read them from L1 for every weight row: at 16 sessions that traffic, not DRAM, was the
// limit). K is free to be permuted inside a tile as long as A and B agree: lane (g, t) of a quad
// unpacks its share of its two weight rows into registers (no shared memory) and the lanes
// holding B load the matching activations, four consecutive elements per k16 step. Q4_K and Q6_K
// keep their scales out of the mma: every k16 step lies in one scale group, so the exact integer
// quants are the A operand and the group's sum is scaled afterwards (no per-weight dequantising).
// A block's warps split K by chunks (chunk c to warp c % W) and add their sums in warp order; one
// physical warp may play several of those warps (virtual warps: the same arithmetic, no barrier).
// A warp loads the chunk it computes into registers and prefetches its next one into L1. The
// activations of decode rows usually arrive pre-split from their producer (x_split.cuh), so a
// block reads its B registers instead of computing them. Weight rows past n_out and step rows
// past a group's end read valid rows whose outputs are never written, so no load needs a guard.
#pragma once

#include "matvec_plan.h"

#include "bulk_copy.cuh"
#include "launch.cuh"
#include "mma_bf16.cuh"
#include "quant_decode.cuh"
#include "x_split.cuh"

#include "tandem/swiglu.h"

#include <type_traits>

namespace tandem::cuda::matvec_detail {

// Block shapes (chosen by plan_matvec, matvec_plan.cpp) by `bench --prompt 0 --sessions 1,4,16`
// on an H200: 4 warps per block beat 8 (more, smaller blocks), and one n8 tile of step rows per
// pass beats two (half the registers: 4 blocks per SM instead of 2); more rows take more passes,
// whose weights then come from L1/L2. A dense matrix too narrow to give every SM two blocks (wo; a
// router not fused with its norm) splits K 16 ways instead; the split is a function of the
// matrix's shape, never of the step's rows, so decode rows stay batch invariant. A grouped K-quant
// matrix of three super-blocks a row (an expert's down of width 768) runs three warps a block,
// none idle: 96 registers instead of 128, 7 blocks per SM instead of 4 (16 sessions +6%).
constexpr int block_rows = 16;   // weight rows per block (an m16 tile); SwiGLU: 8 gate + 8 up rows
constexpr int chunk_items = 4;   // generic types: items per K chunk, lane t of a quad takes item 4c + t

__device__ __forceinline__ void prefetch_l1(const void *p) { asm volatile("prefetch.L1 [%0];" ::"l"(p)); }

// Q4_K: the low (high) nibbles of a word's four bytes -> two bf16 pairs of 128 + q, exact: the
// nibbles masked in place, then bytes b0, b1 (pair 0) or b2, b3 (pair 1) each under an 0x43 byte
// (0x4300 | q is 128 + q in bf16). The bias is not subtracted here (one bf16 subtraction a pair
// saved): the sub-block's sum of x times 128 d is, with the m term (see the loop).
__device__ __forceinline__ uint32_t q4_nibbles(uint32_t word, bool high) { return (high ? word >> 4 : word) & 0x0F0F0F0Fu; }
__device__ __forceinline__ uint32_t q4_pair_biased(uint32_t nibbles, int pair) {
    return __byte_perm(nibbles, 0x43434343u, pair == 0 ? 0x4140u : 0x4342u);
}

// The B registers of elements e .. e + 3 (e a multiple of 4) of one step row: read from the row's
// split twin (x_split.cuh) when the producer wrote one, else split here.
template <bool split_in>
__device__ __forceinline__ uint4 b_frag(const uint4 *split_row, const float *x_row, int e) {
    uint4 r;
    if constexpr (split_in) {
        r = split_row[e >> 2];
    } else {
        const float4 f = *reinterpret_cast<const float4 *>(x_row + e);
        bf16_split2(f.x, f.y, r.x, r.z);
        bf16_split2(f.z, f.w, r.y, r.w);
    }
    return r;
}

// Lane t's scales of a Q4_K block (head = d, dmin, the 12 scale bytes): d * sc and dmin * m of
// sub-blocks 2t and 2t + 1, as ggml's get_scale_min_k4 gives them, without branching on t: the
// four 6-bit values of sub-blocks 0-3 and of 4-7 are assembled as bytes of packed words.
__device__ __forceinline__ void q4_k_lane_scales(const uint4 &head, int t, float &d0, float &m0, float &d1, float &m1) {
    const uint32_t s0 = head.y, s1 = head.z, s2 = head.w;
    const uint32_t sc = t < 2 ? s0 & 0x3F3F3F3Fu : (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t mn = t < 2 ? s1 & 0x3F3F3F3Fu : ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u);
    const int shift = 16 * (t & 1);  // bytes 2t, 2t + 1 of the sub-blocks' group of four
    const float d = half_bits_to_float(head.x), dmin = half_bits_to_float(head.x >> 16);
    d0 = __fmul_rn(d, float((sc >> shift) & 0xFFu));
    m0 = __fmul_rn(dmin, float((mn >> shift) & 0xFFu));
    d1 = __fmul_rn(d, float((sc >> (shift + 8)) & 0xFFu));
    m1 = __fmul_rn(dmin, float((mn >> (shift + 8)) & 0xFFu));
}


// Q6_K: four 6-bit quants (bytes of `word`, each 0..63) -> two bf16 pairs of q - 32, exact:
// bytes b0, b1 (pair 0) or b2, b3 (pair 1), as 128 + q (0x4300 | q) minus 160.
__device__ __forceinline__ uint32_t q6_pair(uint32_t word, int pair) {
    uint32_t v = __byte_perm(word, 0u, pair == 0 ? 0x4140u : 0x4342u) | 0x43004300u;
    __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162 *>(&v);
    b = __hsub2(b, __floats2bfloat162_rn(160.0f, 160.0f));
    return *reinterpret_cast<const uint32_t *>(&b);
}
// A 32-bit word of a Q6_K block, which is only 2-byte aligned (210-byte blocks).
__device__ __forceinline__ uint32_t load_u32_a2(const uint8_t *p) {
    const uint16_t *q = reinterpret_cast<const uint16_t *>(p);
    return uint32_t(q[0]) | (uint32_t(q[1]) << 16);
}

// split_in: the B registers come from the producer's split rows (x_split, and Q4_K's sums from
// x_sums) instead of being computed here; one path per instantiation keeps the unrolled body small.
// parted: K in a.k_parts parts on blocks of their own (an instance of its own: the part
// arithmetic would cost the other instances registers).
// n_tiles: m16 tiles of weight rows per block (Q4_K only), sharing the block's activation
// registers; n_cols: n8 tiles of step rows per pass (Q4_K; plain Q6_K too), sharing the unpacked weights.
// Every output's arithmetic is the same whatever the tiling. min_blocks: __launch_bounds__'s
// minimum blocks per multiprocessor (0: the compiler's choice).
// v_warps: K-split warps each physical warp plays (virtual warp w * v_warps + v takes the chunks a
// block of n_warps * v_warps warps gives its warp of that index, into an accumulator of its own);
// the sums are added in virtual-warp order, so the arithmetic is that of n_warps * v_warps warps.
// staged (grouped Q4_K; dense Q4_K of two column tiles; plain Q6_K of whole tiles): the block's
// weight rows are copied whole into shared memory at its start, one bulk copy a row (or a plain
// tile's consecutive rows in one, when they pack: s_stride below) on one barrier (bulk_copy.cuh),
// instead of each warp keeping one chunk in flight. Same arithmetic. (Barriers over K ranges, so
// the first chunks are computed while the rest arrive, are slower: four copies a row cost
// more instructions than the overlap saves.)
// One block's work; matvec_kernel below is a launch of it (min_blocks: its __launch_bounds__).
template <ggml_type T, bool swiglu, int n_warps, bool split_in, bool parted = false, int n_tiles = 1, int n_cols = 1,
          int v_warps = 1, bool staged = false>
__device__ __forceinline__ void matvec_body(const matvec_args &a, int64_t row_bytes, int blocks0, int blocks1) {
    static_assert((n_tiles == 1 && n_cols == 1) || T == ggml_type::q4_k || (T == ggml_type::q6_k && n_tiles == 1 && !swiglu),
                  "matvec: several tiles a block are for Q4_K only (Q6_K: two column tiles, plain products)");
    static_assert(!staged || ((T == ggml_type::q4_k || (T == ggml_type::q6_k && !swiglu && n_tiles == 1)) && !parted),
                  "matvec: staging is for grouped Q4_K products and plain Q6_K ones");
    constexpr int n_virtual = n_warps * v_warps;
    __shared__ uint64_t s_bar;
    extern __shared__ __align__(16) uint8_t s_w[];  // staged: 16 n_tiles rows, s_stride apart
    // The sums of virtual warps v_warps.. (those of physical warps 1..), lane-minor.
    __shared__ float s_red[n_warps > 1 ? (n_warps - 1) * v_warps : 1][4 * n_tiles * n_cols][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // Which matrix of a fused launch this block computes (uniform per block).
    int bx = blockIdx.x, n_out = a.n_out;
    const void *w = a.w;
    float *y_base = a.y;
    int64_t y_stride = a.y_stride;
    // K parts (matvec_args::k_parts): blocks [s * blocks0, (s + 1) * blocks0) take part s.
    int part = 0;
    if constexpr (parted) {
        part = bx / blocks0;
        bx -= part * blocks0;
        y_base += part * a.y_part_stride;
    }
    if (a.n_extra > 0 && bx >= blocks0) {
        bx -= blocks0;
        int part = 0;
        if (a.n_extra > 1 && bx >= blocks1) {
            bx -= blocks1;
            part = 1;
        }
        w = a.extra[part].w;
        n_out = a.extra[part].n_out;
        y_base = a.extra[part].y;
        y_stride = a.extra[part].y_stride;
    }
    constexpr int tile_out = swiglu ? block_rows / 2 : block_rows;  // outputs of one tile
    const int j0 = bx * tile_out * n_tiles;
    const bool grouped = a.group_off != nullptr;
    const bool early = !grouped || a.groups_settled;  // the weight rows are known before the wait
    constexpr bool q4k = T == ggml_type::q4_k, q6k = T == ggml_type::q6_k;
    // K chunks: Q4_K / Q6_K blocks of 256 (scales applied outside the mma), else 4 items of 32.
    const int n_items = a.n_in / 32;
    const int n_chunks = q4k || q6k ? a.n_in / 256 : (n_items + chunk_items - 1) / chunk_items;
    const int n_parts = parted ? a.k_parts : 1;
    const int c_begin = part * n_chunks / n_parts, c_end = (part + 1) * n_chunks / n_parts;  // this block's chunks
    int begin = 0, end = a.n_pairs, mat = 0;
    // The group's range and matrix are loaded with the group count, not after it (one round trip):
    // entries past the count are in bounds (max_groups of them) and unused.
    auto resolve_group = [&]() {
        const int gi = blockIdx.y;
        const int n_groups = *a.n_groups, b = a.group_off[gi], e = a.group_off[gi + 1], m = a.group_mat[gi];
        if (gi >= n_groups) return false;
        begin = b;
        end = e;
        mat = m;
        return true;
    };
    // A rows of this lane: g and g + 8 of the tile (SwiGLU: gate and up of output j0 + g). A row
    // past n_out reads row j0 instead: its C row is never written, and every mma output element
    // is its own A row times its own B column, so no other element sees it. Loads need no guards.
    // Row s of tile i (A row s of its m16 tile): SwiGLU rows 0-7 gate, 8-15 up of outputs jt + (s & 7).
    auto weight_row = [&](int i, int s) -> const uint8_t * {
        const int jt = j0 + i * tile_out;
        const void *m = w;
        int j = jt + s;
        if constexpr (swiglu) {
            m = s < 8 ? w : a.w_up;
            j = jt + (s & 7);
        }
        return static_cast<const uint8_t *>(m) + (size_t(mat) * n_out + size_t(j < n_out ? j : j0)) * size_t(row_bytes);
    };
    // Staged rows: the 8 rows g reads at once must start in 8 different 16-byte bank slots (an
    // 8-byte read a lane: two wavefronts, no more). A row of an odd number of 16-byte units
    // (row_bytes % 32 == 16: Q4_K of an odd number of blocks, e.g. K = 768) does that packed, so a
    // plain tile's rows, consecutive in the matrix, come in one copy; otherwise rows are padded
    // 32 bytes apart and copied one at a time (SwiGLU's gate and up rows are not consecutive anyway).
    // A staged Q6_K tile (210-byte blocks: rows only 2-byte aligned) is always one copy of its 16
    // consecutive rows (16 row_bytes is a multiple of 16; the launcher stages only matrices of whole
    // tiles), read in place at 2-byte alignment as the streamed rows are.
    const bool packed = !swiglu && (row_bytes % 32 == 16 || q6k);
    const int64_t s_stride = packed ? row_bytes : row_bytes + 32;
    const uint8_t *rows_lo[n_tiles] = {}, *rows_hi[n_tiles] = {};
    auto resolve_rows = [&]() {
#pragma unroll
        for (int i = 0; i < n_tiles; ++i) {
            if constexpr (staged) {
                rows_lo[i] = s_w + (16 * i + g) * s_stride;
                rows_hi[i] = s_w + (16 * i + 8 + g) * s_stride;
            } else {
                rows_lo[i] = weight_row(i, g);
                rows_hi[i] = weight_row(i, g + 8);
            }
        }
    };
    // The chunk being computed is loaded into registers; the warp's next one is prefetched into
    // L1 meanwhile (no registers held: lane t of a quad touches byte min(128 t, last) of its two
    // rows' chunk, which reaches every 128-byte line of a chunk of up to 384 bytes).
    const int64_t chunk_bytes = q4k || q6k ? row_bytes / n_chunks : row_bytes / n_items * chunk_items;
    auto stage_weights = [&]() {
        if constexpr (staged) {
            constexpr int n_rows = 16 * n_tiles;
            if (threadIdx.x == 0) {
                mbar_init(&s_bar);
                mbar_fence_init();
                mbar_expect(&s_bar, uint32_t(n_rows * row_bytes));
            }
            __syncthreads();
            // Row r from lane r / n_warps of warp r % n_warps: a warp issues its lanes' copies one at
            // a time (a copy takes uniform operands), so the warps share them.
            // Packed: a tile's rows that exist in one copy, from its first row's lane; rows past n_out
            // (the matrix's last block) are row j0 again, one copy each, as weight_row gives them.
            for (int r = lane * n_warps + warp; r < n_rows; r += n_warps * 32) {
                const int i = r / 16, s = r % 16;
                const int live = packed ? max(0, min(16, n_out - (j0 + i * tile_out))) : 0;
                if (s >= live)
                    bulk_copy_to_shared(s_w + r * s_stride, weight_row(i, s), uint32_t(row_bytes), &s_bar);
                else if (s == 0)
                    bulk_copy_to_shared(s_w + r * s_stride, weight_row(i, 0), uint32_t(live * row_bytes), &s_bar);
            }
        }
    };
    auto prefetch_chunk = [&](int c) {
        if constexpr (staged) return;
        if (c >= c_end) return;
        const int64_t off = int64_t(c) * chunk_bytes + (128 * t < chunk_bytes ? 128 * t : chunk_bytes - 1);
        if (off >= row_bytes) return;
#pragma unroll
        for (int i = 0; i < n_tiles; ++i) {
            prefetch_l1(rows_lo[i] + off);
            prefetch_l1(rows_hi[i] + off);
        }
    };
    using raw_t = std::conditional_t<q4k, q4_k_lane, item_raw<T>>;
    raw_t raws_lo[n_tiles] = {}, raws_hi[n_tiles] = {};
    auto load_chunk = [&](int c) {
        if (c >= c_end) return;
        if constexpr (q4k) {
            if constexpr (staged) mbar_wait_first(&s_bar);
#pragma unroll
            for (int i = 0; i < n_tiles; ++i) {
                raws_lo[i] = load_q4_k_lane(rows_lo[i], c, t);
                raws_hi[i] = load_q4_k_lane(rows_hi[i], c, t);
            }
        } else if constexpr (q6k) {
            // Loaded where it is used (the lane's words of a block take 36 registers per row).
        } else {
            const int item = chunk_items * c + t;
            if (item >= n_items) return;
            raws_lo[0] = load_item<T>(rows_lo[0], item);
            raws_hi[0] = load_item<T>(rows_hi[0], item);
        }
    };
    // This warp's chunks ascend: runs of v_warps consecutive chunks, n_virtual apart.
    auto next_chunk = [&](int c) { return (c - c_begin) % v_warps == v_warps - 1 ? c + n_virtual - (v_warps - 1) : c + 1; };
    bool prefetched = false;
    if (early) {
        if (grouped && !resolve_group()) return;
        resolve_rows();
        // Stream this warp's first weights while the previous kernel finishes.
        if constexpr (staged) {
            stage_weights();
        } else {
            load_chunk(c_begin + warp * v_warps);
            prefetch_chunk(next_chunk(c_begin + warp * v_warps));
            prefetched = true;
        }
    }
    pdl_wait();
    pdl_trigger();
    if (!early) {
        if (!resolve_group()) return;
        resolve_rows();
        stage_weights();
    }

    for (int p0 = begin; p0 < end; p0 += 8 * n_cols) {
        // B: this lane holds row p0 + 8 u + g of the step in column tile u; past the group's end,
        // row `begin` again (like the A rows past n_out: its C column is never written).
        auto x_row = [&](int i) -> int64_t {
            const int r = i < end ? i : begin;
            return a.x_rows ? a.x_rows[r] : r;
        };
        const float *xrs[n_cols];
        const uint4 *srs[n_cols] = {};
        // Q4_K with the producer's sums: those of rows 2t and 2t + 1, whose outputs this lane adds.
        const float *sums0[n_cols] = {}, *sums1[n_cols] = {};
#pragma unroll
        for (int u = 0; u < n_cols; ++u) {
            const int64_t row_g = x_row(p0 + 8 * u + g);
            xrs[u] = a.x + row_g * a.x_stride;
            if constexpr (split_in) srs[u] = a.x_split + row_g * (a.x_stride / 4);
            if constexpr (q4k && split_in) {
                sums0[u] = a.x_sums + x_row(p0 + 8 * u + 2 * t) * (a.x_stride / 32);
                sums1[u] = a.x_sums + x_row(p0 + 8 * u + 2 * t + 1) * (a.x_stride / 32);
            }
        }
        [[maybe_unused]] const float *xr = xrs[0];
        [[maybe_unused]] const uint4 *sr = srs[0];
        float acc_all[v_warps][n_tiles * n_cols][4] = {};  // [virtual warp][tile * n_cols + column tile]
        for (int c0 = c_begin + warp * v_warps; c0 < c_end; c0 += n_virtual)
#pragma unroll
            for (int v = 0; v < v_warps; ++v) {
                const int c = c0 + v;
                if (c >= c_end) break;
                auto &acc = acc_all[v];
                if (!(prefetched && p0 == begin && c == c_begin + warp * v_warps)) load_chunk(c);
                prefetch_chunk(next_chunk(c));
                if constexpr (q4k) {
                    // Sub-block j (32 elements) of block c: sum_l (128 + q_l) x_l on the tensor cores
                    // (exact in bf16, x split hi/lo), then acc += d_j * that - m'_j * sum_l x_l per row.
                    // Lane t of a quad unpacks the scales of sub-blocks 2t, 2t + 1 of both rows; the
                    // quad shares them by shuffles below (each lane unpacking all 16 cost more).
                    // The quants enter the mma as 128 + q, so the sub-block's sum is d1 (sum_l q_l x_l +
                    // 128 sum_l x_l) - m1 sum_l x_l = d1 part - (m1 + 128 d1) sum_l x_l: the m term
                    // carries 128 d1 (exact scaling, one rounding). sum_l x_l is the sum of the split
                    // values hi + lo the mma saw (x_split.cuh), so the bias cancels to fp32 rounding.
                    float own[n_tiles][2][4];  // [tile][sub-block 2t + h][d1 row g, m1' row g, d1 row g + 8, m1' row g + 8]
#pragma unroll
                    for (int i = 0; i < n_tiles; ++i) {
                        q4_k_lane_scales(raws_lo[i].head, t, own[i][0][0], own[i][0][1], own[i][1][0], own[i][1][1]);
                        q4_k_lane_scales(raws_hi[i].head, t, own[i][0][2], own[i][0][3], own[i][1][2], own[i][1][3]);
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            own[i][h][1] = __fmaf_rn(128.0f, own[i][h][0], own[i][h][1]);
                            own[i][h][3] = __fmaf_rn(128.0f, own[i][h][2], own[i][h][3]);
                        }
                    }
                    // This lane's activations of the block: B registers at 4-element steps, sums per sub-block.
                    const uint4 *xbs[n_cols];
                    const float *xs_rows0[n_cols], *xs_rows1[n_cols], *xcs[n_cols];
#pragma unroll
                    for (int u = 0; u < n_cols; ++u) {
                        xcs[u] = xrs[u] + 256 * c + 8 * t;
                        if constexpr (split_in) {
                            xbs[u] = srs[u] + 64 * c + 2 * t;
                            xs_rows0[u] = sums0[u] + 8 * c;
                            xs_rows1[u] = sums1[u] + 8 * c;
                        }
                    }
#pragma unroll
                    for (int cc = 0; cc < 4; ++cc) {
                        // Sums of sub-blocks 2 cc and 2 cc + 1 of step rows 2t and 2t + 1, 8 bytes a
                        // load (matvec() passes split rows only when x_stride is a multiple of 64): one
                        // session +1-3%. Two column tiles and staged blocks load them one at a time (the
                        // pairs cost the dense two-tile kernel 9 registers, a block an SM, and gain
                        // nothing at 16 sessions staged).
                        constexpr bool sum_pairs = n_cols == 1 && !staged;
                        [[maybe_unused]] float2 xs_pair[n_cols][2];
                        if constexpr (split_in && sum_pairs) {
#pragma unroll
                            for (int u = 0; u < n_cols; ++u) {
                                xs_pair[u][0] = *reinterpret_cast<const float2 *>(xs_rows0[u] + 2 * cc);
                                xs_pair[u][1] = *reinterpret_cast<const float2 *>(xs_rows1[u] + 2 * cc);
                            }
                        }
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            // Sub-block j = 2 cc + h; this lane's elements 8t .. 8t + 7 of it.
                            uint4 bq[n_cols][2];
                            float xs0[n_cols], xs1[n_cols];  // the sub-block's x sums of step rows 2t and 2t + 1
#pragma unroll
                            for (int u = 0; u < n_cols; ++u) {
                                if constexpr (!split_in) {
                                    const float *xc = xcs[u];
                                    float xv[8];
#pragma unroll
                                    for (int q = 0; q < 2; ++q) {
                                        const float4 f = *reinterpret_cast<const float4 *>(xc + 64 * cc + 32 * h + 4 * q);
                                        xv[4 * q] = bf16_split_value(f.x); xv[4 * q + 1] = bf16_split_value(f.y);
                                        xv[4 * q + 2] = bf16_split_value(f.z); xv[4 * q + 3] = bf16_split_value(f.w);
                                        bf16_split2(f.x, f.y, bq[u][q].x, bq[u][q].z);
                                        bf16_split2(f.z, f.w, bq[u][q].y, bq[u][q].w);
                                    }
                                    // The row's 32 split values of the sub-block, in x_split.cuh's canonical
                                    // order: 8 here, then the quad's butterfly; the C rows' sums from their quads.
                                    float xs = ((xv[0] + xv[1]) + (xv[2] + xv[3])) + ((xv[4] + xv[5]) + (xv[6] + xv[7]));
                                    xs += __shfl_xor_sync(0xFFFFFFFFu, xs, 1);
                                    xs += __shfl_xor_sync(0xFFFFFFFFu, xs, 2);
                                    xs0[u] = __shfl_sync(0xFFFFFFFFu, xs, 8 * t);
                                    xs1[u] = __shfl_sync(0xFFFFFFFFu, xs, 8 * t + 4);
                                } else {
                                    bq[u][0] = xbs[u][16 * cc + 8 * h];
                                    bq[u][1] = xbs[u][16 * cc + 8 * h + 1];
                                    if constexpr (sum_pairs) {
                                        xs0[u] = h == 0 ? xs_pair[u][0].x : xs_pair[u][0].y;
                                        xs1[u] = h == 0 ? xs_pair[u][1].x : xs_pair[u][1].y;
                                    } else {
                                        xs0[u] = xs_rows0[u][2 * cc + h];
                                        xs1[u] = xs_rows1[u][2 * cc + h];
                                    }
                                }
                            }
#pragma unroll
                            for (int i = 0; i < n_tiles; ++i) {
                                float part[n_cols][4] = {};
#pragma unroll
                                for (int q = 0; q < 2; ++q) {
                                    // k slots 2t, 2t + 1 <- elements 8t + 4q, +1; slots 2t + 8, +9 <- 8t + 4q + 2, +3.
                                    const uint32_t nl = q4_nibbles(q == 0 ? raws_lo[i].qs[cc].x : raws_lo[i].qs[cc].y, h);
                                    const uint32_t nh = q4_nibbles(q == 0 ? raws_hi[i].qs[cc].x : raws_hi[i].qs[cc].y, h);
                                    const uint32_t av[4] = {q4_pair_biased(nl, 0), q4_pair_biased(nh, 0), q4_pair_biased(nl, 1), q4_pair_biased(nh, 1)};
#pragma unroll
                                    for (int u = 0; u < n_cols; ++u) {
                                        mma_bf16(part[u], av, bq[u][q].x, bq[u][q].y);
                                        mma_bf16(part[u], av, bq[u][q].z, bq[u][q].w);
                                    }
                                }
                                // Sub-block j = 2 cc + h: its scales are lane cc's of the quad, entry h.
                                const int owner = (lane & ~3) | cc;
                                const float d1_lo = __shfl_sync(0xFFFFFFFFu, own[i][h][0], owner);
                                const float m1_lo = __shfl_sync(0xFFFFFFFFu, own[i][h][1], owner);
                                const float d1_hi = __shfl_sync(0xFFFFFFFFu, own[i][h][2], owner);
                                const float m1_hi = __shfl_sync(0xFFFFFFFFu, own[i][h][3], owner);
                                // C element e: weight row g + 8 (e >> 1), step row 2t + (e & 1).
#pragma unroll
                                for (int u = 0; u < n_cols; ++u)
#pragma unroll
                                    for (int e = 0; e < 4; ++e) {
                                        const float d1 = e < 2 ? d1_lo : d1_hi, m1 = e < 2 ? m1_lo : m1_hi;
                                        float &y = acc[i * n_cols + u][e];
                                        y = fmaf(d1, part[u][e], y);
                                        y = fmaf(-m1, (e & 1) ? xs1[u] : xs0[u], y);
                                    }
                            }
                        }
                    }
                } else if constexpr (q6k) {
                    if constexpr (staged) mbar_wait_first(&s_bar);
                    // Block c: 16 groups of 16 elements (half h, quarter qq, is: the CPU's loop order,
                    // group index 8 h + 2 qq + is = its scale's index), one k16 step each; lane t holds
                    // elements l = 16 is + 4t .. +3 of the group. The quants (q - 32, exact in bf16) go
                    // through the tensor cores, then acc += (d * scale) * that per row.
                    uint32_t ql[2][2][2][2] = {}, qh[2][2][2] = {};  // [row][half][is][at l / l + 32], [row][half][is]
                    float dsc[2][16] = {};
                    const uint8_t *rows2[2] = {rows_lo[0], rows_hi[0]};
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const uint8_t *b = rows2[r] + size_t(c) * 210;
                        const float d = half_bits_to_float(*reinterpret_cast<const uint16_t *>(b + 208));
#pragma unroll
                        for (int h = 0; h < 2; ++h)
#pragma unroll
                            for (int is = 0; is < 2; ++is) {
                                ql[r][h][is][0] = load_u32_a2(b + 64 * h + 16 * is + 4 * t);
                                ql[r][h][is][1] = load_u32_a2(b + 64 * h + 32 + 16 * is + 4 * t);
                                qh[r][h][is] = load_u32_a2(b + 128 + 32 * h + 16 * is + 4 * t);
                            }
#pragma unroll
                        for (int k = 0; k < 8; ++k) {
                            const uint32_t two = *reinterpret_cast<const uint16_t *>(b + 192 + 2 * k);
                            dsc[r][2 * k] = __fmul_rn(d, float(int8_t(two & 0xFFu)));
                            dsc[r][2 * k + 1] = __fmul_rn(d, float(int8_t(two >> 8)));
                        }
                    }
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
#pragma unroll
                        for (int qq = 0; qq < 4; ++qq)
#pragma unroll
                            for (int is = 0; is < 2; ++is) {
                                // B of elements 128 h + 32 qq + 16 is + 4t .. +3, of each column tile's rows
                                uint4 xq[n_cols];
#pragma unroll
                                for (int u = 0; u < n_cols; ++u)
                                    xq[u] = b_frag<split_in>(srs[u], xrs[u], 256 * c + 128 * h + 32 * qq + 16 * is + 4 * t);
                                uint32_t qb[2];  // the four quants of each row, one per byte
#pragma unroll
                                for (int r = 0; r < 2; ++r) {
                                    const uint32_t low = (ql[r][h][is][qq & 1] >> (qq >= 2 ? 4 : 0)) & 0x0F0F0F0Fu;
                                    qb[r] = low | (((qh[r][h][is] >> (2 * qq)) & 0x03030303u) << 4);
                                }
                                const uint32_t av[4] = {q6_pair(qb[0], 0), q6_pair(qb[1], 0), q6_pair(qb[0], 1), q6_pair(qb[1], 1)};
                                const int grp = 8 * h + 2 * qq + is;
#pragma unroll
                                for (int u = 0; u < n_cols; ++u) {
                                    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                                    mma_bf16(part, av, xq[u].x, xq[u].y);
                                    mma_bf16(part, av, xq[u].z, xq[u].w);
#pragma unroll
                                    for (int e = 0; e < 4; ++e) acc[u][e] = fmaf(dsc[e >> 1][grp], part[e], acc[u][e]);
                                }
                            }
                    }
                } else {
                    const int item = chunk_items * c + t;
                    const bool live = item < n_items;
                    int start[4];
                    item_starts<T>(live ? item : 0, start);
                    // B: this lane's row's activations at the item's positions, 4 per k16 step.
                    uint4 xb[8];  // B of the 4-element steps 4q .. 4q + 3 of the item
#pragma unroll
                    for (int q = 0; q < 8; ++q) xb[q] = b_frag<split_in>(sr, xr, start[q >> 1] + 4 * (q & 1));  // A is zero past n_items
                    // A: the two weight rows' values of the item (zeros past n_out or n_in).
                    float v_lo[32], v_hi[32];
                    int st[4];
#pragma unroll
                    for (int i = 0; i < 32; ++i) v_lo[i] = v_hi[i] = 0.0f;
                    if (live) {
                        decode_raw<T>(raws_lo[0], item, v_lo, st);
                        decode_raw<T>(raws_hi[0], item, v_hi, st);
                    }
                    // Two accumulators (even and odd k16 steps) so consecutive mmas do not wait on
                    // each other; the split terms hi hi, hi lo, lo hi in that order.
                    float part[2][4] = {};
#pragma unroll
                    for (int s = 0; s < 8; ++s) {
                        // k slots 2t, 2t + 1 <- values 4s, 4s + 1; slots 2t + 8, 2t + 9 <- 4s + 2, 4s + 3.
                        uint32_t a_hi[4], a_lo[4];
                        bf16_split2(v_lo[4 * s], v_lo[4 * s + 1], a_hi[0], a_lo[0]);
                        bf16_split2(v_hi[4 * s], v_hi[4 * s + 1], a_hi[1], a_lo[1]);
                        bf16_split2(v_lo[4 * s + 2], v_lo[4 * s + 3], a_hi[2], a_lo[2]);
                        bf16_split2(v_hi[4 * s + 2], v_hi[4 * s + 3], a_hi[3], a_lo[3]);
                        mma_bf16(part[s & 1], a_hi, xb[s].x, xb[s].y);
                        mma_bf16(part[s & 1], a_hi, xb[s].z, xb[s].w);
                        mma_bf16(part[s & 1], a_lo, xb[s].x, xb[s].y);
                    }
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[0][e] += part[0][e] + part[1][e];
                }
            }
        // The virtual warps' K parts, added in virtual-warp order by warp 0, which writes the outputs.
        if (warp > 0)
#pragma unroll
            for (int v = 0; v < v_warps; ++v)
#pragma unroll
                for (int i = 0; i < n_tiles * n_cols; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s_red[(warp - 1) * v_warps + v][4 * i + e][lane] = acc_all[v][i][e];
        if constexpr (n_warps > 1) __syncthreads();
        // After the last pass only warp 0 has work left (the reduction and the stores): the others
        // leave, so their registers can take another block's warps sooner.
        const bool last_pass = p0 + 8 * n_cols >= end;
        if (warp > 0 && last_pass) return;
        if (warp == 0) {
            // Element (i, e) is weight row g + 8 (e >> 1) of tile i / n_cols, step row p0 + 8 (i %
            // n_cols) + 2t + (e & 1). Every element's output row (y_rows) and, accumulating, its
            // prior value are asked for before the sums: one round trip for all of them. (Asked for
            // beside each store, every load waits behind the store before it, which may alias: wo's
            // residual add would take a round trip an element, eight at sixteen rows.)
            constexpr int n_e = swiglu ? 2 : 4;
            auto out_col = [&](int i, int e) { return j0 + (i / n_cols) * tile_out + g + (swiglu ? 0 : 8 * (e >> 1)); };
            int y_row_of[n_tiles * n_cols][2];  // element (i, e)'s output row is y_row_of[i][e & 1]; -1: past the group
            float prior[n_tiles * n_cols][n_e];
#pragma unroll
            for (int i = 0; i < n_tiles * n_cols; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = p0 + 8 * (i % n_cols) + 2 * t + h;
                    y_row_of[i][h] = r < end ? (a.y_rows ? a.y_rows[r] : r) : -1;
                }
#pragma unroll
            for (int i = 0; i < n_tiles * n_cols; ++i)
#pragma unroll
                for (int e = 0; e < n_e; ++e) {
                    const int yr = y_row_of[i][e & 1], j = out_col(i, e);
                    prior[i][e] = !swiglu && a.accumulate && yr >= 0 && j < n_out ? y_base[int64_t(yr) * y_stride + j] : 0.0f;
                }
            auto &acc = acc_all[0];
#pragma unroll
            for (int i = 0; i < n_tiles * n_cols; ++i) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
#pragma unroll
                    for (int v = 1; v < v_warps; ++v) acc[i][e] += acc_all[v][i][e];
#pragma unroll
                    for (int v = 0; v < (n_warps - 1) * v_warps; ++v) acc[i][e] += s_red[v][4 * i + e][lane];
                }
#pragma unroll
                for (int e = 0; e < n_e; ++e) {
                    const int yr = y_row_of[i][e & 1], j = out_col(i, e);
                    if (yr < 0 || j >= n_out) continue;
                    float *y = y_base + int64_t(yr) * y_stride + j;
                    if constexpr (swiglu) {
                        const float gate = acc[i][e], up = acc[i][e + 2];
                        *y = ::tandem::swiglu(gate, up);  // the CPU twin's bits (tandem/swiglu.h)
                    } else {
                        *y = a.accumulate ? prior[i][e] + acc[i][e] : acc[i][e];
                    }
                }
            }
        }
        if (n_warps > 1 && !last_pass) __syncthreads();  // s_red is rewritten by the next pass
    }
}

template <ggml_type T, bool swiglu, int n_warps, bool split_in, bool parted = false, int n_tiles = 1, int n_cols = 1,
          int min_blocks = 0, int v_warps = 1, bool staged = false>
__global__ void __launch_bounds__(n_warps * 32, min_blocks)
    matvec_kernel(const matvec_args a, int64_t row_bytes, int blocks0, int blocks1) {
    matvec_body<T, swiglu, n_warps, split_in, parted, n_tiles, n_cols, v_warps, staged>(a, row_bytes, blocks0, blocks1);
}

// A dense launch whose last extra matrix is typed (matvec_part::typed), as matvec() validated it,
// with plan_matvec's warps and column tiles: matvec_mixed.cu.
void launch_matvec_mixed(const matvec_args &a, const matvec_plan &plan, cudaStream_t stream);

}  // namespace tandem::cuda::matvec_detail
