// cuda/kv_cache.cuh - the KV cache's element types on the device: float, __half when
// engine_options::kv_type is "f16" (attention_args::kv_f16), or ggml's block_q8_0 when it is
// "q8_0" (attention_args::kv_q8_0). A key or value is rounded once, as it enters the cache (to
// nearest half; or through its 32-value block as ggml's quantize_row_q8_0 does, which the CPU
// engine runs); the CUDA-core readers convert it back to float exactly (a q8_0 value is
// float(q) * float(d)), so their arithmetic is the same for every type and the CPU twin agrees;
// the tensor-core kernel applies a q8_0 block's scale after its product (attention_mma.h).
// A warp writes one head: lane l holds elements l + 32 t, so with d_head a multiple of 32 each t
// is one whole q8_0 block and its amax is one warp maximum.
#pragma once

#include "warp_reduce.cuh"

#include "tandem/quant_blocks.h"

#include <cuda_fp16.h>

#include <type_traits>

namespace tandem::cuda {

__device__ __forceinline__ float kv_to_float(float v) { return v; }
__device__ __forceinline__ float kv_to_float(__half v) { return __half2float(v); }
template <class KV>
__device__ __forceinline__ KV kv_from_float(float v) {
    if constexpr (sizeof(KV) == 2)
        return __float2half_rn(v);
    else
        return v;
}
template <class KV>
__device__ __forceinline__ void kv_store(KV *p, float v) { *p = kv_from_float<KV>(v); }
// v as a cache of element type KV holds it (float and halves only: a q8_0 value needs its block).
template <class KV>
__device__ __forceinline__ float kv_round(float v) { return kv_to_float(kv_from_float<KV>(v)); }

// What a reader keeps in registers: the element itself for floats and halves (converted at use),
// the dequantized float for q8_0 blocks.
template <class KV>
using kv_reg = std::conditional_t<std::is_same_v<KV, block_q8_0>, float, KV>;

// Element e of a cache plane (elements counted across its rows) as kv_reg<KV>.
template <class KV>
__device__ __forceinline__ kv_reg<KV> kv_load(const void *cache, int64_t e) {
    if constexpr (std::is_same_v<KV, block_q8_0>) {
        const block_q8_0 *b = static_cast<const block_q8_0 *>(cache) + (e >> 5);
        return __fmul_rn(float(b->qs[e & 31]), __half2float(__ushort_as_half(b->d)));
    } else {
        return static_cast<const KV *>(cache)[e];
    }
}

// quantize_row_q8_0_ref for the block whose 32 values the warp's lanes hold (x, one a lane):
// d = amax / 127 rounded to fp16, q = round(x * (1 / d)) half away from zero, with IEEE division
// and no contraction so every bit is the CPU's. Returns this lane's quant; d_bits the scale.
__device__ __forceinline__ int8_t q8_0_quantize_warp(float x, uint16_t &d_bits) {
    const float amax = warp_max(fabsf(x));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    d_bits = __half_as_ushort(__float2half_rn(d));
    return int8_t(roundf(__fmul_rn(x, id)));
}

// A head's values val[t] (element lane + 32 t, t < dpl) enter the cache: written at element e0 of
// the plane (the head's first; nullptr: not written) and replaced by what the cache holds.
template <class KV, int n>
__device__ __forceinline__ void kv_put_head(float (&val)[n], int dpl, int lane, void *cache, int64_t e0) {
#pragma unroll
    for (int t = 0; t < n; ++t) {
        if (t >= dpl) continue;  // warp-uniform
        if constexpr (std::is_same_v<KV, block_q8_0>) {
            uint16_t d_bits;
            const int8_t q = q8_0_quantize_warp(val[t], d_bits);
            if (cache) {
                block_q8_0 *b = static_cast<block_q8_0 *>(cache) + (e0 >> 5) + t;
                b->qs[lane] = q;
                if (lane == 0) b->d = d_bits;
            }
            val[t] = __fmul_rn(float(q), __half2float(__ushort_as_half(d_bits)));
        } else {
            if (cache) kv_store(static_cast<KV *>(cache) + e0 + lane + 32 * t, val[t]);
            val[t] = kv_round<KV>(val[t]);
        }
    }
}

}  // namespace tandem::cuda
