// cuda/x_split.cuh - activations handed to the decode products already split for the tensor
// cores, written by the kernel that produces them (RMSNorm, the MoE combine, decode attention).
//
// The split (mma_bf16.cuh): hi = v truncated to bf16, lo = bf16_rn(v - hi). A split row has the
// geometry of its fp32 row (4 bytes an element, same row stride): elements 4i .. 4i + 3 are one
// uint4 {hi(4i) | hi(4i+1) << 16, hi(4i+2) | hi(4i+3) << 16, lo(4i) | lo(4i+1) << 16,
// lo(4i+2) | lo(4i+3) << 16}, i.e. as 16-bit halves [hi0 hi1 hi2 hi3 lo0 lo1 lo2 lo3]: exactly the
// two B registers of the hi and of the lo k16 products for the four elements a lane holds. The
// row's 32-element sums (Q4_K's m term and quant bias) sit in a third array with row stride / 32:
// sums of the split values hi + lo (what the tensor cores see), each in the canonical order: an
// xor butterfly over the 32 elements in lane order (1, 2, 4, 8, 16).
// matvec computes the same values itself from an fp32 row (bitwise equal): the producers only
// spare every block of every product re-splitting the same rows.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tandem::cuda {

// The canonical sum of 32 consecutive elements held one per lane (lane j: element j), in every lane.
__device__ __forceinline__ float sum32_canonical(float v) {
#pragma unroll
    for (int w = 1; w <= 16; w <<= 1) v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, w));
    return v;
}

// A warp's share of one split row (as 16-bit halves): element i (i % 32 == lane) written, and lane 0
// writing the sum of its 32-element sub-block. Every lane of the warp must call it (the sum shuffles).
__device__ __forceinline__ void split_store_warp(uint16_t *split_row, float *sums_row, int64_t i, float v) {
    const uint32_t hi = __float_as_uint(v) & 0xFFFF0000u;
    uint16_t *group = split_row + (i >> 2) * 8 + (i & 3);
    group[0] = uint16_t(hi >> 16);
    const __nv_bfloat16 lo = __float2bfloat16_rn(v - __uint_as_float(hi));
    group[4] = __bfloat16_as_ushort(lo);
    const float s = sum32_canonical(__fadd_rn(__uint_as_float(hi), __bfloat162float(lo)));
    if (sums_row && (threadIdx.x & 31) == 0) sums_row[i >> 5] = s;
}

}  // namespace tandem::cuda
