// cuda/launch.cpp - whether the current device takes programmatic dependent launch (launch.cuh),
// whether it runs this build's sm_90a code (wgmma), and its multiprocessor count, each asked once
// per device; kernels' dynamic shared memory limits, set once per device.
#include "launch.cuh"

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
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

CUtensorMap byte_tensor_map(const void *base, cuuint32_t rank, const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                            CUtensorMapSwizzle swizzle, const char *what) {
    using encoder = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                 const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill);
    static const encoder encode = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult found{};
        TANDEM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
        TANDEM_CUDA_REQUIRE(found == cudaDriverEntryPointSuccess && p, "the driver has no cuTensorMapEncodeTiled");
        return reinterpret_cast<encoder>(p);
    }();
    TANDEM_CUDA_REQUIRE(rank >= 1 && rank <= 5, (std::string(what) + ": a tensor map has 1 to 5 dimensions").c_str());
    const cuuint32_t steps[5] = {1, 1, 1, 1, 1};
    CUtensorMap m;
    const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, const_cast<void *>(base), dims, strides, box, steps,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    TANDEM_CUDA_REQUIRE(r == CUDA_SUCCESS, (std::string(what) + ": a tensor map could not be made").c_str());
    return m;
}

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
