// src/gguf/quant_iq3.cpp - IQ3_XXS and IQ3_S rows: dequantization, bitwise ggml's
// dequantize_row_iq3_*: value = (block scale * grid byte) * sign, four values a grid entry; and
// ggml's quantizers (quantize_row_iq3_xxs_impl, quantize_row_iq3_s_impl), the same bytes.
#include "tandem/error.h"

#include "quant_iq_grids.h"
#include "quant_iq_search.h"
#include "quant_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

void emit4(float scale, uint32_t grid_entry, uint8_t signs, int first_sign_bit, float *y) {
    for (int j = 0; j < 4; ++j) {
        const float g = static_cast<float>((grid_entry >> (8 * j)) & 0xff);
        y[j] = scale * g * ((signs >> (first_sign_bit + j)) & 1 ? -1.f : 1.f);
    }
}

}  // namespace

// qs[0..63]: 8-bit grid indices; qs[64 + 4 ib ..]: a u32 per 32-group with four 7-bit sign
// indices and the 4-bit scale s in bits 28..31: (d * (0.5 + s)) * 0.5.
void dequantize_row_iq3_xxs(const block_iq3_xxs *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d);
        const uint8_t *qs = src[b].qs;
        float *y = dst + b * qk_k_elems;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t aux;
            std::memcpy(&aux, qs + 64 + 4 * ib, 4);
            const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l) {
                const uint8_t signs = iq_signs((aux >> (7 * l)) & 127);
                float *yl = y + 32 * ib + 8 * l;
                emit4(db, iq3xxs_grid[qs[8 * ib + 2 * l]], signs, 0, yl);
                emit4(db, iq3xxs_grid[qs[8 * ib + 2 * l + 1]], signs, 4, yl + 4);
            }
        }
    }
}

// 9-bit grid indices: qs byte plus bit k of qh[ib] for the k-th index of 32-group ib; explicit
// sign bytes; a 4-bit scale s per 32-group (two per scales byte): d * (1 + 2 s).
void dequantize_row_iq3_s(const block_iq3_s *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_iq3_s &blk = src[b];
        const float d = half_to_float(blk.d);
        float *y = dst + b * qk_k_elems;
        for (int ib = 0; ib < 8; ++ib) {
            const int s = (blk.scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
            const float db = d * static_cast<float>(1 + 2 * s);
            for (int l = 0; l < 4; ++l) {
                const int i0 = blk.qs[8 * ib + 2 * l] | (((blk.qh[ib] >> (2 * l)) & 1) << 8);
                const int i1 = blk.qs[8 * ib + 2 * l + 1] | (((blk.qh[ib] >> (2 * l + 1)) & 1) << 8);
                const uint8_t signs = blk.signs[4 * ib + l];
                float *yl = y + 32 * ib + 8 * l;
                emit4(db, iq3s_grid[static_cast<std::size_t>(i0)], signs, 0, yl);
                emit4(db, iq3s_grid[static_cast<std::size_t>(i1)], signs, 4, yl + 4);
            }
        }
    }
}

namespace {

constexpr int n_levels = 8;                // kMaxQ: grid bytes 1, 3, ..., 15
constexpr float group_max_eps_iq3 = 1e-8f;  // GROUP_MAX_EPS_IQ3_XXS (IQ3_S tests max == 0)

// The 32-group setup both IQ3 types share: weights (importance, or x^2 without), their square
// roots, and sign bytes. sigma2 is 2 * mean square over the super-block.
void group_weights(const float *xb, const float *qw, float sigma2, float *weight, float *waux) {
    for (int i = 0; i < 32; ++i) weight[i] = qw ? qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
    for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);
}

float sigma2_of(const float *x) {
    float s = 0;
    for (int i = 0; i < qk_k_elems; ++i) s += x[i] * x[i];
    return 2 * s / qk_k_elems;
}

int sub_scale(float id, float scale) { return std::max(0, std::min(15, nearest_int(0.5f * (id * scale - 1)))); }

int grid_index_of(const iq_grid_search &g, const int8_t *L, int64_t b) {
    int u = 0;
    for (int i = 0; i < 4; ++i) u |= L[i] << (3 * i);
    const int32_t index = g.map[static_cast<size_t>(u)];
    TANDEM_ASSERT(index >= 0, "IQ3 block {}: levels off the grid", b);
    return index;
}

// quantize_row_iq3_xxs_impl (grid 256): 8-bit grid indices, per 32-group a u32 of four 7-bit
// sign indices and a 4-bit sub-scale; d carries ggml's 1.0125 factor.
void quantize_block_iq3_xxs(const float *x, const float *qw, block_iq3_xxs &y, int64_t b) {
    const iq_grid_search &g = iq_grid(iq_grid_kind::iq3xxs);
    uint8_t q3[96] = {};
    uint32_t scales_and_signs[8] = {};
    float scales[8], weight[32], waux[32], xval[32];
    int8_t L[32];
    float max_scale = 0;
    const float sigma2 = sigma2_of(x);
    y.d = float_to_half(0.f);
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + 32 * ib;
        group_weights(xb, qw ? qw + 32 * ib : nullptr, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; ++k) signs[k] = iq_signs8(xb + 8 * k, weight + 8 * k, true, xval + 8 * k) & 127;
        float max = xval[0];
        for (int i = 1; i < 32; ++i) max = max > xval[i] ? max : xval[i];
        std::memset(L, 0, 32);
        scales[ib] = 0;
        if (max < group_max_eps_iq3) continue;
        const iq_fit_args args{&g, 32, n_levels, 15, 0.2f, true, false};
        float scale = iq_grid_fit(args, xval, weight, waux, max, L);
        if (scale < 0) {
            scale = -scale;
            for (auto &s : signs) s = static_cast<uint8_t>(~s & 127);
        }
        for (int k = 0; k < 8; ++k) q3[8 * ib + k] = static_cast<uint8_t>(grid_index_of(g, L + 4 * k, b));
        scales_and_signs[ib] = signs[0] | (signs[1] << 7) | (signs[2] << 14) | (static_cast<uint32_t>(signs[3]) << 21);
        scales[ib] = scale;
        max_scale = std::max(max_scale, scale);
    }
    if (max_scale == 0) {
        std::memset(y.qs, 0, sizeof(y.qs));
        return;
    }
    const float d = max_scale / 31;
    y.d = checked_half(d * 1.0125f, "iq3_xxs", b);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) scales_and_signs[ib] |= static_cast<uint32_t>(sub_scale(id, scales[ib])) << 28;
    std::memcpy(y.qs, q3, 64);
    std::memcpy(y.qs + 64, scales_and_signs, 32);
}

// quantize_row_iq3_s_impl (grid 512, 32-groups): 9-bit indices (qs + a qh bit), explicit sign
// bytes, 4-bit sub-scales; every group is re-projected after the search; d carries 1.033.
void quantize_block_iq3_s(const float *x, const float *qw, block_iq3_s &y, int64_t b) {
    const iq_grid_search &g = iq_grid(iq_grid_kind::iq3s);
    float scales[8], weight[32], waux[32], xval[32];
    int8_t L[32];
    float max_scale = 0;
    const float sigma2 = sigma2_of(x);
    std::memset(&y, 0, sizeof(y));
    // ggml advances its qs and sign pointers only past groups it stores, so an all-zero group
    // shifts the indices and signs of the groups after it (qh and the sub-scales stay indexed by
    // group); reproduced for the same bytes.
    int stored = 0;
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + 32 * ib;
        group_weights(xb, qw ? qw + 32 * ib : nullptr, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; ++k) signs[k] = iq_signs8(xb + 8 * k, weight + 8 * k, false, xval + 8 * k);
        float max = xval[0];
        for (int i = 1; i < 32; ++i) max = max > xval[i] ? max : xval[i];
        std::memset(L, 0, 32);
        scales[ib] = 0;
        if (max == 0) continue;
        const iq_fit_args args{&g, 32, n_levels, 9, 0.2f, false, true};
        float scale = iq_grid_fit(args, xval, weight, waux, max, L);
        if (scale < 0) {
            scale = -scale;
            for (auto &s : signs) s = static_cast<uint8_t>(~s);
        }
        for (int k = 0; k < 8; ++k) {
            const int index = grid_index_of(g, L + 4 * k, b);
            y.qs[8 * stored + k] = static_cast<uint8_t>(index & 255);
            y.qh[ib] = static_cast<uint8_t>(y.qh[ib] | ((index >> 8) << k));
        }
        std::memcpy(y.signs + 4 * stored, signs, 4);
        ++stored;
        scales[ib] = scale;
        max_scale = std::max(max_scale, scale);
    }
    if (max_scale == 0) return;
    const float d = max_scale / 31;
    y.d = checked_half(d * 1.033f, "iq3_s", b);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2)
        y.scales[ib / 2] = static_cast<uint8_t>(sub_scale(id, scales[ib]) | (sub_scale(id, scales[ib + 1]) << 4));
}

}  // namespace

void quantize_row_iq3_xxs(const float *src, const float *qw, block_iq3_xxs *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b)
        quantize_block_iq3_xxs(src + b * qk_k_elems, qw ? qw + b * qk_k_elems : nullptr, dst[b], b);
}
void quantize_row_iq3_s(const float *src, const float *qw, block_iq3_s *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b)
        quantize_block_iq3_s(src + b * qk_k_elems, qw ? qw + b * qk_k_elems : nullptr, dst[b], b);
}

}  // namespace tandem::quant_detail
