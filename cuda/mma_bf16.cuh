// cuda/mma_bf16.cuh - the split-bf16 tensor-core product of decode rows: an fp32 value v is held
// as hi (v truncated to bf16) and lo = bf16(v - hi) (~16 significant bits), and a product
// of two such values is taken as hi*hi + hi*lo + lo*hi on mma.sync m16n8k16 with fp32
// accumulation (the lo*lo term, ~2^-16 relative, is dropped).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tandem::cuda {

// Two floats -> their hi parts packed (first in the low half) and their lo parts packed. hi is v
// truncated to bf16 (a mask: exact), lo = v - hi exactly in fp32, then rounded to bf16: v is
// held to ~2^-16 relative, in 6 instructions per pair (rounding hi as well would cost twice that).
__device__ __forceinline__ void bf16_split2(float a, float b, uint32_t &hi, uint32_t &lo) {
    const uint32_t ua = __float_as_uint(a) & 0xFFFF0000u, ub = __float_as_uint(b) & 0xFFFF0000u;
    hi = __byte_perm(ua, ub, 0x7632);  // the high halves: a's in bits 0-15, b's in 16-31
    const __nv_bfloat162 l = __floats2bfloat162_rn(a - __uint_as_float(ua), b - __uint_as_float(ub));
    lo = uint32_t(__bfloat16_as_ushort(l.x)) | (uint32_t(__bfloat16_as_ushort(l.y)) << 16);
}

// The value a split holds, hi + lo (exact in fp32: lo's bits lie within 16 of hi's lowest).
__device__ __forceinline__ float bf16_split_value(float v) {
    const float hi = __uint_as_float(__float_as_uint(v) & 0xFFFF0000u);
    return __fadd_rn(hi, __bfloat162float(__float2bfloat16_rn(v - hi)));
}

// c += a b for one m16n8k16 tile (a: 16 x 16 row-major, b: 16 x 8 column-major, bf16; c fp32).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace tandem::cuda
