// src/gguf/quant_iq2.cpp - IQ2_XXS, IQ2_XS and IQ2_S rows: dequantization, bitwise ggml's
// dequantize_row_iq2_*: value = (block scale * grid byte) * sign.
#include "quant_iq_grids.h"
#include "quant_rows.h"

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

}  // namespace tandem::quant_detail
