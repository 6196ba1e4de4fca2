// cuda/quant_decode_iq.cuh - device decoding of the IQ types with lookup grids (IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) into quant_decode.cuh's items: item i is 32-group i % 8
// of block i / 8, elements 32 (i % 8) .. +31 of the block, the CPU's loop body over `ib`.
// Values use the CPU's dequantize_row_iq* expressions (src/gguf/quant_iq{1,2,3}.cpp) operation by
// operation, so each weight equals the CPU's dequantised weight bitwise. The grids are the CPU's
// constexpr tables (src/gguf/quant_iq_grids.h) copied into device global memory and read through
// the read-only cache: lanes index them divergently, which constant memory would serialise.
// Blocks of 50, 66, 74, 82, 98 and 110 bytes allow two-byte loads only; IQ1_M's 56 four.
#pragma once

#include "src/gguf/quant_iq_grids.h"
#include "tandem/quant_blocks.h"
#include "tandem/types.h"

#include <cuda_fp16.h>

#include <cstdint>

namespace tandem::cuda {

static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82 &&
              sizeof(block_iq3_xxs) == 98 && sizeof(block_iq3_s) == 110 && sizeof(block_iq1_s) == 50 &&
              sizeof(block_iq1_m) == 56);

// The CPU's tables, bit for bit (one copy per translation unit; 34 KiB in all).
__device__ const std::array<uint64_t, 256> iq2xxs_grid_dev = quant_detail::iq2xxs_grid;
__device__ const std::array<uint64_t, 512> iq2xs_grid_dev = quant_detail::iq2xs_grid;
__device__ const std::array<uint64_t, 1024> iq2s_grid_dev = quant_detail::iq2s_grid;
__device__ const std::array<uint64_t, 2048> iq1s_grid_dev = quant_detail::iq1s_grid;
__device__ const std::array<uint32_t, 256> iq3xxs_grid_dev = quant_detail::iq3xxs_grid;
__device__ const std::array<uint32_t, 512> iq3s_grid_dev = quant_detail::iq3s_grid;

// Entry k of an 8-value grid as two words (values 0-3, 4-7), or of a 4-value grid as one word.
template <size_t N>
__device__ __forceinline__ uint2 iq_grid8(const std::array<uint64_t, N> &grid, uint32_t k) {
    return __ldg(reinterpret_cast<const uint2 *>(&grid) + k);
}
template <size_t N>
__device__ __forceinline__ uint32_t iq_grid4(const std::array<uint32_t, N> &grid, uint32_t k) {
    return __ldg(reinterpret_cast<const unsigned int *>(&grid) + k);
}

// ksigns_iq2xs: the eighth sign bit makes the count of negative values even (quant_iq_grids.h).
__device__ __forceinline__ uint32_t iq_signs_dev(uint32_t seven_bits) {
    return seven_bits | ((uint32_t(__popc(seven_bits)) & 1u) << 7);
}

// The CPU's emit8 (IQ2): (scale * grid byte) * (+-1), sign bit j for value j.
__device__ __forceinline__ void iq_emit8(float scale, uint2 g, uint32_t signs, float *y) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float q = float(((j < 4 ? g.x : g.y) >> (8 * (j & 3))) & 0xFFu);
        y[j] = __fmul_rn(__fmul_rn(scale, q), (signs >> j) & 1u ? -1.f : 1.f);
    }
}
// The CPU's emit4 (IQ3): four values of a 4-value entry, signs from bit `first` on.
__device__ __forceinline__ void iq_emit4(float scale, uint32_t g, uint32_t signs, int first, float *y) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float q = float((g >> (8 * j)) & 0xFFu);
        y[j] = __fmul_rn(__fmul_rn(scale, q), (signs >> (first + j)) & 1u ? -1.f : 1.f);
    }
}
// The CPU's IQ1 emit8: scale * (int8 grid value + delta).
__device__ __forceinline__ void iq1_emit8(float scale, uint2 g, float delta, float *y) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float q = float(int8_t(((j < 4 ? g.x : g.y) >> (8 * (j & 3))) & 0xFFu));
        y[j] = __fmul_rn(scale, __fadd_rn(q, delta));
    }
}

__device__ __forceinline__ float iq_half(const uint8_t *p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(p)));
}
__device__ __forceinline__ uint32_t iq_u16(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
// iq2_scale: (d * (0.5 + s)) * 0.25.
__device__ __forceinline__ float iq2_scale_dev(float d, uint32_t s) {
    return __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, float(s))), 0.25f);
}

// IQ2_XXS: per 32-group two u32 at qs + 8 ib: four 8-bit grid indices; four 7-bit sign indices
// and the 4-bit scale in bits 28..31.
__device__ __forceinline__ void decode_iq2_xxs(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 66;
    const int ib = item & 7;
    const float d = iq_half(blk);
    const uint8_t *q = blk + 2 + 8 * ib;
    const uint32_t aux0 = iq_u16(q) | (iq_u16(q + 2) << 16), aux1 = iq_u16(q + 4) | (iq_u16(q + 6) << 16);
    const float db = iq2_scale_dev(d, aux1 >> 28);
#pragma unroll
    for (int l = 0; l < 4; ++l)
        iq_emit8(db, iq_grid8(iq2xxs_grid_dev, (aux0 >> (8 * l)) & 0xFFu), iq_signs_dev((aux1 >> (7 * l)) & 127u), v + 8 * l);
}

// IQ2_XS: per 8 values a u16 of a 9-bit grid index and a 7-bit sign index; scales byte ib holds
// the two 16-value halves' 4-bit scales.
__device__ __forceinline__ void decode_iq2_xs(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 74;
    const int ib = item & 7;
    const float d = iq_half(blk);
    const uint32_t sc = blk[66 + ib];
    const float db0 = iq2_scale_dev(d, sc & 0xFu), db1 = iq2_scale_dev(d, sc >> 4);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
        const uint32_t q = iq_u16(blk + 2 + 2 * (4 * ib + l));
        iq_emit8(l < 2 ? db0 : db1, iq_grid8(iq2xs_grid_dev, q & 511u), iq_signs_dev(q >> 9), v + 8 * l);
    }
}

// IQ2_S: 10-bit indices (qs byte, two bits of qh[ib]), explicit sign bytes at qs + 32.
__device__ __forceinline__ void decode_iq2_s(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 82;
    const int ib = item & 7;
    const float d = iq_half(blk);
    const uint8_t *qs = blk + 2;
    const uint32_t qh = blk[66 + ib], sc = blk[74 + ib];
    const float db0 = iq2_scale_dev(d, sc & 0xFu), db1 = iq2_scale_dev(d, sc >> 4);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
        const uint32_t index = qs[4 * ib + l] | (((qh >> (2 * l)) & 3u) << 8);
        iq_emit8(l < 2 ? db0 : db1, iq_grid8(iq2s_grid_dev, index), qs[32 + 4 * ib + l], v + 8 * l);
    }
}

// IQ3_XXS: 8-bit indices of 4-value entries at qs + 8 ib; the u32 at qs + 64 + 4 ib holds four
// 7-bit sign indices and the scale s: (d * (0.5 + s)) * 0.5.
__device__ __forceinline__ void decode_iq3_xxs(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 98;
    const int ib = item & 7;
    const float d = iq_half(blk);
    const uint8_t *qs = blk + 2;
    const uint32_t aux = iq_u16(qs + 64 + 4 * ib) | (iq_u16(qs + 66 + 4 * ib) << 16);
    const float db = __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, float(aux >> 28))), 0.5f);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
        const uint32_t signs = iq_signs_dev((aux >> (7 * l)) & 127u);
        iq_emit4(db, iq_grid4(iq3xxs_grid_dev, qs[8 * ib + 2 * l]), signs, 0, v + 8 * l);
        iq_emit4(db, iq_grid4(iq3xxs_grid_dev, qs[8 * ib + 2 * l + 1]), signs, 4, v + 8 * l + 4);
    }
}

// IQ3_S: 9-bit indices (qs byte, bit k of qh[ib]), explicit sign bytes, scale d * (1 + 2 s).
__device__ __forceinline__ void decode_iq3_s(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 110;
    const int ib = item & 7;
    const float d = iq_half(blk);
    const uint8_t *qs = blk + 2;
    const uint32_t qh = blk[66 + ib];
    const uint32_t s = (uint32_t(blk[106 + ib / 2]) >> (4 * (ib % 2))) & 0xFu;
    const float db = __fmul_rn(d, float(int(1 + 2 * s)));
#pragma unroll
    for (int l = 0; l < 4; ++l) {
        const uint32_t i0 = qs[8 * ib + 2 * l] | (((qh >> (2 * l)) & 1u) << 8);
        const uint32_t i1 = qs[8 * ib + 2 * l + 1] | (((qh >> (2 * l + 1)) & 1u) << 8);
        const uint32_t signs = blk[74 + 4 * ib + l];
        iq_emit4(db, iq_grid4(iq3s_grid_dev, i0), signs, 0, v + 8 * l);
        iq_emit4(db, iq_grid4(iq3s_grid_dev, i1), signs, 4, v + 8 * l + 4);
    }
}

// IQ1_S: 11-bit indices (qs byte, three bits of the u16 qh[ib]); qh[ib] bits 12..14 the scale
// (d * (2 s + 1)), bit 15 the sign of the 1/8 shift.
__device__ __forceinline__ void decode_iq1_s(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 50;
    const int ib = item & 7;
    const float d = iq_half(blk);
    const uint32_t qh = iq_u16(blk + 34 + 2 * ib);
    const float dl = __fmul_rn(d, float(int(2 * ((qh >> 12) & 7u) + 1)));
    const float delta = qh & 0x8000u ? -quant_detail::iq1_delta : quant_detail::iq1_delta;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
        const uint32_t index = blk[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
        iq1_emit8(dl, iq_grid8(iq1s_grid_dev, index), delta, v + 8 * l);
    }
}

// IQ1_M: the fp16 scale in the top nibbles of the four u16 scales; each u16 below them holds two
// 32-groups' pairs of 3-bit sub-scales; qh per 8 values 3 high index bits and the shift's sign.
__device__ __forceinline__ void decode_iq1_m(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 56;
    const int ib = item & 7;
    const uint32_t sc01 = *reinterpret_cast<const uint32_t *>(blk + 48), sc23 = *reinterpret_cast<const uint32_t *>(blk + 52);
    const uint32_t sc0 = sc01 & 0xFFFFu, sc1 = sc01 >> 16, sc2 = sc23 & 0xFFFFu, sc3 = sc23 >> 16;
    const uint32_t scale_bits = (sc0 >> 12) | ((sc1 >> 8) & 0x00F0u) | ((sc2 >> 4) & 0x0F00u) | (sc3 & 0xF000u);
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(scale_bits)));
    const uint32_t sc = ib < 2 ? sc0 : ib < 4 ? sc1 : ib < 6 ? sc2 : sc3;
    const int shift = 6 * (ib % 2);
    const float dl0 = __fmul_rn(d, float(int(2 * ((sc >> shift) & 7u) + 1)));
    const float dl1 = __fmul_rn(d, float(int(2 * ((sc >> (shift + 3)) & 7u) + 1)));
    const uint8_t *qs = blk + 4 * ib, *qh = blk + 32 + 2 * ib;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
        const uint32_t h = qh[l / 2];
        const uint32_t high = l % 2 == 0 ? h & 7u : (h >> 4) & 7u;
        const bool negative = l % 2 == 0 ? (h & 0x08u) != 0 : (h & 0x80u) != 0;
        iq1_emit8(l < 2 ? dl0 : dl1, iq_grid8(iq1s_grid_dev, qs[l] | (high << 8)),
                  negative ? -quant_detail::iq1_delta : quant_detail::iq1_delta, v + 8 * l);
    }
}

// The grid types, for quant_decode.cuh's generic path.
template <ggml_type T>
constexpr bool iq_grid_type = T == ggml_type::iq2_xxs || T == ggml_type::iq2_xs || T == ggml_type::iq2_s ||
                              T == ggml_type::iq3_xxs || T == ggml_type::iq3_s || T == ggml_type::iq1_s ||
                              T == ggml_type::iq1_m;

template <ggml_type T>
__device__ __forceinline__ void decode_iq_grid(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    if constexpr (T == ggml_type::iq2_xxs) decode_iq2_xxs(row, item, v);
    else if constexpr (T == ggml_type::iq2_xs) decode_iq2_xs(row, item, v);
    else if constexpr (T == ggml_type::iq2_s) decode_iq2_s(row, item, v);
    else if constexpr (T == ggml_type::iq3_xxs) decode_iq3_xxs(row, item, v);
    else if constexpr (T == ggml_type::iq3_s) decode_iq3_s(row, item, v);
    else if constexpr (T == ggml_type::iq1_s) decode_iq1_s(row, item, v);
    else {
        static_assert(T == ggml_type::iq1_m, "decode_iq_grid: not a grid type");
        decode_iq1_m(row, item, v);
    }
}

}  // namespace tandem::cuda
