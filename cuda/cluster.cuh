// cuda/cluster.cuh - a kernel's view of its thread-block cluster (sm_90): the kernels that spread
// one logits row over a cluster of blocks (logits_draw.cu, logits_top.cu's best token) exchange
// through distributed shared memory with these. Before sm_90 a row is one block, and these are
// the block's own: rank 0 of 1, the block barrier, its own shared memory.
#pragma once

#include <cooperative_groups.h>

namespace tandem::cuda {

constexpr int max_cluster = 8;  // the portable cluster size

// cluster_sync: every thread of every block of the cluster, what each wrote to its shared memory
// before seen by all after. cluster_peer: `p` (in this block's shared memory) as block `rank` of
// the cluster holds it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ int cluster_rank() { return int(cooperative_groups::this_cluster().block_rank()); }
__device__ __forceinline__ int cluster_blocks() { return int(cooperative_groups::this_cluster().num_blocks()); }
__device__ __forceinline__ void cluster_sync() { cooperative_groups::this_cluster().sync(); }
template <class T>
__device__ __forceinline__ T *cluster_peer(T *p, int rank) {
    return cooperative_groups::this_cluster().map_shared_rank(p, unsigned(rank));
}
#else
__device__ __forceinline__ int cluster_rank() { return 0; }
__device__ __forceinline__ int cluster_blocks() { return 1; }
__device__ __forceinline__ void cluster_sync() { __syncthreads(); }
template <class T>
__device__ __forceinline__ T *cluster_peer(T *p, int) {
    return p;
}
#endif

}  // namespace tandem::cuda
