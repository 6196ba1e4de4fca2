// src/gguf/quant_q4_k.cpp - Q4_K rows: dequantize and ggml's reference quantizer
// (quantize_row_q4_K_ref with make_qkx2_quants), block for block the same bytes.
#include "tandem/error.h"

#include "quant_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

constexpr int sub_len = 32;     // elements per sub-block (one 6-bit scale and min each)
constexpr int n_sub = 8;        // sub-blocks per 256-element block
constexpr int q_max = 15;       // 4-bit quants
// make_qkx2_quants(..., rmin = -1, rdelta = 0.1, nstep = 20): candidate inverse scales
// (q_max - 1 + 0.1 * step) / (max - min) for step = 0..20.
constexpr int n_steps = 21;
// Beyond this magnitude the fitted scales overflow fp16 long before, and the float sums of
// squares below would overflow to inf and make the search meaningless; reject the block.
constexpr float max_abs_input = 1e12f;

// Eight candidate steps at a time in one 8-float vector (GCC/Clang vector extensions, no
// intrinsics): each lane runs ggml's per-step float operations in ggml's order, so every
// lane's numbers are bitwise those of the scalar loop. Written out because g++ -O2 keeps
// per-lane accumulator arrays in memory when it vectorizes such a loop itself (half the speed).
constexpr int group = 8;
using v8f = float __attribute__((vector_size(32)));
using v8i = int32_t __attribute__((vector_size(32)));

// Candidate steps first_step .. first_step + 7 (steps past the last repeat it; the caller
// ignores them), all built on the current min: per lane the quants, the least-squares
// (scale, min), the determinant and the weighted squared error, as make_qkx2_quants has them.
struct q4_k_group {
    v8f laux[sub_len];  // quants per element, one lane per step, as floats
    v8f scale, min, det, mad;
};

void evaluate_group(const float *x, const float *w, float min, float max, float sum_w, float sum_x, int first_step,
                    q4_k_group &g) {
    v8f iscale;
    for (int k = 0; k < group; ++k) {
        const int step = std::min(first_step + k, n_steps - 1);
        iscale[k] = (-1.0f + 0.1f * static_cast<float>(step) + static_cast<float>(q_max)) / (max - min);
    }
    const v8i zero = {}, top = zero + q_max;
    v8f sum_l = {}, sum_l2 = {}, sum_xl = {};
    for (int i = 0; i < sub_len; ++i) {
        const float xi = x[i], wi = w[i];
        // nearest_int_bounded per lane: add 1.5 * 2^23, read the integer from the mantissa.
        const v8f shifted = iscale * (xi - min) + 12582912.f;
        v8i l = (std::bit_cast<v8i>(shifted) & 0x007fffff) - 0x00400000;
        l = l < zero ? zero : l;
        l = l > top ? top : l;
        const v8f lf = __builtin_convertvector(l, v8f);
        g.laux[i] = lf;
        sum_l += wi * lf;
        sum_l2 += wi * lf * lf;
        sum_xl += wi * lf * xi;
    }
    g.det = sum_w * sum_l2 - sum_l * sum_l;
    const v8f this_scale = (sum_w * sum_xl - sum_x * sum_l) / g.det;
    const v8f this_min = (sum_l2 * sum_x - sum_l * sum_xl) / g.det;
    const v8i positive = this_min > 0;
    g.scale = positive ? sum_xl / sum_l2 : this_scale;
    g.min = positive ? v8f{} : this_min;
    g.mad = v8f{};
    for (int i = 0; i < sub_len; ++i) {
        const v8f diff = g.scale * g.laux[i] + g.min - x[i];
        g.mad += w[i] * (diff * diff);
    }
}

// make_qkx2_quants for one 32-element sub-block with weights w: the (scale, min) of x ~ scale *
// L + min (min <= 0, L in 0..15) minimising sum w * (scale * L + min - x)^2 over ggml's 21
// candidate grids, each refined by weighted least squares. Returns scale; *neg_min = -min.
//
// ggml runs the 21 steps one after another, and a step that improves the error also replaces
// the min that the following steps' grids are built on. So steps are evaluated eight at a time
// with the current min, the first improving one (in ggml's order, with its strict test) is
// taken, and evaluation restarts after it with the new min. The result is bitwise ggml's.
float fit_scale_min(const float *x, const float *w, uint8_t *L, float *neg_min) {
    float min = x[0];
    float max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < sub_len; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        std::memset(L, 0, sub_len);
        *neg_min = -min;
        return 0.0f;
    }
    const float iscale = static_cast<float>(q_max) / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < sub_len; ++i) {
        const int l = std::min(std::max(nearest_int_bounded(iscale * (x[i] - min)), 0), q_max);
        L[i] = static_cast<uint8_t>(l);
        const float diff = scale * static_cast<float>(L[i]) + min - x[i];
        best_mad += w[i] * (diff * diff);
    }

    q4_k_group g;
    for (int first = 0; first < n_steps;) {
        evaluate_group(x, w, min, max, sum_w, sum_x, first, g);
        int taken = -1;
        for (int k = 0; k < group && first + k < n_steps && taken < 0; ++k)
            if (g.det[k] > 0 && g.mad[k] < best_mad) taken = k;
        if (taken < 0) {
            first += group;
            continue;
        }
        best_mad = g.mad[taken];
        scale = g.scale[taken];
        min = g.min[taken];
        for (int i = 0; i < sub_len; ++i) L[i] = static_cast<uint8_t>(g.laux[i][taken]);
        first += taken + 1;
    }
    *neg_min = -min;
    return scale;
}

void quantize_block(const float *x, block_q4_k &blk, int64_t block_index) {
    float amax = 0.0f;
    for (int i = 0; i < qk_k_elems; ++i) amax = std::max(amax, std::fabs(x[i]));  // inputs are finite: no fmax NaN rules (a libm call)
    if (amax > max_abs_input)
        fail(error_kind::invalid_request, "q4_K block {}: |x| up to {} overflows the fp16 scales", block_index, amax);

    uint8_t L[256];
    float scales[n_sub], mins[n_sub];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < n_sub; ++j) {
        const float *xs = x + sub_len * j;
        // ggml's weights: the sub-block's RMS plus |x|, so large values count more but none is ignored.
        float sum_x2 = 0;
        for (int l = 0; l < sub_len; ++l) sum_x2 += xs[l] * xs[l];
        const float av_x = std::sqrt(sum_x2 / sub_len);
        float weights[sub_len];
        for (int l = 0; l < sub_len; ++l) weights[l] = av_x + std::fabs(xs[l]);
        scales[j] = fit_scale_min(xs, weights, L + sub_len * j, &mins[j]);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }

    // 6-bit scales and mins relative to the largest of each; the uint8_t conversion before the
    // clamp is ggml's (a negative scale wraps and then clamps to 63).
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < n_sub; ++j) {
        const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
        const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
        if (j < 4) {
            blk.scales[j] = ls;
            blk.scales[j + 4] = lm;
        } else {
            blk.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
            blk.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
            blk.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
        }
    }
    const float d_super = max_scale / 63.f, dmin_super = max_min / 63.f;
    if (!(d_super < 65520.f) || !(dmin_super < 65520.f))
        fail(error_kind::invalid_request, "q4_K block {}: |x| up to {} overflows the fp16 scales", block_index, amax);
    blk.d = float_to_half(d_super);
    blk.dmin = float_to_half(dmin_super);

    // Requantize against the rounded scales. A sub-block whose scale rounded to 0 keeps the
    // quants of its own fit (as ggml does); they dequantize to -min regardless.
    const float d = half_to_float(blk.d), dmin = half_to_float(blk.dmin);
    for (int j = 0; j < n_sub; ++j) {
        const q4_k_scale_min sm = q4_k_get_scale_min(blk.scales, j);
        const float ds = d * sm.scale;
        if (ds == 0) continue;
        const float dm = dmin * sm.min;
        for (int i = 0; i < sub_len; ++i)
            L[sub_len * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[sub_len * j + i] + dm) / ds), 0, q_max));
    }
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l)
            blk.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

}  // namespace

// dequantize_row_q4_K's expression: (d * sc) * q - dmin * m, with no FMA contraction.
void dequantize_row_q4_k(const block_q4_k *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_q4_k &blk = src[b];
        const float d = half_to_float(blk.d), dmin = half_to_float(blk.dmin);
        float *y = dst + b * qk_k_elems;
        for (int c = 0; c < 4; ++c) {
            const q4_k_scale_min lo = q4_k_get_scale_min(blk.scales, 2 * c);
            const q4_k_scale_min hi = q4_k_get_scale_min(blk.scales, 2 * c + 1);
            const float d1 = d * lo.scale, m1 = dmin * lo.min;
            const float d2 = d * hi.scale, m2 = dmin * hi.min;
            const uint8_t *q = blk.qs + 32 * c;
            float *yc = y + 64 * c;
            for (int l = 0; l < 32; ++l) yc[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) yc[32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
    }
}

void quantize_row_q4_k(const float *src, block_q4_k *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block(src + b * qk_k_elems, dst[b], b);
}

}  // namespace tandem::quant_detail
