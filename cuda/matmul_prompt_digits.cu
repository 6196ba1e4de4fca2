// cuda/matmul_prompt_digits.cu - the grouped Q4_K digit products of prompt steps (matmul_digits,
// cuda/matvec_digits.h), and dense ones as one group: block tiles of 32 pairs of one group x 128
// weight rows (64 for launches too small to fill the GPU; for still smaller ones, a tile's K
// partials on a cluster of blocks) on mma.m16n8k32 (u8 quants x s8 digits), with matvec_digits'
// arithmetic output by output.
//
// Work per block and K step (one block of 256 elements): the 128 weight rows' raw Q4_K bytes (144
// a row), the 32 pairs' digits (512 bytes a row), digit sums (32) and scale (4) arrive by cp.async
// in one of two stages while the other is computed; one barrier a step. A warp
// computes 32 weight rows x 16 pairs. Per 32-element sub-block its A fragments are the staged quant
// bytes as they are, nibbles masked (K permuted inside the sub-block as matvec_digits does: lane
// t's slots 4t .. and 16 + 4t .. hold elements 8t .. 8t + 7, eight consecutive bytes), and a
// pair's B fragments for both digits are one 16-byte load; one mma a digit, the sub-block scales
// applied as integer multiply-adds. Per block of 256: the mins on one bf16 mma and digit_fold. The
// blocks are taken in matvec_digits' partial order (v, v + V, ..., then v + 1, ...: each output the
// same partials added in the same order), so a pair's outputs are bitwise the decode kernels'.
// No weights are converted in shared memory and no warp waits on another except at the step's
// barrier: the conversion pass and its barriers are what bound the bf16 prompt tiles.
#include "matvec_digits.h"

#include "cp_async.cuh"
#include "cuda_check.h"
#include "digits.cuh"
#include "launch.cuh"
#include "matmul_prompt_tile.cuh"
#include "mma_bf16.cuh"
#include "quant_decode.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>

namespace tandem::cuda {
namespace {

constexpr int tile_m = 32;   // pairs a block tile: two blocks an SM (shared memory), so one's start and
                             // end overlap the other's steps (`test_cuda_matmul_prompt "[.bench]"`: ~8%
                             // faster than 64 pairs at one block an SM)
constexpr int warps_r = 2;
constexpr int w_frags = 2, r_frags = 2;  // a warp: 2 m16 weight tiles x 2 n8 pair tiles
constexpr int n_stages = 2;
constexpr int w_pitch = 160;  // bytes a staged weight row (144 used): a half-warp's 8-byte loads (rows g = 0..3) in different banks
constexpr int x_pitch = 576;  // bytes a staged pair's digits (512 used): a quarter-warp's 16-byte loads (rows g, g + 1) in different banks
constexpr int w_pieces = 144 / 16;  // 16-byte copies a weight row a step
constexpr int x_bytes = tile_m * x_pitch, sum_bytes = tile_m * 32, scale_bytes = tile_m * 4;
constexpr int acc_floats = w_frags * r_frags * 4;  // a thread's outputs
// A block tile of WW warps across the weight rows (times warps_r across the pairs): tile_n = 32 WW
// weight rows (SwiGLU: runs of 8 gate rows, then their 8 up rows). 128 rows normally; 64 when a
// launch has too few 128-row tiles to fill the GPU (prompt chunks of tens of rows: the same
// arithmetic per output, so the same bits).
template <int WW>
struct tile_shape {
    static constexpr int tile_n = 32 * WW, warps_w = WW, n_threads = 32 * WW * warps_r;
    static constexpr int w_bytes = tile_n * w_pitch;
    static constexpr int stage_bytes = w_bytes + x_bytes + sum_bytes + scale_bytes;
    static constexpr size_t smem_stages = size_t(n_stages) * stage_bytes;
    static constexpr size_t smem_bytes = smem_stages + 2 * size_t(acc_floats) * n_threads * sizeof(float);
    static_assert(16 * w_frags * warps_w == tile_n && 8 * r_frags * warps_r == tile_m, "warps and tile disagree");
    static_assert(stage_bytes % 16 == 0 && (tile_m * 32) % n_threads == 0 && 3 * tile_m <= n_threads,
                  "stages 16-byte aligned, digit copies even, the sums and scales one copy a thread");
};

// ksplit (one-group plain products, launched in clusters of V blocks along z): block z makes only
// partial v = z; block 0 of the cluster adds the V partials in order from the blocks' shared
// memory and stores. Otherwise one block makes every partial.
template <bool swiglu, int V, int WW, bool ksplit = false>
__global__ void __launch_bounds__(tile_shape<WW>::n_threads, 2) matmul_digits_kernel(const matvec_digits_args a) {
    static_assert(!ksplit || !swiglu, "matmul_digits: the K split is for plain products");
    using shape = tile_shape<WW>;
    constexpr int tile_n = shape::tile_n, warps_w = shape::warps_w, n_threads = shape::n_threads, w_bytes = shape::w_bytes;
    constexpr int stage_bytes = shape::stage_bytes;
    constexpr size_t smem_stages = shape::smem_stages;
    constexpr int D = digits_per_element;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int32_t s_xrow[tile_m];          // each pair's digit row (-1: past the tile's pairs)
    __shared__ const uint8_t *s_wrow[tile_n];   // each tile row's weight row (nullptr: past n_out)
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    pdl_wait();  // groups, pairs and digits come from the launches before
    pdl_trigger();
    // The tile's pairs, matrix and outputs, and the partial order below, are what
    // prompt_tile::resolve_digit_tile, fill_digit_rows and digit_block_in_order compute for the
    // warpgroup tiles; written out here because calling them moved ptxas's allocation of the SwiGLU
    // instance (20 bytes of spill stores instead of 4) in this register-bound kernel.
    int begin = 0, end = 0, mat = 0, m0 = 0;
    if (a.one_group) {
        end = a.n_rows;
        m0 = int(blockIdx.y) * tile_m;
        if (m0 >= end) return;
    } else if (!prompt_tile::find_group_tile<tile_m>(a, blockIdx.y, begin, end, mat, m0)) {
        return;
    }
    const int rows_here = min(tile_m, end - m0);
    constexpr int outs_per_block = swiglu ? tile_n / 2 : tile_n;
    // The block's matrix: the first, or an extra one (one_group) where the grid continues.
    const void *w_mat = a.w;
    int n_out = a.n_out, bx = int(blockIdx.x);
    float *y_mat = a.y;
    int64_t y_stride = a.y_stride;
    for (int e = 0, first = (n_out + outs_per_block - 1) / outs_per_block; e < a.n_extra && bx >= first; ++e) {
        bx -= first;
        w_mat = a.extra[e].w;
        n_out = a.extra[e].n_out;
        y_mat = a.extra[e].y;
        y_stride = a.extra[e].y_stride;
        first = (n_out + outs_per_block - 1) / outs_per_block;
    }
    const int j0 = bx * outs_per_block, n_blocks = a.n_in / 256;
    const int64_t row_bytes = int64_t(n_blocks) * 144;
    for (int r = tid; r < tile_m; r += n_threads) s_xrow[r] = r < rows_here ? (a.x_rows ? a.x_rows[m0 + r] : m0 + r) : -1;
    for (int wr = tid; wr < tile_n; wr += n_threads) {
        const int j = swiglu ? j0 + 8 * (wr >> 4) + (wr & 7) : j0 + wr;
        const void *base = swiglu && (wr & 8) ? a.w_up : w_mat;
        s_wrow[wr] = j < n_out ? static_cast<const uint8_t *>(base) + (int64_t(mat) * n_out + j) * row_bytes : nullptr;
    }
    __syncthreads();

    // The i-th block of 256 in partial order: v = 0's blocks (0, V, 2V, ...), then v = 1's, ...
    // (ksplit: this block's partial only).
    const int v_first = ksplit ? int(blockIdx.z) : 0, v_end = ksplit ? v_first + 1 : V;
    const int n_steps = ksplit ? (v_first < n_blocks ? (n_blocks - v_first + V - 1) / V : 0) : n_blocks;
    auto block_at = [&](int i) {
        if constexpr (ksplit) {
            return v_first + i * V;
        } else {
            for (int v = 0; v < V; ++v) {
                const int cnt = v < n_blocks ? (n_blocks - v + V - 1) / V : 0;
                if (i < cnt) return v + i * V;
                i -= cnt;
            }
            return 0;
        }
    };
    // Step i's copies into stage i % n_stages (a group committed even past the last step, so the
    // wait below always counts the same).
    auto issue = [&](int i) {
        if (i < n_steps) {
            const int c = block_at(i);
            uint8_t *st = smem + (i % n_stages) * stage_bytes;
            for (int p = tid; p < tile_n * w_pieces; p += n_threads) {
                const int r = p / w_pieces, part = p - w_pieces * r;
                const uint8_t *src = s_wrow[r];
                cp_async_16(st + r * w_pitch + 16 * part, src ? src + int64_t(c) * 144 + 16 * part : s_wrow[0], src ? 16 : 0);
            }
            uint8_t *xs = st + w_bytes;
#pragma unroll
            for (int k = 0; k < tile_m * 32 / n_threads; ++k) {
                const int p = tid + k * n_threads, r = p >> 5, part = p & 31, xr = s_xrow[r];
                const int8_t *src = a.x.digits + (xr >= 0 ? int64_t(xr) * D * a.n_in + c * 256 * D + 16 * part : 0);
                cp_async_16(xs + r * x_pitch + 16 * part, src, xr >= 0 ? 16 : 0);
            }
            if (tid < 2 * tile_m) {
                const int r = tid >> 1, part = tid & 1, xr = s_xrow[r];
                const uint16_t *src = a.x.sums + (xr >= 0 ? (int64_t(xr) * n_blocks + c) * 16 + 8 * part : 0);
                cp_async_16(st + w_bytes + x_bytes + r * 32 + 16 * part, src, xr >= 0 ? 16 : 0);
            } else if (tid < 3 * tile_m) {
                const int r = tid - 2 * tile_m, xr = s_xrow[r];
                const float *src = a.x.scales + (xr >= 0 ? int64_t(xr) * n_blocks + c : 0);
                cp_async_4(st + w_bytes + x_bytes + sum_bytes + 4 * r, src, xr >= 0 ? 4 : 0);
            }
        }
        cp_async_commit();
    };

    const int w0 = 32 * (warp % warps_w), r0 = 16 * (warp / warps_w);  // the warp's first weight row and pair
    const int r_live = min(r_frags, max(0, (rows_here - r0 + 7) / 8));  // its n8 pair tiles that hold pairs
    // The partials' running sum, per thread in shared memory (registers hold the partial being made):
    // [w_frags * r_frags * 4][n_threads], consecutive threads' values adjacent.
    float *const total = reinterpret_cast<float *>(smem + smem_stages);
    float *const part = total + acc_floats * n_threads;  // the partial being made, likewise
    auto at = [&](int wf, int rf, int e) { return ((wf * r_frags + rf) * 4 + e) * n_threads + tid; };

    // One block of 256 into part: element e of tile (wf, rf) is weight row w0 + 16 wf + g + 8 (e >> 1)
    // and pair r0 + 8 rf + 2t + (e & 1). Pairs past the tile's have zero digits (computed, never stored).
    auto compute = [&](const uint8_t *st) {
        const uint8_t *ws = st, *xs = st + w_bytes;
        const uint16_t *ss = reinterpret_cast<const uint16_t *>(st + w_bytes + x_bytes);
        const float *cs = reinterpret_cast<const float *>(st + w_bytes + x_bytes + sum_bytes);
        auto w_row = [&](int wf, int h) { return ws + (w0 + 16 * wf + g + 8 * h) * w_pitch; };
        int acc[w_frags][r_frags][D][4];
#pragma unroll
        for (int wf = 0; wf < w_frags; ++wf)
#pragma unroll
            for (int rf = 0; rf < r_frags; ++rf)
#pragma unroll
                for (int d = 0; d < D; ++d) acc[wf][rf][d][0] = acc[wf][rf][d][1] = acc[wf][rf][d][2] = acc[wf][rf][d][3] = 0;
        // Two halves of the block (sub-blocks 0-3, 4-7), a loop: each half's scale bytes (get_scale_min_k4's
        // values of rows g and g + 8) in one word a row, so every byte index below is a constant.
#pragma unroll 1
        for (int half = 0; half < 2; ++half) {
            uint32_t sc[w_frags][2];
#pragma unroll
            for (int wf = 0; wf < w_frags; ++wf)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint4 hd = *reinterpret_cast<const uint4 *>(w_row(wf, h));
                    sc[wf][h] = half ? (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u) : hd.y & 0x3F3F3F3Fu;
                }
#pragma unroll
            for (int c2 = 0; c2 < 2; ++c2) {  // 32 quant bytes: sub-blocks 2cc (low nibbles) and 2cc + 1 (high)
                const int cc = 2 * half + c2;
                uint2 q[w_frags][2];
#pragma unroll
                for (int wf = 0; wf < w_frags; ++wf)
#pragma unroll
                    for (int h = 0; h < 2; ++h) q[wf][h] = *reinterpret_cast<const uint2 *>(w_row(wf, h) + 16 + 32 * cc + 8 * t);
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int jh = 2 * c2 + hh, j = 4 * half + jh;  // sub-block j, byte jh of the half's scale words
                    uint4 xb[r_frags];  // pair g's digit 0 (x, y) and digit 1 (z, w) of elements 8t .. 8t + 7
#pragma unroll
                    for (int rf = 0; rf < r_frags; ++rf)
                        xb[rf] = *reinterpret_cast<const uint4 *>(xs + (r0 + 8 * rf + g) * x_pitch + 64 * j + 16 * t);
#pragma unroll
                    for (int wf = 0; wf < w_frags; ++wf) {
                        const uint32_t av[4] = {nibbles(q[wf][0].x, hh), nibbles(q[wf][1].x, hh), nibbles(q[wf][0].y, hh),
                                                nibbles(q[wf][1].y, hh)};
                        const int s_lo = byte_of(sc[wf][0], jh), s_hi = byte_of(sc[wf][1], jh);
#pragma unroll
                        for (int rf = 0; rf < r_frags; ++rf) {
#pragma unroll
                            for (int d = 0; d < D; ++d) {
                                int p[4];
                                mma_u8s8(p, av, d ? xb[rf].z : xb[rf].x, d ? xb[rf].w : xb[rf].y);
                                acc[wf][rf][d][0] += s_lo * p[0];
                                acc[wf][rf][d][1] += s_lo * p[1];
                                acc[wf][rf][d][2] += s_hi * p[2];
                                acc[wf][rf][d][3] += s_hi * p[3];
                            }
                        }
                    }
                }
            }
        }
        // Mins: sum_j m_j S_j on one bf16 mma (K slots j and 8 + j: m_j times S_j's hi and lo), as
        // matvec_digits takes them; then each element's fold.
        const int sh16 = 16 * (t & 1);
#pragma unroll
        for (int wf = 0; wf < w_frags; ++wf) {
            const uint4 hl = *reinterpret_cast<const uint4 *>(w_row(wf, 0)), hh = *reinterpret_cast<const uint4 *>(w_row(wf, 1));
            const uint32_t mn_lo = t < 2 ? hl.z & 0x3F3F3F3Fu : ((hl.w >> 4) & 0x0F0F0F0Fu) | ((hl.z >> 2) & 0x30303030u);
            const uint32_t mn_hi = t < 2 ? hh.z & 0x3F3F3F3Fu : ((hh.w >> 4) & 0x0F0F0F0Fu) | ((hh.z >> 2) & 0x30303030u);
            const __nv_bfloat162 ml = __floats2bfloat162_rn(float((mn_lo >> sh16) & 0xFFu), float((mn_lo >> (sh16 + 8)) & 0xFFu));
            const __nv_bfloat162 mh = __floats2bfloat162_rn(float((mn_hi >> sh16) & 0xFFu), float((mn_hi >> (sh16 + 8)) & 0xFFu));
            const uint32_t ml_u = *reinterpret_cast<const uint32_t *>(&ml), mh_u = *reinterpret_cast<const uint32_t *>(&mh);
            const uint32_t am[4] = {ml_u, mh_u, ml_u, mh_u};
            const float d_lo = half_bits_to_float(hl.x), dm_lo = half_bits_to_float(hl.x >> 16);
            const float d_hi = half_bits_to_float(hh.x), dm_hi = half_bits_to_float(hh.x >> 16);
#pragma unroll
            for (int rf = 0; rf < r_frags; ++rf) {
                const uint2 sb = *reinterpret_cast<const uint2 *>(ss + (r0 + 8 * rf + g) * 16 + 4 * t);
                float cm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_bf16(cm, am, sb.x, sb.y);
                const float2 sx = *reinterpret_cast<const float2 *>(cs + r0 + 8 * rf + 2 * t);  // pairs 2t, 2t + 1
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    part[at(wf, rf, e)] = digit_fold(acc[wf][rf][0][e], acc[wf][rf][1][e], cm[e], e < 2 ? d_lo : d_hi, e < 2 ? dm_lo : dm_hi,
                                                     (e & 1) ? sx.y : sx.x, part[at(wf, rf, e)]);
            }
        }
    };

    for (int st = 0; st + 1 < n_stages; ++st) issue(st);  // the steps ahead of step 0
    int i = 0;
#pragma unroll 1
    for (int v = v_first; v < v_end; ++v) {
#pragma unroll
        for (int e = 0; e < acc_floats; ++e) part[e * n_threads + tid] = 0.0f;
#pragma unroll 1
        for (int c = v; c < n_blocks; c += V, ++i) {
            cp_async_wait_pending<n_stages - 2>();  // step i's copies (this thread's) are in
            __syncthreads();                        // everyone's are; stage (i - 1) % n_stages is free
            issue(i + n_stages - 1);
            if (r_live > 0) compute(smem + (i % n_stages) * stage_bytes);
        }
        // The partials added in order of v, as matvec_digits' warps (or a solo warp's partials) are.
        if constexpr (!ksplit) {
#pragma unroll
            for (int e = 0; e < acc_floats; ++e) {
                float &sum = total[e * n_threads + tid];
                sum = v == 0 ? part[e * n_threads + tid] : __fadd_rn(sum, part[e * n_threads + tid]);
            }
        }
    }
    cp_async_wait_pending<0>();  // no copy outlives the block
    if constexpr (ksplit) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        // The cluster's V blocks hold partials 0 .. V - 1 in their `part`; block 0 adds them in
        // order into its `total` (the same additions as above), the others wait until it has read.
        namespace cg = cooperative_groups;
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();
        if (cluster.block_rank() == 0) {
#pragma unroll
            for (int e = 0; e < acc_floats; ++e) total[e * n_threads + tid] = part[e * n_threads + tid];
            for (int v = 1; v < V; ++v) {
                const float *remote = cluster.map_shared_rank(part, v);
#pragma unroll
                for (int e = 0; e < acc_floats; ++e)
                    total[e * n_threads + tid] = __fadd_rn(total[e * n_threads + tid], remote[e * n_threads + tid]);
            }
        }
        cluster.sync();
        if (cluster.block_rank() != 0) return;
#else
        __trap();  // no clusters before sm_90: the launch never takes this instance there
#endif
    }

    auto total_at = [&](int wf, int rf, int e) { return total[at(wf, rf, e)]; };
    // SwiGLU: tile wf's rows g are the gates, g + 8 the ups, of output j0 + (w0 + 16 wf) / 2 + g.
#pragma unroll
    for (int rf = 0; rf < r_frags; ++rf)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
            const int lm = r0 + 8 * rf + 2 * t + e2;
            if (rf >= r_live || lm >= rows_here) continue;
            const int p = m0 + lm;
            float *y = y_mat + int64_t(a.y_rows ? a.y_rows[p] : p) * y_stride;
#pragma unroll
            for (int wf = 0; wf < w_frags; ++wf) {
                if constexpr (swiglu) {
                    const int jo = j0 + (w0 + 16 * wf) / 2 + g;
                    if (jo < n_out) y[jo] = digit_swiglu(total_at(wf, rf, e2), total_at(wf, rf, e2 + 2));
                } else {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int jo = j0 + w0 + 16 * wf + g + 8 * h;
                        const float v = total_at(wf, rf, e2 + 2 * h);
                        if (jo < n_out) y[jo] = a.accumulate ? __fadd_rn(y[jo], v) : v;
                    }
                }
            }
        }
}

template <bool swiglu, int V, int WW>
int col_blocks_of(const matvec_digits_args &a) {
    return prompt_tile::digit_col_blocks(a, swiglu ? tile_shape<WW>::tile_n / 2 : tile_shape<WW>::tile_n);
}

template <bool swiglu, int V, int WW>
void launch_digit_tiles(const matvec_digits_args &a, int m_tiles, cudaStream_t stream) {
    using shape = tile_shape<WW>;
    const int col_blocks = col_blocks_of<swiglu, V, WW>(a);
    if constexpr (!swiglu) {
        // The K split: one-group products whose tiles would leave a quarter of the SMs or more
        // without a block, on a GPU with clusters (sm_90: the same that takes PDL).
        // `bench --prompt 2048 --prefill-chunk 64` (and 96): +6-9%; from 128 blocks the split loses.
        const bool want = a.tile_k_blocks > 0 || (a.tile_k_blocks < 0 && 4 * col_blocks * m_tiles <= 3 * multiprocessor_count());
        if (a.one_group && want && pdl_supported()) {
            auto kernel = matmul_digits_kernel<false, V, WW, true>;
            allow_dynamic_smem(kernel, shape::smem_bytes);
            launch_pdl_cluster_smem(kernel, dim3(col_blocks, m_tiles, V), dim3(1, 1, V), dim3(shape::n_threads), shape::smem_bytes,
                                    stream, a);
            TANDEM_CUDA_CHECK_LAUNCH();
            return;
        }
    }
    auto kernel = matmul_digits_kernel<swiglu, V, WW>;
    allow_dynamic_smem(kernel, shape::smem_bytes);
    launch_pdl_smem(kernel, dim3(col_blocks, m_tiles), dim3(shape::n_threads), shape::smem_bytes, stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

// The tile width of a launch: 128 weight rows, or 64 when that gives fewer blocks than two per SM.
template <bool swiglu, int V>
void launch_digit_tiles(const matvec_digits_args &a, cudaStream_t stream) {
    // Each group: its pairs / tile_m tiles, plus one; one group: its rows' tiles.
    const int m_tiles = prompt_tile::digit_m_tiles(a, tile_m);
    if (m_tiles == 0) return;
    int wide = a.tile_weight_rows;
    if (wide == 0) {
        const int64_t blocks = int64_t(col_blocks_of<swiglu, V, 4>(a)) * m_tiles;
        wide = blocks < 2 * int64_t(multiprocessor_count()) ? 64 : 128;
    }
    if (wide == 64)
        launch_digit_tiles<swiglu, V, 2>(a, m_tiles, stream);
    else
        launch_digit_tiles<swiglu, V, 4>(a, m_tiles, stream);
}

// A one-group plain product small enough for the K split over clusters at 64-row tiles (the
// warpgroup tiles' width): as launch_digit_tiles decides it.
bool k_split_wanted_64(const matvec_digits_args &a) {
    if (a.w_up || a.tile_k_blocks == 0 || !pdl_supported()) return false;
    const int64_t blocks = int64_t(col_blocks_of<false, 4, 2>(a)) * ((a.n_rows + tile_m - 1) / tile_m);
    return a.tile_k_blocks > 0 || 4 * blocks <= 3 * int64_t(multiprocessor_count());
}

}  // namespace

void matmul_digits(const matvec_digits_args &a, cudaStream_t stream) {
    const bool swiglu = a.w_up != nullptr;
    TANDEM_CUDA_REQUIRE(a.w && a.y && a.n_in > 0 && a.n_in % 256 == 0 && a.n_out > 0, "matmul_digits: bad arguments (n_in a multiple of 256)");
    TANDEM_CUDA_REQUIRE(a.one_group ? !a.group_off && !a.x_rows && !a.y_rows && a.n_rows >= 0
                                    : a.group_off && a.n_groups && a.group_mat && a.max_groups > 0 && a.n_pairs >= 0,
                        "matmul_digits: grouped products (groups, max_groups and a pair bound) or one group of rows by index");
    TANDEM_CUDA_REQUIRE(!a.accumulate || !swiglu, "matmul_digits: SwiGLU and accumulate do not combine");
    TANDEM_CUDA_REQUIRE(a.x.digits && a.x.scales && a.x.sums && !a.x_f32, "matmul_digits: producer digit rows only");
    TANDEM_CUDA_REQUIRE((reinterpret_cast<uintptr_t>(a.w) | reinterpret_cast<uintptr_t>(a.w_up) | reinterpret_cast<uintptr_t>(a.x.digits) |
                         reinterpret_cast<uintptr_t>(a.x.sums)) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(a.x.scales) % 4 == 0,
                        "matmul_digits: weights, digits and sums must be 16-byte aligned");
    TANDEM_CUDA_REQUIRE(a.n_extra >= 0 && a.n_extra <= 2 && (a.n_extra == 0 || (a.one_group && !swiglu)),
                        "matmul_digits: extra matrices are for one-group plain products (at most two)");
    for (int e = 0; e < a.n_extra; ++e)
        TANDEM_CUDA_REQUIRE(a.extra[e].w && a.extra[e].y && a.extra[e].n_out > 0 && reinterpret_cast<uintptr_t>(a.extra[e].w) % 16 == 0,
                            "matmul_digits: an extra matrix needs weights (16-byte aligned), outputs and rows");
    TANDEM_CUDA_REQUIRE(a.tile_weight_rows == 0 || a.tile_weight_rows == 64 || a.tile_weight_rows == 128,
                        "matmul_digits: tile_weight_rows is 0 (by the launch's size), 64 or 128");
    TANDEM_CUDA_REQUIRE(a.tile_k_blocks >= -1 && a.tile_k_blocks <= 1, "matmul_digits: tile_k_blocks is -1 (by the launch's size), 0 or 1");
    TANDEM_CUDA_REQUIRE(a.tile_pairs == 0 || a.tile_pairs == 32 || a.tile_pairs == 64, "matmul_digits: tile_pairs is 0 (by the groups' size), 32 or 64");
    // The warpgroup tiles where `bench --prompt 2048 --prefill-chunk C` finds them faster: one-group
    // products (prompt rows' Q/K/V and wo) of 512 rows or more, and grouped products (the experts)
    // whose groups average 64 pairs or more; smaller launches stay on the mma.sync tiles. Either
    // gives the same bits.
    constexpr int wgmma_min_rows = 512, wgmma_min_group_pairs = 64;
    const bool wgmma_fits =
        a.one_group ? !swiglu && a.n_rows >= wgmma_min_rows && !k_split_wanted_64(a)
                    : int64_t(a.n_pairs) >= int64_t(wgmma_min_group_pairs) * std::max(1, std::min(a.max_groups, a.n_pairs));
    const bool wgmma = a.engine == matvec_digits_args::tile_engine::wgmma ||
                       (a.engine == matvec_digits_args::tile_engine::automatic && wgmma_fits && wgmma_built());
    if (wgmma) {
        matmul_digits_wgmma(a, stream);
        return;
    }
    const int V = digits_grouped_k_split(swiglu, a.n_in);
    if (swiglu)
        launch_digit_tiles<true, 4>(a, stream);
    else if (V == 3)
        launch_digit_tiles<false, 3>(a, stream);
    else
        launch_digit_tiles<false, 4>(a, stream);
}

}  // namespace tandem::cuda
