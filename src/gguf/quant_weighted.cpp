// src/gguf/quant_weighted.cpp - the K-quants' and legacy types' quantizers with an importance
// matrix (ggml's quantize_row_{q2,q3,q4,q5,q6}_K_impl and quantize_row_q{4,5}_{0,1}_impl), one
// row at a time, block for block the same bytes. The per-element weight is
// qw[i] * sqrt(sigma2 + x[i]^2), sigma2 a mean square over the super-block (K-quants) or the
// whole row (legacy types), as in ggml.
#include "quant_rows.h"
#include "quant_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

constexpr int qk = 32;  // legacy block

float sum_squares(const float *x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}

void importance_weights(const float *x, const float *qw, float sigma2, int n, float *weight) {
    for (int i = 0; i < n; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
}

float sum_of(const float *w, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += w[i];
    return s;
}

// Element 128h + 32g + l of a Q2_K/Q3_K block in bits 2g of qs[32h + l].
void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t *Lh = L + 128 * h;
            qs[32 * h + l] = static_cast<uint8_t>(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
        }
}

// Q4_K/Q5_K: the 6-bit scale and min of sub-block j into the 12 packed bytes.
void pack_scale_min(uint8_t *scales, int j, uint8_t ls, uint8_t lm) {
    if (j < 4) {
        scales[j] = ls;
        scales[j + 4] = lm;
    } else {
        scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
}

// Q4_K/Q5_K requantization against the stored scales (identical to the reference quantizers').
void requantize_k4(const float *x, uint16_t d_bits, uint16_t dmin_bits, const uint8_t *scales, int nmax, uint8_t *L) {
    for (int j = 0; j < 8; ++j) {
        const q4_k_scale_min sm = q4_k_get_scale_min(scales, j);
        const float d = half_to_float(d_bits) * static_cast<float>(sm.scale);
        if (d == 0) continue;
        const float dm = half_to_float(dmin_bits) * static_cast<float>(sm.min);
        for (int i = 0; i < 32; ++i)
            L[32 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + i] + dm) / d), 0, nmax));
    }
}

// Q3_K's signed 6-bit scale of sub-block j, before the -32.
int q3_k_scale(const uint8_t *scales, int j) {
    const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    return low | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

void quantize_block_q2_k(const float *x, const float *qw, block_q2_k &y, int64_t b) {
    uint8_t L[256], Ls[16], Lm[16];
    float mins[16], scales[16], sw[16], weight[16];
    const float sigma2 = sum_squares(x, 256) / 256;
    for (int j = 0; j < 16; ++j) {
        importance_weights(x + 16 * j, qw + 16 * j, sigma2, 16, weight);
        sw[j] = sum_of(weight, 16);
        scales[j] = make_qkx3(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j]);
    }
    y.d = checked_half(make_qp(16, 15, scales, Ls, sw), "q2_K", b);
    y.dmin = checked_half(make_qp(16, 15, mins, Lm, sw), "q2_K", b);
    const float dm = half_to_float(y.d), mm = half_to_float(y.dmin);
    for (int j = 0; j < 16; ++j) y.scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
    for (int j = 0; j < 16; ++j) {
        const float d = dm * static_cast<float>(y.scales[j] & 0xF);
        if (d == 0) continue;
        const float m = mm * static_cast<float>(y.scales[j] >> 4);
        for (int i = 0; i < 16; ++i)
            L[16 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + i] + m) / d), 0, 3));
    }
    pack_2bit(L, y.qs);
}

void quantize_block_q3_k(const float *x, const float *qw, block_q3_k &y, int64_t b) {
    int8_t L[256], Ls[16];
    float scales[16], weight[16], sw[16];
    const float sigma2 = 2 * sum_squares(x, 256) / 256;
    for (int j = 0; j < 16; ++j) {
        importance_weights(x + 16 * j, qw + 16 * j, sigma2, 16, weight);
        sw[j] = sum_of(weight, 16);
        scales[j] = make_qx(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    std::memset(y.scales, 0, 12);
    const float d_block = make_qx(16, 32, scales, Ls, sw);
    for (int j = 0; j < 16; ++j) {
        const int l = Ls[j];
        if (j < 8) y.scales[j] = static_cast<uint8_t>(l & 0xF);
        else y.scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        y.scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
    }
    y.d = checked_half(d_block, "q3_K", b);
    for (int j = 0; j < 16; ++j) {
        const float d = half_to_float(y.d) * static_cast<float>(q3_k_scale(y.scales, j) - 32);
        if (d == 0) continue;
        for (int i = 0; i < 16; ++i)
            L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
    std::memset(y.hmask, 0, 32);
    uint8_t low[256];
    for (int e = 0; e < 256; ++e) {
        if (L[e] > 3) y.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
        low[e] = static_cast<uint8_t>(L[e] > 3 ? L[e] - 4 : L[e]);
    }
    pack_2bit(low, y.qs);
}

// Q4_K (nmax 15) and Q5_K (nmax 31) share the search: per 32-group scale and min, then the
// 6-bit super-block quantization of both by make_qp_quants weighted by the group weight sums.
template <int nmax>
void search_k4(const float *x, const float *qw, uint8_t *L, uint8_t *scales_out, uint16_t &d_out, uint16_t &dmin_out,
               const char *type_name, int64_t b) {
    uint8_t Ls[8], Lm[8];
    float weights[32], sw[8], mins[8], scales[8];
    const float sigma2 = 2 * sum_squares(x, 256) / 256;
    for (int j = 0; j < 8; ++j) {
        importance_weights(x + 32 * j, qw + 32 * j, sigma2, 32, weights);
        sw[j] = sum_of(weights, 32);
        scales[j] = make_qkx3(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j]);
    }
    const float d_block = make_qp(8, 63, scales, Ls, sw);
    const float m_block = make_qp(8, 63, mins, Lm, sw);
    for (int j = 0; j < 8; ++j) pack_scale_min(scales_out, j, Ls[j], Lm[j]);
    d_out = checked_half(d_block, type_name, b);
    dmin_out = checked_half(m_block, type_name, b);
    requantize_k4(x, d_out, dmin_out, scales_out, nmax, L);
}

void quantize_block_q4_k(const float *x, const float *qw, block_q4_k &y, int64_t b) {
    uint8_t L[256];
    search_k4<15>(x, qw, L, y.scales, y.d, y.dmin, "q4_K", b);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) y.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

void quantize_block_q5_k(const float *x, const float *qw, block_q5_k &y, int64_t b) {
    uint8_t L[256];
    search_k4<31>(x, qw, L, y.scales, y.d, y.dmin, "q5_K", b);
    std::memset(y.qh, 0, 32);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            const int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
            y.qh[l] |= static_cast<uint8_t>(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
            y.qs[32 * c + l] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
        }
}

// Q6_K takes the importance values themselves as make_qx_quants weights (no sigma2 term).
void quantize_block_q6_k(const float *x, const float *qw, block_q6_k &y, int64_t b) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
        scales[ib] = make_qx(16, 32, x + 16 * ib, L + 16 * ib, qw + 16 * ib);
        const float abs_scale = std::fabs(scales[ib]);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < group_max_eps) {
        std::memset(&y, 0, sizeof(y));
        return;
    }
    const float iscale = -128.f / max_scale;
    y.d = checked_half(1 / iscale, "q6_K", b);
    for (int ib = 0; ib < 16; ++ib) y.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < 16; ++j) {
        const float d = half_to_float(y.d) * static_cast<float>(y.scales[j]);
        if (d == 0) continue;
        for (int i = 0; i < 16; ++i)
            L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
        const int8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; ++l) {
            const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
            y.ql[64 * h + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
            y.ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
            y.qh[32 * h + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
    }
}

// Legacy blocks: element j < 16 in the low nibble of qs[j], j + 16 in the high one; the fifth
// bits (Q5) in the little-endian u32 qh.
void pack_legacy(const uint8_t *L, uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = static_cast<uint8_t>((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
        h |= static_cast<uint32_t>((L[j] >> 4) & 1) << j;
        h |= static_cast<uint32_t>((L[j + 16] >> 4) & 1) << (j + 16);
    }
    if (qh) std::memcpy(qh, &h, 4);
}

// The legacy types' sigma2 is the mean square of the whole row.
float row_sigma2(const float *x, int64_t n_blocks) {
    const int64_t n = n_blocks * qk;
    return sum_squares(x, n) / static_cast<float>(n);
}

// Q4_0/Q5_0: make_qx_quants with nmax 8 / 16 (quants biased to 0..15 / 0..31).
template <int nmax, class Block>
void quantize_symmetric(const float *src, const float *qw, Block *dst, int64_t n_blocks, const char *type_name,
                        uint8_t *(*qh_of)(Block &)) {
    const float sigma2 = row_sigma2(src, n_blocks);
    for (int64_t b = 0; b < n_blocks; ++b) {
        float weight[qk];
        int8_t L[qk];
        importance_weights(src + b * qk, qw + b * qk, sigma2, qk, weight);
        const float d = make_qx(qk, nmax, src + b * qk, L, weight);
        dst[b].d = checked_half(d, type_name, b);
        pack_legacy(reinterpret_cast<const uint8_t *>(L), dst[b].qs, qh_of(dst[b]));
    }
}

// Q4_1/Q5_1: make_qkx3_quants with nmax 15 / 31; m = the fitted min.
template <int nmax, class Block>
void quantize_affine(const float *src, const float *qw, Block *dst, int64_t n_blocks, const char *type_name,
                     uint8_t *(*qh_of)(Block &)) {
    const float sigma2 = row_sigma2(src, n_blocks);
    for (int64_t b = 0; b < n_blocks; ++b) {
        float weight[qk], neg_min;
        uint8_t L[qk];
        importance_weights(src + b * qk, qw + b * qk, sigma2, qk, weight);
        const float d = make_qkx3(qk, nmax, src + b * qk, weight, L, &neg_min);
        dst[b].d = checked_half(d, type_name, b);
        dst[b].m = checked_half(-neg_min, type_name, b);
        pack_legacy(L, dst[b].qs, qh_of(dst[b]));
    }
}

template <class Block>
uint8_t *no_qh(Block &) { return nullptr; }
template <class Block>
uint8_t *qh_field(Block &blk) { return blk.qh; }

template <class Block, void (*Fn)(const float *, const float *, Block &, int64_t)>
void each_k_block(const float *src, const float *qw, Block *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) Fn(src + b * qk_k_elems, qw + b * qk_k_elems, dst[b], b);
}

}  // namespace

void quantize_row_q2_k_weighted(const float *src, const float *qw, block_q2_k *dst, int64_t n_blocks) {
    each_k_block<block_q2_k, quantize_block_q2_k>(src, qw, dst, n_blocks);
}
void quantize_row_q3_k_weighted(const float *src, const float *qw, block_q3_k *dst, int64_t n_blocks) {
    each_k_block<block_q3_k, quantize_block_q3_k>(src, qw, dst, n_blocks);
}
void quantize_row_q4_k_weighted(const float *src, const float *qw, block_q4_k *dst, int64_t n_blocks) {
    each_k_block<block_q4_k, quantize_block_q4_k>(src, qw, dst, n_blocks);
}
void quantize_row_q5_k_weighted(const float *src, const float *qw, block_q5_k *dst, int64_t n_blocks) {
    each_k_block<block_q5_k, quantize_block_q5_k>(src, qw, dst, n_blocks);
}
void quantize_row_q6_k_weighted(const float *src, const float *qw, block_q6_k *dst, int64_t n_blocks) {
    each_k_block<block_q6_k, quantize_block_q6_k>(src, qw, dst, n_blocks);
}
void quantize_row_q4_0_weighted(const float *src, const float *qw, block_q4_0 *dst, int64_t n_blocks) {
    quantize_symmetric<8>(src, qw, dst, n_blocks, "q4_0", no_qh<block_q4_0>);
}
void quantize_row_q5_0_weighted(const float *src, const float *qw, block_q5_0 *dst, int64_t n_blocks) {
    quantize_symmetric<16>(src, qw, dst, n_blocks, "q5_0", qh_field<block_q5_0>);
}
void quantize_row_q4_1_weighted(const float *src, const float *qw, block_q4_1 *dst, int64_t n_blocks) {
    quantize_affine<15>(src, qw, dst, n_blocks, "q4_1", no_qh<block_q4_1>);
}
void quantize_row_q5_1_weighted(const float *src, const float *qw, block_q5_1 *dst, int64_t n_blocks) {
    quantize_affine<31>(src, qw, dst, n_blocks, "q5_1", qh_field<block_q5_1>);
}

}  // namespace tandem::quant_detail
