// tests/unit/quant/quant_test_util.h - shared functions for the quant tests: IEEE half decoding from
// the definition, seeded test data of several shapes, relative RMS error.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace quant_test {

// The binary16 value from the IEEE definition, in double (exact for every half).
inline double half_value(uint16_t h) {
    const int sign = (h & 0x8000) ? -1 : 1;
    const int e = (h >> 10) & 0x1f;
    const int m = h & 0x3ff;
    if (e == 0) return sign * std::ldexp(static_cast<double>(m), -24);
    if (e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
    return sign * std::ldexp(static_cast<double>(1024 + m), e - 25);
}

inline uint16_t load_u16(const uint8_t *p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline void store_u16(uint8_t *p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v & 0xff);
    p[1] = static_cast<uint8_t>(v >> 8);
}

enum class data_kind { gaussian, uniform, outliers, all_equal, all_equal_negative, all_zero, tiny };

inline std::string data_kind_name(data_kind k) {
    switch (k) {
    case data_kind::gaussian: return "gaussian";
    case data_kind::uniform: return "uniform";
    case data_kind::outliers: return "outliers";
    case data_kind::all_equal: return "all_equal";
    case data_kind::all_equal_negative: return "all_equal_negative";
    case data_kind::all_zero: return "all_zero";
    case data_kind::tiny: return "tiny";
    }
    return "?";
}

// n values of the given shape from a seeded generator (libstdc++'s distributions are fixed).
inline std::vector<float> make_data(data_kind kind, int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        switch (kind) {
        case data_kind::gaussian: x[i] = normal(rng); break;
        case data_kind::uniform: x[i] = uniform(rng); break;
        case data_kind::outliers: x[i] = normal(rng) * (rng() % 97 == 0 ? 40.0f : 1.0f); break;
        case data_kind::all_equal: x[i] = 0.37f; break;
        case data_kind::all_equal_negative: x[i] = -2.5f; break;
        case data_kind::all_zero: x[i] = 0.0f; break;
        case data_kind::tiny: x[i] = normal(rng) * 1e-3f; break;
        }
    }
    return x;
}

// sqrt(sum (y - x)^2 / sum x^2), or the plain RMS of y when x is all zero.
inline double rel_rms_error(const std::vector<float> &x, const std::vector<float> &y) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double d = static_cast<double>(y[i]) - x[i];
        err += d * d;
        ref += static_cast<double>(x[i]) * x[i];
    }
    return ref > 0 ? std::sqrt(err / ref) : std::sqrt(err / static_cast<double>(x.size()));
}

}  // namespace quant_test
