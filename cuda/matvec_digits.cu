// cuda/matvec_digits.cu - Q4_K decode products on int8 activation digits (matvec_digits.h):
// mma.m16n8k32 u8 x s8 per digit; tested and timed beside matvec.cu by
// tests/kernels/test_cuda_matvec_digits.cpp.
#include "matvec_digits.h"
#include "matvec_digits_tile.cuh"

#include "bulk_copy.cuh"
#include "cuda_check.h"
#include "digits.cuh"
#include "launch.cuh"
#include "mma_bf16.cuh"
#include "moe_route.cuh"
#include "quant_decode.cuh"
#include "warp_reduce.cuh"

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

namespace tandem::cuda {
namespace {

using namespace digit_tile;

static_assert(digits_pass == 4, "plan_matvec_digits counts passes of 4 rows");

constexpr int quant_warps = 8;  // blocks of 256 elements a block of the producer
constexpr int route_one_epl = route_max_experts / 32;  // in-kernel routing: experts a lane

// Lane l of a warp holds elements 8l .. 8l + 7 of a block of 256: sub-block j = l / 4, group t = l % 4.
__global__ void __launch_bounds__(quant_warps * 32) digits_quantize_kernel(const digits_quantize_args a) {
    pdl_wait();
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c = blockIdx.x * quant_warps + warp, r = blockIdx.y, n_blocks = a.n / 256;
    if (c >= n_blocks) return;
    float v[8];
    load8(a.x + int64_t(a.x_rows ? a.x_rows[r] : r) * a.n + c * 256 + 8 * lane, v);
    digits_quantize_warp(v, a.out, r, a.n, c, lane);
}

// Tensor copies (matvec_digits_args::tensor_copies): the staged SwiGLU tile's gate rows and up rows
// each in one tensor copy (8 rows x the row's 128-byte lines, 128-byte swizzle) instead of one bulk
// copy a row (under ncu, 16 copies a tile take ~16% of a block's warp time).
struct swiglu_maps {
    CUtensorMap gate, up;
};
// Byte o of row r (0-7) of such a box, its base 1024-byte aligned, rows `lines` 128-byte lines long:
// 16-byte unit u of line L sits at unit u ^ (L & 7) (CU_TENSOR_MAP_SWIZZLE_128B).
__device__ __forceinline__ const uint8_t *swizzled(const uint8_t *box, int r, int lines, int o) {
    const int L = r * lines + (o >> 7);
    return box + L * 128 + ((((o >> 4) & 7) ^ (L & 7)) << 4) + (o & 15);
}
__device__ __forceinline__ q4_k_lane load_q4_k_lane_swizzled(const uint8_t *box, int r, int lines, int blk, int t) {
    const int o = blk * 144;
    q4_k_lane q;
    q.head = *reinterpret_cast<const uint4 *>(swizzled(box, r, lines, o));
#pragma unroll
    for (int c = 0; c < 4; ++c) q.qs[c] = *reinterpret_cast<const uint2 *>(swizzled(box, r, lines, o + 16 + 32 * c + 8 * t));
    return q;
}

// The one group of a one_group product: rows 0 .. n_rows - 1 of matrix 0. The kernels choose it at
// compile time, so the decode instances carry no test of it (a runtime test there costs decode 1-2%).
__device__ __forceinline__ bool read_one_group(const matvec_digits_args &a, int gi, int &begin, int &end, int &mat) {
    begin = 0;
    end = a.n_rows;
    mat = 0;
    return gi == 0;
}

// Block (0, 0)'s lane s of warp 0 writes what moe_route writes for the row (moe_route_one_kernel and
// route_rows: ids, weights renormalised in slot order, the one-row groups), then a fence, so the
// launch that this one triggers afterwards reads them (matvec_digits_args::route_out).
__device__ __forceinline__ void publish_route(const route_outputs &o, bool pad, int e, int grp, const float *s_w, int k, int lane) {
    if (lane < k) {  // k <= 32
        float top = 0.0f;
        for (int j = 0; j < k && !pad; ++j) top += s_w[j];
        o.ids[lane] = pad ? -1 : e;
        o.weights[lane] = pad ? 0.0f : o.renormalise ? s_w[lane] / top : s_w[lane];
    }
    route_one_row_write_groups(pad, e, grp, k, o.group_expert, o.group_off, o.n_groups, o.pair_x, o.pair_y, o.groups_total);
    __threadfence();
}

// The one-row step's group gi routed here (matvec_digits_args::route_logits): warp 0 routes the row
// with moe_route's code (the same experts, bitwise), then group gi is its gi-th expert in ascending
// id order (moe_route's one-row groups), with one pair: step row 0 into output row y_pair, the
// expert's slot. false: a padding row (routed nowhere) or gi past k. Every thread of the block calls it;
// with route_out, block (0, 0) also publishes the routing (publish_route).
__device__ __forceinline__ bool route_one_group(const matvec_digits_args &a, int gi, float *s_prob, uint16_t *s_cand, int *s_sel,
                                                float *s_w, int *s_group, int &begin, int &end, int &mat, int &y_pair) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, k = a.route_k, ne = a.route_n_expert;
    if (gi >= k) return false;
    if (warp == 0) {
        const int32_t slot = a.route_slots[0];  // with the logits: one round trip
        float p[route_one_epl];
        route_load_logits<route_one_epl>(a.route_logits, 1, 0, ne, p);
        const bool pad = slot < 0;
        if (!pad) {
            route_softmax<route_one_epl>(p, ne, s_prob);
            route_select_top_k<route_one_epl>(p, s_prob, s_cand, ne, k, [&](int rank, int e, float pe) {
                s_sel[rank] = e;
                s_w[rank] = pe;
            });
        }
        if (lane == 0) s_group[0] = -1;
        __syncwarp();
        const int e = !pad && lane < k ? s_sel[lane] : 0;
        const int grp = route_one_row_group(e, k);
        if (a.route_out.ids && gi == 0 && blockIdx.x == 0) publish_route(a.route_out, pad, e, grp, s_w, k, lane);
        if (grp == gi && !pad && lane < k) {
            s_group[0] = e;
            s_group[1] = lane;
        }
    }
    __syncthreads();
    mat = s_group[0];
    y_pair = s_group[1];
    begin = 0;
    end = 1;
    return mat >= 0;
}


// Lane (g, t): weight rows g and g + 8 of the block's 16, step row t of a pass of four (C columns
// 2t, 2t + 1: its two digits; B column g: row g / 2's digit g % 2). K slot 4t + i of a sub-block's
// mma is element 8t + i, slot 16 + 4t + i element 8t + 4 + i (the lane's eight consecutive quant
// bytes).
// SwiGLU: A rows g are gate rows, g + 8 up rows, of output j0 + g. Grouped: blockIdx.y is the group.
// staged (grouped): the block's 16 weight rows are copied into shared memory by the copy engine
// at its start (one bulk copy a row, rows 32 bytes apart beyond their length), as matvec's staged
// grouped products do; the lanes then read them from there.
// quantize (grouped, not SwiGLU): x comes as fp32 rows (x_f32); for each of its chunks a warp
// quantises the pass's rows' block itself (digits_of_lane, the producer's bits) into shared memory,
// laid out as the B fragments are read: [sub-block j][lane] 8 bytes.
// Staged blocks are held to 64 registers (8 blocks an SM): 16 rows' gate/up 50.4 us, against 54.3
// at ptxas's own choice (56, with spills) and 52.8 at 80 (one block asked for).
// route (staged SwiGLU, one-row steps): the block routes the row itself (route_one_group) before the
// PDL wait instead of reading moe_route's groups after it.
// stride (staged, producer digits, moe_route's groups): block row y takes groups y, y + gridDim.y, ...
// (matvec_digits_args::group_rows), the next one's range read while this one is multiplied.
template <int W, bool swiglu, bool grouped, bool staged = false, bool quantize = false, bool one = false, bool route = false, int P = 1,
          bool stride = false, bool tma = false>
__global__ void __launch_bounds__(W * 32, staged ? 8 : 0) matvec_digits_kernel(const matvec_digits_args a, const __grid_constant__ swiglu_maps maps) {
    static_assert(!tma || (swiglu && staged), "matvec_digits: tensor copies are for the staged SwiGLU blocks");
    constexpr int D = digits_per_element;
    static_assert(!staged || grouped, "matvec_digits: staging is for grouped products");
    static_assert(!quantize || (grouped && !swiglu), "matvec_digits: in-kernel digits are for grouped plain products");
    static_assert(!route || (swiglu && staged && !one), "matvec_digits: in-kernel routing is for staged SwiGLU products");
    static_assert(P == 1 || (!swiglu && !staged && !quantize && !route), "matvec_digits: passes together are for plain products of producer digits");
    static_assert(!stride || (staged && !quantize && !one && !route), "matvec_digits: striding blocks are for staged products of moe_route's groups");
    __shared__ float s_rprob[route ? 32 * route_one_epl : 1];
    __shared__ uint16_t s_rcand[route ? route_cand_cap : 1];
    __shared__ int s_rsel[route ? 32 : 1], s_rgroup[2];
    __shared__ float s_rw[route ? 32 : 1];
    __shared__ float s_red[W - 1][P][2][32];
    __shared__ uint64_t s_bar;
    __shared__ __align__(16) uint8_t s_qd[quantize ? W : 1][quantize ? digits_pass * 256 * D : 1];
    __shared__ __align__(16) uint16_t s_qsums[quantize ? W : 1][quantize ? digits_pass * 16 : 1];
    __shared__ float s_qscale[quantize ? W : 1][digits_pass];
    extern __shared__ __align__(16) uint8_t s_w[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    constexpr int tile_out = swiglu ? 8 : 16;
    const int j0 = blockIdx.x * tile_out, n_blocks = a.n_in / 256;
    const int64_t row_bytes = int64_t(n_blocks) * 144;
    const bool one_copy = staged_in_one_copy(swiglu, n_blocks, j0, a.n_out);
    const int64_t s_pitch = one_copy ? row_bytes : row_bytes + 32;
    int begin = 0, end = a.n_rows, mat = 0, y_pair = 0, gi = blockIdx.y;
    const uint8_t *rlo = nullptr, *rhi = nullptr;
    // tma: the stage 1024-byte aligned (the launch adds 1 KiB), gate rows then up rows, swizzled.
    [[maybe_unused]] const int lines = int(row_bytes >> 7);
    [[maybe_unused]] uint8_t *s_box = s_w;
    if constexpr (tma) s_box = s_w + ((1024u - (shared_addr(s_w) & 1023u)) & 1023u);
    auto load_lo = [&](int c) {
        if constexpr (tma) return load_q4_k_lane_swizzled(s_box, g, lines, c, t);
        else return load_q4_k_lane(rlo, c, t);
    };
    auto load_hi = [&](int c) {
        if constexpr (tma) return load_q4_k_lane_swizzled(s_box + 8 * row_bytes, g, lines, c, t);
        else return load_q4_k_lane(rhi, c, t);
    };
    auto resolve_rows = [&]() {
        rlo = tile_row<swiglu>(a, mat, j0, g, row_bytes);
        rhi = tile_row<swiglu>(a, mat, j0, g + 8, row_bytes);
    };
    // Grouped: the group's weight rows, and (staged) their copies issued.
    auto stage_group = [&]() {
        resolve_rows();
        if constexpr (staged) {
            // The barrier was made at the kernel's start: the expected bytes and the copies may
            // come in either order (its phase waits for this one arrival as well).
            if (threadIdx.x == 0) mbar_expect(&s_bar, uint32_t(16 * row_bytes));
            if constexpr (tma) {
                if (threadIdx.x == 0) {
                    tensor_copy_4d_to_shared(s_box, &maps.gate, 0, 0, j0, mat, &s_bar);
                    tensor_copy_4d_to_shared(s_box + 8 * row_bytes, &maps.up, 0, 0, j0, mat, &s_bar);
                }
                return;
            }
            // Row r (A row r of the tile: gate rows, then up rows; or the 16 rows) from lane r / W of warp r % W.
            const int r = lane * W + warp;
            if (one_copy) {
                if (r == 0) bulk_copy_to_shared(s_w, tile_row<swiglu>(a, mat, j0, 0, row_bytes), uint32_t(16 * row_bytes), &s_bar);
            } else if (r < 16) {
                bulk_copy_to_shared(s_w + r * s_pitch, tile_row<swiglu>(a, mat, j0, r, row_bytes), uint32_t(row_bytes), &s_bar);
            }
            rlo = s_w + g * s_pitch;
            rhi = s_w + (g + 8) * s_pitch;
        }
    };
    // Grouped: the block's (first) group, then stage_group.
    auto start_group = [&]() {
        if constexpr (route) {
            if (!route_one_group(a, gi, s_rprob, s_rcand, s_rsel, s_rw, s_rgroup, begin, end, mat, y_pair)) return false;
        } else if constexpr (one) {
            if (!read_one_group(a, gi, begin, end, mat)) return false;
        } else if (!read_group(a.n_groups, a.group_off, a.group_mat, gi, begin, end, mat)) {
            return false;
        }
        stage_group();
        return true;
    };
    // Staged: the copies' barrier made before anything waits (for the first blocks, while the
    // predecessor finishes), so no block barrier stands between the group's read and its copies.
    if constexpr (staged) {
        if (threadIdx.x == 0) {
            mbar_init(&s_bar);
            mbar_fence_init();
        }
        __syncthreads();
    }
    // The first chunk's weights loaded before the wait on the predecessor: dense products, and
    // grouped ones whose groups are settled (streamed; staged ones issue their copies).
    // Routing that publishes moe_route's outputs (route_out) reads logits of the launch just before:
    // after the wait, and the next launch triggered only after it.
    const bool publish = route && a.route_out.ids != nullptr;
    const bool early = (!grouped || a.groups_settled || one || route) && !publish;
    q4_k_lane lo, hi;
    if (early) {
        if constexpr (grouped) {
            if (!start_group()) {
                // Routed here and nothing to do: still after moe_route, so that this grid never
                // completes before the launch whose groups the next launches read.
                if constexpr (route) pdl_wait();
                return;
            }
        } else {
            resolve_rows();
        }
        if (!staged && warp < n_blocks) {
            lo = load_q4_k_lane(rlo, warp, t);
            hi = load_q4_k_lane(rhi, warp, t);
        }
    }
    pdl_wait();
    if (!publish) pdl_trigger();
    if constexpr (grouped) {
        if (!early) {
            const bool live = start_group();
            if (publish) pdl_trigger();
            if (!live) return;
        }
    }
    auto x_row = [&](int i) {
        if constexpr (route) return 0;  // the step's one row
        const int r = i < end ? i : begin;
        return a.x_rows ? a.x_rows[r] : r;
    };
    auto y_row = [&](int i) {
        if constexpr (route) return y_pair;
        return a.y_rows ? a.y_rows[i] : i;
    };
    // Staged, producer digits: the first pass's row indices and the warp's first chunk of
    // activations are fetched while the weights are still on their way.
    constexpr bool x_ahead = staged && !quantize && P == 1;
    x_chunk xv;
    for (int round = 0;; ++round) {  // one round a group (stride), else one
        // Stride: the next group's range and matrix, read now and used after this group's passes.
        const int g_next = gi + int(gridDim.y);
        int n_next = 0, b_next = 0, e_next = 0, m_next = 0;
        if constexpr (stride)
            if (g_next < a.max_groups) n_next = read_group_raw(a.n_groups, a.group_off, a.group_mat, g_next, b_next, e_next, m_next);
        if constexpr (x_ahead)
            if (warp < n_blocks) xv = load_x_chunk(a.x, a.n_in, x_row(begin + (g >> 1)), x_row(begin + t), warp, g, t);
        if constexpr (stride)
            mbar_wait_parity(&s_bar, uint32_t(round & 1));
        else if constexpr (staged)
            mbar_wait_first(&s_bar);
        if constexpr (!x_ahead && !quantize) {
            // Producer digits read in the loop: P passes of rows at a time (1 unless
            // matvec_digits_args::passes_together asks for more), each chunk's weights loaded and
            // unpacked once for the P passes' rows. Every output sums the same digit_chunk terms in
            // the same chunk order, then the warps in the same order, whatever P: the same bits.
            for (int p0 = begin; p0 < end; p0 += P * digits_pass) {
                float out[P][2];
                int xr[P], xs[P];
#pragma unroll
                for (int q = 0; q < P; ++q) {
                    out[q][0] = out[q][1] = 0.0f;
                    xr[q] = x_row(p0 + q * digits_pass + (g >> 1));
                    xs[q] = x_row(p0 + q * digits_pass + t);
                }
                for (int c = warp; c < n_blocks; c += W) {
                    if (!(early && !staged && p0 == begin && c == warp)) {
                        lo = load_lo(c);
                        hi = load_hi(c);
                    }
#pragma unroll
                    for (int q = 0; q < P; ++q) {
                        if (p0 + q * digits_pass >= end) break;  // the same for the whole block
                        const int8_t *xd = a.x.digits + int64_t(xr[q]) * D * a.n_in + (c * 32 + t) * 8 * D + 8 * (g & 1);
                        const uint2 sb = *reinterpret_cast<const uint2 *>(a.x.sums + (int64_t(xr[q]) * n_blocks + c) * 16 + t * 4);
                        const float sx = a.x.scales[int64_t(xs[q]) * n_blocks + c];
                        digit_chunk(lo, hi, [&](int j) { return *reinterpret_cast<const uint2 *>(xd + j * 32 * D); }, sb, sx, t, out[q]);
                    }
                }
                if (warp > 0)
#pragma unroll
                    for (int q = 0; q < P; ++q)
#pragma unroll
                        for (int e = 0; e < 2; ++e) s_red[warp - 1][q][e][lane] = out[q][e];
                __syncthreads();
                if (warp == 0)
#pragma unroll
                    for (int q = 0; q < P; ++q) {
                        if (p0 + q * digits_pass >= end) break;
#pragma unroll
                        for (int e = 0; e < 2; ++e)
#pragma unroll
                            for (int v = 0; v < W - 1; ++v) out[q][e] = __fadd_rn(out[q][e], s_red[v][q][e][lane]);
                        store_outputs<swiglu, one>(a, out[q], j0, g, t, p0 + q * digits_pass, end, y_row);
                    }
                __syncthreads();
            }
        } else {
            // Activations fetched ahead (staged) or digits made here (quantize): a pass at a time.
            for (int p0 = begin; p0 < end; p0 += digits_pass) {
                const int xr = x_row(p0 + (g >> 1));  // B column g (past the rows: a real row, unused)
                const int xs = x_row(p0 + t);         // C columns 2t, 2t + 1
                float out[2] = {0.0f, 0.0f};
                for (int c = warp; c < n_blocks; c += W) {
                    if (!(early && !staged && p0 == begin && c == warp)) {
                        lo = load_lo(c);
                        hi = load_hi(c);
                    }
                    uint2 sb;
                    float sx;
                    if constexpr (x_ahead) {
                        if (!(p0 == begin && c == warp)) xv = load_x_chunk(a.x, a.n_in, xr, xs, c, g, t);
                        sb = xv.sb;
                        sx = xv.sx;
                    } else {
                        // The pass's rows' block c (columns past its rows keep stale values: never written out).
                        uint8_t *qd = s_qd[warp];
                        __syncwarp();
                        const int n_cols = end - p0 < digits_pass ? end - p0 : digits_pass;
                        for (int i = 0; i < n_cols; ++i) {
                            const float *xs = a.x_f32 + int64_t(x_row(p0 + i)) * a.x_f32_stride + c * 256 + 8 * lane;
                            const float4 f0 = *reinterpret_cast<const float4 *>(xs), f1 = *reinterpret_cast<const float4 *>(xs + 4);
                            const float v[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
                            const lane_digits ld = digits_of_lane(v);  // this lane: sub-block g, group t
#pragma unroll
                            for (int d = 0; d < D; ++d)  // B column 2i + d: lane (2i + d) * 4 + t of sub-block g
                                *reinterpret_cast<uint2 *>(qd + (g * 32 + (D * i + d) * 4 + t) * 8) = make_uint2(ld.wd[d][0], ld.wd[d][1]);
                            if (t == 0) {
                                uint16_t *sums = s_qsums[warp] + i * 16 + (g >> 1) * 4 + (g & 1);
                                digit_sum_halves(ld.sum_j, sums[0], sums[2]);
                            }
                            if (lane == 0) s_qscale[warp][i] = ld.scale;
                        }
                        __syncwarp();
                        sb = *reinterpret_cast<const uint2 *>(s_qsums[warp] + (g >> 1) * 16 + t * 4);
                        sx = s_qscale[warp][t];
                    }
                    digit_chunk(
                        lo, hi,
                        [&](int j) {
                            if constexpr (x_ahead) return xv.b[j];
                            return *reinterpret_cast<const uint2 *>(s_qd[warp] + (j * 32 + lane) * 8);
                        },
                        sb, sx, t, out);
                }
                if (warp > 0)
#pragma unroll
                    for (int e = 0; e < 2; ++e) s_red[warp - 1][0][e][lane] = out[e];
                __syncthreads();
                if (warp == 0) {
#pragma unroll
                    for (int e = 0; e < 2; ++e)
#pragma unroll
                        for (int v = 0; v < W - 1; ++v) out[e] = __fadd_rn(out[e], s_red[v][0][e][lane]);
                    store_outputs<swiglu, one>(a, out, j0, g, t, p0, end, y_row);
                }
                __syncthreads();
            }
        }
        if constexpr (!stride) {
            break;
        } else {
            // Every warp is past this group's passes (their last barrier; this one if it had none):
            // the stage is free for the next group's copies, the barrier's next phase.
            __syncthreads();
            if (g_next >= a.max_groups || g_next >= n_next) return;
            gi = g_next;
            begin = b_next;
            end = e_next;
            mat = m_next;
            stage_group();
        }
    }
}

}  // namespace

void digits_quantize(const digits_quantize_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.x && a.out.digits && a.out.scales && a.out.sums && a.n > 0 && a.n % 256 == 0 && a.n_rows >= 0,
                        "digits_quantize: bad arguments (n a multiple of 256)");
    if (a.n_rows == 0) return;
    const dim3 grid((a.n / 256 + quant_warps - 1) / quant_warps, a.n_rows);
    launch_pdl(digits_quantize_kernel, grid, dim3(quant_warps * 32), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

namespace {
// A matrix's rows as (128-byte line bytes, lines, rows, matrices); a box: 8 rows' whole rows.
CUtensorMap tile_map(const void *w, int32_t n_in, int32_t n_out) {
    const cuuint64_t row_bytes = cuuint64_t(n_in / 256) * 144, lines = row_bytes / 128;
    const cuuint64_t dims[4] = {128, lines, cuuint64_t(n_out), cuuint64_t(1) << 16};
    const cuuint64_t strides[3] = {128, row_bytes, row_bytes * cuuint64_t(n_out)};
    const cuuint32_t box[4] = {128, cuuint32_t(lines), 8, 1};
    return byte_tensor_map(w, 4, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, "matvec_digits");
}
swiglu_maps tma_maps(const matvec_digits_args &a) {
    swiglu_maps m;
    m.gate = tile_map(a.w, a.n_in, a.n_out);
    m.up = tile_map(a.w_up, a.n_in, a.n_out);
    return m;
}
}  // namespace

void matvec_digits(const matvec_digits_args &a, cudaStream_t stream) {
    const bool swiglu = a.w_up != nullptr, grouped = a.group_off != nullptr || a.one_group, quantize = a.x_f32 != nullptr;
    TANDEM_CUDA_REQUIRE(!a.one_group || (!a.group_off && !a.x_rows && !a.y_rows && !quantize && !swiglu),
                        "matvec_digits: one_group is a plain product of rows by index and producer digits (no groups, no row maps, "
                        "no fp32 rows, no SwiGLU)");
    TANDEM_CUDA_REQUIRE(!a.accumulate || !swiglu, "matvec_digits: SwiGLU and accumulate do not combine");
    TANDEM_CUDA_REQUIRE(a.n_extra == 0, "matvec_digits: extra matrices are matmul_digits' (one launch a matrix here)");
    TANDEM_CUDA_REQUIRE(a.group_rows >= 0, "matvec_digits: group_rows is 0 (automatic) or positive");
    TANDEM_CUDA_REQUIRE(a.passes_together == -1 || a.passes_together == 0 || a.passes_together == 1 || a.passes_together == 2 ||
                            a.passes_together == 4,
                        "matvec_digits: passes_together is -1, 0, 1, 2 or 4");
    TANDEM_CUDA_REQUIRE(a.w && a.y && a.n_in > 0 && a.n_in % 256 == 0 && a.n_out > 0 && a.n_rows >= 0,
                        "matvec_digits: bad arguments (n_in a multiple of 256)");
    TANDEM_CUDA_REQUIRE(quantize || (a.x.digits && a.x.scales && a.x.sums), "matvec_digits: no digit rows");
    TANDEM_CUDA_REQUIRE(!quantize || (grouped && !swiglu && a.x_f32_stride >= a.n_in && a.x_f32_stride % 4 == 0 &&
                                      reinterpret_cast<uintptr_t>(a.x_f32) % 16 == 0),
                        "matvec_digits: fp32 rows are for grouped plain products (stride a multiple of 4, 16-byte aligned)");
    TANDEM_CUDA_REQUIRE(!a.group_off || (a.n_groups && a.group_mat && a.max_groups > 0), "matvec_digits: incomplete groups");
    TANDEM_CUDA_REQUIRE(!a.route_logits || (swiglu && a.group_off && !quantize && a.solo_warps == 0 && a.route_slots &&
                                            matvec_digits_route_applies(a.route_n_expert, a.route_k) && a.max_groups == a.route_k),
                        "matvec_digits: in-kernel routing is for one-row grouped SwiGLU products (k <= 32, up to 128 experts, "
                        "max_groups k)");
    TANDEM_CUDA_REQUIRE(!a.route_out.ids || (a.route_logits && a.route_out.weights && a.route_out.group_expert &&
                                             a.route_out.group_off && a.route_out.n_groups && a.route_out.pair_x && a.route_out.pair_y),
                        "matvec_digits: published routing needs in-kernel routing and every moe_route output");
    if (!a.group_off && a.n_rows == 0) return;  // dense, or one group (which has no group arrays)
    const matvec_digits_plan p = plan_matvec_digits(a, current_device_facts());
    using kind = matvec_digits_plan::kernel;
    const dim3 grid(p.grid_x, p.grid_y);
    const swiglu_maps no_maps{};
    auto go = [&](auto kernel) { launch_pdl_smem(kernel, grid, dim3(p.warps * 32), p.smem_bytes, stream, a, no_maps); };
    if (p.variant == kind::one_group) {
        // Dense products as one group (prompt rows' Q, K, V and wo): instances of their own, so the
        // decode products' code stays as it was.
        if (p.k_split == 3)
            p.staged                   ? go(matvec_digits_kernel<3, false, true, true, false, true>)
            : p.passes_together == 4 ? go(matvec_digits_kernel<3, false, true, false, false, true, false, 4>)
            : p.passes_together == 2 ? go(matvec_digits_kernel<3, false, true, false, false, true, false, 2>)
                                     : go(matvec_digits_kernel<3, false, true, false, false, true>);
        else
            p.staged                   ? go(matvec_digits_kernel<4, false, true, true, false, true>)
            : p.passes_together == 4 ? go(matvec_digits_kernel<4, false, true, false, false, true, false, 4>)
            : p.passes_together == 2 ? go(matvec_digits_kernel<4, false, true, false, false, true, false, 2>)
                                     : go(matvec_digits_kernel<4, false, true, false, false, true>);
    } else if (p.variant == kind::solo) {
        digit_tile::launch_solo(a, p, stream);  // whole tiles a warp (matvec_digits_solo.cu)
    } else if (swiglu && p.tensor_copies) {
        auto go_tma = [&](auto kernel) { launch_pdl_smem(kernel, grid, dim3(p.warps * 32), p.smem_bytes, stream, a, tma_maps(a)); };
        a.route_logits   ? go_tma(matvec_digits_kernel<4, true, true, true, false, false, true, 1, false, true>)
        : p.group_rows > 0 ? go_tma(matvec_digits_kernel<4, true, true, true, false, false, false, 1, true, true>)
                           : go_tma(matvec_digits_kernel<4, true, true, true, false, false, false, 1, false, true>);
    } else if (swiglu && p.staged && a.route_logits) {
        go(matvec_digits_kernel<4, true, true, true, false, false, true>);
    } else if (swiglu && p.staged) {
        p.group_rows > 0 ? go(matvec_digits_kernel<4, true, true, true, false, false, false, 1, true>)
                         : go(matvec_digits_kernel<4, true, true, true>);
    } else if (swiglu) {
        grouped ? go(matvec_digits_kernel<4, true, true>) : go(matvec_digits_kernel<4, true, false>);
    } else if (grouped && p.k_split == 3) {
        // Three super-blocks a row (an expert's down of width 768): three warps, none idle.
        if (quantize)
            p.staged ? go(matvec_digits_kernel<3, false, true, true, true>) : go(matvec_digits_kernel<3, false, true, false, true>);
        else
            p.staged ? go(matvec_digits_kernel<3, false, true, true>) : go(matvec_digits_kernel<3, false, true>);
    } else if (grouped) {
        if (quantize)
            p.staged ? go(matvec_digits_kernel<4, false, true, true, true>) : go(matvec_digits_kernel<4, false, true, false, true>);
        else
            p.staged ? go(matvec_digits_kernel<4, false, true, true>) : go(matvec_digits_kernel<4, false, true>);
    } else {
        p.warps == 16 ? go(matvec_digits_kernel<16, false, false>) : go(matvec_digits_kernel<4, false, false>);
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
