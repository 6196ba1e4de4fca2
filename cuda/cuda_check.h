// cuda/cuda_check.h - TANDEM_CUDA_CHECK and TANDEM_CUDA_REQUIRE: abort with file, line, statement
// and device on a CUDA error or a broken launch precondition. No fmt here: .cu files include it.
#pragma once

#include <cuda_runtime.h>

namespace tandem::cuda {

[[noreturn]] void cuda_fail(const char *file, int line, const char *statement, const char *message);
void cuda_check(cudaError_t err, const char *file, int line, const char *statement);

}  // namespace tandem::cuda

#define TANDEM_CUDA_CHECK(stmt) ::tandem::cuda::cuda_check((stmt), __FILE__, __LINE__, #stmt)
#define TANDEM_CUDA_REQUIRE(cond, message)                                  \
    do {                                                                    \
        if (!(cond)) ::tandem::cuda::cuda_fail(__FILE__, __LINE__, #cond, message); \
    } while (0)
// After a launch: catches bad configurations at once (asynchronous faults surface at the next sync).
#define TANDEM_CUDA_CHECK_LAUNCH() TANDEM_CUDA_CHECK(cudaGetLastError())
