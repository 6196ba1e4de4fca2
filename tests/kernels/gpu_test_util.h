// tests/kernels/gpu_test_util.h - GPU presence check, device buffers and seeded data for the
// CUDA oracle tests, and the one table of tolerances they compare with.
#pragma once

#include "cuda/cuda_check.h"

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tandem::test {

// Catch2 2.13 has no SKIP: [gpu] tests call this first and return when it is false.
inline bool gpu_present() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        WARN("no CUDA device visible: skipping this [gpu] test");
        return false;
    }
    return true;
}

// Tolerances, relative L2 error ||gpu - cpu|| / ||cpu|| unless said otherwise. One table:
struct tolerance {
    // matvec (decode rows on tensor cores, mma_bf16.cuh): the same dequantised weights (bitwise),
    // weights and activations each split into two bf16 parts (~16 significant bits), the lo x lo
    // term dropped: ~2^-16 relative to each |w x| term. Relative to a row's result that is ~2e-5
    // for wide rows; a row of one output whose 256 terms cancel measured 1.8e-4.
    static constexpr double matvec = 5e-4;
    // attention: float32 dots and exp (CUDA expf <= 2 ulp vs glibc), chunked online softmax vs
    // the CPU's two-pass softmax: a few float32 ulps per term.
    static constexpr double attention = 1e-5;
    // prompt attention on tensor cores (cuda/attention_prompt.h): Q, K, P and V each split into
    // two bf16 parts (~16 significant bits), lo x lo dropped (2^-18 relative per product), score
    // errors carried through exp; the mma's fp32 accumulation truncates. Measured on an H200
    // (q std 2, K/V std 1): worst row 1.4e-5 at n_ctx 700, 4.1e-5 at 5000 (long averages shrink
    // the output, not the score errors); 1e-4 leaves 2.4x. A cache of halves takes f16 mma with K
    // and V exact and Q, P as f16 hi + lo (~22 bits): measured 2.9e-6 to 2.0e-5 on an H200.
    static constexpr double attention_prompt = 1e-4;
    // QK norm + RoPE: the norm is bitwise the CPU's; cos/sin in double on both sides may round
    // to different floats in rare cases (one ulp of one element).
    static constexpr double rope = 1e-6;
    // router weights: softmax sums in another order and expf vs glibc expf.
    static constexpr double route_weights = 1e-6;
    // grouped expert FFN: matvec's bound through two products and SwiGLU's expf. The experts'
    // Q4_K gate/up and down on int8 digits (cuda/matvec_digits.h) are held to it too: two digits
    // resolve each element to 2^-15 of its block of 256's largest (not of itself), so a product is
    // ~4e-5 from the CPU (measured 3.4-4.1e-5 on an H200; 5.9e-5 against the split).
    static constexpr double moe = 2e-4;
    // prompt-row products on tensor cores (cuda/matmul_prompt.h): the same dequantised weights,
    // weights and activations each split into two bf16 parts (~16 significant bits) and the
    // lo x lo term dropped: ~2^-16 relative per product, plus the fp32 accumulation order. The
    // exact-quant Q4_K kernel (only x split, d and m after the mma) is held to the same bound
    // (measured worst 3.7e-5 on an H200).
    static constexpr double matmul_prompt = 1e-4;
    // whole model, CUDA vs CPU engine logits: every op above through all layers; a router near
    // tie can pick another expert, which the greedy-token check would catch.
    static constexpr double model_logits = 1e-3;
};

template <class T>
struct device_buffer {
    T *ptr = nullptr;
    size_t count = 0;
    explicit device_buffer(size_t n) : count(n) { TANDEM_CUDA_CHECK(cudaMalloc(&ptr, (n ? n : 1) * sizeof(T))); }
    explicit device_buffer(const std::vector<T> &v) : device_buffer(v.size()) { upload(v); }
    ~device_buffer() { cudaFree(ptr); }
    device_buffer(const device_buffer &) = delete;
    device_buffer &operator=(const device_buffer &) = delete;
    void upload(const std::vector<T> &v) {
        TANDEM_CUDA_CHECK(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    // Fills with a NaN-like byte pattern so unwritten outputs show.
    void poison() { TANDEM_CUDA_CHECK(cudaMemset(ptr, 0xFF, count * sizeof(T))); }
    std::vector<T> download() const {
        TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<T> v(count);
        TANDEM_CUDA_CHECK(cudaMemcpy(v.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }
};

inline std::vector<float> random_floats(std::mt19937_64 &rng, size_t n, float std = 1.0f) {
    std::normal_distribution<float> dist(0.0f, std);
    std::vector<float> v(n);
    for (float &x : v) x = dist(rng);
    return v;
}

inline double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace tandem::test
