// cuda/bulk_copy.cuh - bulk copies global -> shared by the copy engine (cp.async.bulk, sm_90), each
// completing on an mbarrier: a block asks for all of its weights at once instead of a warp keeping
// one chunk in flight (matvec's staged grouped products); and tensor copies (TMA) of one box of a
// tensor map (the warpgroup prompt tiles' weights, cuda/matmul_prompt_wgmma.cu). On older GPUs these
// compile to a trap; callers use them only where pdl_supported() or wgmma_built() (launch.cuh:
// compute capability 9+).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

__device__ __forceinline__ uint32_t shared_addr(const void *p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// One thread: the barrier expects one arrival (mbar_expect) plus the bytes of its copies.
__device__ __forceinline__ void mbar_init(uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_addr(bar)) : "memory");
#else
    __trap();
#endif
}
// After the inits, before any copy names the barriers: the copy engine sees them initialised.
__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// The one arrival, announcing `bytes` still to come by copies.
__device__ __forceinline__ void mbar_expect(uint64_t *bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(bar)), "r"(bytes) : "memory");
#endif
}
// dst, src 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void bulk_copy_to_shared(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     shared_addr(dst)),
                 "l"(src), "r"(bytes), "r"(shared_addr(bar))
                 : "memory");
#else
    __trap();
#endif
}
// One box of a 4-d tensor map (coordinates innermost first) into shared memory, completing on bar.
__device__ __forceinline__ void tensor_copy_4d_to_shared(void *dst, const CUtensorMap *map, int c0, int c1, int c2, int c3, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(
                     shared_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(shared_addr(bar))
                 : "memory");
#else
    __trap();
#endif
}
// One box of a 3-d tensor map (coordinates innermost first) into shared memory, completing on bar;
// elements past the tensor's extent arrive as zeros. map: a __grid_constant__ kernel parameter.
__device__ __forceinline__ void tensor_copy_3d_to_shared(void *dst, const CUtensorMap *map, int c0, int c1, int c2, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
                     shared_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(shared_addr(bar))
                 : "memory");
#else
    __trap();
#endif
}
// Until the barrier's phase of this parity (0, 1, 0, ... for its successive uses) completes.
__device__ __forceinline__ void mbar_wait_parity(uint64_t *bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(shared_addr(bar)), "r"(parity)
                     : "memory");
#endif
}
// Until the barrier's first phase completes: its copies' bytes are then visible to this thread.
// (A suspend-time hint is no faster.)
__device__ __forceinline__ void mbar_wait_first(uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(shared_addr(bar))
                     : "memory");
#endif
}

}  // namespace tandem::cuda
