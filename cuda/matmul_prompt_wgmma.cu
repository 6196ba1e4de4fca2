// cuda/matmul_prompt_wgmma.cu - matmul_digits' tiles on the warpgroup products of sm_90a
// (cuda/wgmma.cuh): the same outputs, bit for bit, as the mma.sync tiles (matmul_prompt_digits.cu)
// and the decode kernels, with the sub-block scales inside the tensor-core products instead of
// integer multiply-adds after each one (those multiply-adds bound the mma.sync tiles).
//
// A block of WG warpgroups (128 threads each) computes 64 WG weight rows (SwiGLU: each warp's 8
// gate rows, then their 8 up rows; each warpgroup's 64 rows are the A of its own products) x TM
// pairs of one group (TM 64 with two warpgroups sharing the staged digits, or 32 with one for
// small groups). Per block of 256 elements (one K step):
// - the rows' raw Q4_K bytes arrive by one tensor copy (TMA; SwiGLU: one for the gate rows, one
//   for the up rows) on the stage's mbarrier, the pairs' digit sums and scales by cp.async, into
//   one of ST stages (3 for the 64-pair tiles, 2 for the 32) while another is computed; the
//   digits arrive as the B operand: sub-block j,
//   column 2p + d (pair p's digit d), its elements 0-15 then 16-31 (8-byte copies: the digit rows
//   interleave d0 and d1 every 8 elements);
// - the A operand is the weights, made in registers from the staged bytes: warp w's rows 16 w + g
//   and + 8 (g = lane / 4), k 4t .. 4t + 3 and 16 + 4t ..: one quant word each. The sub-block scale
//   sc = 16 sc_hi + sc_lo (sc_lo < 16, sc_hi < 4) goes in as two u8 operands q sc_lo (< 226) and
//   q sc_hi (< 46): two wgmma m64nNk32 (N = 2 TM) a sub-block give lo = sum_j sc_lo_j S_dj and hi,
//   so lo + 16 hi is exactly the integer the mma.sync tiles sum (|acc| < 2^31: 8 x 32 x 15 x 63 x
//   127); the next sub-blocks' operands are made while the tensor cores run the last ones;
// - the mins on one bf16 mma per 8 pairs with the mma.sync tiles' operands (mins of the rows x the
//   pairs' digit sums: the same products in the same K slots, the pairs' columns permuted), and
//   digit_fold, in matvec_digits' partial order.
// Grouped products (SwiGLU or plain) and one-group plain products with extras; the K split of
// small one-group launches over clusters stays with the mma.sync tiles. A grouped block takes a
// chunk of up to 128 pairs of its group, tile after tile: the block's setup once, and the next
// tile's first copies in flight while a tile finishes and stores. matmul_digits takes these tiles
// where they beat the mma.sync ones: one-group products of 512 rows or more, grouped products
// whose groups average 64 pairs or more.
#include "matvec_digits.h"

#include "bulk_copy.cuh"
#include "cp_async.cuh"
#include "cuda_check.h"
#include "digits.cuh"
#include "launch.cuh"
#include "matmul_prompt_tile.cuh"
#include "mma_bf16.cuh"
#include "quant_decode.cuh"
#include "wgmma.cuh"

#include <cuda_bf16.h>

#include <algorithm>

namespace tandem::cuda {
namespace {

// The tensor maps of a launch's weights (Q4_K raw bytes as a 3-d array of bytes: a row's bytes x
// the matrix's rows x the matrices): SwiGLU m[0] gate, m[1] up; plain m[0] the matrix, m[1 + e]
// extra e. A box is one K step's 144 bytes of a tile's rows.
struct weight_maps {
    CUtensorMap m[3];
};
// n_mats: the matrices a group may name (a bound: only named ones are read); rows past n_out of a
// box arrive as zeros.
CUtensorMap weight_map(const void *w, int32_t n_in, int32_t n_out, int32_t n_mats, int32_t box_rows) {
    const cuuint64_t row_bytes = cuuint64_t(n_in / 256) * 144;
    const cuuint64_t dims[3] = {row_bytes, cuuint64_t(n_out), cuuint64_t(n_mats)};
    const cuuint64_t strides[2] = {row_bytes, row_bytes * cuuint64_t(n_out)};
    const cuuint32_t box[3] = {144, cuuint32_t(box_rows), 1};
    return byte_tensor_map(w, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE, "matmul_digits");
}

constexpr int w_pitch = 144;    // a staged raw row: lanes (g, t) read words 36 g + t + ..., distinct banks
static_assert(digits_per_element == 2, "a pair's two digits are two B columns");
// A block tile of TM pairs (64, or 32 for small groups): B has 2 TM columns; WG warpgroups, each 64
// weight rows (the A rows of its wgmma), sharing the block's B; ST stages of copies.
template <int TM, int WG = 1, int ST = 2>
struct tile_shape {
    static constexpr int tile_n = 64 * WG, n_threads = 128 * WG, n_warps = 4 * WG, n_stages = ST;
    static constexpr int w_bytes = tile_n * w_pitch;
    static constexpr int n_cols = 2 * TM, n_tiles8 = TM / 4;  // n-tiles of 8 columns
    static constexpr int b_half_bytes = n_cols * 16;       // one K half of a sub-block's B: the columns x 16 bytes
    static constexpr int b_sub_bytes = 2 * b_half_bytes;   // a sub-block's B operand
    static constexpr int x_bytes = 8 * b_sub_bytes, sum_bytes = TM * 32, scale_bytes = TM * 4;
    static constexpr int stage_bytes = (x_bytes + w_bytes + sum_bytes + scale_bytes + 127) / 128 * 128;
    static constexpr int n_part = 2 * n_tiles8;            // a thread's outputs: rows r, r + 8 x its pairs
    static constexpr size_t smem_bytes = size_t(n_stages) * stage_bytes + size_t(n_part) * n_threads * sizeof(float);
    static_assert(TM == 32 || TM == 64, "tiles of 32 or 64 pairs");
    static_assert(x_bytes % 128 == 0 && stage_bytes % 128 == 0, "B operands 128-byte aligned");
    static constexpr int min_blocks = (TM == 32 ? 3 : 2) / WG;  // an SM, as the registers allow (168, 255 a thread)
    static_assert(TM % (8 * n_warps) == 0, "each warp copies whole pair octets");
    static_assert(min_blocks * (smem_bytes + 1024) <= 227 * 1024, "the blocks an SM fit in shared memory");
};

// R: the block's pair tiles (a chunk of R TM pairs of one group, or of the one group's rows), one
// after another, the copies of each tile's first steps issued while the tile before is computed.
template <bool swiglu, int V, int TM, int R, int WG, int ST>
__global__ void __launch_bounds__(tile_shape<TM, WG, ST>::n_threads, tile_shape<TM, WG, ST>::min_blocks)
    matmul_digits_wgmma_kernel(const matvec_digits_args a, const __grid_constant__ weight_maps maps) {
#if TANDEM_HAVE_WGMMA
    using shape = tile_shape<TM, WG, ST>;
    constexpr int n_stages = shape::n_stages;
    constexpr int tile_n = shape::tile_n, n_threads = shape::n_threads, n_warps = shape::n_warps, w_bytes = shape::w_bytes;
    constexpr int tile_m = TM, chunk = TM * R, n_tiles8 = shape::n_tiles8, n_part = shape::n_part;
    constexpr int b_half_bytes = shape::b_half_bytes, b_sub_bytes = shape::b_sub_bytes, x_bytes = shape::x_bytes;
    constexpr int sum_bytes = shape::sum_bytes, stage_bytes = shape::stage_bytes;
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ int32_t s_xrow[chunk];          // each pair's digit row (-1: past the chunk's pairs)
    __shared__ int32_t s_yrow[chunk];          // each pair's output row
    __shared__ __align__(8) uint64_t s_wbar[n_stages];  // each stage's weight copies
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    pdl_wait();  // groups, pairs and digits come from the launches before
    pdl_trigger();
    constexpr int outs_per_block = swiglu ? tile_n / 2 : tile_n;
    prompt_tile::digit_tile b;
    if (!prompt_tile::resolve_digit_tile<chunk, outs_per_block>(a, b)) return;
    const int rows_here = b.rows_here, n_out = b.n_out, j0 = b.j0, n_blocks = a.n_in / 256;
    float *const y_mat = b.y;
    const int64_t y_stride = b.y_stride;
    prompt_tile::fill_digit_rows<chunk>(a, b, s_xrow, s_yrow, tid, n_threads);
    if (tid == 0) {
        for (int st = 0; st < n_stages; ++st) mbar_init(&s_wbar[st]);
        mbar_fence_init();
    }
    __syncthreads();
    // The weights of a step: one tensor copy of the tile's rows (SwiGLU: the gate rows, then the up
    // rows; rows past n_out arrive as zeros), from the block's matrix (maps.m[b.part]; SwiGLU: m[0]
    // gate, m[1] up) at rows j0 .., matrix b.mat.
    const CUtensorMap *const w_map = &maps.m[swiglu ? 0 : b.part];
    const int n_tiles = (rows_here + tile_m - 1) / tile_m, n_steps = n_tiles * n_blocks;
    auto block_at = [&](int i) { return prompt_tile::digit_block_in_order<V>(i, n_blocks); };
    // Stage layout: B (digits) [sub-block j][K half][column][16], raw rows, sums, scales. Each
    // thread's copies are fixed for the tile (sources by pointer, destinations by constant offsets).
    // - Digits: warp w copies pair octets w, w + n_warps, ... (x_oct of them, one in every shape
    //   built); for each (sub-block j, K half h), copy k = 2j + h: lane (pair r = 8 o + lane / 4,
    //   digit d = lane / 2 % 2, 8-byte half e = lane % 2) copies bytes 32k + 16e + 8d of the pair's
    //   512 (elements 16h + 8e .. of sub-block j, digit d) to column 2r + d, bytes 8e: a warp reads
    //   8 whole 32-byte sectors and writes 256 contiguous bytes. (Digit rows laid out for 16-byte
    //   copies are 0.7% slower end to end.)
    // - Raw rows: thread 0's tensor copies (the weights' 16-byte copies, 4.5 a thread, would keep
    //   the copy queue full).
    // - Sums: threads 0 .. 2 TM - 1, two copies a pair; scales: the next TM threads where the block
    //   has them, else threads 0 .. TM - 1.
    // The pairs' sources are set per tile (at its first step's copies: one shared-memory read each).
    constexpr int x_oct = TM / (8 * n_warps);
    const int x_d = (lane >> 1) & 1, x_e = lane & 1;
    const int8_t *x_src[x_oct];
    int x_dst[x_oct], x_bytes_mine[x_oct];
    const int c_pair = 2 * tile_m < n_threads ? tid - 2 * tile_m : tid;
    const bool c_mine = c_pair >= 0 && c_pair < tile_m;
    int s_row = -1, c_row = -1;
    auto set_tile_sources = [&](int r) {
        const int8_t *const digits = a.x.digits + 16 * x_e + 8 * x_d;
#pragma unroll
        for (int o = 0; o < x_oct; ++o) {
            const int x_pair = 8 * (warp + n_warps * o) + (lane >> 2), xr = s_xrow[r * tile_m + x_pair];
            x_src[o] = xr >= 0 ? digits + int64_t(xr) * 2 * a.n_in : a.x.digits;
            x_bytes_mine[o] = xr >= 0 ? 8 : 0;
            x_dst[o] = (2 * x_pair + x_d) * 16 + 8 * x_e;
        }
        s_row = tid < 2 * tile_m ? s_xrow[r * tile_m + (tid >> 1)] : -1;
        c_row = c_mine ? s_xrow[r * tile_m + c_pair] : -1;
    };
    // Step i (tile i / n_blocks, its block i % n_blocks in partial order) into stage i % n_stages.
    int issue_tile = 0, issue_k = 0;  // the next step issue() is called for, counted incrementally
    set_tile_sources(0);
    auto issue = [&](int i) {
        if (i < n_steps) {
            if (issue_k == n_blocks) {
                issue_k = 0;
                set_tile_sources(++issue_tile);
            }
            const int c = block_at(issue_k++);
            uint8_t *st = smem + (i % n_stages) * stage_bytes;
#pragma unroll
            for (int o = 0; o < x_oct; ++o) {
                const int8_t *xs = x_src[o] + c * 512;
#pragma unroll
                for (int k = 0; k < 16; ++k) cp_async_8(st + x_dst[o] + k * b_half_bytes, xs + 32 * k, x_bytes_mine[o]);
            }
            if (tid == 0) {
                uint64_t *bar = &s_wbar[i % n_stages];
                fence_proxy_async_shared();  // the stage's last readers passed the step's barrier
                mbar_expect(bar, uint32_t(tile_n * w_pitch));
                if constexpr (swiglu) {
                    tensor_copy_3d_to_shared(st + x_bytes, &maps.m[0], c * 144, j0, b.mat, bar);
                    tensor_copy_3d_to_shared(st + x_bytes + tile_n / 2 * w_pitch, &maps.m[1], c * 144, j0, b.mat, bar);
                } else {
                    tensor_copy_3d_to_shared(st + x_bytes, w_map, c * 144, j0, b.mat, bar);
                }
            }
            if (tid < 2 * tile_m) {
                const uint16_t *src = a.x.sums + (s_row >= 0 ? (int64_t(s_row) * n_blocks + c) * 16 + 8 * (tid & 1) : 0);
                cp_async_16(st + x_bytes + w_bytes + (tid >> 1) * 32 + 16 * (tid & 1), src, s_row >= 0 ? 16 : 0);
            }
            if (c_mine) {
                const float *src = a.x.scales + (c_row >= 0 ? int64_t(c_row) * n_blocks + c : 0);
                cp_async_4(st + x_bytes + w_bytes + sum_bytes + 4 * c_pair, src, c_row >= 0 ? 4 : 0);
            }
        }
        cp_async_commit();
    };

    const int r_lo = 16 * warp + g;  // the thread's A rows r_lo and r_lo + 8
    float part[n_part];              // row r_lo + 8 h, pair 4 i + t at n_tiles8 h + i
    // The partials' running sum, in shared memory (registers hold the partial being made).
    float *const total = reinterpret_cast<float *>(smem + size_t(n_stages) * stage_bytes) + tid;
    // One block of 256 into part.
    auto compute = [&](const uint8_t *st, int i_next) {
        const uint8_t *ws = st + x_bytes;
        // The thread's A rows: plain, staged rows r_lo and r_lo + 8; SwiGLU, its output's gate row
        // (staged row 8 warp + g) and up row (the same row of the second half).
        const uint8_t *w0 = ws + (swiglu ? 8 * warp + g : r_lo) * w_pitch, *w1 = w0 + (swiglu ? tile_n / 2 : 8) * w_pitch;
        const uint4 h0 = *reinterpret_cast<const uint4 *>(w0), h1 = *reinterpret_cast<const uint4 *>(w1);
        // Scales of sub-blocks 0-3 and 4-7 (get_scale_min_k4), rows r_lo and r_lo + 8.
        const uint32_t sc0[2] = {h0.y & 0x3F3F3F3Fu, (h0.w & 0x0F0F0F0Fu) | ((h0.y >> 2) & 0x30303030u)};
        const uint32_t sc1[2] = {h1.y & 0x3F3F3F3Fu, (h1.w & 0x0F0F0F0Fu) | ((h1.y >> 2) & 0x30303030u)};
        int lo[TM], hi[TM];
        uint32_t af[2][2][2][4];  // [cc % 2][hh][lo, hi][fragment]
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
            if (cc >= 2) wgmma_wait<1>();  // group cc - 2 is done with af[cc % 2]
            const int o = 16 + 32 * cc + 4 * t;
            const uint32_t q00 = *reinterpret_cast<const uint32_t *>(w0 + o), q01 = *reinterpret_cast<const uint32_t *>(w0 + o + 16);
            const uint32_t q10 = *reinterpret_cast<const uint32_t *>(w1 + o), q11 = *reinterpret_cast<const uint32_t *>(w1 + o + 16);
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int jb = 2 * (cc & 1) + hh;  // sub-block 2 cc + hh: byte jb of the scale word cc / 2
                const uint32_t s0 = uint32_t(byte_of(sc0[cc >> 1], jb)), s1 = uint32_t(byte_of(sc1[cc >> 1], jb));
                const uint32_t n00 = nibbles(q00, hh), n10 = nibbles(q10, hh), n01 = nibbles(q01, hh), n11 = nibbles(q11, hh);
                uint32_t(&al)[4] = af[cc & 1][hh][0];
                uint32_t(&ah)[4] = af[cc & 1][hh][1];
                al[0] = n00 * (s0 & 15u), al[1] = n10 * (s1 & 15u), al[2] = n01 * (s0 & 15u), al[3] = n11 * (s1 & 15u);
                ah[0] = n00 * (s0 >> 4), ah[1] = n10 * (s1 >> 4), ah[2] = n01 * (s0 >> 4), ah[3] = n11 * (s1 >> 4);
            }
            wgmma_fence();
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int j = 2 * cc + hh;
                const uint64_t desc = wgmma_desc(st + j * b_sub_bytes, b_half_bytes, 128);
                wgmma_u8s8(lo, af[cc & 1][hh][0], desc, j);
                wgmma_u8s8(hi, af[cc & 1][hh][1], desc, j);
            }
            wgmma_commit();
        }
        issue(i_next);  // the next stage's copies, while the products run
        // Also meanwhile: the mins (sum_j m_j S_j) on bf16 mmas, 8 pairs each, and the
        // rows' super scales. Mma column 2u holds pair 8 o + u, column 2u + 1 pair 8 o + 4 + u.
        const uint16_t *ss = reinterpret_cast<const uint16_t *>(ws + w_bytes);
        const float *cs = reinterpret_cast<const float *>(ws + w_bytes + sum_bytes);
        const int sh16 = 16 * (t & 1);
        const uint32_t mn0 = t < 2 ? h0.z & 0x3F3F3F3Fu : ((h0.w >> 4) & 0x0F0F0F0Fu) | ((h0.z >> 2) & 0x30303030u);
        const uint32_t mn1 = t < 2 ? h1.z & 0x3F3F3F3Fu : ((h1.w >> 4) & 0x0F0F0F0Fu) | ((h1.z >> 2) & 0x30303030u);
        const __nv_bfloat162 ml = __floats2bfloat162_rn(float((mn0 >> sh16) & 0xFFu), float((mn0 >> (sh16 + 8)) & 0xFFu));
        const __nv_bfloat162 mh = __floats2bfloat162_rn(float((mn1 >> sh16) & 0xFFu), float((mn1 >> (sh16 + 8)) & 0xFFu));
        const uint32_t ml_u = *reinterpret_cast<const uint32_t *>(&ml), mh_u = *reinterpret_cast<const uint32_t *>(&mh);
        const uint32_t am[4] = {ml_u, mh_u, ml_u, mh_u};
        const int pg = (g & 1) ? 4 + (g >> 1) : g >> 1;  // the pair of mma column g within its eight
        auto mins_of = [&](int o, float (&cm)[4]) {
            const uint2 sb = *reinterpret_cast<const uint2 *>(ss + (8 * o + pg) * 16 + 4 * t);
            cm[0] = cm[1] = cm[2] = cm[3] = 0.0f;
            mma_bf16(cm, am, sb.x, sb.y);
        };
        float cm_first[4];
        mins_of(0, cm_first);  // while the products run
        const float d0 = half_bits_to_float(h0.x), dm0 = half_bits_to_float(h0.x >> 16);
        const float d1 = half_bits_to_float(h1.x), dm1 = half_bits_to_float(h1.x >> 16);
        wgmma_wait<0>();
        wgmma_keep(af[0][0][0]), wgmma_keep(af[0][0][1]), wgmma_keep(af[0][1][0]), wgmma_keep(af[0][1][1]);
        wgmma_keep(af[1][0][0]), wgmma_keep(af[1][0][1]), wgmma_keep(af[1][1][0]), wgmma_keep(af[1][1][1]);
        float cm[4];
#pragma unroll
        for (int i = 0; i < n_tiles8; ++i) {
            if (i == 0) {
#pragma unroll
                for (int e = 0; e < 4; ++e) cm[e] = cm_first[e];
            } else if (i % 2 == 0) {
                mins_of(i / 2, cm);
            }
            const float sx = cs[4 * i + t];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int acc0 = lo[4 * i + 2 * h] + 16 * hi[4 * i + 2 * h], acc1 = lo[4 * i + 2 * h + 1] + 16 * hi[4 * i + 2 * h + 1];
                float &pv = part[n_tiles8 * h + i];
                pv = digit_fold(acc0, acc1, cm[2 * h + (i & 1)], h ? d1 : d0, h ? dm1 : dm0, sx, pv);
            }
        }
    };

    for (int st = 0; st + 1 < n_stages; ++st) issue(st);
    int i = 0;
#pragma unroll 1
    for (int tile = 0; tile < n_tiles; ++tile) {
#pragma unroll 1
        for (int v = 0; v < V; ++v) {
#pragma unroll
            for (int e = 0; e < n_part; ++e) part[e] = 0.0f;
#pragma unroll 1
            for (int c = v; c < n_blocks; c += V, ++i) {
                cp_async_wait_pending<n_stages - 2>();  // step i's copies (this thread's) are in
                mbar_wait_parity(&s_wbar[i % n_stages], uint32_t(i / n_stages) & 1u);  // and its weights
                fence_proxy_async_shared();             // ... and visible to the tensor cores' reads
                __syncthreads();                        // everyone's are; step i - 1's stage is free
                compute(smem + (i % n_stages) * stage_bytes, i + n_stages - 1);
            }
#pragma unroll
            for (int e = 0; e < n_part; ++e) total[e * n_threads] = v == 0 ? part[e] : __fadd_rn(total[e * n_threads], part[e]);
        }
        // The tile's outputs (the next tile's first copies are in flight).
        const int t0 = tile * tile_m, tile_rows = min(tile_m, rows_here - t0);
#pragma unroll
        for (int k = 0; k < n_tiles8; ++k) {
            const int pl = 4 * k + t;
            if (pl >= tile_rows) continue;
            float *y = y_mat + int64_t(s_yrow[t0 + pl]) * y_stride;
            if constexpr (swiglu) {
                const int jo = j0 + 8 * warp + g;  // the warp's gate row g and its up row g + 8
                if (jo < n_out) y[jo] = digit_swiglu(total[k * n_threads], total[(n_tiles8 + k) * n_threads]);
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int jo = j0 + r_lo + 8 * h;
                    const float v = total[(n_tiles8 * h + k) * n_threads];
                    if (jo < n_out) y[jo] = a.accumulate ? __fadd_rn(y[jo], v) : v;
                }
            }
        }
    }
    cp_async_wait_pending<0>();  // no copy outlives the block
#else
    (void)a;
    __trap();  // launched only where wgmma_built(): the device runs the sm_90a code
#endif
}

template <bool swiglu, int V, int TM, int R, int WG = 1, int ST = 2>
void launch_wgmma_tiles(const matvec_digits_args &a, cudaStream_t stream) {
    using shape = tile_shape<TM, WG, ST>;
    const int col_blocks = prompt_tile::digit_col_blocks(a, swiglu ? shape::tile_n / 2 : shape::tile_n);
    const int m_tiles = prompt_tile::digit_m_tiles(a, TM * R);
    if (m_tiles == 0) return;
    weight_maps maps{};
    const int32_t box_rows = swiglu ? shape::tile_n / 2 : shape::tile_n, n_mats = a.one_group ? 1 : 1 << 16;
    maps.m[0] = weight_map(a.w, a.n_in, a.n_out, n_mats, box_rows);
    if (swiglu) maps.m[1] = weight_map(a.w_up, a.n_in, a.n_out, n_mats, box_rows);
    for (int e = 0; e < a.n_extra; ++e) maps.m[1 + e] = weight_map(a.extra[e].w, a.n_in, a.extra[e].n_out, 1, box_rows);
    auto kernel = matmul_digits_wgmma_kernel<swiglu, V, TM, R, WG, ST>;
    allow_dynamic_smem(kernel, shape::smem_bytes);
    launch_pdl_smem(kernel, dim3(col_blocks, m_tiles), dim3(shape::n_threads), shape::smem_bytes, stream, a, maps);
    TANDEM_CUDA_CHECK_LAUNCH();
}

template <bool swiglu, int V>
void launch_wgmma_tiles(const matvec_digits_args &a, cudaStream_t stream) {
    // 64-pair tiles, or 32 where a grouped step's groups average fewer than 24 pairs (a 64-pair
    // tile would be mostly empty).
    const int groups = a.one_group ? 1 : std::max(1, std::min(a.max_groups, a.n_pairs));
    const int rows = a.one_group ? a.n_rows : a.n_pairs;
    const int tm = a.tile_pairs ? a.tile_pairs : rows < 24 * groups ? 32 : 64;
    // Grouped products: chunks of up to 128 pairs a block, a group's tiles one after another (one
    // setup a block; one-group products stay a block a tile: chunks of two lose at 512 rows).
    // 64-pair tiles in blocks of two warpgroups, 128 weight rows sharing the staged digits.
    // `bench --prompt 2048 --sessions 1` justifies both (see docs/performance.md).
    if (tm == 64) {
        // Three stages (one block an SM has the shared memory): `bench --prompt 2048` +0.3-0.5%.
        if (!a.one_group)
            launch_wgmma_tiles<swiglu, V, 64, 2, 2, 3>(a, stream);
        else
            launch_wgmma_tiles<swiglu, V, 64, 1, 2, 3>(a, stream);
    } else {
        if (!a.one_group)
            launch_wgmma_tiles<swiglu, V, 32, 4>(a, stream);
        else
            launch_wgmma_tiles<swiglu, V, 32, 1>(a, stream);
    }
}

}  // namespace

void matmul_digits_wgmma(const matvec_digits_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(wgmma_built(), "matmul_digits: the warpgroup tiles need a build for sm_90a and a device of compute capability 9.0");
    const bool swiglu = a.w_up != nullptr;
    const int V = digits_grouped_k_split(swiglu, a.n_in);
    if (swiglu)
        launch_wgmma_tiles<true, 4>(a, stream);
    else if (V == 3)
        launch_wgmma_tiles<false, 3>(a, stream);
    else
        launch_wgmma_tiles<false, 4>(a, stream);
}

}  // namespace tandem::cuda
