// cuda/launch.cpp - whether the current device takes programmatic dependent launch (launch.cuh),
// whether it runs this build's sm_90a code (wgmma), and its multiprocessor count, each asked once
// per device; kernels' dynamic shared memory limits, set once per device.
#include "launch.cuh"

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>

namespace tandem::cuda {

namespace {

// A device attribute of the current device, asked once per device (0 in the table: not asked yet;
// values are stored plus one; devices beyond the table are asked every time).
int cached_attribute(cudaDeviceAttr attr, std::array<std::atomic<int>, 64> &known) {
    int device = 0;
    TANDEM_CUDA_CHECK(cudaGetDevice(&device));
    if (device >= 0 && device < int(known.size())) {
        const int k = known[size_t(device)].load(std::memory_order_relaxed);
        if (k != 0) return k - 1;
    }
    int v = 0;
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
    if (device >= 0 && device < int(known.size())) known[size_t(device)].store(v + 1, std::memory_order_relaxed);
    return v;
}

}  // namespace

bool pdl_supported() {
    static std::array<std::atomic<int>, 64> known{};
    return cached_attribute(cudaDevAttrComputeCapabilityMajor, known) >= 9;
}

bool wgmma_built() {
#if defined(TANDEM_WGMMA_BUILT)
    static std::array<std::atomic<int>, 64> major{}, minor{};
    return cached_attribute(cudaDevAttrComputeCapabilityMajor, major) == 9 && cached_attribute(cudaDevAttrComputeCapabilityMinor, minor) == 0;
#else
    return false;
#endif
}

int multiprocessor_count() {
    static std::array<std::atomic<int>, 64> known{};
    return cached_attribute(cudaDevAttrMultiProcessorCount, known);
}

void allow_dynamic_smem(const void *kernel, size_t bytes) {
    static std::mutex mutex;
    static std::map<std::pair<int, const void *>, size_t> allowed;  // (device, kernel) -> bytes set
    int device = 0;
    TANDEM_CUDA_CHECK(cudaGetDevice(&device));
    const std::lock_guard<std::mutex> lock(mutex);
    size_t &have = allowed[{device, kernel}];
    if (have >= bytes) return;
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    have = bytes;
}

}  // namespace tandem::cuda
