// src/cpu/digits_kernels.h - what the digit products' variants share (internal to src/cpu/digits*):
// the folds that turn a block's integer sums into float, the Q6_K quant at an element, and each
// variant's entry.
#pragma once

#include "digits.h"

#include "tandem/quant_blocks.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace tandem::cpu {

// The GPU's digit_fold (cuda/digits.cuh), every rounding explicit: out + s (d (acc0 + acc1 / 256) - dm cm / 256).
inline float digit_fold(int32_t acc0, int32_t acc1, float cm, float d, float dm, float s, float out) {
    const float dots = std::fma(float(acc1), 1.0f / 256.0f, float(acc0));
    const float part = std::fma(d, dots, -(dm * (cm * (1.0f / 256.0f))));
    return std::fma(s, part, out);
}

// Q6_K: out + s d (acc0 + acc1 / 256).
inline float q6_k_fold(int32_t acc0, int32_t acc1, float d, float s, float out) {
    const float dots = std::fma(float(acc1), 1.0f / 256.0f, float(acc0));
    return std::fma(s, d * dots, out);
}

// Q8_0, one block of 32: part + d (256 dot0 + dot1) (the integer exact: |dot| <= 32 * 128 * 127).
inline float q8_0_fold_block(int32_t dot0, int32_t dot1, float d, float part) {
    return std::fma(d, float(256 * dot0 + dot1), part);
}

// The tensor core's rounding of the mins' exact sum to fp32: toward zero (the double holds it exactly;
// clearing its low 29 mantissa bits keeps fp32's 24).
inline float digit_mins_round(int32_t exact) {
    const uint64_t u = std::bit_cast<uint64_t>(double(exact));
    return float(std::bit_cast<double>(u & ~((uint64_t(1) << 29) - 1)));
}

// The 6-bit quant (0..63) of element e (0..255) of a Q6_K block (quant_blocks.h's layout).
inline uint8_t q6_k_quant(const block_q6_k &b, int e) {
    const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
    const uint8_t ql = b.ql[64 * h + l + (quarter & 1) * 32], qh = b.qh[32 * h + l];
    return uint8_t(((quarter < 2 ? ql & 0xF : ql >> 4)) | (((qh >> (2 * quarter)) & 3) << 4));
}

using digits_tile_fn = void(const digits_product_args &, int64_t, int64_t, digits_scratch &);
digits_tile_fn digits_q4_k_scalar, digits_q6_k_scalar, digits_q8_0_scalar;
#if defined(__x86_64__)
digits_tile_fn digits_q4_k_avx2, digits_q6_k_avx2, digits_q8_0_avx2;
digits_tile_fn digits_q4_k_avx512, digits_q6_k_avx512, digits_q8_0_avx512;
#endif

}  // namespace tandem::cpu
