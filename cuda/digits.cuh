// cuda/digits.cuh - one warp's share of the digit format (matvec_digits.h): a block of 256
// elements, lane l holding elements 8l .. 8l + 7 (sub-block l / 4, group l % 4), quantised to two int8
// digits against the block's power-of-two scale, with the sub-blocks' digit sums. Used by the
// digits producer and the down product's own quantisation (matvec_digits.cu) and by the FFN norm +
// router launch (norm.cu), so all write the same bits. A block holding a non-finite element gets
// zero digits and sums and a NaN scale: every product over it is NaN, as the bf16 split's would be
// (a corrupt norm weight or an overflowing activation is not masked).
#pragma once

#include "matvec_digits.h"
#include "tandem/swiglu.h"
#include "warp_reduce.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace tandem::cuda {

// One lane's digits of a block: wd[d] the digit d of its eight elements (bytes, element order),
// sum_j (in lanes 4j) the sub-block j's S_j = sum (256 d0 + d1), scale the block's s (NaN: a
// non-finite element).
struct lane_digits {
    uint32_t wd[digits_per_element][2];
    int sum_j;
    float scale;
};

__device__ __forceinline__ lane_digits digits_of_lane(const float (&v_in)[8]) {
    constexpr int D = digits_per_element;
    bool finite = true;
#pragma unroll
    for (int i = 0; i < 8; ++i) finite = finite && isfinite(v_in[i]);
    finite = __all_sync(0xFFFFFFFFu, finite);
    float v[8];
    float mx = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        v[i] = finite ? v_in[i] : 0.0f;
        mx = fmaxf(mx, fabsf(v[i]));
    }
    mx = warp_max(mx);
    int e = 0;  // s = 2^e, the smallest power of two with 127 s >= mx (1 for a block of zeros)
    if (mx > 0.0f) {
        int k;
        frexpf(mx, &k);  // mx < 2^k
        e = k - 7;
        if (ldexpf(127.0f, e) < mx) ++e;
    }
    const float inv = ldexpf(1.0f, -e);
    lane_digits out{};
    int s_part = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        float q = v[i] * inv;  // exact: a power of two; each remainder below is exact too
        int sum = 0;
#pragma unroll
        for (int d = 0; d < D; ++d) {
            const float di = d == 0 ? rintf(q) : fminf(fmaxf(rintf(q), -127.0f), 127.0f);
            out.wd[d][i / 4] |= uint32_t(uint8_t(int8_t(int(di)))) << (8 * (i % 4));
            sum = 256 * sum + int(di);
            q = (q - di) * 256.0f;
        }
        s_part += sum;
    }
    s_part += __shfl_xor_sync(0xFFFFFFFFu, s_part, 1);
    s_part += __shfl_xor_sync(0xFFFFFFFFu, s_part, 2);
    out.sum_j = s_part;
    out.scale = finite ? ldexpf(1.0f, e) : __int_as_float(0x7FC00000);
    return out;
}

// S_j (|S| < 2^31), rounded to fp32, as bf16 hi (truncated) and lo.
__device__ __forceinline__ void digit_sum_halves(int s_j, uint16_t &hi16, uint16_t &lo16) {
    const float s = float(s_j);
    const uint32_t hi = __float_as_uint(s) & 0xFFFF0000u;
    hi16 = uint16_t(hi >> 16);
    lo16 = __bfloat16_as_ushort(__float2bfloat16_rn(s - __uint_as_float(hi)));
}

// c = a b for one m16n8k32 tile: a 16 x 32 u8 (row-major), b 32 x 8 s8 (column-major), exact int32.
__device__ __forceinline__ void mma_u8s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %10, %10, %10};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

__device__ __forceinline__ uint32_t nibbles(uint32_t w, int h) { return (h ? w >> 4 : w) & 0x0F0F0F0Fu; }
__device__ __forceinline__ int byte_of(uint32_t w, int i) { return int((w >> (8 * i)) & 0xFFu); }

// One block of 256 elements of a digit product, for one (weight row, step row): acc0 and acc1 the
// digits' exact sums of sc_j q dots, cm the mins' mma (sum_j m_j S_j), d and dm the block's super
// scales, s the row's digit scale: out + s (d (acc0 + acc1 / 256) - dm cm / 256). Every digit
// product (decode's matvec_digits, the prompt tiles) folds a block through here, with explicit
// roundings (nothing left to contraction), so they give the same bits for the same inputs.
__device__ __forceinline__ float digit_fold(int acc0, int acc1, float cm, float d, float dm, float s, float out) {
    const float dots = __fmaf_rn(float(acc1), 1.0f / 256.0f, float(acc0));
    const float part = __fmaf_rn(d, dots, -__fmul_rn(dm, __fmul_rn(cm, 1.0f / 256.0f)));  // S_j in units of 1 / 256
    return __fmaf_rn(s, part, out);
}

// silu(gate) * up, as the CPU twin writes it: every digit product's SwiGLU output.
__device__ __forceinline__ float digit_swiglu(float gate, float up) { return ::tandem::swiglu(gate, up); }

// The warp's block c of row `row` (n elements a row) into out, in digit_rows' layout.
__device__ __forceinline__ void digits_quantize_warp(const float (&v)[8], const digit_rows &out, int64_t row, int n, int c,
                                                     int lane) {
    constexpr int D = digits_per_element;
    const lane_digits ld = digits_of_lane(v);
    int8_t *digits = out.digits + row * D * n + (c * 32 + lane) * 8 * D;
#pragma unroll
    for (int d = 0; d < D; ++d) *reinterpret_cast<uint2 *>(digits + 8 * d) = make_uint2(ld.wd[d][0], ld.wd[d][1]);
    const int j = lane >> 2;
    if ((lane & 3) == 0) {
        uint16_t *sums = out.sums + (row * (n / 256) + c) * 16 + (j >> 1) * 4 + (j & 1);
        digit_sum_halves(ld.sum_j, sums[0], sums[2]);
    }
    if (lane == 0) out.scales[row * (n / 256) + c] = ld.scale;
}

// A block's row held eight contiguous elements a thread (thread T of n / 8: elements 8T .. 8T + 7,
// so warp w holds digit block w as digits_quantize's lanes do): its RMSNorm in the CPU twin's order
// (element i's square summed in lane i % 32 of warp 0, ascending, then the butterfly; rmsnorm_kernel's
// order), y = x inv w written to y_row and as row `row` of `out`. Bitwise rmsnorm's y and
// digits_quantize's digits of that y. Every thread of the block calls it; s_sq holds n floats.
__device__ __forceinline__ void rmsnorm_digits_block(const float (&xv)[8], const float (&wv)[8], float *s_sq, float *s_inv, int n,
                                                     float eps, float *y_row, const digit_rows &out, int64_t row) {
    const int i0 = 8 * int(threadIdx.x), warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
    *reinterpret_cast<float4 *>(s_sq + i0) =
        make_float4(__fmul_rn(xv[0], xv[0]), __fmul_rn(xv[1], xv[1]), __fmul_rn(xv[2], xv[2]), __fmul_rn(xv[3], xv[3]));
    *reinterpret_cast<float4 *>(s_sq + i0 + 4) =
        make_float4(__fmul_rn(xv[4], xv[4]), __fmul_rn(xv[5], xv[5]), __fmul_rn(xv[6], xv[6]), __fmul_rn(xv[7], xv[7]));
    __syncthreads();
    if (warp == 0) {
        float acc = 0.0f;
#pragma unroll 16
        for (int i = lane; i < n; i += 32) acc = __fadd_rn(acc, s_sq[i]);
        acc = warp_sum_fixed(acc);
        if (lane == 0) *s_inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(acc, float(n)), eps)));
    }
    __syncthreads();
    const float inv = *s_inv;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(__fmul_rn(xv[i], inv), wv[i]);
    *reinterpret_cast<float4 *>(y_row + i0) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4 *>(y_row + i0 + 4) = make_float4(v[4], v[5], v[6], v[7]);
    digits_quantize_warp(v, out, row, n, warp, lane);
}

// Eight contiguous floats from p (16-byte aligned) into v.
__device__ __forceinline__ void load8(const float *p, float (&v)[8]) {
    const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

}  // namespace tandem::cuda
