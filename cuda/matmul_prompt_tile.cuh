// cuda/matmul_prompt_tile.cuh - what the prompt-row tile products share (matmul_prompt.cu: any
// type, weights dequantised and split; matmul_prompt_q4k.cu: Q4_K quants exact; the digit tiles,
// matmul_prompt_digits.cu and matmul_prompt_wgmma.cu): which group tile, which fused matrix and
// which outputs a block computes, and the launch grid.
#pragma once

#include "cuda_check.h"
#include "matvec.h"
#include "matvec_digits.h"

#include <cstdint>

namespace tandem::cuda {
namespace prompt_tile {

// Grouped mode: block tile t of the concatenated groups (each group's pairs in tiles of tile_m).
// Every warp computes it (uniform per block): a warp scan over the groups' tile counts.
// (Args: matvec_args or matvec_digits_args: their n_groups, group_off and group_mat.)
template <int tile_m, class Args>
__device__ __forceinline__ bool find_group_tile(const Args &a, int t, int &begin, int &end, int &mat, int &m0) {
    const int lane = threadIdx.x & 31, n_groups = *a.n_groups;
    int base = 0;
    for (int g0 = 0; g0 < n_groups; g0 += 32) {
        const int g = g0 + lane;
        const int cnt = g < n_groups ? (a.group_off[g + 1] - a.group_off[g] + tile_m - 1) / tile_m : 0;
        int incl = cnt;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += v;
        }
        const int total = __shfl_sync(0xFFFFFFFFu, incl, 31);
        if (t < base + total) {
            const int hit = __ffs(__ballot_sync(0xFFFFFFFFu, t < base + incl)) - 1;
            const int before = __shfl_sync(0xFFFFFFFFu, incl - cnt, hit);
            const int gg = g0 + hit;
            begin = a.group_off[gg];
            end = a.group_off[gg + 1];
            mat = a.group_mat[gg];
            m0 = begin + (t - base - before) * tile_m;
            return true;
        }
        base += total;
    }
    return false;
}

// The matrix of a dense launch's column block: the extra matrices (Q, K, V) continue the grid.
struct part_view {
    const void *w;
    float *y;
    int64_t y_stride;
    int n_out, block;  // block: column block within this matrix
};
__device__ __forceinline__ part_view find_part(const matvec_args &a, int bx, int outs_per_block) {
    part_view p{a.w, a.y, a.y_stride, a.n_out, bx};
    for (int i = 0; i < a.n_extra; ++i) {
        const int blocks = (p.n_out + outs_per_block - 1) / outs_per_block;
        if (p.block < blocks) break;
        p = {a.extra[i].w, a.extra[i].y, a.extra[i].y_stride, a.extra[i].n_out, p.block - blocks};
    }
    return p;
}

// What a thread block computes: its rows (a tile of the dense rows, or of one group's pairs),
// the matrix of its group, and its fused matrix and first output.
struct block_tile {
    int mat = 0, m0 = 0, rows_here = 0, j0 = 0;
    part_view part;
};
// false: no work here (a grid slot past the groups' tiles, or past the rows).
template <int tile_m>
__device__ __forceinline__ bool resolve_block_tile(const matvec_args &a, int outs_per_block, block_tile &b) {
    int begin = 0, end = a.n_pairs;
    b.m0 = blockIdx.y * tile_m;
    if (a.group_off) {
        if (!find_group_tile<tile_m>(a, blockIdx.y, begin, end, b.mat, b.m0)) return false;
    } else if (b.m0 >= end) {
        return false;
    }
    b.rows_here = min(tile_m, end - b.m0);
    b.part = find_part(a, blockIdx.x, outs_per_block);
    b.j0 = b.part.block * outs_per_block;
    return true;
}

// The grid of a launch: the column blocks of every fused matrix x the row tiles (grouped: a bound
// on the groups' tiles together).
inline dim3 prompt_grid(const matvec_args &a, int outs_per_block, int tile_m) {
    int col_blocks = (a.n_out + outs_per_block - 1) / outs_per_block;
    for (int i = 0; i < a.n_extra; ++i) col_blocks += (a.extra[i].n_out + outs_per_block - 1) / outs_per_block;
    const int m_tiles = a.group_off ? a.n_pairs / tile_m + a.max_groups : (a.n_pairs + tile_m - 1) / tile_m;
    TANDEM_CUDA_REQUIRE(m_tiles <= 65535, "matmul_prompt: too many rows for one launch");
    return dim3(col_blocks, m_tiles);
}

// A digit tile block (matmul_digits' mma.sync and warpgroup tiles): its pairs (from m0, rows_here of
// them, the group's matrix mat) and its matrix, outputs and first output j0 (an extra matrix of a
// one-group launch where the grid continues).
struct digit_tile {
    int m0 = 0, rows_here = 0, mat = 0, n_out = 0, j0 = 0;
    int part = 0;  // the matrix: 0 (a.w), or 1 + e for a.extra[e]
    const void *w = nullptr;
    float *y = nullptr;
    int64_t y_stride = 0;
};
// false: no work here (past the rows, or past the groups' tiles). Every warp calls it (uniform).
template <int tile_m, int outs_per_block>
__device__ __forceinline__ bool resolve_digit_tile(const matvec_digits_args &a, digit_tile &b) {
    int begin = 0, end = 0;
    if (a.one_group) {
        end = a.n_rows;
        b.m0 = int(blockIdx.y) * tile_m;
        if (b.m0 >= end) return false;
    } else if (!find_group_tile<tile_m>(a, blockIdx.y, begin, end, b.mat, b.m0)) {
        return false;
    }
    b.rows_here = min(tile_m, end - b.m0);
    b.w = a.w;
    b.n_out = a.n_out;
    b.y = a.y;
    b.y_stride = a.y_stride;
    int bx = int(blockIdx.x);
    for (int e = 0, first = (b.n_out + outs_per_block - 1) / outs_per_block; e < a.n_extra && bx >= first; ++e) {
        bx -= first;
        b.part = e + 1;
        b.w = a.extra[e].w;
        b.n_out = a.extra[e].n_out;
        b.y = a.extra[e].y;
        b.y_stride = a.extra[e].y_stride;
        first = (b.n_out + outs_per_block - 1) / outs_per_block;
    }
    b.j0 = bx * outs_per_block;
    return true;
}
// The block's threads fill each pair's digit row (-1: past the tile's pairs) and its output row
// (for the tile's pairs); a barrier must follow. (The weight rows come by tensor copies.)
template <int tile_m>
__device__ __forceinline__ void fill_digit_rows(const matvec_digits_args &a, const digit_tile &b, int32_t *s_xrow, int32_t *s_yrow, int tid,
                                                int n_threads) {
    for (int r = tid; r < tile_m; r += n_threads) s_xrow[r] = r < b.rows_here ? (a.x_rows ? a.x_rows[b.m0 + r] : b.m0 + r) : -1;
    for (int r = tid; r < b.rows_here; r += n_threads) s_yrow[r] = a.y_rows ? a.y_rows[b.m0 + r] : b.m0 + r;
}
// Block i of 256 in the K split's partial order: partial v = 0's blocks (0, V, 2V, ...), then
// v = 1's, ... (matvec_digits' order, so each output adds the same partials in the same order).
template <int V>
__device__ __forceinline__ int digit_block_in_order(int i, int n_blocks) {
    for (int v = 0; v < V; ++v) {
        const int cnt = v < n_blocks ? (n_blocks - v + V - 1) / V : 0;
        if (i < cnt) return v + i * V;
        i -= cnt;
    }
    return 0;
}

// A digit-tile launch's grid (host): column blocks of outs_per_block outputs over every fused
// matrix, and row tiles of tile_m pairs (grouped: a bound on the groups' tiles together).
inline int digit_col_blocks(const matvec_digits_args &a, int outs_per_block) {
    int col_blocks = (a.n_out + outs_per_block - 1) / outs_per_block;
    for (int e = 0; e < a.n_extra; ++e) col_blocks += (a.extra[e].n_out + outs_per_block - 1) / outs_per_block;
    return col_blocks;
}
inline int digit_m_tiles(const matvec_digits_args &a, int tile_m) {
    const int m_tiles = a.one_group ? (a.n_rows + tile_m - 1) / tile_m : a.n_pairs / tile_m + a.max_groups;
    TANDEM_CUDA_REQUIRE(m_tiles <= 65535, "matmul_digits: too many pairs for one launch");
    return m_tiles;
}

}  // namespace prompt_tile
}  // namespace tandem::cuda
