// src/gguf/quant_iq1.cpp - IQ1_S and IQ1_M rows: dequantization, bitwise ggml's
// dequantize_row_iq1_*: value = block scale * (grid value +- 1/8).
#include "quant_iq_grids.h"
#include "quant_rows.h"

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

}  // namespace tandem::quant_detail
