// scripts/cluster-probe/cluster_probe.cu - how many 8- and 16-CTA clusters of a given shared-memory
// size can be resident on this GPU, what a cluster barrier costs, and the latency of a dependent
// load from another CTA's shared memory: inputs to the choice of a one-launch expert FFN on
// clusters. Not part of the build; on a GPU machine:
//   nvcc -O2 -arch=sm_90 -o /tmp/cluster_probe scripts/cluster-probe/cluster_probe.cu && /tmp/cluster_probe
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;

__global__ void sync_loop(int iters, float *out) {
    extern __shared__ float s[];
    cg::cluster_group cl = cg::this_cluster();
    float acc = 0.0f;
    for (int i = 0; i < iters; ++i) {
        cl.sync();
        acc += s[threadIdx.x % 32];
    }
    if (acc == 12345.0f) out[0] = acc;
}

__global__ void dsmem_read(int iters, float *out) {
    extern __shared__ float s[];
    cg::cluster_group cl = cg::this_cluster();
    s[threadIdx.x] = float(threadIdx.x);
    cl.sync();
    const unsigned peer = (cl.block_rank() + 1) % cl.num_blocks();
    float *ps = cl.map_shared_rank(s, peer);
    float acc = 0.0f;
    unsigned idx = threadIdx.x;
    for (int i = 0; i < iters; ++i) {  // dependent remote loads: latency
        acc += ps[idx];
        idx = (unsigned(acc) + threadIdx.x) % 128;
    }
    cl.sync();
    if (acc == 12345.0f) out[0] = acc;
}

// A launch of `csize`-CTA clusters, 8 of them, 128 threads a CTA, `smem` bytes of shared memory
// each (attr must outlive cfg).
cudaLaunchConfig_t cluster_config(int csize, size_t smem, cudaLaunchAttribute &attr) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(csize, 8);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = csize;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cfg;
}

// Nanoseconds an iteration of kernel(iters): one warm-up launch of 10, then one timed launch.
template <class K>
float ns_per_iter(K kernel, const cudaLaunchConfig_t &cfg, int iters, float *out) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaLaunchKernelEx(&cfg, kernel, 10, out);
    cudaEventRecord(a);
    cudaLaunchKernelEx(&cfg, kernel, iters, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = -1.0f;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms * 1e6f / float(iters);
}

int main() {
    float *out;
    cudaMalloc(&out, 4);
    cudaFuncSetAttribute(sync_loop, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaFuncSetAttribute(dsmem_read, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    for (int csize : {8, 16}) {
        for (int kb : {48, 100, 150, 200, 220}) {
            const size_t smem = size_t(kb) * 1024;
            cudaFuncSetAttribute(sync_loop, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
            cudaLaunchAttribute attr;
            const cudaLaunchConfig_t cfg = cluster_config(csize, smem, attr);
            int n = -1;
            const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, sync_loop, &cfg);
            const float ns = e == cudaSuccess && n > 0 ? ns_per_iter(sync_loop, cfg, 10000, out) : -1.0f;
            std::printf("cluster %2d, %3d KB smem a CTA: max active clusters %d (%s); cluster.sync %.1f ns each (8 clusters)\n", csize,
                        kb, n, cudaGetErrorString(e), ns);
        }
    }
    cudaLaunchAttribute attr;
    const float ns = ns_per_iter(dsmem_read, cluster_config(16, 128 * 4, attr), 100000, out);
    std::printf("dependent DSMEM load (cluster 16): %.1f ns each; last error %s\n", ns, cudaGetErrorString(cudaGetLastError()));
    cudaFree(out);
    return 0;
}
