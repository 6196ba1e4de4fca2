// cuda/ldmatrix.cuh - ldmatrix (sm_75+): four 8x8 matrices of 16-bit elements from shared memory
// into mma.sync fragments; lanes 8i .. 8i + 7 give the row addresses (16 bytes each) of matrix i.
// Lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of each matrix (transposed: column
// l / 4, rows 2 (l % 4) and 2 (l % 4) + 1). Used by the prompt products and the attention kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void *p) {
    const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

}  // namespace tandem::cuda
