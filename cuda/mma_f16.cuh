// cuda/mma_f16.cuh - the f16 tensor-core product of the attention kernels over a cache of halves:
// keys and values enter exactly, the fp32 operand (queries, probabilities) as an f16 hi + lo pair.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace tandem::cuda {

// c += a b: m16n8k16, f16 inputs, fp32 accumulation (a 16 x 16 row-major, b 16 x 8 column-major).
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (x, y) -> hi = their halves packed (x in the low 16 bits), lo = the halves of what remains.
// x - hi is exact in fp32; lo keeps ~11 more bits (fewer below 2^-14, where halves go subnormal:
// an absolute error under 2^-25).
__device__ __forceinline__ void split_f16(float x, float y, uint32_t &hi, uint32_t &lo) {
    const __half2 h = __floats2half2_rn(x, y);
    const float2 hf = __half22float2(h);
    const __half2 l = __floats2half2_rn(x - hf.x, y - hf.y);
    hi = *reinterpret_cast<const uint32_t *>(&h);
    lo = *reinterpret_cast<const uint32_t *>(&l);
}

}  // namespace tandem::cuda
