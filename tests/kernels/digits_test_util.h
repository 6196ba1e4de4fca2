// tests/kernels/digits_test_util.h - the host twin of the digit format (cuda/digits.cuh): the same
// scale choice, rounding and packing, to check its producers bitwise.
#pragma once

#include "split_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tandem::test {

// Host twin of digits_quantize_kernel: the same scale choice, rounding and packing. Compare scales
// bitwise (same_bits): a non-finite block's scale is NaN.
struct host_digits {
    std::vector<int8_t> digits;
    std::vector<float> scales;
    std::vector<uint16_t> sums;
};
inline host_digits quantize_host(const std::vector<float> &x, int32_t rows, int32_t n) {
    constexpr int D = 2;  // cuda::digits_per_element
    const int32_t nb = n / 256;
    host_digits h{std::vector<int8_t>(size_t(rows) * D * n), std::vector<float>(size_t(rows) * nb),
                  std::vector<uint16_t>(size_t(rows) * nb * 16)};
    for (int32_t r = 0; r < rows; ++r)
        for (int32_t c = 0; c < nb; ++c) {
            const float *xv = x.data() + size_t(r) * n + size_t(c) * 256;
            // A block with a non-finite element: zero digits and sums, a NaN scale.
            const bool finite = std::all_of(xv, xv + 256, [](float f) { return std::isfinite(f); });
            float v[256];
            for (int i = 0; i < 256; ++i) v[i] = finite ? xv[i] : 0.0f;
            float mx = 0.0f;
            for (int i = 0; i < 256; ++i) mx = std::max(mx, std::fabs(v[i]));
            int e = 0;
            if (mx > 0.0f) {
                int k;
                std::frexp(mx, &k);
                e = k - 7;
                if (std::ldexp(127.0f, e) < mx) ++e;
            }
            const float inv = std::ldexp(1.0f, -e);
            h.scales[size_t(r) * nb + c] = finite ? std::ldexp(1.0f, e) : bits_float(0x7FC00000u);
            for (int j = 0; j < 8; ++j) {
                int s = 0;
                for (int l = 0; l < 32; ++l) {
                    float q = v[32 * j + l] * inv;
                    int sum = 0;
                    const int t = l / 8, i = l % 8;
                    int8_t *dst = h.digits.data() + size_t(r) * D * n + (size_t(c) * 32 + size_t(4 * j + t)) * 8 * D;
                    for (int d = 0; d < D; ++d) {
                        const float di = d == 0 ? std::nearbyint(q) : std::min(std::max(std::nearbyint(q), -127.0f), 127.0f);
                        dst[8 * d + i] = int8_t(di);
                        sum = 256 * sum + int(di);
                        q = (q - di) * 256.0f;
                    }
                    s += sum;
                }
                const float sf = float(s);
                const uint32_t hi = float_bits(sf) & 0xFFFF0000u;
                uint16_t *sums = h.sums.data() + (size_t(r) * nb + c) * 16 + (j >> 1) * 4 + (j & 1);
                sums[0] = uint16_t(hi >> 16);
                sums[2] = bf16_rn(sf - bits_float(hi));
            }
        }
    return h;
}

template <class T>
bool same_bits(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace tandem::test
