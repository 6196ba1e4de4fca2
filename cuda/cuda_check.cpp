// cuda/cuda_check.cpp - the failure path of TANDEM_CUDA_CHECK / TANDEM_CUDA_REQUIRE.
#include "cuda_check.h"

#include "tandem/error.h"

#include <fmt/format.h>

namespace tandem::cuda {

void cuda_fail(const char *file, int line, const char *statement, const char *message) {
    int device = -1;
    cudaGetDevice(&device);
    assert_fail(file, line, statement, fmt::format("{} (device {})", message, device));
}

void cuda_check(cudaError_t err, const char *file, int line, const char *statement) {
    if (err == cudaSuccess) return;
    int device = -1;
    cudaGetDevice(&device);
    assert_fail(file, line, statement,
                fmt::format("CUDA error {} ({}) on device {}", cudaGetErrorName(err), cudaGetErrorString(err), device));
}

}  // namespace tandem::cuda
