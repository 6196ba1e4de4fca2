// cuda/matvec_digits_tile.cuh - what the decode digit products' kernels share (matvec_digits.cu's
// blocks, matvec_digits_solo.cu's solo warps): a group's range, a tile's weight rows, one chunk's
// digit arithmetic (digit_chunk: every digit product's bits), a pass's activation operands and its
// outputs. Internal to those two files.
#pragma once

#include "digits.cuh"
#include "matvec_digits.h"
#include "mma_bf16.cuh"
#include "quant_decode.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace tandem::cuda::digit_tile {

// Group gi's pair range [begin, end) and matrix, loaded with the group count (one round trip):
// read_group_raw returns the count, read_group whether gi is one of the step's groups (false: the
// block has nothing to do; what was set is then meaningless). gi < max_groups: in bounds either way.
__device__ __forceinline__ int read_group_raw(const int32_t *n_groups, const int32_t *group_off, const int32_t *group_mat, int gi,
                                              int &begin, int &end, int &mat) {
    const int n = *n_groups;
    begin = group_off[gi];
    end = group_off[gi + 1];
    mat = group_mat[gi];
    return n;
}
__device__ __forceinline__ bool read_group(const int32_t *n_groups, const int32_t *group_off, const int32_t *group_mat, int gi,
                                           int &begin, int &end, int &mat) {
    return gi < read_group_raw(n_groups, group_off, group_mat, gi, begin, end, mat);
}
// Row r (0-15) of the 16-row weight tile of outputs j0 ..: SwiGLU's gate rows of j0 + r, then
// (r >= 8) its up rows of j0 + r - 8; otherwise row j0 + r. A row past n_out reads row j0 (its
// outputs are never written). Matrix `mat` of the grouped products (0 for dense ones).
template <bool swiglu>
__device__ __forceinline__ const uint8_t *tile_row(const matvec_digits_args &a, int mat, int j0, int r, int64_t row_bytes) {
    const int jr = j0 + (swiglu ? (r & 7) : r);
    const int64_t j = jr < a.n_out ? jr : j0;
    const void *w = swiglu && r >= 8 ? a.w_up : a.w;
    return static_cast<const uint8_t *>(w) + (int64_t(mat) * a.n_out + j) * row_bytes;
}

// Whether a staged tile takes one bulk copy of its 16 rows instead of one a row: a plain tile whose
// rows are all inside the matrix (contiguous there), with an odd number of blocks a row, so that
// rows g = 0..7 start in distinct 16-byte bank slots unpadded (144 odd-block rows: 432 bytes, the
// experts' down). Otherwise rows lie 32 bytes apart beyond their length, one copy a row. Only where
// the bytes land changes: every value read is the same.
__device__ __forceinline__ bool staged_in_one_copy(bool swiglu, int n_blocks, int j0, int n_out) {
    return !swiglu && (n_blocks & 1) != 0 && j0 + 16 <= n_out;
}

// One chunk (a block of 256) of a tile's weight rows g (lo) and g + 8 (hi) against a pass's four
// step rows, each row's two digits in adjacent B columns (column 2i + d: row i's digit d), so one
// mma a sub-block yields both digits' products. bfrag(j) gives the lane's B fragment of sub-block
// j (column g: row g / 2's digit g % 2), sb the digit sums of that row, s the scale of the lane's
// row t: out[r] += s (d dots - dm mins) for weight row g + 8 r, the arithmetic of every digit
// product. The integer products and sums are exact, so placing the digits in columns changes no
// value.
template <class BFrag>
__device__ __forceinline__ void digit_chunk(const q4_k_lane &lo, const q4_k_lane &hi, BFrag &&bfrag, uint2 sb, float s, int t,
                                            float (&out)[2]) {
    // Scale bytes (get_scale_min_k4's values): sub-blocks 0-3 and 4-7 of each row.
    const uint32_t sc_lo[2] = {lo.head.y & 0x3F3F3F3Fu, (lo.head.w & 0x0F0F0F0Fu) | ((lo.head.y >> 2) & 0x30303030u)};
    const uint32_t sc_hi[2] = {hi.head.y & 0x3F3F3F3Fu, (hi.head.w & 0x0F0F0F0Fu) | ((hi.head.y >> 2) & 0x30303030u)};
    const uint32_t mn_lo = t < 2 ? lo.head.z & 0x3F3F3F3Fu : ((lo.head.w >> 4) & 0x0F0F0F0Fu) | ((lo.head.z >> 2) & 0x30303030u);
    const uint32_t mn_hi = t < 2 ? hi.head.z & 0x3F3F3F3Fu : ((hi.head.w >> 4) & 0x0F0F0F0Fu) | ((hi.head.z >> 2) & 0x30303030u);
    int acc[4] = {};  // weight row g: digit 0, digit 1 of step row t; weight row g + 8: the same
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int j = 2 * cc + h;
            const uint32_t av[4] = {nibbles(lo.qs[cc].x, h), nibbles(hi.qs[cc].x, h), nibbles(lo.qs[cc].y, h),
                                    nibbles(hi.qs[cc].y, h)};
            const int sl = byte_of(sc_lo[j >> 2], j & 3), sh = byte_of(sc_hi[j >> 2], j & 3);
            const uint2 bd = bfrag(j);
            int p[4];
            mma_u8s8(p, av, bd.x, bd.y);
            acc[0] += sl * p[0]; acc[1] += sl * p[1]; acc[2] += sh * p[2]; acc[3] += sh * p[3];
        }
    }
    // Mins: sum_j m_j S_j on one bf16 mma (K slots j and 8 + j: m_j times S_j's hi and lo); both
    // columns of a step row hold its sums, so cm[2 r] is weight row g + 8 r's for row t.
    const int sh16 = 16 * (t & 1);
    const __nv_bfloat162 ml = __floats2bfloat162_rn(float((mn_lo >> sh16) & 0xFFu), float((mn_lo >> (sh16 + 8)) & 0xFFu));
    const __nv_bfloat162 mh = __floats2bfloat162_rn(float((mn_hi >> sh16) & 0xFFu), float((mn_hi >> (sh16 + 8)) & 0xFFu));
    const uint32_t ml_u = *reinterpret_cast<const uint32_t *>(&ml), mh_u = *reinterpret_cast<const uint32_t *>(&mh);
    const uint32_t am[4] = {ml_u, mh_u, ml_u, mh_u};
    float cm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_bf16(cm, am, sb.x, sb.y);
    const float d_lo = half_bits_to_float(lo.head.x), dm_lo = half_bits_to_float(lo.head.x >> 16);
    const float d_hi = half_bits_to_float(hi.head.x), dm_hi = half_bits_to_float(hi.head.x >> 16);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float d = r ? d_hi : d_lo, dm = r ? dm_hi : dm_lo;
        out[r] = digit_fold(acc[2 * r], acc[2 * r + 1], cm[2 * r], d, dm, s, out[r]);
    }
}

// Step rows a pass of the digit products covers: one per lane group t.
constexpr int digits_pass = 4;

// The lane's activation operands of one chunk (block c of 256 elements): its B fragments of the
// eight sub-blocks (step row xr, column g: that row's digit g % 2), xr's digit sums, and the scale
// of step row xs (the lane's C columns).
struct x_chunk {
    uint2 b[8];
    uint2 sb;
    float sx;
};
__device__ __forceinline__ x_chunk load_x_chunk(const digit_rows &x, int n_in, int xr, int xs, int c, int g, int t) {
    constexpr int D = digits_per_element;
    const int n_blocks = n_in / 256;
    const int8_t *xd = x.digits + int64_t(xr) * D * n_in + (c * 32 + t) * 8 * D + 8 * (g & 1);
    x_chunk v;
#pragma unroll
    for (int j = 0; j < 8; ++j) v.b[j] = *reinterpret_cast<const uint2 *>(xd + j * 32 * D);
    v.sb = *reinterpret_cast<const uint2 *>(x.sums + (int64_t(xr) * n_blocks + c) * 16 + t * 4);
    v.sx = x.scales[int64_t(xs) * n_blocks + c];
    return v;
}

// The lane's outputs of a pass: step row p0 + t of weight rows j0 + g and j0 + g + 8, or SwiGLU's
// silu(gate) * up of output j0 + g; rows past the pass's end and outputs past n_out are not
// written. Every digit product writes its outputs here.
template <bool swiglu, bool one = false, class YRow>
__device__ __forceinline__ void store_outputs(const matvec_digits_args &a, const float (&out)[2], int j0, int g, int t, int p0,
                                              int end, YRow &&y_row) {
    const int r = p0 + t;
    if (r >= end) return;
    float *y = a.y + int64_t(y_row(r)) * a.y_stride;
    if constexpr (swiglu) {
        if (j0 + g >= a.n_out) return;
        const float gate = out[0], up = out[1];
        y[j0 + g] = digit_swiglu(gate, up);
    } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float *yj = y + j0 + g + 8 * h;
            if (j0 + g + 8 * h < a.n_out) {
                if constexpr (one)
                    *yj = a.accumulate ? __fadd_rn(*yj, out[h]) : out[h];  // wo's residual add
                else
                    *yj = out[h];
            }
        }
    }
}

// The solo-warp products (matvec_digits_args::solo_warps; matvec_digits_solo.cu) of a plan of kind
// solo (plan_matvec_digits): SwiGLU, or plain ones of three blocks a row; staged: each warp's tile
// in its own shared-memory stage; group_rows > 0: that many rows of blocks striding over the groups.
void launch_solo(const matvec_digits_args &a, const matvec_digits_plan &plan, cudaStream_t stream);

}  // namespace tandem::cuda::digit_tile
