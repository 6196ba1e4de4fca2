// src/gguf/quant_iq1.cpp - IQ1_S and IQ1_M rows: dequantization, bitwise ggml's
// dequantize_row_iq1_*: value = block scale * (grid value +- 1/8); and ggml's quantizers
// (quantize_row_iq1_s_impl, quantize_row_iq1_m_impl), block for block the same bytes.
#include "quant_iq_grids.h"
#include "quant_iq_search.h"
#include "quant_rows.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>

namespace tandem::quant_detail {
namespace {

void emit8(float scale, uint64_t grid_entry, float delta, float *y) {
    for (int j = 0; j < 8; ++j) {
        const float g = static_cast<float>(static_cast<int8_t>((grid_entry >> (8 * j)) & 0xff));
        y[j] = scale * (g + delta);
    }
}

}  // namespace

// Per 32-group ib: qh[ib] bits 3l..3l+2 are the high index bits of group l, bits 12..14 the
// scale s (d * (2 s + 1)), bit 15 the sign of the shift.
void dequantize_row_iq1_s(const block_iq1_s *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_iq1_s &blk = src[b];
        const float d = half_to_float(blk.d);
        float *y = dst + b * qk_k_elems;
        for (int ib = 0; ib < 8; ++ib) {
            const uint16_t qh = blk.qh[ib];
            const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -iq1_delta : iq1_delta;
            for (int l = 0; l < 4; ++l) {
                const int index = blk.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
                emit8(dl, iq1s_grid[static_cast<std::size_t>(index)], delta, y + 32 * ib + 8 * l);
            }
        }
    }
}

// The fp16 block scale is the top nibbles of the four little-endian u16 in scales (first u16 the
// lowest nibble); below them each u16 holds two 32-groups' pair of 3-bit sub-scales. qh holds,
// per group of 8, 3 high index bits and the shift's sign bit (bit 3 or 7).
void dequantize_row_iq1_m(const block_iq1_m *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const block_iq1_m &blk = src[b];
        uint16_t sc[4];
        for (int i = 0; i < 4; ++i) sc[i] = static_cast<uint16_t>(blk.scales[2 * i] | (blk.scales[2 * i + 1] << 8));
        const uint16_t scale_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                                          ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = half_to_float(scale_bits);
        float *y = dst + b * qk_k_elems;
        for (int ib = 0; ib < 8; ++ib) {
            const int shift = 6 * (ib % 2);
            const float dl[2] = {d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1),
                                 d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1)};
            const uint8_t *qs = blk.qs + 4 * ib;
            const uint8_t *qh = blk.qh + 2 * ib;
            for (int l = 0; l < 4; ++l) {
                const uint8_t h = qh[l / 2];
                const int high = l % 2 == 0 ? h & 7 : (h >> 4) & 7;
                const bool negative = l % 2 == 0 ? (h & 0x08) != 0 : (h & 0x80) != 0;
                emit8(dl[l / 2], iq1s_grid[static_cast<std::size_t>(qs[l] | (high << 8))], negative ? -iq1_delta : iq1_delta,
                      y + 32 * ib + 8 * l);
            }
        }
    }
}

namespace {

// The three values a level stands for with a positive or a negative shift (IQ1S_DELTA and
// IQ1M_DELTA are both 1/8).
constexpr float x_p[3] = {-1 + iq1_delta, iq1_delta, 1 + iq1_delta};
constexpr float x_m[3] = {-1 - iq1_delta, -iq1_delta, 1 - iq1_delta};
constexpr float group_max_eps_iq1_s = 1e-12f;  // GROUP_MAX_EPS_IQ1_S
constexpr float group_max_eps_iq1_m = 1e-7f;   // GROUP_MAX_EPS_IQ1_M

float sigma2_of(const float *x) {
    float s = 0;
    for (int i = 0; i < qk_k_elems; ++i) s += x[i] * x[i];
    return 2 * s / qk_k_elems;
}

// The group's indices in ascending order of value; equal values keep their index order, as the
// merge sort behind glibc's qsort (which ggml calls) leaves them.
template <int n>
std::array<int, n> sorted_order(const float *xb) {
    std::array<int, n> idx;
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return xb[a] < xb[b]; });
    return idx;
}

// Levels from the best split: sorted positions below i1 get 0, below i2 1, the rest 2.
template <int n>
void split_levels(const std::array<int, n> &idx, int i1, int i2, int8_t *L) {
    for (int j = 0; j < n; ++j) L[idx[static_cast<size_t>(j)]] = static_cast<int8_t>(j < i1 ? 0 : j < i2 ? 1 : 2);
}

// Puts each group of 8 levels on the grid (best neighbour by the IQ1 values xx when off it).
// Returns whether all were on it.
bool snap_iq1(const iq_grid_search &g, const float *xb, const float *weight, float scale, const float *const *xx,
              int n_groups, int8_t *L, uint16_t *index) {
    bool all_on_grid = true;
    for (int k = 0; k < n_groups; ++k) {
        int u = 0;
        for (int j = 0; j < 8; ++j) u |= L[8 * k + j] << (2 * j);
        int32_t grid_index = g.map[static_cast<size_t>(u)];
        if (grid_index < 0) {
            all_on_grid = false;
            grid_index = iq1_best_neighbour(g, g.neighbours_of(u), xb + 8 * k, weight + 8 * k, scale, xx[k], L + 8 * k);
        }
        index[k] = static_cast<uint16_t>(grid_index);
    }
    return all_on_grid;
}

// The least-squares scale of the snapped groups; kept only when both sums are positive.
float refit_iq1(const iq_grid_search &g, const float *xb, const float *weight, const float *const *xx, int n_groups,
                const uint16_t *index, float scale) {
    float sumqx = 0, sumq2 = 0;
    for (int k = 0; k < n_groups; ++k) {
        const int8_t *pg = g.point(index[k]);
        for (int j = 0; j < 8; ++j) {
            const float w = weight[8 * k + j], q = xx[k][(pg[j] - 1) / 2];
            sumqx += w * q * xb[8 * k + j];
            sumq2 += w * q * q;
        }
    }
    return sumqx > 0 && sumq2 > 0 ? sumqx / sumq2 : scale;
}

// quantize_row_iq1_s_impl, one super-block: 8 groups of 32, each split exhaustively into
// levels -1, 0, 1 (plus a shared +-1/8 shift) over its sorted values.
void quantize_block_iq1_s(const float *x, const float *qw, block_iq1_s &y, int64_t b) {
    constexpr int bs = 32;
    const iq_grid_search &g = iq_grid(iq_grid_kind::iq1s);
    float scales[8], weight[bs], sumx[bs + 1], sumw[bs + 1];
    int8_t L[bs], shifts[8];
    uint16_t index[4];
    float max_scale = 0;
    const float sigma2 = sigma2_of(x);
    y.d = float_to_half(0.f);
    std::memset(y.qs, 0, sizeof(y.qs));
    std::memset(y.qh, 0, sizeof(y.qh));
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + bs * ib;
        const float *qwb = qw + bs * ib;
        for (int i = 0; i < bs; ++i) weight[i] = qwb[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
        float max = std::fabs(xb[0]);
        for (int i = 1; i < bs; ++i) max = max > std::fabs(xb[i]) ? max : std::fabs(xb[i]);
        scales[ib] = 0;
        shifts[ib] = 1;
        if (max < group_max_eps_iq1_s) continue;
        const auto idx = sorted_order<bs>(xb);
        sumx[0] = sumw[0] = 0;
        for (int j = 0; j < bs; ++j) {
            const int i = idx[static_cast<size_t>(j)];
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        float best_score = -FLT_MAX, scale = max;
        int besti1 = -1, besti2 = -1, best_shift = 0;
        for (int i1 = 0; i1 <= bs; ++i1) {
            for (int i2 = i1; i2 <= bs; ++i2) {
                for (const int shift : {1, -1}) {
                    const float *v = shift == 1 ? x_p : x_m;
                    const float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[bs] - sumx[i2]) * v[2];
                    const float sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                                        (sumw[bs] - sumw[i2]) * v[2] * v[2];
                    if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1;
                        besti2 = i2;
                        best_shift = shift;
                    }
                }
            }
        }
        if (besti1 < 0 || besti2 < 0 || best_shift == 0) continue;
        split_levels<bs>(idx, besti1, besti2, L);
        if (scale < 0) {
            for (int j = 0; j < bs; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
            scale = -scale;
            best_shift = -best_shift;
        }
        const float *xx = best_shift == 1 ? x_p : x_m;
        const float *xxs[4] = {xx, xx, xx, xx};
        if (!snap_iq1(g, xb, weight, scale, xxs, 4, L, index)) scale = refit_iq1(g, xb, weight, xxs, 4, index, scale);
        uint16_t h = 0;
        for (int k = 0; k < 4; ++k) {
            y.qs[4 * ib + k] = static_cast<uint8_t>(index[k] & 255);
            h = static_cast<uint16_t>(h | ((index[k] >> 8) << (3 * k)));
        }
        y.qh[ib] = h;
        scales[ib] = scale;
        shifts[ib] = static_cast<int8_t>(best_shift);
        max_scale = std::max(max_scale, scale);
    }
    if (max_scale == 0) return;
    const float d = max_scale / 15;
    y.d = checked_half(d * 1.125f, "iq1_s", b);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) {
        int l = std::max(0, std::min(7, nearest_int(0.5f * (id * scales[ib] - 1))));
        if (shifts[ib] == -1) l |= 8;
        y.qh[ib] = static_cast<uint16_t>(y.qh[ib] | (l << 12));
    }
}

// IQ1_M's shift choice per 16-group: k = 2 * (first half negative) + (second half negative).
const float *iq1m_values(int k, int half) { return (half == 0 ? k < 2 : k % 2 == 0) ? x_p : x_m; }

// quantize_row_iq1_m_impl, one super-block: 16 groups of 16 whose halves may shift either way;
// the split search keeps per-half prefix sums (ggml's form: v0 - v1 = v1 - v2 = -1, so a split's
// sums are T v2 - px[i1] - px[i2] and W v2^2 + pw[i1] c1 + pw[i2] c2). The fp16 scale is refit
// over the whole block and spread over the top nibbles of the four scale u16.
void quantize_block_iq1_m(const float *x, const float *qw, block_iq1_m &y, int64_t b) {
    constexpr int bs = 16;
    constexpr uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    const iq_grid_search &g = iq_grid(iq_grid_kind::iq1s);
    float scales[16], weight[bs];
    int8_t L[bs], shifts[16];
    uint16_t index[2];
    float max_scale = 0;
    const float sigma2 = sigma2_of(x);
    std::memset(&y, 0, sizeof(y));
    const auto group_weights = [&](int ib) {
        const float *xb = x + bs * ib;
        for (int i = 0; i < bs; ++i) weight[i] = qw ? qw[bs * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
    };
    for (int ib = 0; ib < 16; ++ib) {
        const float *xb = x + bs * ib;
        group_weights(ib);
        float max = std::fabs(xb[0]);
        for (int i = 1; i < bs; ++i) max = max > std::fabs(xb[i]) ? max : std::fabs(xb[i]);
        scales[ib] = 0;
        shifts[ib] = 0;
        if (max < group_max_eps_iq1_m) continue;
        const auto idx = sorted_order<bs>(xb);
        float px[2][bs + 1], pw[2][bs + 1];
        px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
        for (int j = 0; j < bs; ++j) {
            const int i = idx[static_cast<size_t>(j)];
            const int h = i < bs / 2 ? 0 : 1;
            px[h][j + 1] = px[h][j] + weight[i] * xb[i];
            px[1 - h][j + 1] = px[1 - h][j];
            pw[h][j + 1] = pw[h][j] + weight[i];
            pw[1 - h][j + 1] = pw[1 - h][j];
        }
        const float txs[2] = {px[0][bs], px[1][bs]}, tws[2] = {pw[0][bs], pw[1][bs]};
        const float p2 = x_p[2], m2 = x_m[2];
        const float cp1 = x_p[0] * x_p[0] - x_p[1] * x_p[1], cp2 = x_p[1] * x_p[1] - x_p[2] * x_p[2];
        const float cm1 = x_m[0] * x_m[0] - x_m[1] * x_m[1], cm2 = x_m[1] * x_m[1] - x_m[2] * x_m[2];
        float best_score = -FLT_MAX, scale = max;
        int besti1 = -1, besti2 = -1, best_k = -1;
        for (int i1 = 0; i1 <= bs; ++i1) {
            for (int i2 = i1; i2 <= bs; ++i2) {
                float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
                for (int h = 0; h < 2; ++h) {
                    const float sx = px[h][i1] + px[h][i2];
                    qx_p[h] = txs[h] * p2 - sx;
                    qx_m[h] = txs[h] * m2 - sx;
                    q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                    q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                }
                const float sumqx[4] = {qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]};
                const float sumq2[4] = {q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]};
                for (int k = 0; k < 4; ++k) {
                    if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                        scale = sumqx[k] / sumq2[k];
                        best_score = scale * sumqx[k];
                        besti1 = i1;
                        besti2 = i2;
                        best_k = k;
                    }
                }
            }
        }
        if (besti1 < 0 || besti2 < 0 || best_k < 0) continue;
        split_levels<bs>(idx, besti1, besti2, L);
        if (scale < 0) {
            for (int j = 0; j < bs; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
            scale = -scale;
            best_k = 3 - best_k;
        }
        const float *xxs[2] = {iq1m_values(best_k, 0), iq1m_values(best_k, 1)};
        if (!snap_iq1(g, xb, weight, scale, xxs, 2, L, index)) scale = refit_iq1(g, xb, weight, xxs, 2, index, scale);
        y.qs[2 * ib] = static_cast<uint8_t>(index[0] & 255);
        y.qs[2 * ib + 1] = static_cast<uint8_t>(index[1] & 255);
        y.qh[ib] = static_cast<uint8_t>((index[0] >> 8) | ((index[1] >> 8) << 4));
        scales[ib] = scale;
        shifts[ib] = static_cast<int8_t>(best_k);
        max_scale = std::max(max_scale, scale);
    }
    if (max_scale == 0) return;
    uint16_t sc[4] = {};
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < 16; ++ib) {
        const int l = std::max(0, std::min(7, nearest_int(0.5f * (id * scales[ib] - 1))));
        sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | (l << (3 * (ib % 4))));
        y.qh[ib] = static_cast<uint8_t>(y.qh[ib] | masks[shifts[ib]]);
        group_weights(ib);
        const float *xb = x + bs * ib;
        for (int k = 0; k < 2; ++k) {
            const float *xx = iq1m_values(shifts[ib], k);
            const int grid_index = y.qs[2 * ib + k] + ((y.qh[ib] << (8 - 4 * k)) & 0x700);
            const int8_t *pg = g.point(grid_index);
            for (int j = 0; j < 8; ++j) {
                const float w = weight[8 * k + j], q = xx[(pg[j] - 1) / 2] * static_cast<float>(2 * l + 1);
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t s = checked_half(d * 1.1125f, "iq1_m", b);
    sc[0] = static_cast<uint16_t>(sc[0] | ((s & 0x000f) << 12));
    sc[1] = static_cast<uint16_t>(sc[1] | ((s & 0x00f0) << 8));
    sc[2] = static_cast<uint16_t>(sc[2] | ((s & 0x0f00) << 4));
    sc[3] = static_cast<uint16_t>(sc[3] | (s & 0xf000));
    for (int i = 0; i < 4; ++i) {
        y.scales[2 * i] = static_cast<uint8_t>(sc[i] & 0xff);
        y.scales[2 * i + 1] = static_cast<uint8_t>(sc[i] >> 8);
    }
}

}  // namespace

void quantize_row_iq1_s(const float *src, const float *qw, block_iq1_s *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block_iq1_s(src + b * qk_k_elems, qw + b * qk_k_elems, dst[b], b);
}
void quantize_row_iq1_m(const float *src, const float *qw, block_iq1_m *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b)
        quantize_block_iq1_m(src + b * qk_k_elems, qw ? qw + b * qk_k_elems : nullptr, dst[b], b);
}

}  // namespace tandem::quant_detail
