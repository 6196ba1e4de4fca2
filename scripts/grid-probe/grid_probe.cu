// scripts/grid-probe/grid_probe.cu - what a phase boundary costs on this GPU, three ways: a launch
// boundary between small dependent kernels in a CUDA graph (with and without programmatic
// dependent launch, as the decode graph launches them), a software grid barrier inside one
// persistent launch (an arrival counter and a generation word in global memory), and cooperative
// groups' grid.sync(). Inputs to the choice of a persistent decode-layer kernel for one-session
// decode, whose steps are a chain of short dependent launches. Each phase hands a value from
// every block to every other block through global memory, so each boundary carries a real
// dependency. Not part of the build; on a GPU machine:
//   nvcc -O2 -arch=sm_90 -o /tmp/grid_probe scripts/grid-probe/grid_probe.cu && /tmp/grid_probe
#include <cooperative_groups.h>

#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(x)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

constexpr int threads = 128;

// One phase's work: block b reads the value block (b + 1) % n wrote in the phase before and writes
// its own (a dependency across blocks, as a layer's phases have).
__device__ __forceinline__ void phase(float *slots, int phase_i, int n_blocks) {
    if (threadIdx.x == 0) {
        const int b = blockIdx.x;
        const float prev = phase_i == 0 ? 0.0f : slots[(phase_i - 1) % 2 * n_blocks + (b + 1) % n_blocks];
        slots[phase_i % 2 * n_blocks + b] = prev + 1.0f;
    }
}

// A kernel per phase, launched in a graph; with PDL it waits for its predecessor before reading.
__global__ void phase_kernel(float *slots, int phase_i, int n_blocks) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
    phase(slots, phase_i, n_blocks);
}

// A software grid barrier: the last block to arrive resets the counter and bumps the generation.
__device__ __forceinline__ void soft_grid_barrier(unsigned *count, volatile unsigned *gen, unsigned n_blocks) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(count, 1u) == n_blocks - 1) {
            *count = 0;
            __threadfence();
            *gen = g + 1;
        } else {
            while (*gen == g) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

__global__ void persistent_soft(float *slots, int n_phases, unsigned *count, unsigned *gen) {
    for (int p = 0; p < n_phases; ++p) {
        phase(slots, p, gridDim.x);
        soft_grid_barrier(count, gen, gridDim.x);
    }
}

__global__ void persistent_cg(float *slots, int n_phases) {
    cg::grid_group grid = cg::this_grid();
    for (int p = 0; p < n_phases; ++p) {
        phase(slots, p, gridDim.x);
        grid.sync();
    }
}

int main() {
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    constexpr int n_phases = 2000;
    float *slots;
    unsigned *count, *gen;
    CHECK(cudaMalloc(&slots, 2 * 4 * sms * sizeof(float)));
    CHECK(cudaMalloc(&count, sizeof(unsigned)));
    CHECK(cudaMalloc(&gen, sizeof(unsigned)));
    CHECK(cudaMemset(count, 0, sizeof(unsigned)));
    CHECK(cudaMemset(gen, 0, sizeof(unsigned)));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    auto time_ms = [&](auto &&fn, float &ms) {
        fn();  // warm-up
        cudaEventRecord(a, stream);
        fn();
        cudaEventRecord(b, stream);
        cudaEventSynchronize(b);
        return cudaEventElapsedTime(&ms, a, b);
    };
    for (const int blocks_per_sm : {1, 2}) {
        const int n_blocks = sms * blocks_per_sm;
        // Launch boundaries: n_phases kernels of n_blocks blocks in one graph, with and without PDL.
        for (const bool pdl : {false, true}) {
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
            for (int p = 0; p < n_phases; ++p) {
                cudaLaunchConfig_t cfg{};
                cfg.gridDim = dim3(n_blocks);
                cfg.blockDim = dim3(threads);
                cfg.stream = stream;
                cudaLaunchAttribute attr;
                attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
                attr.val.programmaticStreamSerializationAllowed = 1;
                cfg.attrs = &attr;
                cfg.numAttrs = pdl ? 1 : 0;
                CHECK(cudaLaunchKernelEx(&cfg, phase_kernel, slots, p, n_blocks));
            }
            CHECK(cudaStreamEndCapture(stream, &graph));
            CHECK(cudaGraphInstantiate(&exec, graph, 0));
            float ms = 0;
            CHECK(time_ms([&] { cudaGraphLaunch(exec, stream); }, ms));
            std::printf("%4d blocks: launch boundary in a graph%s: %7.1f ns each\n", n_blocks, pdl ? " (PDL)" : "      ", ms * 1e6f / n_phases);
            CHECK(cudaGraphExecDestroy(exec));
            CHECK(cudaGraphDestroy(graph));
        }
        // One persistent launch, n_phases barriers.
        void *args_soft[] = {&slots, const_cast<int *>(&n_phases), &count, &gen};
        float ms = 0;
        CHECK(time_ms([&] { cudaLaunchCooperativeKernel(persistent_soft, dim3(n_blocks), dim3(threads), args_soft, 0, stream); }, ms));
        std::printf("%4d blocks: software grid barrier:        %7.1f ns each\n", n_blocks, ms * 1e6f / n_phases);
        void *args_cg[] = {&slots, const_cast<int *>(&n_phases)};
        CHECK(time_ms([&] { cudaLaunchCooperativeKernel(persistent_cg, dim3(n_blocks), dim3(threads), args_cg, 0, stream); }, ms));
        std::printf("%4d blocks: cooperative grid.sync():      %7.1f ns each\n", n_blocks, ms * 1e6f / n_phases);
    }
    // The last run (2 blocks an SM): every block's value of the last phase is n_phases.
    const int last_n = 2 * sms;
    std::vector<float> host(2 * size_t(last_n));
    CHECK(cudaMemcpy(host.data(), slots, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < last_n; ++i) wrong += host[size_t((n_phases - 1) % 2 * last_n + i)] != float(n_phases);
    std::printf("check: %d of %d blocks' last values differ from %d\n", wrong, last_n, n_phases);
    return 0;
}
