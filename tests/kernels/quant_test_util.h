// tests/kernels/quant_test_util.h - seeded random weight matrices in a GGUF type, their view as
// the CPU twin's matrix, and a dense product's arguments: what the product-kernel tests share.
#pragma once

#include "gpu_test_util.h"
#include "cuda/matvec.h"
#include "src/cpu/cpu_ops.h"
#include "tandem/quant.h"

#include <cstdint>
#include <random>
#include <vector>

namespace tandem::test {

// n_out rows of n_in random weights quantised to `type`, back to back.
inline std::vector<uint8_t> random_matrix(std::mt19937_64 &rng, ggml_type type, int64_t n_in, int64_t n_out, float std) {
    const size_t row_bytes = ggml_row_bytes(type, n_in);
    std::vector<uint8_t> bytes(row_bytes * size_t(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
        const std::vector<float> w = random_floats(rng, size_t(n_in), std);
        quantize_row(type, w.data(), bytes.data() + size_t(r) * row_bytes, n_in);
    }
    return bytes;
}

inline cpu::cpu_matrix host_matrix(const std::vector<uint8_t> &bytes, ggml_type type, int64_t n_in, int64_t n_out) {
    return {bytes.data(), type, n_in, n_out, ggml_row_bytes(type, n_in)};
}

// The arguments of a dense product of n_rows rows: y [n_rows][n_out] = W [n_out][n_in] x [n_rows][n_in],
// rows packed (strides n_in and n_out); the other fields keep their defaults.
inline cuda::matvec_args dense_product_args(const void *w, ggml_type type, int32_t n_in, int32_t n_out, const float *x,
                                            float *y, int32_t n_rows) {
    cuda::matvec_args a;
    a.w = w;
    a.type = type;
    a.n_in = n_in;
    a.n_out = n_out;
    a.x = x;
    a.x_stride = n_in;
    a.y = y;
    a.y_stride = n_out;
    a.n_pairs = n_rows;
    return a;
}

}  // namespace tandem::test
