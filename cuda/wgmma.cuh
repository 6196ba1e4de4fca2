// cuda/wgmma.cuh - the warpgroup matrix products of sm_90a (wgmma.mma_async): four warps (128
// threads) compute a 64 x N tile together, A from registers, B from shared memory through a matrix
// descriptor, asynchronously until wgmma_wait. Only a build for sm_90a (TANDEM_CUDA_ARCHS "90a")
// has them: elsewhere TANDEM_HAVE_WGMMA is 0 and these trap; callers launch their kernels only
// where wgmma_built() (launch.cuh) says the running device got the sm_90a code.
//
// Layouts (int8, K = 32 an instruction), thread (warp w of the group, g = lane / 4, t = lane % 4):
// - A (64 x 32, registers a[0..3]): the m16n8k32 fragment of rows 16 w + g (a[0], a[2]) and
//   16 w + g + 8 (a[1], a[3]), k 4t .. 4t + 3 (a[0], a[1]) and 16 + 4t .. 16 + 4t + 3 (a[2], a[3]).
// - B (32 x N, "K-major": each of the N columns' 32 bytes contiguous in 16-byte halves): core
//   matrices of 8 columns x 16 bytes (128 contiguous bytes); `k_half_bytes` apart along K (the
//   descriptor's leading byte offset), `col8_bytes` apart along N (its stride byte offset); no swizzle.
// - D (64 x N int32, d[N / 2]; N 64 or 128 here): element 4i + e of n-tile i is row
//   16 w + g + 8 (e >> 1), column 8 i + 2 t + (e & 1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TANDEM_HAVE_WGMMA 1
#else
#define TANDEM_HAVE_WGMMA 0
#endif

namespace tandem::cuda {

// The shared-memory matrix descriptor of a no-swizzle K-major operand starting at `smem`.
__device__ __forceinline__ uint64_t wgmma_desc(const void *smem, uint32_t k_half_bytes, uint32_t col8_bytes) {
    const uint64_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    return ((addr & 0x3FFFFu) >> 4) | (uint64_t((k_half_bytes >> 4) & 0x3FFFu) << 16) | (uint64_t((col8_bytes >> 4) & 0x3FFFu) << 32);
}

// Before the first wgmma that reads registers (A, D) other instructions wrote.
__device__ __forceinline__ void wgmma_fence() {
#if TANDEM_HAVE_WGMMA
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if TANDEM_HAVE_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Until all but the `n` most recent committed groups are complete (their D readable, their A
// registers and B bytes free).
template <int n>
__device__ __forceinline__ void wgmma_wait() {
#if TANDEM_HAVE_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(n) : "memory");
#endif
}
// Shared memory this thread wrote (stores, or cp.async copies it has waited for), made visible to
// the wgmma (async) proxy; then a barrier before the wgmma reads it.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if TANDEM_HAVE_WGMMA
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// d (64 x 64 int32) = a (u8, registers) x b (s8, descriptor) + (accumulate ? d : 0), exact.
__device__ __forceinline__ void wgmma_u8s8_m64n64k32(int (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
#if TANDEM_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]),
          "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]),
          "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]),
          "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)
        : "memory");
#else
    (void)d, (void)a, (void)b, (void)accumulate;
    __trap();
#endif
}

// d (64 x 128 int32) = a (u8, registers) x b (s8, descriptor) + (accumulate ? d : 0), exact.
__device__ __forceinline__ void wgmma_u8s8_m64n128k32(int (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
#if TANDEM_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]),
          "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]),
          "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]),
          "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]),
          "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]),
          "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)
        : "memory");
#else
    (void)d, (void)a, (void)b, (void)accumulate;
    __trap();
#endif
}
__device__ __forceinline__ void wgmma_u8s8(int (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    wgmma_u8s8_m64n128k32(d, a, b, accumulate);
}
__device__ __forceinline__ void wgmma_u8s8(int (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    wgmma_u8s8_m64n64k32(d, a, b, accumulate);
}
// Registers an asynchronous product reads stay allocated until here (after its wgmma_wait): the
// compiler may not hand them to other instructions meanwhile, which would make it wait early.
template <int n>
__device__ __forceinline__ void wgmma_keep(const uint32_t (&r)[n]) {
#pragma unroll
    for (int i = 0; i < n; ++i) asm volatile("" ::"r"(r[i]));
}

}  // namespace tandem::cuda
