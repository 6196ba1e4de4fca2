// src/gguf/quant_iq2.cpp - IQ2_XXS, IQ2_XS and IQ2_S rows: dequantization, bitwise ggml's
// dequantize_row_iq2_*: value = (block scale * grid byte) * sign; and ggml's quantizers
// (quantize_row_iq2_{xxs,xs,s}_impl), block for block the same bytes.
#include "tandem/error.h"

#include "quant_iq_grids.h"
#include "quant_iq_search.h"
#include "quant_rows.h"
#include "quant_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

// Eight values of one grid entry with a sign byte (bit j set: value j negative).
void emit8(float scale, uint64_t grid_entry, uint8_t signs, float *y) {
    for (int j = 0; j < 8; ++j) {
        const float g = static_cast<float>((grid_entry >> (8 * j)) & 0xff);
        y[j] = scale * g * ((signs >> j) & 1 ? -1.f : 1.f);
    }
}

// The 4-bit sub-scale s of IQ2: (d * (0.5 + s)) * 0.25.
float iq2_scale(float d, int s) { return d * (0.5f + static_cast<float>(s)) * 0.25f; }

}  // namespace

void dequantize_row_iq2_xxs(const block_iq2_xxs *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d);
        float *y = dst + b * qk_k_elems;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t aux[2];
            std::memcpy(aux, src[b].qs + 4 * ib, 8);
            const float db = iq2_scale(d, static_cast<int>(aux[1] >> 28));
            for (int l = 0; l < 4; ++l) {
                const uint8_t index = static_cast<uint8_t>(aux[0] >> (8 * l));
                emit8(db, iq2xxs_grid[index], iq_signs((aux[1] >> (7 * l)) & 127), y + 32 * ib + 8 * l);
            }
        }
    }
}

void dequantize_row_iq2_xs(const block_iq2_xs *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d);
        float *y = dst + b * qk_k_elems;
        for (int ib = 0; ib < 8; ++ib) {
            const float db[2] = {iq2_scale(d, src[b].scales[ib] & 0xF), iq2_scale(d, src[b].scales[ib] >> 4)};
            for (int l = 0; l < 4; ++l) {
                const uint16_t q = src[b].qs[4 * ib + l];
                emit8(db[l / 2], iq2xs_grid[q & 511], iq_signs(q >> 9), y + 32 * ib + 8 * l);
            }
        }
    }
}

// qs[0..31] are the low 8 bits of the 32 grid indices, qs[32..63] the explicit sign bytes; the
// two high index bits of group l of 32-group ib are bits 2l..2l+1 of qh[ib].
void dequantize_row_iq2_s(const block_iq2_s *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_iq2_s &blk = src[b];
        const float d = half_to_float(blk.d);
        float *y = dst + b * qk_k_elems;
        for (int ib = 0; ib < 8; ++ib) {
            const float db[2] = {iq2_scale(d, blk.scales[ib] & 0xF), iq2_scale(d, blk.scales[ib] >> 4)};
            for (int l = 0; l < 4; ++l) {
                const int index = blk.qs[4 * ib + l] | (((blk.qh[ib] >> (2 * l)) & 3) << 8);
                emit8(db[l / 2], iq2s_grid[static_cast<std::size_t>(index)], blk.qs[32 + 4 * ib + l], y + 32 * ib + 8 * l);
            }
        }
    }
}

namespace {

constexpr int n_levels = 3;                  // kMaxQ: grid bytes 1, 3, 5 (levels 0..2)
constexpr float iq2s_group_max_eps = 1e-8f;  // GROUP_MAX_EPS_IQ2_S

// sigma2 of a super-block: (factor * sum x^2) / 256, ggml's expression per type.
float block_sigma2(const float *x, float factor) {
    float s = 0;
    for (int i = 0; i < qk_k_elems; ++i) s += x[i] * x[i];
    return factor * s / qk_k_elems;
}

void iq_weights(const float *x, const float *qw, float sigma2, int n, float *weight, float *waux) {
    for (int i = 0; i < n; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
    for (int i = 0; i < n; ++i) waux[i] = std::sqrt(weight[i]);
}

// The 4-bit sub-scale of a group scale: clamp(nearest(0.5 (scale / d - 1)), 0, 15).
int sub_scale(float id, float scale, int max) { return std::max(0, std::min(max, nearest_int(0.5f * (id * scale - 1)))); }

// quantize_row_iq2_xxs_impl, one super-block: 8 groups of 32, four grid points of 8 each.
void quantize_block_iq2_xxs(const float *x, const float *qw, block_iq2_xxs &y, int64_t b) {
    const iq_grid_search &g = iq_grid(iq_grid_kind::iq2xxs);
    uint32_t q2[16] = {};
    float scales[8], weight[32], waux[32], xval[32];
    int8_t L[32], Laux[32];
    uint8_t signs[4];
    float max_scale = 0;
    const float sigma2 = block_sigma2(x, 1);
    y.d = float_to_half(0.f);
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + 32 * ib;
        iq_weights(xb, qw + 32 * ib, sigma2, 32, weight, waux);
        for (int k = 0; k < 4; ++k) signs[k] = iq_signs8(xb + 8 * k, weight + 8 * k, true, xval + 8 * k) & 127;
        float max = xval[0];
        for (int i = 1; i < 32; ++i) max = max > xval[i] ? max : xval[i];
        scales[ib] = 0;
        if (max < group_max_eps) continue;
        float scale = make_qp(32, n_levels + 1, xval, reinterpret_cast<uint8_t *>(L), weight);
        const float eff_max = scale * n_levels;
        if (eff_max <= 0) continue;
        float best = 0;
        for (int is = -6; is <= 6; ++is) {
            const float id = (static_cast<float>(2 * n_levels - 1) + static_cast<float>(is) * 0.1f) / eff_max;
            const float this_scale = 1 / id;
            for (int k = 0; k < 4; ++k) {
                const int u = iq_levels(xval + 8 * k, id, 8, 2, n_levels, Laux + 8 * k);
                if (g.map[static_cast<size_t>(u)] < 0)
                    iq_best_neighbour(g, g.neighbours_of(u), xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
            }
            float sumqx = 0, sumq2 = 0;
            for (int i = 0; i < 32; ++i) {
                const float w = weight[i], q = static_cast<float>(2 * Laux[i] + 1);
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                std::memcpy(L, Laux, 32);
            }
        }
        if (scale > 0) {
            const float id = 1 / scale;
            for (int k = 0; k < 4; ++k) {
                const int u = iq_levels(xval + 8 * k, id, 8, 2, n_levels, L + 8 * k);
                if (g.map[static_cast<size_t>(u)] < 0)
                    iq_best_neighbour(g, g.neighbours_of(u), xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
            }
            float sumqx = 0, sumq2 = 0;
            for (int i = 0; i < 32; ++i) {
                const float w = weight[i], q = static_cast<float>(2 * L[i] + 1);
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if (sumq2 > 0) scale = sumqx / sumq2;
        }
        if (scale < 0) {  // ggml: "should never happen"; the stored scale is unsigned
            scale = -scale;
            for (int k = 0; k < 4; ++k) signs[k] = static_cast<uint8_t>(~signs[k] & 127);
        }
        for (int k = 0; k < 4; ++k) {
            int u = 0;
            for (int i = 0; i < 8; ++i) u |= L[8 * k + i] << (2 * i);
            const int32_t index = g.map[static_cast<size_t>(u)];
            TANDEM_ASSERT(index >= 0, "iq2_xxs block {}: levels off the grid", b);
            q2[2 * ib] |= static_cast<uint32_t>(index) << (8 * k);
            q2[2 * ib + 1] |= static_cast<uint32_t>(signs[k]) << (7 * k);
        }
        scales[ib] = scale;
        max_scale = std::max(max_scale, scale);
    }
    if (max_scale == 0) {
        std::memset(y.qs, 0, sizeof(y.qs));
        return;
    }
    const float d = max_scale / 31;
    y.d = checked_half(d, "iq2_xxs", b);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) q2[2 * ib + 1] |= static_cast<uint32_t>(sub_scale(id, scales[ib], 15)) << 28;
    std::memcpy(y.qs, q2, sizeof(y.qs));
}

// IQ2_XS and IQ2_S: 16 groups of 16 (two grid points each) with 4-bit sub-scales.
struct iq2_group {
    bool empty;  // all |x| below the threshold: nothing stored, scale 0
    float scale;
    int index[2];
    uint8_t signs[2];
};

iq2_group fit_group16(const iq_grid_search &g, const float *xb, const float *weight, const float *waux, bool parity,
                      float max_eps, int64_t b) {
    float xval[16];
    int8_t L[16] = {};
    iq2_group out{true, 0, {0, 0}, {0, 0}};
    for (int k = 0; k < 2; ++k) {
        const uint8_t s = iq_signs8(xb + 8 * k, weight + 8 * k, parity, xval + 8 * k);
        out.signs[k] = parity ? static_cast<uint8_t>(s & 127) : s;
    }
    float max = xval[0];
    for (int i = 1; i < 16; ++i) max = max > xval[i] ? max : xval[i];
    if (max < max_eps) return out;
    const iq_fit_args args{&g, 16, n_levels, 9, 0.1f, true, false};
    float scale = iq_grid_fit(args, xval, weight, waux, max, L);
    if (scale < 0) {
        scale = -scale;
        for (auto &s : out.signs) s = static_cast<uint8_t>(parity ? ~s & 127 : ~s);
    }
    for (int k = 0; k < 2; ++k) {
        int u = 0;
        for (int i = 0; i < 8; ++i) u |= L[8 * k + i] << (2 * i);
        out.index[k] = g.map[static_cast<size_t>(u)];
        TANDEM_ASSERT(out.index[k] >= 0, "IQ2 block {}: levels off the grid", b);
    }
    out.empty = false;
    out.scale = scale;
    return out;
}

void pack_sub_scales16(const float *scales, float max_scale, uint8_t *out) {
    const float id = 1 / (max_scale / 31);
    for (int ib = 0; ib < 16; ++ib) {
        const int l = sub_scale(id, scales[ib], 15);
        if (ib % 2 == 0) out[ib / 2] = static_cast<uint8_t>(l);
        else out[ib / 2] = static_cast<uint8_t>(out[ib / 2] | (l << 4));
    }
}

void quantize_block_iq2_xs(const float *x, const float *qw, block_iq2_xs &y, int64_t b) {
    const iq_grid_search &g = iq_grid(iq_grid_kind::iq2xs);
    float weight[16], waux[16], scales[16];
    float max_scale = 0;
    const float sigma2 = block_sigma2(x, 1);
    std::memset(&y, 0, sizeof(y));
    for (int ib = 0; ib < 16; ++ib) {
        iq_weights(x + 16 * ib, qw + 16 * ib, sigma2, 16, weight, waux);
        const iq2_group grp = fit_group16(g, x + 16 * ib, weight, waux, true, group_max_eps, b);
        if (!grp.empty)
            for (int k = 0; k < 2; ++k) y.qs[2 * ib + k] = static_cast<uint16_t>(grp.index[k] | (grp.signs[k] << 9));
        scales[ib] = grp.scale;
        max_scale = std::max(max_scale, grp.scale);
    }
    if (max_scale == 0) {
        std::memset(y.qs, 0, sizeof(y.qs));
        return;
    }
    y.d = checked_half(max_scale / 31, "iq2_xs", b);
    pack_sub_scales16(scales, max_scale, y.scales);
}

// IQ2_S: explicit sign bytes, 10-bit grid indices; without importance the weights are
// 0.25 sigma2 + x^2.
void quantize_block_iq2_s(const float *x, const float *qw, block_iq2_s &y, int64_t b) {
    const iq_grid_search &g = iq_grid(iq_grid_kind::iq2s);
    float weight[16], waux[16], scales[16];
    float max_scale = 0;
    const float sigma2 = block_sigma2(x, 2);
    std::memset(&y, 0, sizeof(y));
    for (int ib = 0; ib < 16; ++ib) {
        const float *xb = x + 16 * ib;
        if (qw) {
            iq_weights(xb, qw + 16 * ib, sigma2, 16, weight, waux);
        } else {
            for (int i = 0; i < 16; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
            for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
        }
        const iq2_group grp = fit_group16(g, xb, weight, waux, false, iq2s_group_max_eps, b);
        scales[ib] = 0;
        if (grp.empty) continue;
        for (int k = 0; k < 2; ++k) {
            const int i8 = 2 * ib + k;
            y.qs[i8] = static_cast<uint8_t>(grp.index[k] & 255);
            y.qh[i8 / 4] = static_cast<uint8_t>(y.qh[i8 / 4] | ((grp.index[k] >> 8) << (2 * (i8 % 4))));
            y.qs[32 + i8] = grp.signs[k];
        }
        scales[ib] = grp.scale;
        max_scale = std::max(max_scale, grp.scale);
    }
    if (max_scale == 0) return;
    y.d = checked_half(max_scale / 31 * 0.9875f, "iq2_s", b);
    pack_sub_scales16(scales, max_scale, y.scales);
}

}  // namespace

void quantize_row_iq2_xxs(const float *src, const float *qw, block_iq2_xxs *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block_iq2_xxs(src + b * qk_k_elems, qw + b * qk_k_elems, dst[b], b);
}
void quantize_row_iq2_xs(const float *src, const float *qw, block_iq2_xs *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block_iq2_xs(src + b * qk_k_elems, qw + b * qk_k_elems, dst[b], b);
}
void quantize_row_iq2_s(const float *src, const float *qw, block_iq2_s *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b)
        quantize_block_iq2_s(src + b * qk_k_elems, qw ? qw + b * qk_k_elems : nullptr, dst[b], b);
}

}  // namespace tandem::quant_detail
