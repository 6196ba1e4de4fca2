// tests/catch_main_gpu.cpp - the Catch2 main of the GPU test programs: without a visible CUDA
// device the program runs nothing and exits with the code ctest reports as Skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdio>

int main(int argc, char **argv) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) {
        std::printf("no CUDA device visible: skipped\n");
        return TANDEM_SKIP_RETURN_CODE;
    }
    return Catch::Session().run(argc, argv);
}
