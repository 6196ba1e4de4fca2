// cuda/warp_reduce.cuh - warp reductions in a fixed order (xor-butterfly 16, 8, 4, 2, 1), and a
// transposing sum of several values at once.
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

// Sums n values per lane (n a power of two, 1..32) over the warp with n - 1 + 5 - log2(n)
// shuffles instead of 5 n: each step sends half of the remaining values to the partner lane and
// keeps the other half. Afterwards every lane of the aligned group of 32 / n lanes starting at
// lane (j * 32 / n) holds the sum of value j, i.e. lane l holds value l / (32 / n). The order of
// the additions differs from warp_sum_fixed: for float32 results checked by tolerance.
template <int n>
__device__ __forceinline__ float warp_sum_transposed(float (&v)[n]) {
    static_assert(n >= 1 && n <= 32 && (n & (n - 1)) == 0, "n must be a power of two up to 32");
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int cnt = n, o = 16; cnt > 1; cnt >>= 1, o >>= 1) {
        const bool upper = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < cnt / 2; ++i) {
            const float send = upper ? v[i] : v[i + cnt / 2];
            const float keep = upper ? v[i + cnt / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, o);
        }
    }
#pragma unroll
    for (int o = 16 / n; o >= 1; o >>= 1) v[0] += __shfl_xor_sync(0xFFFFFFFFu, v[0], o);
    return v[0];
}

}  // namespace tandem::cuda
