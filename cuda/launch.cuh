// cuda/launch.cuh - kernel launches with programmatic dependent launch (PDL, sm_90): a kernel
// may be scheduled while its predecessor in the stream finishes; it calls pdl_wait() before its
// first read of anything an earlier kernel wrote, then pdl_trigger() so its own successor can be
// scheduled. Every kernel of the forward follows that order, so when kernel N starts, kernel
// N - 2 is complete and its writes are visible (N - 1 passed its wait before triggering).
// Reads of immutable weights may come before the wait: that overlaps them with the predecessor.
#pragma once

#include "cuda_check.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <utility>

namespace tandem::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Whether the current device takes PDL (compute capability 9.0+); older GPUs (sm_89) launch the
// same kernels in plain stream order, where pdl_wait/pdl_trigger compile to nothing.
bool pdl_supported();
// Whether the current device runs this build's sm_90a code (warpgroup products, cuda/wgmma.cuh):
// the library was built with "90a" among TANDEM_CUDA_ARCHS (TANDEM_WGMMA_BUILT) and the device has
// compute capability 9.0 exactly (sm_90a code runs nowhere else).
bool wgmma_built();
// The current device's multiprocessor count (launch shapes that must fill the GPU).
int multiprocessor_count();

// A tiled tensor map over bytes (innermost dimension first; strides of dimensions 1.. in bytes):
// the driver's cuTensorMapEncodeTiled, found once through the runtime, with what every caller here
// uses (no interleave, 256-byte L2 promotion, rows past the extent arriving as zeros). what: the
// caller, for the error message.
CUtensorMap byte_tensor_map(const void *base, cuuint32_t rank, const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                            CUtensorMapSwizzle swizzle, const char *what);
// Lets `kernel` take `bytes` of dynamic shared memory on the current device: the driver call the
// first time (or when more is asked), a table look-up after that (prompt steps are launched
// from the host, kernel by kernel, so the driver call would be paid every launch).
void allow_dynamic_smem(const void *kernel, size_t bytes);
template <class... Params>
void allow_dynamic_smem(void (*kernel)(Params...), size_t bytes) {
    allow_dynamic_smem(reinterpret_cast<const void *>(kernel), bytes);
}

// The launch with its attributes: PDL where the device takes it, and thread-block clusters of
// `*cluster` blocks when given (sm_90).
template <class... Params, class... Args>
void launch_pdl_config(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, const dim3 *cluster,
                       Args &&...args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (cluster) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster->x;
        attr[n].val.clusterDim.y = cluster->y;
        attr[n].val.clusterDim.z = cluster->z;
        ++n;
    }
    if (pdl_supported()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    TANDEM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// With `smem_bytes` of dynamic shared memory (allowed by allow_dynamic_smem above 48 KiB).
template <class... Params, class... Args>
void launch_pdl_smem(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                     Args &&...args) {
    launch_pdl_config(kernel, grid, block, smem_bytes, stream, nullptr, std::forward<Args>(args)...);
}

// In thread-block clusters of `cluster` blocks (sm_90), with PDL.
template <class... Params, class... Args>
void launch_pdl_cluster_smem(void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block, size_t smem_bytes, cudaStream_t stream,
                             Args &&...args) {
    launch_pdl_config(kernel, grid, block, smem_bytes, stream, &cluster, std::forward<Args>(args)...);
}

template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args &&...args) {
    launch_pdl_smem(kernel, grid, block, 0, stream, std::forward<Args>(args)...);
}

}  // namespace tandem::cuda
