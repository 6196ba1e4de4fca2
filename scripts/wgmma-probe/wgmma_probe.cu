// scripts/wgmma-probe/wgmma_probe.cu - checks cuda/wgmma.cuh's layouts on the device (outside the
// build): one warpgroup multiplies a random 64 x 32 u8 A (registers, the m16n8k32 fragment) by a
// random 32 x 64 s8 B (shared memory, no-swizzle K-major core matrices) twice, the second
// accumulating, against the host's product. (An H200 gets 0 of 4,096 wrong; with the
// descriptor's two byte offsets swapped the copy engine faults.)
// Build: nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -I. -o wgmma_probe scripts/wgmma-probe/wgmma_probe.cu
#include "cuda/wgmma.cuh"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace tandem::cuda;

__global__ void probe(const uint8_t *a, const int8_t *b, int *out) {
    __shared__ __align__(128) int8_t bs[2 * 64 * 16];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int i = tid; i < 2 * 64 * 16; i += 128) {
        const int kc = i / 1024, n = (i / 16) % 64, kk = i % 16;
        bs[i] = b[(16 * kc + kk) * 64 + n];  // B[k][n]
    }
    fence_proxy_async_shared();
    __syncthreads();
    auto word = [&](int row, int k0) {
        uint32_t w = 0;
        for (int i = 0; i < 4; ++i) w |= uint32_t(uint8_t(a[row * 32 + k0 + i])) << (8 * i);
        return w;
    };
    const int r = 16 * warp + g;
    const uint32_t af[4] = {word(r, 4 * t), word(r + 8, 4 * t), word(r, 16 + 4 * t), word(r + 8, 16 + 4 * t)};
    const uint64_t desc = wgmma_desc(bs, 1024, 128);
    int d[32];
    for (int i = 0; i < 32; ++i) d[i] = 7;
    wgmma_fence();
    wgmma_u8s8_m64n64k32(d, af, desc, 0);
    wgmma_u8s8_m64n64k32(d, af, desc, 1);
    wgmma_commit();
    wgmma_wait<0>();
    for (int i = 0; i < 8; ++i)
        for (int e = 0; e < 4; ++e) out[(r + 8 * (e >> 1)) * 64 + 8 * i + 2 * t + (e & 1)] = d[4 * i + e];
}

int main() {
    std::mt19937 rng(1);
    std::vector<uint8_t> a(64 * 32);
    std::vector<int8_t> b(32 * 64);
    for (auto &v : a) v = uint8_t(rng() % 256);
    for (auto &v : b) v = int8_t(int(rng() % 256) - 128);
    uint8_t *da;
    int8_t *db;
    int *dout;
    cudaMalloc(&da, a.size());
    cudaMalloc(&db, b.size());
    cudaMalloc(&dout, 64 * 64 * 4);
    cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice);
    probe<<<1, 128>>>(da, db, dout);
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        std::printf("wgmma probe: %s\n", cudaGetErrorString(err));
        return 2;
    }
    std::vector<int> out(64 * 64);
    cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 64; ++n) {
            int want = 0;
            for (int k = 0; k < 32; ++k) want += int(a[m * 32 + k]) * int(b[k * 64 + n]);
            bad += out[m * 64 + n] != 2 * want;
        }
    std::printf("wgmma probe: %d of 4096 wrong\n", bad);
    return bad ? 1 : 0;
}
