// cuda/matmul_prompt_tile.cuh - pieces the prompt-row tile products share (matmul_prompt.cu: any
// type, weights dequantised and split; matmul_prompt_q4k.cu: Q4_K quants exact): shared-memory
// fragment loads, the mma, cp.async, which group tile and which fused matrix a block computes,
// and the epilogue (SwiGLU, residual add, row indirection).
#pragma once

#include "cuda_check.h"
#include "matvec.h"

#include <cuda_bf16.h>

#include <cstdint>

namespace tandem::cuda {
namespace prompt_tile {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16 *p) {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a b for one m16n8k16 tile (a: 16 x 16 row-major, b: 16 x 8 column-major, bf16; c fp32).
// Not volatile: registers in and out only, so the compiler may move it among the ldmatrix loads.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Grouped mode: block tile t of the concatenated groups (each group's pairs in tiles of tile_m).
// Every warp computes it (uniform per block): a warp scan over the groups' tile counts.
template <int tile_m>
__device__ __forceinline__ bool find_group_tile(const matvec_args &a, int t, int &begin, int &end, int &mat, int &m0) {
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

// 16 bytes global -> shared without registers; src_bytes 0 writes zeros (src must still be valid).
__device__ __forceinline__ void cp_async_16(void *dst, const void *src, int src_bytes) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

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
                    y_row[jo] = gate / (1.0f + expf(-gate)) * up;  // silu(gate) * up, as matvec writes it
                } else {
                    const int jo = j0 + 8 * (n_frags * wn + j) + t2 + (e & 1);
                    if (jo >= part.n_out) continue;
                    y_row[jo] = a.accumulate ? y_row[jo] + acc[i][j][e] : acc[i][j][e];
                }
            }
        }
}

}  // namespace prompt_tile
}  // namespace tandem::cuda
