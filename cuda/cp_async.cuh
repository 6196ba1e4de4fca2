// cuda/cp_async.cuh - cp.async (sm_80+): 16 bytes global -> shared without registers, for kernels
// that stage the next tile while computing the current one (matmul_prompt_q4k, matmul_prompt_digits,
// attention_prompt).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

// src_bytes 0 writes zeros (src must still be a valid address).
__device__ __forceinline__ void cp_async_16(void *dst, const void *src, int src_bytes) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
// 8 bytes (cp.async.ca), src_bytes 0 or 8.
__device__ __forceinline__ void cp_async_8(void *dst, const void *src, int src_bytes) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
// 4 bytes (cp.async.ca: through L1), src_bytes 0 or 4.
__device__ __forceinline__ void cp_async_4(void *dst, const void *src, int src_bytes) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// This thread's copies are complete and visible to it; other threads' need a barrier after.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// All but this thread's n most recent groups are complete.
template <int n>
__device__ __forceinline__ void cp_async_wait_pending() { asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory"); }

}  // namespace tandem::cuda
