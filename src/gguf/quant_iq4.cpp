// src/gguf/quant_iq4.cpp - IQ4_NL and IQ4_XS rows: dequantize and ggml's quantizer
// (quantize_iq4_nl / quantize_iq4_xs: quantize_row_iq4_nl_impl with ntry 7), with or without an
// importance matrix, block for block the same bytes.
#include "quant_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

// kvalues_iq4nl: the 16 non-linear levels of IQ4_NL and IQ4_XS (ggml-common.h), sorted.
constexpr int8_t iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr int n_try = 7;                 // quantize_iq4_*'s ntry: scales (v0 + t) / max for t = -7..7
constexpr float group_max_eps = 1e-15f;  // ggml's GROUP_MAX_EPS

// best_index_int8: the level nearest to x; x picks level j once 2x reaches values[j-1] + values[j]
// (exact in float), so a tie goes up. Branch-free binary search over the 16 sorted levels.
int best_index(float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = x2 >= static_cast<float>(iq4_values[j - 1] + iq4_values[j]) ? j : idx;
    }
    return idx;
}

// quantize_row_iq4_nl_impl's per-32 search: the scale d of x ~ d * values[L] maximising
// sumqx^2 / sumq2 over the first guess -max / values[0] and 15 more grids, with weights
// qw * sqrt(sigma2 + x^2), or x^2 without qw. L gets the indices of the first guess (the caller
// requantizes). Returns d (0 for an all-zero group).
float fit_scale(const float *x, const float *qw, float sigma2, uint8_t *L) {
    float weight[32];
    for (int j = 0; j < 32; ++j) weight[j] = qw ? qw[j] * std::sqrt(sigma2 + x[j] * x[j]) : x[j] * x[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        const float ax = std::fabs(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (amax < group_max_eps) {
        std::memset(L, 0, 32);
        return 0;
    }
    float d = -max / static_cast<float>(iq4_values[0]);
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
        const int l = best_index(id * x[j]);
        L[j] = static_cast<uint8_t>(l);
        const float q = iq4_values[l];
        sumqx += weight[j] * q * x[j];
        sumq2 += weight[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -n_try; itry <= n_try; ++itry) {
        id = static_cast<float>(itry + iq4_values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const float q = iq4_values[best_index(id * x[j])];
            sumqx += weight[j] * q * x[j];
            sumq2 += weight[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// quantize_row_iq4_nl_impl's sigma2: the sum of squares over the super-block times 2 / its size.
float super_sigma2(const float *x, int n) {
    float s = 0;
    for (int j = 0; j < n; ++j) s += x[j] * x[j];
    return s * (2.f / static_cast<float>(n));
}

// Element j (< 16) of a 32-group in the low nibble of qs[j], j + 16 in the high nibble.
void pack_group(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

}  // namespace

void dequantize_row_iq4_nl(const block_iq4_nl *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d);
        float *y = dst + b * 32;
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>(iq4_values[src[b].qs[j] & 0xF]);
            y[j + 16] = d * static_cast<float>(iq4_values[src[b].qs[j] >> 4]);
        }
    }
}

// dequantize_row_iq4_xs: (d * (ls - 32)) * value, ls the 6-bit scale of the 32-group.
void dequantize_row_iq4_xs(const block_iq4_xs *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_iq4_xs &blk = src[b];
        const float d = half_to_float(blk.d);
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = ((blk.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((blk.scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            const uint8_t *qs = blk.qs + 16 * ib;
            float *y = dst + b * qk_k_elems + 32 * ib;
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * static_cast<float>(iq4_values[qs[j] & 0xF]);
                y[j + 16] = dl * static_cast<float>(iq4_values[qs[j] >> 4]);
            }
        }
    }
}

// One group: d stored as fp16, indices recomputed against the unrounded d.
void quantize_row_iq4_nl(const float *src, const float *qw, block_iq4_nl *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *x = src + b * 32;
        uint8_t L[32];
        const float d = fit_scale(x, qw ? qw + b * 32 : nullptr, qw ? super_sigma2(x, 32) : 0.f, L);
        dst[b].d = checked_half(d, "iq4_nl", b);
        const float id = d != 0 ? 1 / d : 0;
        for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(best_index(id * x[j]));
        pack_group(L, dst[b].qs);
    }
}

// Eight groups: their scales as signed 6-bit multiples of d = -max_scale / 32 (max_scale the
// scale of largest magnitude), each group requantized against its rounded scale d * l.
void quantize_row_iq4_xs(const float *src, const float *qw, block_iq4_xs *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *x = src + b * qk_k_elems;
        const float *qwb = qw ? qw + b * qk_k_elems : nullptr;
        const float sigma2 = qw ? super_sigma2(x, qk_k_elems) : 0.f;
        block_iq4_xs &y = dst[b];
        uint8_t L[256];
        float scales[8];
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < 8; ++ib) {
            scales[ib] = fit_scale(x + 32 * ib, qwb ? qwb + 32 * ib : nullptr, sigma2, L + 32 * ib);
            const float abs_d = std::fabs(scales[ib]);
            if (abs_d > amax_scale) {
                amax_scale = abs_d;
                max_scale = scales[ib];
            }
        }
        const float d = -max_scale / 32;
        y.d = checked_half(d, "iq4_xs", b);
        y.scales_h = 0;
        const float id = d != 0 ? 1 / d : 0.f;
        for (int ib = 0; ib < 8; ++ib) {
            int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * static_cast<float>(l);
            const float idl = dl != 0 ? 1 / dl : 0.f;
            for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<uint8_t>(best_index(idl * x[32 * ib + j]));
            l += 32;
            if (ib % 2 == 0) y.scales_l[ib / 2] = static_cast<uint8_t>(l & 0xF);
            else y.scales_l[ib / 2] |= static_cast<uint8_t>((l & 0xF) << 4);
            y.scales_h = static_cast<uint16_t>(y.scales_h | ((l >> 4) << (2 * ib)));
        }
        for (int ib = 0; ib < 8; ++ib) pack_group(L + 32 * ib, y.qs + 16 * ib);
    }
}

}  // namespace tandem::quant_detail
