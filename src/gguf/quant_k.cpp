// src/gguf/quant_k.cpp - Q2_K, Q3_K and Q5_K rows: dequantize and ggml's reference quantizers
// (quantize_row_q{2,3,5}_K_ref with make_qkx2_quants and make_q3_quants), block for block the
// same bytes. Q4_K and Q6_K, the hot types, have files of their own with vectorized searches.
#include "quant_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

constexpr float group_max_eps = 1e-15f;  // ggml's GROUP_MAX_EPS

// make_qkx2_quants: x ~ scale * L + min with min <= 0 and L in 0..nmax, minimising the weighted
// error (|diff| with use_mad, else diff^2) over nstep + 1 candidate grids, each refit by weighted
// least squares. Returns scale; *neg_min = -min. Plain loops in ggml's order.
float make_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin, float rdelta,
                int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        std::memset(L, 0, static_cast<size_t>(n));
        *neg_min = -min;
        return 0.f;
    }
    auto error_of = [&](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
    float iscale = static_cast<float>(nmax) / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
        best_error += w[i] * error_of(scale * static_cast<float>(L[i]) + min - x[i]);
    }
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = static_cast<uint8_t>(l);
            const float lf = static_cast<float>(l);
            sum_l += w[i] * lf;
            sum_l2 += w[i] * lf * lf;
            sum_xl += w[i] * lf * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float cur_error = 0;
        for (int i = 0; i < n; ++i) cur_error += w[i] * error_of(this_scale * static_cast<float>(Laux[i]) + this_min - x[i]);
        if (cur_error < best_error) {
            std::memcpy(L, Laux, static_cast<size_t>(n));
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

// make_q3_quants(n, nmax, x, L, do_rmse = true): a symmetric scale with weights x^2, then up to
// five passes that move single quants while that raises sumlx^2 / suml2. L gets q + nmax.
float make_q3(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < group_max_eps) {
        std::memset(L, 0, static_cast<size_t>(n));
        return 0.f;
    }
    const float iscale = static_cast<float>(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * static_cast<float>(l);
        suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            const float li = static_cast<float>(L[i]);
            float slx = sumlx - w * x[i] * li;
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * li * li;
            const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            const float nl = static_cast<float>(new_l);
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = static_cast<int8_t>(new_l);
                sumlx = slx;
                suml2 = sl2;
                ++n_changed;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs 2-bit quants L[256] as Q2_K/Q3_K lay them out: element 128h + 32g + l in bits 2g of qs[32h + l].
void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t *Lh = L + 128 * h;
            qs[32 * h + l] = static_cast<uint8_t>(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
        }
}

// Q3_K's signed 6-bit scale of sub-block j (0..15), before the -32: low 4 bits in scales[j % 8]
// (low nibble for j < 8, high for j >= 8), high 2 bits in scales[8 + j % 4] at bit 2 * (j / 4).
int q3_k_scale(const uint8_t *scales, int j) {
    const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    return low | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

void quantize_block_q2_k(const float *x, block_q2_k &y, int64_t b) {
    uint8_t L[256];
    float weights[16], mins[16], scales[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
        for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
        scales[j] = make_qkx2(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    constexpr float q4scale = 15.f;
    if (max_scale > 0) {
        const float iscale = q4scale / max_scale;
        for (int j = 0; j < 16; ++j) y.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
        y.d = checked_half(max_scale / q4scale, "q2_K", b);
    } else {
        std::memset(y.scales, 0, 16);
        y.d = float_to_half(0.f);
    }
    if (max_min > 0) {
        const float iscale = q4scale / max_min;
        for (int j = 0; j < 16; ++j) y.scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
        y.dmin = checked_half(max_min / q4scale, "q2_K", b);
    } else {
        y.dmin = float_to_half(0.f);
    }
    for (int j = 0; j < 16; ++j) {
        const float d = half_to_float(y.d) * static_cast<float>(y.scales[j] & 0xF);
        if (d == 0) continue;
        const float dm = half_to_float(y.dmin) * static_cast<float>(y.scales[j] >> 4);
        for (int i = 0; i < 16; ++i)
            L[16 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + i] + dm) / d), 0, 3));
    }
    pack_2bit(L, y.qs);
}

void quantize_block_q3_k(const float *x, block_q3_k &y, int64_t b) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
        scales[j] = make_q3(16, 4, x + 16 * j, L + 16 * j);
        const float scale = std::fabs(scales[j]);
        if (scale > amax) {
            amax = scale;
            max_scale = scales[j];
        }
    }
    std::memset(y.scales, 0, 12);
    if (max_scale != 0) {
        const float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; ++j) {
            int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
            l = std::clamp(l, -32, 31) + 32;
            if (j < 8) y.scales[j] = static_cast<uint8_t>(l & 0xF);
            else y.scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
            y.scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
        }
        y.d = checked_half(1 / iscale, "q3_K", b);
    } else {
        y.d = float_to_half(0.f);
    }
    for (int j = 0; j < 16; ++j) {
        const float d = half_to_float(y.d) * static_cast<float>(q3_k_scale(y.scales, j) - 32);
        if (d == 0) continue;
        for (int i = 0; i < 16; ++i)
            L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
    // The high bit of element e goes to bit e / 32 of hmask[e % 32]; the low 2 bits stay in L.
    std::memset(y.hmask, 0, 32);
    uint8_t low[256];
    for (int e = 0; e < 256; ++e) {
        if (L[e] > 3) y.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
        low[e] = static_cast<uint8_t>(L[e] > 3 ? L[e] - 4 : L[e]);
    }
    pack_2bit(low, y.qs);
}

void quantize_block_q5_k(const float *x, block_q5_k &y, int64_t b) {
    uint8_t L[256];
    float mins[8], scales[8], weights[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = make_qkx2(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], -0.5f, 0.1f, 15, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
        const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
        const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
        if (j < 4) {
            y.scales[j] = ls;
            y.scales[j + 4] = lm;
        } else {
            y.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
            y.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
            y.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
        }
    }
    y.d = checked_half(max_scale / 63.f, "q5_K", b);
    y.dmin = checked_half(max_min / 63.f, "q5_K", b);
    for (int j = 0; j < 8; ++j) {
        const q4_k_scale_min sm = q4_k_get_scale_min(y.scales, j);
        const float d = half_to_float(y.d) * static_cast<float>(sm.scale);
        if (d == 0) continue;
        const float dm = half_to_float(y.dmin) * static_cast<float>(sm.min);
        for (int i = 0; i < 32; ++i)
            L[32 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + i] + dm) / d), 0, 31));
    }
    std::memset(y.qh, 0, 32);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            const int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
            y.qh[l] |= static_cast<uint8_t>(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
            y.qs[32 * c + l] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
        }
}

}  // namespace

// dequantize_row_q2_K: (d * sc) * q - dmin * m per 16-element sub-block.
void dequantize_row_q2_k(const block_q2_k *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_q2_k &blk = src[b];
        const float d = half_to_float(blk.d), dmin = half_to_float(blk.dmin);
        float *y = dst + b * qk_k_elems;
        for (int e = 0; e < qk_k_elems; ++e) {
            const int s = e / 16, h = e / 128, g = (e / 32) % 4, l = e % 32;
            const float dl = d * static_cast<float>(blk.scales[s] & 0xF);
            const float ml = dmin * static_cast<float>(blk.scales[s] >> 4);
            y[e] = dl * static_cast<float>((blk.qs[32 * h + l] >> (2 * g)) & 3) - ml;
        }
    }
}

// dequantize_row_q3_K: (d * (sc - 32)) * (q - (high bit ? 0 : 4)).
void dequantize_row_q3_k(const block_q3_k *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_q3_k &blk = src[b];
        const float d = half_to_float(blk.d);
        float *y = dst + b * qk_k_elems;
        for (int s = 0; s < 16; ++s) {
            const float dl = d * static_cast<float>(q3_k_scale(blk.scales, s) - 32);
            for (int i = 0; i < 16; ++i) {
                const int e = 16 * s + i, h = e / 128, g = (e / 32) % 4, l = e % 32;
                const int low = (blk.qs[32 * h + l] >> (2 * g)) & 3;
                const int high = (blk.hmask[l] >> (e / 32)) & 1;
                y[e] = dl * static_cast<float>(low - (high ? 0 : 4));
            }
        }
    }
}

// dequantize_row_q5_K: (d * sc) * q - dmin * m with q = nibble + 16 * fifth bit.
void dequantize_row_q5_k(const block_q5_k *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_q5_k &blk = src[b];
        const float d = half_to_float(blk.d), dmin = half_to_float(blk.dmin);
        float *y = dst + b * qk_k_elems;
        for (int c = 0; c < 4; ++c) {
            const q4_k_scale_min lo = q4_k_get_scale_min(blk.scales, 2 * c);
            const q4_k_scale_min hi = q4_k_get_scale_min(blk.scales, 2 * c + 1);
            const float d1 = d * lo.scale, m1 = dmin * lo.min;
            const float d2 = d * hi.scale, m2 = dmin * hi.min;
            const uint8_t *q = blk.qs + 32 * c;
            float *yc = y + 64 * c;
            for (int l = 0; l < 32; ++l)
                yc[l] = d1 * static_cast<float>((q[l] & 0xF) + (((blk.qh[l] >> (2 * c)) & 1) << 4)) - m1;
            for (int l = 0; l < 32; ++l)
                yc[32 + l] = d2 * static_cast<float>((q[l] >> 4) + (((blk.qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
        }
    }
}

void quantize_row_q2_k(const float *src, block_q2_k *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block_q2_k(src + b * qk_k_elems, dst[b], b);
}
void quantize_row_q3_k(const float *src, block_q3_k *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block_q3_k(src + b * qk_k_elems, dst[b], b);
}
void quantize_row_q5_k(const float *src, block_q5_k *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block_q5_k(src + b * qk_k_elems, dst[b], b);
}

}  // namespace tandem::quant_detail
