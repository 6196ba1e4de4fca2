// tests/unit/quant/test_quant_reference.cpp - quantize_row against a second, deliberately plain
// implementation of ggml's reference quantizers (quantize_row_{q8_0,q4_K,q6_K}_ref), written
// here as sequential loops straight from the algorithm, with std::nearbyint for rounding and
// byte offsets instead of the structs. The library runs the candidate searches as vector lanes;
// the blocks must still be identical byte for byte.
#include "tandem/quant.h"
#include "tandem/types.h"

#include "quant_test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

using namespace tandem;
using namespace quant_test;

namespace {

// Round half to even (the default FP environment); saturate far outside the quant ranges.
int plain_nearest(float v) {
    const double r = std::nearbyint(static_cast<double>(v));
    return static_cast<int>(std::clamp(r, -4194303.0, 4194303.0));
}

void plain_q8_0(const float *x, uint8_t *out) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_u16(out, fp32_to_fp16(d));
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

// make_qkx2_quants(32, 15, x, w, L, &the_min, Laux, -1, 0.1, 20, false), one candidate at a time.
float plain_qkx2(const float *x, const float *w, uint8_t *L, float *the_min) {
    const int n = 32, nmax = 15;
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        min = x[i] < min ? x[i] : min;
        max = x[i] > max ? x[i] : max;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = static_cast<uint8_t>(std::clamp(plain_nearest(iscale * (x[i] - min)), 0, nmax));
        const float diff = scale * L[i] + min - x[i];
        best_mad += w[i] * (diff * diff);
    }
    for (int step = 0; step <= 20; ++step) {
        iscale = (-1.0f + 0.1f * step + nmax) / (max - min);
        uint8_t Laux[32];
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(plain_nearest(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = static_cast<uint8_t>(l);
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float mad = 0;
        for (int i = 0; i < n; ++i) {
            const float diff = this_scale * Laux[i] + this_min - x[i];
            mad += w[i] * (diff * diff);
        }
        if (mad < best_mad) {
            std::memcpy(L, Laux, n);
            best_mad = mad;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

void plain_q4_k(const float *x, uint8_t *out) {
    uint8_t L[256];
    float scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        float w[32];
        for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = plain_qkx2(x + 32 * j, w, L + 32 * j, &mins[j]);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    int ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
        ls[j] = std::min(63, static_cast<int>(static_cast<uint8_t>(plain_nearest(inv_scale * scales[j]))));
        lm[j] = std::min(63, static_cast<int>(static_cast<uint8_t>(plain_nearest(inv_min * mins[j]))));
    }
    // Pack the 6-bit pairs bit by bit as the layout describes (see test_quant_blocks.cpp).
    uint8_t *sc = out + 4;
    std::memset(sc, 0, 12);
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            sc[j] |= static_cast<uint8_t>(ls[j]);
            sc[j + 4] |= static_cast<uint8_t>(lm[j]);
        } else {
            sc[j + 4] |= static_cast<uint8_t>((ls[j] & 15) | (lm[j] & 15) << 4);
            sc[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
            sc[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
        }
    }
    store_u16(out, fp32_to_fp16(max_scale / 63.f));
    store_u16(out + 2, fp32_to_fp16(max_min / 63.f));
    const float d = static_cast<float>(half_value(load_u16(out)));
    const float dmin = static_cast<float>(half_value(load_u16(out + 2)));
    for (int j = 0; j < 8; ++j) {
        const float dj = d * ls[j];
        if (dj == 0) continue;
        const float dm = dmin * lm[j];
        for (int i = 0; i < 32; ++i) L[32 * j + i] = static_cast<uint8_t>(std::clamp(plain_nearest((x[32 * j + i] + dm) / dj), 0, 15));
    }
    uint8_t *qs = out + 16;
    std::memset(qs, 0, 128);
    for (int e = 0; e < 256; ++e) qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>(L[e] << (((e / 32) % 2) * 4));
}

// make_qx_quants(16, 32, x, L, rmse_type = 1, NULL): weights x^2, 19 candidate grids.
float plain_qx(const float *x, int *L) {
    const int n = 16, nmax = 32;
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    }
    if (amax < 1e-15f) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(plain_nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = l + nmax;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(plain_nearest(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) L[i] = nmax + std::clamp(plain_nearest(iscale * x[i]), -nmax, nmax - 1);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

void plain_q6_k(const float *x, uint8_t *out) {
    int L[256];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
        scales[ib] = plain_qx(x + 16 * ib, L + 16 * ib);
        if (std::fabs(scales[ib]) > max_abs_scale) {
            max_abs_scale = std::fabs(scales[ib]);
            max_scale = scales[ib];
        }
    }
    std::memset(out, 0, 210);
    if (max_abs_scale < 1e-15f) return;
    const float iscale = -128.f / max_scale;
    store_u16(out + 208, fp32_to_fp16(1 / iscale));
    const float d = static_cast<float>(half_value(load_u16(out + 208)));
    int8_t sc[16];
    for (int ib = 0; ib < 16; ++ib) {
        sc[ib] = static_cast<int8_t>(std::min(127, plain_nearest(iscale * scales[ib])));
        out[192 + ib] = static_cast<uint8_t>(sc[ib]);
    }
    for (int j = 0; j < 16; ++j) {
        const float dj = d * sc[j];
        if (dj == 0) continue;
        for (int i = 0; i < 16; ++i) L[16 * j + i] = 32 + std::clamp(plain_nearest(x[16 * j + i] / dj), -32, 31);
    }
    for (int e = 0; e < 256; ++e) {
        const int h = e / 128, r = e % 128, g = r / 32, l = r % 32;
        out[64 * h + l + 32 * (g % 2)] |= static_cast<uint8_t>((L[e] & 15) << (g >= 2 ? 4 : 0));
        out[128 + 32 * h + l] |= static_cast<uint8_t>((L[e] >> 4) << (2 * g));
    }
}

// Values on a grid of 1/8 in [-2, 2]: many exact rounding ties and equal candidate errors,
// where any difference in evaluation order or tie handling would show.
std::vector<float> grid_data(int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<float> x(n);
    for (float &v : x) v = static_cast<float>(static_cast<int>(rng() % 33) - 16) / 8.0f;
    return x;
}

}  // namespace

TEST_CASE("quantize_row matches plain implementations of ggml's reference quantizers", "[quant][reference]") {
    struct type_case {
        ggml_type type;
        int64_t block_elems;
        size_t block_bytes;
        void (*plain)(const float *, uint8_t *);
    };
    const type_case cases[] = {
        {ggml_type::q8_0, 32, 34, plain_q8_0},
        {ggml_type::q4_k, 256, 144, plain_q4_k},
        {ggml_type::q6_k, 256, 210, plain_q6_k},
    };
    const int64_t n = 32 * 256;
    for (uint64_t seed : {101, 102}) {
        std::vector<std::pair<std::string, std::vector<float>>> inputs;
        for (data_kind kind : {data_kind::gaussian, data_kind::uniform, data_kind::outliers, data_kind::all_equal,
                               data_kind::all_equal_negative, data_kind::all_zero, data_kind::tiny})
            inputs.emplace_back(data_kind_name(kind), make_data(kind, n, seed));
        inputs.emplace_back("grid", grid_data(n, seed));
        for (const type_case &tc : cases) {
            for (const auto &[name, x] : inputs) {
                std::vector<uint8_t> got(ggml_row_bytes(tc.type, n)), want(got.size());
                quantize_row(tc.type, x.data(), got.data(), n);
                for (int64_t b = 0; b < n / tc.block_elems; ++b) tc.plain(x.data() + b * tc.block_elems, want.data() + b * tc.block_bytes);
                const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
                const int64_t first_diff = diff.first == got.end() ? -1 : diff.first - got.begin();
                CAPTURE(seed, ggml_type_name(tc.type), name, first_diff);
                REQUIRE(first_diff == -1);
            }
        }
    }
}
