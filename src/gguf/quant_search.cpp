// src/gguf/quant_search.cpp - ggml's scale searches for the importance-weighted quantizers
// (make_qx_quants, make_qkx3_quants, make_qp_quants). Every expression keeps ggml's operand
// order: w*x*l is (w*x)*l, w*l*l is (w*l)*l, and ints convert to float where C converts them.
#include "quant_search.h"

#include "quant_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

int clamp_l(int l, int lo, int hi) { return std::max(lo, std::min(hi, l)); }

}  // namespace

float make_qx(int n, int nmax, const float *x, int8_t *L, const float *qw) {
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
    const auto weight = [&](int i) { return qw ? qw[i] : x[i] * x[i]; };
    float iscale = static_cast<float>(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_l(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l + nmax);
        const float w = weight(i), lf = static_cast<float>(l);
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const float lf = static_cast<float>(clamp_l(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            const float w = weight(i);
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = static_cast<int8_t>(nmax + clamp_l(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float make_qkx3(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *neg_min) {
    constexpr float rmin = -0.9f, rdelta = 0.05f;
    constexpr int nstep = 36;
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        std::memset(L, 0, static_cast<size_t>(n));
        *neg_min = -min;
        return 0.f;
    }
    float iscale = static_cast<float>(nmax) / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = static_cast<uint8_t>(clamp_l(nearest_int(iscale * (x[i] - min)), 0, nmax));
        const float diff = scale * static_cast<float>(L[i]) + min - x[i];
        best_mad += weights[i] * (diff * diff);
    }
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            // ggml: v > 0 ? nearest_int(MIN(v, nmax)) : 0 (the best min so far may sit near max).
            const float v = iscale * (x[i] - min);
            const int l = v > 0 ? nearest_int(v < static_cast<float>(nmax) ? v : static_cast<float>(nmax)) : 0;
            Laux[i] = static_cast<uint8_t>(l);
            const float w = weights[i], lf = static_cast<float>(l);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
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
            const float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
            mad += weights[i] * (diff * diff);
        }
        if (mad < best_mad) {
            std::memcpy(L, Laux, static_cast<size_t>(n));
            best_mad = mad;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

float make_qp(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < group_max_eps) {
        std::memset(L, 0, static_cast<size_t>(n));
        return 0.f;
    }
    float iscale = static_cast<float>(nmax) / max;
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * static_cast<float>(L[i]);
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * static_cast<float>(l);
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = static_cast<uint8_t>(l);
        const float lf = static_cast<float>(l);
        sumlx += qw[i] * x[i] * lf;
        suml2 += qw[i] * lf * lf;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = qw[i], li = static_cast<float>(L[i]);
            float slx = sumlx - w * x[i] * li;
            float sl2 = suml2 - w * li * li;
            if (!(slx > 0 && sl2 > 0)) continue;
            const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
            if (new_l == L[i]) continue;
            const float nl = static_cast<float>(new_l);
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = static_cast<uint8_t>(new_l);
                sumlx = slx;
                suml2 = sl2;
                ++n_changed;
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

}  // namespace tandem::quant_detail
