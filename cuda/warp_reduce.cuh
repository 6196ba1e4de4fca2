// cuda/warp_reduce.cuh - warp reductions in a fixed order (xor-butterfly 16, 8, 4, 2, 1).
// Lane 0's sum equals tandem::dot_f32's lane combination bitwise when the inputs match, since
// lane j + lane (j xor w) is lane j + lane (j + w) for every j < w.
#pragma once

#include <cuda_runtime.h>

namespace tandem::cuda {

__device__ __forceinline__ float warp_sum_fixed(float v) {
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, w));
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, w));
    return v;
}

}  // namespace tandem::cuda
