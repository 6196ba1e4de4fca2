// src/gguf/quant_iq3.cpp - IQ3_XXS and IQ3_S rows: dequantization, bitwise ggml's
// dequantize_row_iq3_*: value = (block scale * grid byte) * sign, four values a grid entry.
#include "quant_iq_grids.h"
#include "quant_rows.h"

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

}  // namespace tandem::quant_detail
