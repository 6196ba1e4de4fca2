// tests/kernels/digits_test_util.h - the host side of the digit format (cuda/digits.cuh) and its
// products: the CPU backend's producer and products (src/cpu/digits.h), which the GPU's must equal
// bit for bit.
#pragma once

#include "split_test_util.h"

#include "src/cpu/digits.h"
#include "tandem/quant.h"
#include "tandem/swiglu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tandem::test {

// The digits as the host makes them: the CPU backend's producer (src/cpu/digits.h), itself checked
// bit for bit against an independent reference in tests/unit/cpu. Compare scales bitwise (same_bits):
// a non-finite block's scale is NaN.
struct host_digits {
    std::vector<int8_t> digits;
    std::vector<float> scales;
    std::vector<uint16_t> sums;
};
inline host_digits quantize_host(const std::vector<float> &x, int32_t rows, int32_t n) {
    cpu::digit_rows d;
    cpu::digits_quantize(x.data(), n, rows, n, d);
    const size_t nb = size_t(rows) * size_t(n / 256);
    return {std::vector<int8_t>(d.digits.begin(), d.digits.begin() + ptrdiff_t(size_t(rows) * 2 * size_t(n))),
            std::vector<float>(d.scales.begin(), d.scales.begin() + ptrdiff_t(nb)),
            std::vector<uint16_t>(d.sums.begin(), d.sums.begin() + ptrdiff_t(nb * 16))};
}

// The CPU's digit product (src/cpu/digits.h) of Q4_K matrix w (n_out rows of n_in) with rows x_rows
// of the digits of x ([*][n_in]), K split k_split: [x_rows.size()][n_out], the GPU kernels' bits.
inline std::vector<float> cpu_digit_product(const std::vector<uint8_t> &w, int32_t n_in, int32_t n_out, const std::vector<float> &x,
                                            const std::vector<int32_t> &x_rows, int32_t k_split) {
    cpu::digit_rows d;
    cpu::digits_quantize(x.data(), n_in, int64_t(x.size()) / n_in, n_in, d);
    std::vector<float> y(x_rows.size() * size_t(n_out));
    std::vector<float *> ys(x_rows.size());
    for (size_t r = 0; r < x_rows.size(); ++r) ys[r] = y.data() + r * size_t(n_out);
    cpu::digits_product_args a;
    a.w = {w.data(), ggml_type::q4_k, n_in, n_out, ggml_row_bytes(ggml_type::q4_k, n_in)};
    a.x = &d;
    a.x_rows = x_rows.data();
    a.y = ys.data();
    a.n_rows = int64_t(x_rows.size());
    a.k_split = k_split;
    cpu::digits_scratch scratch;
    for (int32_t o = 0; o < n_out; o += int32_t(cpu::digits_tile_rows))
        cpu::digits_product_tile(a, o, std::min<int64_t>(o + cpu::digits_tile_rows, n_out), scratch);
    return y;
}

// The K split of matvec_digits' dense products (neither grouped nor one group): 16 partials when the
// launch has fewer than 264 blocks of 16 outputs (matvec_digits.cu's narrow_blocks), else 4.
inline int32_t dense_digits_k_split(int32_t n_out) { return (n_out + 15) / 16 < 264 ? 16 : 4; }

// A grouped product's outputs by the CPU, pair by pair: pair p multiplies expert ids[p]'s matrix
// (mats[e], n_out rows of n_in) with x row x_row(p), into output row p.
template <class XRow>
std::vector<float> cpu_grouped_product(const std::vector<std::vector<uint8_t>> &mats, const std::vector<int32_t> &ids, int32_t n_in,
                                       int32_t n_out, const std::vector<float> &x, XRow &&x_row, int32_t k_split) {
    std::vector<float> y(ids.size() * size_t(n_out));
    for (size_t p = 0; p < ids.size(); ++p) {
        const std::vector<float> one = cpu_digit_product(mats[size_t(ids[p])], n_in, n_out, x, {int32_t(x_row(p))}, k_split);
        std::copy(one.begin(), one.end(), y.begin() + ptrdiff_t(p * size_t(n_out)));
    }
    return y;
}

// silu(gate) * up of two products' outputs, as the CPU engine's SwiGLU writes it.
inline std::vector<float> cpu_swiglu(const std::vector<float> &gate, const std::vector<float> &up) {
    std::vector<float> y(gate.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = tandem::swiglu(gate[i], up[i]);
    return y;
}

// The largest |a - b| / |b| over the elements (the SwiGLU outputs: CUDA's expf is within 2 ulp of
// glibc's, so the GPU's and the CPU's differ by a few ulp where their products agree bitwise).
inline double max_rel_diff(const std::vector<float> &a, const std::vector<float> &b) {
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i]) worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / std::max(std::fabs(double(b[i])), 1e-30));
    return worst;
}

template <class T>
bool same_bits(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace tandem::test
