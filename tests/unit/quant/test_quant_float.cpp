// tests/unit/quant/test_quant_float.cpp - fp16/bf16 scalar conversions (exhaustive, ties, specials,
// F16C hardware as an oracle) and dot_f32 (accuracy, documented order, address independence).
#include "tandem/quant.h"

#include "quant_test_util.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

using namespace tandem;
using quant_test::half_value;

namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }

}  // namespace

TEST_CASE("fp16_to_fp32 gives the IEEE value of every half", "[quant][fp16]") {
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint16_t hh = static_cast<uint16_t>(h);
        const float f = fp16_to_fp32(hh);
        CAPTURE(h);
        if (half_is_nan(hh)) {
            REQUIRE(std::isnan(f));
            REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
            REQUIRE((bits_of(f) & 0x00400000) != 0);  // comes back quiet
        } else {
            // Bitwise, so -0 must stay -0.
            REQUIRE(bits_of(f) == bits_of(static_cast<float>(half_value(hh))));
        }
    }
}

TEST_CASE("fp32_to_fp16 inverts fp16_to_fp32 on every non-NaN half", "[quant][fp16]") {
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint16_t hh = static_cast<uint16_t>(h);
        CAPTURE(h);
        const uint16_t back = fp32_to_fp16(fp16_to_fp32(hh));
        if (half_is_nan(hh)) {
            REQUIRE(half_is_nan(back));
            REQUIRE((back & 0x8000) == (hh & 0x8000));
            REQUIRE((back & 0x0200) != 0);  // quiet
        } else {
            REQUIRE(back == hh);
        }
    }
}

TEST_CASE("fp32_to_fp16 rounds to nearest, ties to even", "[quant][fp16]") {
    // Between consecutive finite halves h and h+1 of the same sign the exact midpoint is a float
    // (12 significant bits). It must go to whichever of h, h+1 is even; a float just below or
    // above it to the nearer one. 0x7bff + 1 is inf: 65520 rounds to inf (0x7bff is odd).
    for (uint32_t sign : {0u, 0x8000u}) {
        for (uint32_t h = 0; h < 0x7c00; ++h) {
            const uint16_t lo = static_cast<uint16_t>(sign | h), hi = static_cast<uint16_t>(sign | (h + 1));
            const double vlo = half_value(lo);
            const double vhi = (h + 1 == 0x7c00) ? (sign ? -65536.0 : 65536.0) : half_value(hi);
            const float mid = static_cast<float>((vlo + vhi) / 2);
            REQUIRE(static_cast<double>(mid) == (vlo + vhi) / 2);  // the midpoint is exact
            CAPTURE(h, sign);
            const uint16_t even = (h & 1) ? hi : lo;
            REQUIRE(fp32_to_fp16(mid) == even);
            const float toward_lo = std::nextafter(mid, static_cast<float>(vlo));
            const float toward_hi = std::nextafter(mid, static_cast<float>(vhi));
            REQUIRE(fp32_to_fp16(toward_lo) == lo);
            REQUIRE(fp32_to_fp16(toward_hi) == hi);
        }
    }
}

TEST_CASE("fp32_to_fp16 special values", "[quant][fp16]") {
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(fp32_to_fp16(inf) == 0x7c00);
    CHECK(fp32_to_fp16(-inf) == 0xfc00);
    CHECK(fp32_to_fp16(0.0f) == 0x0000);
    CHECK(fp32_to_fp16(-0.0f) == 0x8000);
    CHECK(fp32_to_fp16(1.0f) == 0x3c00);
    CHECK(fp32_to_fp16(-2.0f) == 0xc000);
    CHECK(fp32_to_fp16(65504.0f) == 0x7bff);
    CHECK(fp32_to_fp16(1e10f) == 0x7c00);
    CHECK(fp32_to_fp16(-1e10f) == 0xfc00);
    CHECK(fp32_to_fp16(std::numeric_limits<float>::max()) == 0x7c00);
    // Subnormal halves: unit 2^-24; 2^-25 is a tie between 0 and 1 unit -> 0; 3 * 2^-25 -> 2 units.
    CHECK(fp32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);
    CHECK(fp32_to_fp16(-std::ldexp(1.0f, -25)) == 0x8000);
    CHECK(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(fp32_to_fp16(3 * std::ldexp(1.0f, -25)) == 0x0002);
    CHECK(fp32_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
    CHECK(fp32_to_fp16(std::ldexp(1023.5f, -24)) == 0x0400);  // tie rounding up into the normals
    CHECK(fp32_to_fp16(1e-10f) == 0x0000);
    CHECK(fp32_to_fp16(std::numeric_limits<float>::denorm_min()) == 0x0000);
    // NaNs: quiet, sign kept, top payload bits kept.
    CHECK(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()) == 0x7e00);
    CHECK(fp32_to_fp16(float_of(0xffc00000u)) == 0xfe00);
    CHECK(fp32_to_fp16(float_of(0x7f800001u)) == 0x7e00);  // signalling, payload below half's bits
    CHECK(fp32_to_fp16(float_of(0x7fa02000u)) == 0x7f01);  // payload 0x202000 >> 13 = 0x101, quieted
}

#if defined(__F16C__)
TEST_CASE("fp16 conversions match the F16C instructions ggml uses on x86", "[quant][fp16]") {
    for (uint32_t h = 0; h < 65536; ++h) {
        CAPTURE(h);
        REQUIRE(bits_of(fp16_to_fp32(static_cast<uint16_t>(h))) == bits_of(_cvtsh_ss(static_cast<unsigned short>(h))));
    }
    const uint64_t seed = 0x5eed0f16;
    std::mt19937_64 rng(seed);
    int64_t n_mismatch = 0;
    uint32_t first_bad = 0;
    for (int i = 0; i < 2'000'000; ++i) {
        uint32_t u = static_cast<uint32_t>(rng());
        // Half the draws concentrate on the exponents halves can represent (subnormal to 2^12),
        // with the 13 dropped bits at a rounding tie or one below or above it.
        if (i & 1) u = (u & 0x80000000u) | (((u >> 23) % 40 + 100) << 23) | (u & 0x007fe000u) | (0x0fffu + i % 3);
        if (fp32_to_fp16(float_of(u)) != _cvtss_sh(float_of(u), 0) && n_mismatch++ == 0) first_bad = u;
    }
    CAPTURE(seed, first_bad);
    REQUIRE(n_mismatch == 0);
}
#else
TEST_CASE("fp16 conversions match the F16C instructions ggml uses on x86", "[quant][fp16]") {
    WARN("built without F16C: hardware oracle skipped");
}
#endif

TEST_CASE("bf16 conversions are ggml's", "[quant][bf16]") {
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint16_t hh = static_cast<uint16_t>(h);
        CAPTURE(h);
        const float f = bf16_to_fp32(hh);
        REQUIRE(bits_of(f) == h << 16);  // bf16 is the top half of a float
        const bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
        if (nan)
            REQUIRE(fp32_to_bf16(f) == (hh | 0x40));  // quieted, everything else kept
        else
            REQUIRE(fp32_to_bf16(f) == hh);
    }
    // Ties to even on the 16 dropped bits, for every non-NaN bf16 whose successor is finite or inf.
    for (uint32_t h = 0; h < 65536; ++h) {
        if ((h & 0x7fff) >= 0x7f80) continue;
        const uint32_t tie = (h << 16) | 0x8000;
        CAPTURE(h);
        const uint16_t even = static_cast<uint16_t>((h & 1) ? h + 1 : h);
        REQUIRE(fp32_to_bf16(float_of(tie)) == even);
        REQUIRE(fp32_to_bf16(float_of(tie - 1)) == h);
        REQUIRE(fp32_to_bf16(float_of(tie + 1)) == h + 1);
    }
    CHECK(fp32_to_bf16(1.0f) == 0x3f80);
    CHECK(fp32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to inf
    CHECK(fp32_to_bf16(float_of(0x7f800001u)) == 0x7fc0);  // signalling NaN quieted
    CHECK(fp32_to_bf16(float_of(0xff800001u)) == 0xffc0);
    CHECK(fp32_to_bf16(float_of(0x00008000u)) == 0x0000);  // subnormal tie -> even (kept, not flushed)
    CHECK(fp32_to_bf16(float_of(0x00018000u)) == 0x0002);
}

TEST_CASE("f16 and bf16 rows convert element by element", "[quant][fp16][bf16]") {
    const uint64_t seed = 1234;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (int64_t n : {0, 1, 7, 63, 64, 65, 200, 1000}) {
        std::vector<float> x(n);
        for (float &v : x) v = normal(rng);
        std::vector<uint16_t> h(n), b(n);
        quantize_row(ggml_type::f16, x.data(), h.data(), n);
        quantize_row(ggml_type::bf16, x.data(), b.data(), n);
        std::vector<float> xh(n), xb(n);
        dequantize_row(ggml_type::f16, h.data(), xh.data(), n);
        dequantize_row(ggml_type::bf16, b.data(), xb.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            CAPTURE(seed, n, i);
            REQUIRE(h[i] == fp32_to_fp16(x[i]));
            REQUIRE(b[i] == fp32_to_bf16(x[i]));
            REQUIRE(bits_of(xh[i]) == bits_of(fp16_to_fp32(h[i])));
            REQUIRE(bits_of(xb[i]) == bits_of(bf16_to_fp32(b[i])));
        }
    }
}

// ---- dot_f32 ----

namespace {

// The summation order quant.h documents, written plainly: lane i % 32, then the butterfly.
float dot_documented_order(const float *a, const float *b, int64_t n) {
    float lane[32];
    for (float &v : lane) v = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float p = a[i] * b[i];
        lane[i % 32] = lane[i % 32] + p;
    }
    for (int w = 16; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) lane[j] = lane[j] + lane[j + w];
    return lane[0];
}

const std::vector<int64_t> dot_lengths = {0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65,
                                          100, 255, 256, 257, 1000, 2048, 4097, 12345};

}  // namespace

TEST_CASE("dot_f32 is within its rounding bound of the exact sum", "[quant][dot]") {
    const uint64_t seed = 77;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t n : dot_lengths) {
        std::vector<float> a(n), b(n);
        for (int64_t i = 0; i < n; ++i) a[i] = normal(rng), b[i] = normal(rng) * (i % 5 == 0 ? 100.0f : 1.0f);
        double exact = 0, abs_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
            exact += static_cast<double>(a[i]) * b[i];
            abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
        }
        // Every term passes through 1 multiply, at most ceil(n/32) lane adds and 5 butterfly adds,
        // each rounding by at most u = 2^-24 relative; the standard bound is k*u*sum|a*b|.
        // Using eps = 2u instead of u leaves a factor-2 margin (and float64 adds ~1e-16).
        const double k = 1 + static_cast<double>((n + 31) / 32) + 5;
        const double bound = k * std::numeric_limits<float>::epsilon() * abs_sum + 1e-30;
        CAPTURE(seed, n, exact, abs_sum);
        REQUIRE(std::fabs(dot_f32(a.data(), b.data(), n) - exact) <= bound);
    }
}

TEST_CASE("dot_f32 follows the documented summation order bitwise", "[quant][dot]") {
    const uint64_t seed = 78;
    std::mt19937_64 rng(seed);
    // Wide magnitudes make the order matter: a different order changes the low bits.
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-20, 20);
    for (int64_t n : dot_lengths) {
        std::vector<float> a(n), b(n);
        for (int64_t i = 0; i < n; ++i) a[i] = std::ldexp(mant(rng), expo(rng)), b[i] = mant(rng);
        CAPTURE(seed, n);
        REQUIRE(bits_of(dot_f32(a.data(), b.data(), n)) == bits_of(dot_documented_order(a.data(), b.data(), n)));
    }
}

TEST_CASE("dot_f32 is bitwise the same across calls and addresses", "[quant][dot]") {
    const uint64_t seed = 79;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t n : {5, 33, 1000, 4097}) {
        std::vector<float> a(n), b(n);
        for (int64_t i = 0; i < n; ++i) a[i] = normal(rng), b[i] = normal(rng);
        const uint32_t first = bits_of(dot_f32(a.data(), b.data(), n));
        for (int rep = 0; rep < 3; ++rep) REQUIRE(bits_of(dot_f32(a.data(), b.data(), n)) == first);
        // Copies at every float offset 0..15 (all 64-byte alignments) give the same bits.
        std::vector<float> buf_a(n + 32), buf_b(n + 32);
        for (int off_a = 0; off_a < 16; ++off_a) {
            const int off_b = (off_a * 7) % 16;
            std::copy(a.begin(), a.end(), buf_a.begin() + off_a);
            std::copy(b.begin(), b.end(), buf_b.begin() + off_b);
            CAPTURE(seed, n, off_a, off_b);
            REQUIRE(bits_of(dot_f32(buf_a.data() + off_a, buf_b.data() + off_b, n)) == first);
        }
    }
}
