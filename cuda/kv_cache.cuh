// cuda/kv_cache.cuh - the KV cache's element types on the device: float, or __half when
// engine_options::kv_type is "f16" (attention_args::kv_f16). A key or value is rounded to nearest
// once, as it enters the cache; every reader converts it back to float exactly, so the attention's
// arithmetic is the same for both types and the CPU twin (which rounds the same way) agrees.
#pragma once

#include <cuda_fp16.h>

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
// v as a cache of element type KV holds it.
template <class KV>
__device__ __forceinline__ float kv_round(float v) { return kv_to_float(kv_from_float<KV>(v)); }

}  // namespace tandem::cuda
