// src/gguf/quant_iq_grids.h - the lookup tables of the IQ types, built at compile time from
// quant_iq_grid_data.h, and the sign tables, which the formats define by a rule. Used by
// tandem_gguf and by the CUDA decoders (cuda/quant_decode_iq.cuh), which copy the same constexpr
// tables to the device: hence C++17 (the kernels' dialect) and no dependence on the rest of gguf.
#pragma once

#include "quant_iq_grid_data.h"

#include <array>
#include <cstddef>
#include <cstdint>

namespace tandem::quant_detail {

// The byte each grid level stands for, per format (ggml-common.h's iq*_grid tables hold these bytes;
// the dequantizers multiply them by the block scale): IQ2 grids use 8, 25, 43 (level 3 never
// occurs), IQ3_XXS 4, 12, ..., 52, 62 (the top level is not 60), IQ3_S the odd numbers 1..15, and
// IQ1 grids -1, 0, 1 stored as int8.
inline constexpr uint8_t iq2_levels[4] = {0x08, 0x19, 0x2b, 0x00};
inline constexpr uint8_t iq3xxs_levels[8] = {0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3e};
inline constexpr uint8_t iq3s_levels[8] = {0x01, 0x03, 0x05, 0x07, 0x09, 0x0b, 0x0d, 0x0f};
inline constexpr uint8_t iq1_levels[4] = {0xff, 0x00, 0x01, 0x00};

// Entry k of an 8-value grid: byte i (little-endian) is levels[value i of kgrid[k]].
template <std::size_t N>
constexpr std::array<uint64_t, N> expand_grid8(const uint16_t (&kgrid)[N], const uint8_t (&levels)[4]) {
    std::array<uint64_t, N> out{};
    for (std::size_t k = 0; k < N; ++k)
        for (int i = 0; i < 8; ++i) out[k] |= uint64_t{levels[(kgrid[k] >> (2 * i)) & 3]} << (8 * i);
    return out;
}

// Entry k of a 4-value grid (3 bits a value).
template <std::size_t N>
constexpr std::array<uint32_t, N> expand_grid4(const uint16_t (&kgrid)[N], const uint8_t (&levels)[8]) {
    std::array<uint32_t, N> out{};
    for (std::size_t k = 0; k < N; ++k)
        for (int i = 0; i < 4; ++i) out[k] |= uint32_t{levels[(kgrid[k] >> (3 * i)) & 7]} << (8 * i);
    return out;
}

inline constexpr auto iq2xxs_grid = expand_grid8(kgrid_iq2xxs, iq2_levels);
inline constexpr auto iq2xs_grid = expand_grid8(kgrid_iq2xs, iq2_levels);
inline constexpr auto iq2s_grid = expand_grid8(kgrid_iq2s, iq2_levels);
inline constexpr auto iq1s_grid = expand_grid8(kgrid_iq1s, iq1_levels);
inline constexpr auto iq3xxs_grid = expand_grid4(kgrid_iq3xxs, iq3xxs_levels);
inline constexpr auto iq3s_grid = expand_grid4(kgrid_iq3s, iq3s_levels);

// The IQ2/IQ3 sign index: 7 stored sign bits for 8 values, the eighth chosen so that the number
// of negative values is even (ggml's ksigns_iq2xs): bit 7 is the parity of the low 7 bits.
constexpr uint8_t iq_signs(uint32_t seven_bits) {
    uint32_t parity = seven_bits ^ (seven_bits >> 4);
    parity ^= parity >> 2;
    parity ^= parity >> 1;
    return static_cast<uint8_t>(seven_bits | ((parity & 1) << 7));
}

// The shift IQ1_S/IQ1_M add to every grid value (ggml's IQ1S_DELTA).
inline constexpr float iq1_delta = 0.125f;

}  // namespace tandem::quant_detail
