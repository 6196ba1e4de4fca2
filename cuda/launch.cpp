// cuda/launch.cpp - whether the current device takes programmatic dependent launch (launch.cuh),
// asked once per device.
#include "launch.cuh"

#include <array>
#include <atomic>

namespace tandem::cuda {

bool pdl_supported() {
    // 0: not asked yet, 1: no, 2: yes; devices beyond the table are asked every time.
    static std::array<std::atomic<int>, 64> known{};
    int device = 0;
    TANDEM_CUDA_CHECK(cudaGetDevice(&device));
    if (device >= 0 && device < int(known.size())) {
        const int k = known[size_t(device)].load(std::memory_order_relaxed);
        if (k != 0) return k == 2;
    }
    int major = 0;
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    const bool yes = major >= 9;
    if (device >= 0 && device < int(known.size())) known[size_t(device)].store(yes ? 2 : 1, std::memory_order_relaxed);
    return yes;
}

}  // namespace tandem::cuda
