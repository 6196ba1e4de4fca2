// scripts/cluster-probe/cluster_probe.cu - how many 8- and 16-CTA clusters of a given shared-memory
// size can be resident on this GPU, what a cluster barrier costs, and the latency of a dependent
// load from another CTA's shared memory: inputs to the planned one-launch expert FFN
// (docs/perf-notes.md, session 12). Not part of the build; on a GPU machine:
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

int main() {
    float *out;
    cudaMalloc(&out, 4);
    for (int csize : {8, 16}) {
        for (int kb : {48, 100, 150, 200, 220}) {
            size_t smem = size_t(kb) * 1024;
            cudaFuncSetAttribute(sync_loop, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            cudaFuncSetAttribute(sync_loop, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
            cudaLaunchConfig_t cfg{};
            cfg.gridDim = dim3(csize, 8);
            cfg.blockDim = dim3(128);
            cfg.dynamicSmemBytes = smem;
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeClusterDimension;
            attr[0].val.clusterDim.x = csize;
            attr[0].val.clusterDim.y = 1;
            attr[0].val.clusterDim.z = 1;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
            int n = -1;
            cudaError_t e = cudaOccupancyMaxActiveClusters(&n, sync_loop, &cfg);
            float ms = -1.0f;
            if (e == cudaSuccess && n > 0) {
                cudaEvent_t a, b;
                cudaEventCreate(&a);
                cudaEventCreate(&b);
                cudaLaunchKernelEx(&cfg, sync_loop, 10, out);
                cudaEventRecord(a);
                cudaLaunchKernelEx(&cfg, sync_loop, 10000, out);
                cudaEventRecord(b);
                cudaEventSynchronize(b);
                cudaEventElapsedTime(&ms, a, b);
            }
            std::printf("cluster %2d, %3d KB smem a CTA: max active clusters %d (%s); cluster.sync %.1f ns each (8 clusters)\n", csize,
                        kb, n, cudaGetErrorString(e), ms * 1e6f / 10000.0f);
        }
    }
    {
        cudaFuncSetAttribute(dsmem_read, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(16, 8);
        cfg.blockDim = dim3(128);
        cfg.dynamicSmemBytes = 128 * 4;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 16;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        cudaLaunchKernelEx(&cfg, dsmem_read, 10, out);
        cudaEventRecord(a);
        cudaLaunchKernelEx(&cfg, dsmem_read, 100000, out);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        std::printf("dependent DSMEM load (cluster 16): %.1f ns each; last error %s\n", ms * 1e6f / 100000.0f,
                    cudaGetErrorString(cudaGetLastError()));
    }
    return 0;
}
