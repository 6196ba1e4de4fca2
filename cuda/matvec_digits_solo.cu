// cuda/matvec_digits_solo.cu - the decode digit products as solo warps (matvec_digits_args::
// solo_warps): each warp a whole tile of its group, no barrier; the same bits as matvec_digits.cu's
// blocks (tests/kernels/test_cuda_matvec_digits.cpp compares them).
#include "matvec_digits_tile.cuh"

#include "bulk_copy.cuh"
#include "cuda_check.h"
#include "launch.cuh"

namespace tandem::cuda::digit_tile {
namespace {

// Solo: each warp computes whole tiles of its group (tile blockIdx.x * S + warp), all K chunks
// itself, chunk c into partial c % V, the partials added in order: the arithmetic of
// matvec_digits.cu's V-warp blocks (their warps' sums, added by warp 0 in warp order), without
// their barriers and shared-memory sums. For grouped products of producer digits. staged: the warp's 16 weight rows
// copied into its own shared-memory stage first (its own barrier); streamed: from global memory,
// the next chunk's weights loaded before this one is multiplied. stride (staged): block row y takes
// groups y, y + gridDim.y, ... (matvec_digits_args::group_rows), each warp on its own after the
// first, the next group's range read while this one is multiplied.
template <int V, bool swiglu, int S, bool staged, bool stride = false>
__global__ void __launch_bounds__(S * 32) matvec_digits_solo_kernel(const matvec_digits_args a) {
    static_assert(!stride || staged, "matvec_digits: striding solo warps are staged");
    __shared__ uint64_t s_bar[S];
    extern __shared__ __align__(16) uint8_t s_w[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    constexpr int tile_out = swiglu ? 8 : 16;
    const int n_blocks = a.n_in / 256, n_tiles = (a.n_out + tile_out - 1) / tile_out;
    const int64_t row_bytes = int64_t(n_blocks) * 144;
    const int k = blockIdx.x * S + warp, j0 = k * tile_out;
    const bool one_copy = staged_in_one_copy(swiglu, n_blocks, j0, a.n_out);
    const int64_t s_pitch = one_copy ? row_bytes : row_bytes + 32;
    int begin = 0, end = 0, mat = 0, gi = blockIdx.y;
    const uint8_t *rlo = nullptr, *rhi = nullptr;
    q4_k_lane lo, hi;
    // The warp's tile of group gi: staged, its copies issued (first: the barrier made first).
    auto stage_tile = [&](bool first) {
        auto src_row = [&](int r) { return tile_row<swiglu>(a, mat, j0, r, row_bytes); };
        if constexpr (staged) {
            uint8_t *stage = s_w + int64_t(warp) * 16 * s_pitch;
            if (lane == 0) {
                if (first) {
                    mbar_init(&s_bar[warp]);
                    mbar_fence_init();
                }
                mbar_expect(&s_bar[warp], uint32_t(16 * row_bytes));
            }
            __syncwarp();
            if (one_copy) {
                if (lane == 0) bulk_copy_to_shared(stage, src_row(0), uint32_t(16 * row_bytes), &s_bar[warp]);
            } else if (lane < 16) {
                bulk_copy_to_shared(stage + lane * s_pitch, src_row(lane), uint32_t(row_bytes), &s_bar[warp]);
            }
            rlo = stage + g * s_pitch;
            rhi = stage + (g + 8) * s_pitch;
        } else {
            rlo = src_row(g);
            rhi = src_row(g + 8);
            lo = load_q4_k_lane(rlo, 0, t);
            hi = load_q4_k_lane(rhi, 0, t);
        }
    };
    auto start = [&]() {
        if (!read_group(a.n_groups, a.group_off, a.group_mat, gi, begin, end, mat) || k >= n_tiles) return false;
        stage_tile(true);
        return true;
    };
    const bool early = a.groups_settled;
    if (early && !start()) return;
    pdl_wait();
    pdl_trigger();
    if (!early && !start()) return;
    auto x_row = [&](int i) { const int r = i < end ? i : begin; return a.x_rows ? a.x_rows[r] : r; };
    auto y_row = [&](int i) { return a.y_rows ? a.y_rows[i] : i; };
    // Staged: the first pass's row indices and its first V chunks of activations fetched while
    // the weights are on their way; later passes load their V chunks together, then multiply.
    x_chunk xv, xa[V];
    for (int round = 0;; ++round) {  // one round a group (stride), else one
        const int g_next = gi + int(gridDim.y);
        int n_next = 0, b_next = 0, e_next = 0, m_next = 0;
        if constexpr (stride)
            if (g_next < a.max_groups) n_next = read_group_raw(a.n_groups, a.group_off, a.group_mat, g_next, b_next, e_next, m_next);
        if constexpr (staged) {
            const int xr = x_row(begin + (g >> 1)), xs = x_row(begin + t);
#pragma unroll
            for (int v = 0; v < V; ++v)
                if (v < n_blocks) xa[v] = load_x_chunk(a.x, a.n_in, xr, xs, v, g, t);
            mbar_wait_parity(&s_bar[warp], uint32_t(round & 1));
        }
        for (int p0 = begin; p0 < end; p0 += digits_pass) {
            const int xr = x_row(p0 + (g >> 1));  // B column g (past the rows: a real row, unused)
            const int xs = x_row(p0 + t);         // C columns 2t, 2t + 1
            float part[V][2] = {};
            if (!staged && p0 != begin) {
                lo = load_q4_k_lane(rlo, 0, t);
                hi = load_q4_k_lane(rhi, 0, t);
            }
            for (int c0 = 0; c0 < n_blocks; c0 += V) {
                if constexpr (staged) {  // the V chunks' activations in flight together
                    if (p0 != begin || c0 != 0) {
#pragma unroll
                        for (int v = 0; v < V; ++v)
                            if (c0 + v < n_blocks) xa[v] = load_x_chunk(a.x, a.n_in, xr, xs, c0 + v, g, t);
                    }
                }
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const int c = c0 + v;
                    if (c >= n_blocks) break;
                    q4_k_lane lo_next, hi_next;  // streamed: the next chunk's weights, in flight during this one
                    if constexpr (staged) {
                        lo = load_q4_k_lane(rlo, c, t);
                        hi = load_q4_k_lane(rhi, c, t);
                        xv = xa[v];
                    } else {
                        if (c + 1 < n_blocks) {
                            lo_next = load_q4_k_lane(rlo, c + 1, t);
                            hi_next = load_q4_k_lane(rhi, c + 1, t);
                        }
                        xv = load_x_chunk(a.x, a.n_in, xr, xs, c, g, t);
                    }
                    digit_chunk(
                        lo, hi, [&](int j) { return xv.b[j]; }, xv.sb, xv.sx, t, part[v]);
                    if constexpr (!staged) {
                        lo = lo_next;
                        hi = hi_next;
                    }
                }
            }
            float out[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                out[e] = part[0][e];
#pragma unroll
                for (int v = 1; v < V; ++v) out[e] = __fadd_rn(out[e], part[v][e]);
            }
            store_outputs<swiglu>(a, out, j0, g, t, p0, end, y_row);
        }
        if constexpr (!stride) {
            break;
        } else {
            __syncwarp();  // the warp's stage is free for the next group's copies, its barrier's next phase
            if (g_next >= a.max_groups || g_next >= n_next) return;
            gi = g_next;
            begin = b_next;
            end = e_next;
            mat = m_next;
            stage_tile(false);
        }
    }
}

}  // namespace

void launch_solo(const matvec_digits_args &a, const matvec_digits_plan &p, cudaStream_t stream) {
    const bool swiglu = a.w_up != nullptr;
    TANDEM_CUDA_REQUIRE(p.k_split == (swiglu ? 4 : 3) && p.warps == (swiglu && p.staged ? 2 : 4),
                        "matvec_digits: solo warps are SwiGLU's (2 staged, else 4) or three-block plain products' (4)");
    auto go = [&](auto kernel) { launch_pdl_smem(kernel, dim3(p.grid_x, p.grid_y), dim3(p.warps * 32), p.smem_bytes, stream, a); };
    if (swiglu) {
        if (p.staged)
            p.group_rows > 0 ? go(matvec_digits_solo_kernel<4, true, 2, true, true>) : go(matvec_digits_solo_kernel<4, true, 2, true>);
        else
            go(matvec_digits_solo_kernel<4, true, 4, false>);
        return;
    }
    if (p.staged)
        p.group_rows > 0 ? go(matvec_digits_solo_kernel<3, false, 4, true, true>) : go(matvec_digits_solo_kernel<3, false, 4, true>);
    else
        go(matvec_digits_solo_kernel<3, false, 4, false>);
}

}  // namespace tandem::cuda::digit_tile
