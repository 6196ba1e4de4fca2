// tests/kernels/split_test_util.h - the split twin of fp32 rows (cuda/x_split.cuh) computed on the
// host, to check the producers' split outputs and the products reading them, bitwise.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace tandem::test {

inline uint32_t float_bits(float v) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return u;
}
inline float bits_float(uint32_t u) {
    float v;
    std::memcpy(&v, &u, sizeof v);
    return v;
}
// bf16 of a finite float, rounded to nearest even.
inline uint16_t bf16_rn(float v) {
    const uint32_t u = float_bits(v);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Rows of n elements -> 16-bit halves: per 4 elements [hi0 hi1 hi2 hi3 lo0 lo1 lo2 lo3], hi the
// truncated bf16, lo bf16_rn(v - hi).
inline std::vector<uint16_t> host_split(const std::vector<float> &x) {
    std::vector<uint16_t> s(x.size() * 2);
    for (size_t i = 0; i < x.size(); ++i) {
        const uint32_t hi = float_bits(x[i]) & 0xFFFF0000u;
        s[(i / 4) * 8 + i % 4] = uint16_t(hi >> 16);
        s[(i / 4) * 8 + 4 + i % 4] = bf16_rn(x[i] - bits_float(hi));
    }
    return s;
}

// The value a split holds: hi + lo (exact in fp32).
inline float split_value(float v) {
    const float hi = bits_float(float_bits(v) & 0xFFFF0000u);
    return hi + bits_float(uint32_t(bf16_rn(v - hi)) << 16);
}

// Each 32-element sub-block's sum of split values in the canonical order: the xor butterfly 1, 2,
// 4, 8, 16.
inline std::vector<float> host_sums32(const std::vector<float> &x) {
    std::vector<float> sums(x.size() / 32);
    for (size_t b = 0; b < sums.size(); ++b) {
        float v[32], nv[32];
        for (int j = 0; j < 32; ++j) v[j] = split_value(x[b * 32 + j]);
        for (int w = 1; w <= 16; w <<= 1) {
            for (int j = 0; j < 32; ++j) nv[j] = v[j] + v[j ^ w];
            std::memcpy(v, nv, sizeof v);
        }
        sums[b] = v[0];
    }
    return sums;
}

}  // namespace tandem::test
