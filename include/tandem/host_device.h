// tandem/host_device.h - TANDEM_HOST_DEVICE: marks small functions that host code and CUDA kernels
// both call (__host__ __device__ under nvcc, nothing under the host compiler).
#pragma once

#ifndef TANDEM_HOST_DEVICE
#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif
#endif
