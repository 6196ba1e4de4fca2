// tests/unit/quant/test_quant_roundtrip.cpp - quantize -> dequantize error per type and data
// shape against one table of bounds, the Q8_0 per-element bound and idempotence, and block
// independence.
#include "tandem/quant.h"
#include "tandem/types.h"

#include "quant_test_util.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

using namespace tandem;
using namespace quant_test;

namespace {

// Relative RMS error bounds, sqrt(sum err^2 / sum x^2) (absolute RMS for all-zero data), over
// 64 blocks of 256 values. Each row says where its bound comes from; "measured" is what this
// implementation gives for seeds 1-3 (it is bitwise ggml's reference quantizer, see
// test_quant_reference.cpp), so the gap between the two is the slack.
struct bound_row {
    ggml_type type;
    data_kind kind;
    double max_rel_rms;
    const char *why;
    bool importance = false;  // quantize with unit importance (the types ggml quantizes only with one)
};

const bound_row bounds[] = {
    // f16: round to nearest with 11 significant bits: |err| <= 2^-11 |x| per value (measured 2.1e-4).
    {ggml_type::f16, data_kind::gaussian, 4.9e-4, "2^-11 relative per value"},
    {ggml_type::f16, data_kind::tiny, 4.9e-4, "2^-11 relative; 1e-3 is in fp16's normal range"},
    // bf16: 8 significant bits: |err| <= 2^-8 |x| per value (measured 1.7e-3).
    {ggml_type::bf16, data_kind::gaussian, 3.9e-3, "2^-8 relative per value"},
    {ggml_type::bf16, data_kind::outliers, 3.9e-3, "2^-8 relative per value"},
    // q8_0: rounding noise d/sqrt(12), d = amax/127. amax of 32 Gaussians ~ 2.0-2.5 sigma:
    // ~ 2.5/127/3.46 = 0.0057 (measured 0.0054). Uniform(-1,1): (1/127/3.46)/0.577 = 0.0039 (0.0038).
    {ggml_type::q8_0, data_kind::gaussian, 0.008, "d/sqrt(12), d = amax/127"},
    {ggml_type::q8_0, data_kind::uniform, 0.006, "d/sqrt(12), d = amax/127"},
    // ~1% of values at 40 sigma: their blocks get d ~ 16x coarser (measured 0.012).
    {ggml_type::q8_0, data_kind::outliers, 0.02, "an outlier's block has d = 40 sigma/127"},
    // All-equal: every value maps to 127 * fp16(c/127), so only fp16's 2^-11 on d remains (3e-4).
    {ggml_type::q8_0, data_kind::all_equal, 4.9e-4, "fp16 rounding of d only"},
    {ggml_type::q8_0, data_kind::all_equal_negative, 4.9e-4, "fp16 rounding of d only"},
    {ggml_type::q8_0, data_kind::all_zero, 0.0, "d = 0, every quant 0: exact"},
    // Tiny (sigma 1e-3): d ~ 2e-5 is an fp16 subnormal (unit 6e-8, ~0.3% of d), adding at most
    // ~0.004 to the Gaussian bound (measured 0.0055).
    {ggml_type::q8_0, data_kind::tiny, 0.012, "Gaussian bound + subnormal fp16 d"},
    // q4_K: 16 levels over each 32-value sub-block's [min, max]; for Gaussians the range is ~4
    // sigma, step ~0.27 sigma, noise 0.077 sigma, which the min/scale search trims (measured
    // 0.071). Uniform(-1,1): step 2/15, 0.0385/0.577 = 0.067 before the search (0.055).
    {ggml_type::q4_k, data_kind::gaussian, 0.085, "range/15/sqrt(12) per sub-block"},
    {ggml_type::q4_k, data_kind::uniform, 0.075, "range/15/sqrt(12) per sub-block"},
    // An outlier stretches its sub-block's range ~10x; with ~1% outliers about a quarter of the
    // sub-blocks hold one, but the search clips toward the bulk (measured 0.083-0.088).
    {ggml_type::q4_k, data_kind::outliers, 0.12, "outlier sub-blocks much coarser"},
    // Positive constant: scale c/15, min 0, all quants 15; negative constant: scale 0, min -c.
    // Only fp16 rounding of d / dmin (2^-11) remains (measured 1.3e-4, 2.4e-4).
    {ggml_type::q4_k, data_kind::all_equal, 1e-3, "fp16 rounding of d, dmin"},
    {ggml_type::q4_k, data_kind::all_equal_negative, 1e-3, "fp16 rounding of d, dmin"},
    {ggml_type::q4_k, data_kind::all_zero, 0.0, "scale and min 0: exact"},
    // Tiny (sigma 1e-3): d = max_scale/63 ~ 5e-6 is an fp16 subnormal (~1% precision); the grid
    // is requantized against the rounded scales, so only a little is added (measured 0.0715).
    {ggml_type::q4_k, data_kind::tiny, 0.09, "Gaussian bound + subnormal fp16 d"},
    // q6_K: 64 symmetric levels per 16 values: amax of 16 Gaussians ~ 1.8-2 sigma, step ~amax/32,
    // noise ~0.06/3.46 = 0.017 sigma (measured 0.0178); uniform: (1/32)/3.46/0.577 = 0.016 (0.0133).
    {ggml_type::q6_k, data_kind::gaussian, 0.022, "amax/32/sqrt(12) per 16 values"},
    {ggml_type::q6_k, data_kind::uniform, 0.02, "amax/32/sqrt(12) per 16 values"},
    {ggml_type::q6_k, data_kind::outliers, 0.05, "an outlier's sub-block is ~20x coarser (measured 0.034)"},
    // All-equal: one level (-32) times the scale: fp16 and int8 rounding of the scale (2.6e-4).
    {ggml_type::q6_k, data_kind::all_equal, 1e-3, "one level, fp16/int8 rounding of the scale"},
    {ggml_type::q6_k, data_kind::all_equal_negative, 1e-3, "one level, fp16/int8 rounding of the scale"},
    {ggml_type::q6_k, data_kind::all_zero, 0.0, "below GROUP_MAX_EPS: all-zero block, exact"},
    // Tiny: d = max_scale/128 ~ 6e-7 is an fp16 subnormal with ~10% precision; requantizing
    // against it changes the effective step by up to that much (measured 0.0205).
    {ggml_type::q6_k, data_kind::tiny, 0.03, "Gaussian bound + ~10% coarser step from subnormal d"},
    // The other types on Gaussians (sigma 1): noise ~ step/sqrt(12) with the step each layout
    // gives; amax of 32 Gaussians ~ 2.0-2.5 sigma, of 16 ~ 1.8-2, range of 32 ~ 4.2 sigma.
    // q4_0: levels -8..7 times amax/8: 2.3/8/3.46 = 0.083. q4_1: range/15: 4.2/15/3.46 = 0.081.
    {ggml_type::q4_0, data_kind::gaussian, 0.11, "amax/8/sqrt(12) per 32"},
    {ggml_type::q4_1, data_kind::gaussian, 0.11, "range/15/sqrt(12) per 32"},
    // q5_0: amax/16: 0.042; q5_1: range/31: 0.039; q5_K: range/31 per 32 under 6-bit scales: ~0.039.
    {ggml_type::q5_0, data_kind::gaussian, 0.06, "amax/16/sqrt(12) per 32"},
    {ggml_type::q5_1, data_kind::gaussian, 0.055, "range/31/sqrt(12) per 32"},
    {ggml_type::q5_k, data_kind::gaussian, 0.055, "range/31/sqrt(12) per 32 sub-block"},
    // q3_K: levels -4..3 times amax/4 per 16: 1.9/4/3.46 = 0.137, trimmed by the scale search.
    {ggml_type::q3_k, data_kind::gaussian, 0.18, "amax/4/sqrt(12) per 16"},
    // q2_K: 4 levels over each 16's range (~3.5 sigma): 3.5/3/3.46 = 0.34 before the min/scale search.
    {ggml_type::q2_k, data_kind::gaussian, 0.40, "range/3/sqrt(12) per 16"},
    // IQ4: 16 non-linear levels spanning +-amax, denser near 0 than q4_0's: at most q4_0's 0.083.
    {ggml_type::iq4_nl, data_kind::gaussian, 0.11, "q4_0's bound: same span, denser levels"},
    {ggml_type::iq4_xs, data_kind::gaussian, 0.11, "q4_0's bound: same span, denser levels"},
    // mxfp4: e2m1 levels {0,.5,1,1.5,2,3,4,6} times 2^e with amax/2^e in [4, 8): the bulk of a
    // Gaussian block (|x| < 1 sigma ~ 2-4 units) sees steps of 0.5-1 unit = 0.12-0.5 sigma.
    {ggml_type::mxfp4, data_kind::gaussian, 0.2, "e2m1 steps of 0.5-1 unit, unit amax/4..8"},
    // IQ3: 3.06-3.44 bits: points of 4 values on a grid of 8 magnitudes, sign bits apart: q3_K's
    // 0.137 plus the grid's constraint.
    {ggml_type::iq3_xxs, data_kind::gaussian, 0.25, "q3_K's step, grid-constrained"},
    {ggml_type::iq3_s, data_kind::gaussian, 0.25, "q3_K's step, grid-constrained"},
    // IQ2: 2.06-2.5 bits: points of 8 values from 3 magnitudes: about q2_K's 0.34.
    {ggml_type::iq2_s, data_kind::gaussian, 0.5, "q2_K's step, grid-constrained"},
    {ggml_type::iq2_xs, data_kind::gaussian, 0.5, "q2_K's step, grid-constrained", true},
    {ggml_type::iq2_xxs, data_kind::gaussian, 0.5, "q2_K's step, grid-constrained", true},
    // IQ1: 1.56-1.75 bits, values in {-1, 0, 1} + delta times a scale: a ternary quantizer of a
    // Gaussian keeps at best ~81% of its energy (rel. error 0.44); the grid costs more.
    {ggml_type::iq1_m, data_kind::gaussian, 0.75, "ternary levels: >= 0.44, grid-constrained"},
    {ggml_type::iq1_s, data_kind::gaussian, 0.75, "ternary levels: >= 0.44, grid-constrained", true},
};

constexpr int64_t n_values = 64 * 256;

std::vector<float> round_trip(ggml_type type, const std::vector<float> &x, std::vector<uint8_t> *q_out = nullptr,
                              bool importance = false) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(ggml_row_bytes(type, n));
    const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    quantize_rows(type, x.data(), q.data(), 1, n, importance ? ones.data() : nullptr);
    std::vector<float> y(n);
    dequantize_row(type, q.data(), y.data(), n);
    if (q_out) *q_out = std::move(q);
    return y;
}

}  // namespace

TEST_CASE("round-trip error is within the bound table", "[quant][roundtrip]") {
    for (uint64_t seed : {1, 2, 3}) {
        for (const bound_row &row : bounds) {
            const std::vector<float> x = make_data(row.kind, n_values, seed);
            const std::vector<float> y = round_trip(row.type, x, nullptr, row.importance);
            const double err = rel_rms_error(x, y);
            CAPTURE(seed, ggml_type_name(row.type), data_kind_name(row.kind), err, row.max_rel_rms, row.why);
            REQUIRE(err <= row.max_rel_rms);
        }
    }
}

TEST_CASE("f32 round trip is the identity", "[quant][roundtrip]") {
    const std::vector<float> x = make_data(data_kind::outliers, 1000, 5);
    const std::vector<float> y = round_trip(ggml_type::f32, x);
    REQUIRE(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

TEST_CASE("q8_0: every value within half a step plus the fp16 rounding of d", "[quant][q8_0][roundtrip]") {
    for (data_kind kind : {data_kind::gaussian, data_kind::uniform, data_kind::outliers, data_kind::tiny, data_kind::all_equal}) {
        const uint64_t seed = 11;
        const std::vector<float> x = make_data(kind, n_values, seed);
        const std::vector<float> y = round_trip(ggml_type::q8_0, x);
        for (int64_t b = 0; b < n_values / 32; ++b) {
            float amax = 0;
            for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
            const double d = amax / 127.0;
            // |q fp16(d) - x| <= |q| |fp16(d) - d| + |q d - x|: the first is <= 127 * (2^-11 d, or
            // 2^-25 absolute for a subnormal d), the second d/2 (plus a few ulps from x * (1/d)).
            const double bound = d * (0.5 + 127.0 / 2048 + 1e-4) + 127.0 * std::ldexp(1.0, -25);
            for (int j = 0; j < 32; ++j) {
                CAPTURE(seed, data_kind_name(kind), b, j, x[b * 32 + j], y[b * 32 + j], bound);
                REQUIRE(std::fabs(static_cast<double>(y[b * 32 + j]) - x[b * 32 + j]) <= bound);
            }
        }
    }
}

TEST_CASE("q8_0: quantize(dequantize(q)) == q", "[quant][q8_0][roundtrip]") {
    // The block maximum maps to +-127, so the dequantized block's amax / 127 is exactly the
    // stored fp16 d again (127 * d is exact in float), and each q * d maps back to q.
    for (data_kind kind : {data_kind::gaussian, data_kind::uniform, data_kind::outliers, data_kind::tiny,
                           data_kind::all_equal_negative, data_kind::all_zero}) {
        const uint64_t seed = 12;
        const std::vector<float> x = make_data(kind, n_values, seed);
        std::vector<uint8_t> q1, q2;
        const std::vector<float> y = round_trip(ggml_type::q8_0, x, &q1);
        round_trip(ggml_type::q8_0, y, &q2);
        CAPTURE(seed, data_kind_name(kind));
        REQUIRE(q1 == q2);
    }
}

TEST_CASE("blocks are quantized independently", "[quant][roundtrip]") {
    // A row quantized in one call equals the same row quantized block by block.
    const uint64_t seed = 13;
    const std::vector<float> x = make_data(data_kind::outliers, 8 * 256, seed);
    for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
        const int64_t blk = ggml_type_info(type).block_elems;
        const size_t blk_bytes = ggml_row_bytes(type, blk);
        std::vector<uint8_t> whole(ggml_row_bytes(type, 8 * 256)), pieces(whole.size());
        quantize_row(type, x.data(), whole.data(), 8 * 256);
        for (int64_t b = 0; b < 8 * 256 / blk; ++b) quantize_row(type, x.data() + b * blk, pieces.data() + b * blk_bytes, blk);
        CAPTURE(seed, ggml_type_name(type));
        REQUIRE(whole == pieces);
    }
}

TEST_CASE("subnormal and near-zero inputs give finite, negligible output", "[quant][roundtrip]") {
    // Far below what the fp16 scales can resolve: every format must return finite values no
    // larger than the input's magnitude (in practice zeros), never NaN from the scale searches.
    for (float magnitude : {1e-39f, 1e-30f, 1e-20f}) {
        std::vector<float> x = make_data(data_kind::gaussian, 4 * 256, 21);
        float amax = 0;
        for (float &v : x) amax = std::max(amax, std::fabs(v *= magnitude));
        for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
            const std::vector<float> y = round_trip(type, x);
            for (size_t i = 0; i < y.size(); ++i) {
                CAPTURE(magnitude, ggml_type_name(type), i, y[i]);
                REQUIRE(std::isfinite(y[i]));
                REQUIRE(std::fabs(y[i]) <= 2 * amax);
            }
        }
    }
}
