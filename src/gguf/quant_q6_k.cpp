// src/gguf/quant_q6_k.cpp - Q6_K rows: dequantize and ggml's reference quantizer
// (quantize_row_q6_K_ref with make_qx_quants), block for block the same bytes.
#include "tandem/error.h"

#include "quant_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

constexpr int sub_len = 16;   // elements per sub-block (one int8 scale each)
constexpr int n_sub = 16;     // sub-blocks per 256-element block
constexpr int q_half = 32;    // quants are -32..31, stored biased by 32 (make_qx_quants' nmax)
// make_qx_quants tries inverse scales -(32 + 0.1 * step) / max for step = -9..9 except 0.
constexpr int n_steps = 18;
constexpr int n_lanes = 24;   // n_steps rounded up to whole 8-float vectors; extra lanes ignored
constexpr float group_max_eps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group is all zero
// The fp16 super-block scale overflows once |x| passes ~2.7e8 (that is reported after the
// search); beyond ~1e11 the x^3 terms of the weighted sums would overflow to inf first and turn
// the scales into NaN, so such blocks are rejected up front with the same error.
constexpr float max_abs_input = 1e10f;

constexpr int step_of_lane(int s) { return s < 9 ? s - 9 : (s < n_steps ? s - 8 : 9); }

// make_qx_quants(16, 32, x, L, rmse_type = 1, no weights): symmetric scale with weights x^2,
// chosen among 19 grids by the weighted least-squares criterion sumlx^2 / suml2. Returns the
// scale; L gets the quants biased to 0..63.
//
// As in quant_q4_k.cpp, the 18 extra grids run as vector lanes, each summing over i = 0..15 in
// order with ggml's expressions, and are compared in ggml's step order with its strict test, so
// the chosen scale and quants are bitwise ggml's.
float fit_scale(const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < sub_len; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < group_max_eps) {
        std::memset(L, 0, sub_len);
        return 0.0f;
    }
    const float iscale0 = static_cast<float>(-q_half) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < sub_len; ++i) {
        const int l = std::min(std::max(nearest_int_bounded(iscale0 * x[i]), -q_half), q_half - 1);
        L[i] = static_cast<int8_t>(l + q_half);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * static_cast<float>(l);
        suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;

    float step_iscale[n_lanes];
    for (int s = 0; s < n_lanes; ++s)
        step_iscale[s] = -(static_cast<float>(q_half) + 0.1f * static_cast<float>(step_of_lane(s))) / max;
    float lane_lx[n_lanes] = {}, lane_l2[n_lanes] = {};
    for (int i = 0; i < sub_len; ++i) {
        const float xi = x[i], w = x[i] * x[i];
        for (int s = 0; s < n_lanes; ++s) {
            const float l = static_cast<float>(std::min(std::max(nearest_int_bounded(step_iscale[s] * xi), -q_half), q_half - 1));
            lane_lx[s] += w * xi * l;
            lane_l2[s] += w * l * l;
        }
    }
    int best_lane = -1;
    for (int s = 0; s < n_steps; ++s) {
        if (lane_l2[s] > 0 && lane_lx[s] * lane_lx[s] > best * lane_l2[s]) {
            scale = lane_lx[s] / lane_l2[s];
            best = scale * lane_lx[s];
            best_lane = s;
        }
    }
    if (best_lane >= 0)
        for (int i = 0; i < sub_len; ++i)
            L[i] = static_cast<int8_t>(q_half + std::min(std::max(nearest_int_bounded(step_iscale[best_lane] * x[i]), -q_half), q_half - 1));
    return scale;
}

void quantize_block(const float *x, block_q6_k &blk, int64_t block_index) {
    float amax = 0.0f;
    for (int i = 0; i < qk_k_elems; ++i) amax = std::max(amax, std::fabs(x[i]));  // inputs are finite: no fmax NaN rules (a libm call)
    if (amax > max_abs_input)
        fail(error_kind::invalid_request, "q6_K block {}: |x| up to {} overflows the fp16 scale", block_index, amax);

    int8_t L[256];
    float scales[n_sub];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < n_sub; ++ib) {
        scales[ib] = fit_scale(x + sub_len * ib, L + sub_len * ib);
        const float abs_scale = std::fabs(scales[ib]);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < group_max_eps) {
        std::memset(&blk, 0, sizeof(blk));  // all-zero block: d = +0 and every quant/scale 0
        return;
    }

    // int8 scales relative to the largest (signed: the sub-block scale with the largest
    // magnitude maps to -128); MIN(127, .) as in ggml, -128 is reachable only by that one.
    const float iscale = -128.f / max_scale;
    const float d_super = 1 / iscale;
    if (!(std::fabs(d_super) < 65520.f))
        fail(error_kind::invalid_request, "q6_K block {}: |x| up to {} overflows the fp16 scale", block_index, amax);
    blk.d = float_to_half(d_super);
    for (int ib = 0; ib < n_sub; ++ib) blk.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));

    // Requantize against the rounded scales. A sub-block whose scale rounded to 0 keeps the
    // quants of its own fit (as ggml does); they dequantize to 0 regardless.
    const float d = half_to_float(blk.d);
    for (int j = 0; j < n_sub; ++j) {
        const float ds = d * static_cast<float>(blk.scales[j]);
        if (ds == 0) continue;
        for (int i = 0; i < sub_len; ++i) {
            const int l = std::clamp(nearest_int(x[sub_len * j + i] / ds), -q_half, q_half - 1);
            L[sub_len * j + i] = static_cast<int8_t>(l + q_half);
        }
    }
    for (int h = 0; h < 2; ++h) {
        const int8_t *Lh = L + 128 * h;
        uint8_t *ql = blk.ql + 64 * h;
        uint8_t *qh = blk.qh + 32 * h;
        for (int l = 0; l < 32; ++l) {
            const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
            ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
            ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
            qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
    }
}

}  // namespace

// dequantize_row_q6_K's expression: (d * scale) * (q - 32), no FMA contraction. Each 32-element
// run is split at 16 so the scale is constant within a loop (same values, vectorizable).
void dequantize_row_q6_k(const block_q6_k *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_q6_k &blk = src[b];
        const float d = half_to_float(blk.d);
        for (int h = 0; h < 2; ++h) {
            const uint8_t *ql = blk.ql + 64 * h;
            const uint8_t *qh = blk.qh + 32 * h;
            const int8_t *sc = blk.scales + 8 * h;
            float *y = dst + b * qk_k_elems + 128 * h;
            for (int k = 0; k < 2; ++k) {
                const float s1 = d * static_cast<float>(sc[k + 0]), s2 = d * static_cast<float>(sc[k + 2]);
                const float s3 = d * static_cast<float>(sc[k + 4]), s4 = d * static_cast<float>(sc[k + 6]);
                for (int l = 16 * k; l < 16 * k + 16; ++l) {
                    const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[l] = s1 * static_cast<float>(q1);
                    y[l + 32] = s2 * static_cast<float>(q2);
                    y[l + 64] = s3 * static_cast<float>(q3);
                    y[l + 96] = s4 * static_cast<float>(q4);
                }
            }
        }
    }
}

void quantize_row_q6_k(const float *src, block_q6_k *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block(src + b * qk_k_elems, dst[b], b);
}

}  // namespace tandem::quant_detail
