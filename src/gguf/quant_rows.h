// src/gguf/quant_rows.h - private to tandem_gguf: per-type row kernels behind quant.h's dispatch,
// and the inline scalar functions they share (half/bf16 bit conversions, ggml's nearest_int).
#pragma once

#include "tandem/quant_blocks.h"

#include <bit>
#include <cstdint>

namespace tandem::quant_detail {

constexpr int qk_k_elems = 256;  // elements per K-quant super-block (types.h's qk_k, as int)

// The conversions below compute every case unconditionally and pick one with mask arithmetic:
// g++ -O2 leaves branches (or nested ?:) on these paths unvectorized, and the row loops of f16
// tensors must vectorize.
inline uint32_t select_u32(bool take_a, uint32_t a, uint32_t b) {
    return b ^ ((a ^ b) & (0u - static_cast<uint32_t>(take_a)));
}

// IEEE binary16 bits -> float, exact (a signalling NaN comes back quiet, as with F16C).
inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t em = h & 0x7fff;  // exponent and mantissa
    // Normal numbers: shift the 15-bit field into place and rebias the exponent by 127 - 15.
    const uint32_t normal = (em << 13) + (112u << 23);
    // Inf/NaN: exponent 31 must become 255, another +112; NaNs get the quiet bit.
    const uint32_t special = (normal + (112u << 23)) | (static_cast<uint32_t>(em > 0x7c00) << 22);
    // Zero and subnormals: em units of 2^-24; em < 1024 and the power-of-two scale are exact.
    const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(em) * 0x1p-24f);
    const uint32_t bits = select_u32(em < 0x0400, subnormal, select_u32(em >= 0x7c00, special, normal));
    return std::bit_cast<float>(sign | bits);
}

// float -> IEEE binary16 bits, round to nearest even (the x86 F16C instruction's result).
inline uint16_t float_to_half(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t a = x & 0x7fffffff;
    // NaN: quiet, sign and top payload bits kept.
    const uint32_t nan = 0x7e00 | ((a >> 13) & 0x3ff);
    // Below 2^-14 the result is a subnormal with unit 2^-24. Adding 0.5f (whose ulp is 2^-24)
    // makes the FPU round to that unit, ties to even; the low bits are then the count. A count
    // of 1024 is 0x0400, the smallest normal, which is the right encoding too.
    const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
    // Normal: rebias the exponent (-112), round the 13 dropped bits to nearest even; a carry out
    // of the mantissa correctly bumps the exponent. (Wraps harmlessly where not selected.)
    const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1)) >> 13;
    // >= 65520, halfway between 65504 and 2^16, rounds (to even) to inf.
    const uint32_t h = select_u32(a > 0x7f800000, nan,
                                  select_u32(a >= 0x477ff000, 0x7c00u, select_u32(a < 0x38800000, subnormal, normal)));
    return static_cast<uint16_t>(sign | h);
}

inline float bf16_bits_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// ggml_compute_fp32_to_bf16: NaN keeps its top bits with the quiet bit forced; everything else
// (subnormals included) rounds to nearest even on the dropped 16 bits.
inline uint16_t float_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t nan = (x >> 16) | 64;
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
    return static_cast<uint16_t>(select_u32((x & 0x7fffffff) > 0x7f800000, nan, rounded));
}

// Round to the nearest integer, ties to even, for |v| < 2^22 (ggml's nearest_int). Adding
// 1.5 * 2^23 moves v to where the float ulp is 1, so the FPU does the rounding; the integer is
// then in the low mantissa bits. Only for arguments bounded by construction (the search loops);
// branch-free so those loops vectorize.
inline int nearest_int_bounded(float v) {
    const float shifted = v + 12582912.f;
    return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007fffff) - 0x00400000;
}

// The same for any finite v: out-of-range values saturate at +-(2^22 - 1) instead of wrapping
// (callers clamp to a few bits anyway; ggml only asserts). Identical to ggml's in range.
inline int nearest_int(float v) {
    if (v < -4194303.f) return -4194303;
    if (v > 4194303.f) return 4194303;
    return nearest_int_bounded(v);
}

// fp32 -> fp16 for a block scale the quantizer computed; a scale that does not fit fp16 (the block's
// values are too large for the type) is refused, naming the type and block, instead of being
// stored as inf. Defined in quant.cpp.
uint16_t checked_half(float v, const char *type_name, int64_t block_index);

// Row kernels. n_blocks blocks; inputs validated by quant.cpp (finite for quantize).
void dequantize_row_q8_0(const block_q8_0 *src, float *dst, int64_t n_blocks);
void quantize_row_q8_0(const float *src, block_q8_0 *dst, int64_t n_blocks);
void dequantize_row_q4_k(const block_q4_k *src, float *dst, int64_t n_blocks);
void quantize_row_q4_k(const float *src, block_q4_k *dst, int64_t n_blocks);
void dequantize_row_q6_k(const block_q6_k *src, float *dst, int64_t n_blocks);
void quantize_row_q6_k(const float *src, block_q6_k *dst, int64_t n_blocks);

void dequantize_row_q4_0(const block_q4_0 *src, float *dst, int64_t n_blocks);
void quantize_row_q4_0(const float *src, block_q4_0 *dst, int64_t n_blocks);
void dequantize_row_q4_1(const block_q4_1 *src, float *dst, int64_t n_blocks);
void quantize_row_q4_1(const float *src, block_q4_1 *dst, int64_t n_blocks);
void dequantize_row_q5_0(const block_q5_0 *src, float *dst, int64_t n_blocks);
void quantize_row_q5_0(const float *src, block_q5_0 *dst, int64_t n_blocks);
void dequantize_row_q5_1(const block_q5_1 *src, float *dst, int64_t n_blocks);
void quantize_row_q5_1(const float *src, block_q5_1 *dst, int64_t n_blocks);
void dequantize_row_q2_k(const block_q2_k *src, float *dst, int64_t n_blocks);
void quantize_row_q2_k(const float *src, block_q2_k *dst, int64_t n_blocks);
void dequantize_row_q3_k(const block_q3_k *src, float *dst, int64_t n_blocks);
void quantize_row_q3_k(const float *src, block_q3_k *dst, int64_t n_blocks);
void dequantize_row_q5_k(const block_q5_k *src, float *dst, int64_t n_blocks);
void quantize_row_q5_k(const float *src, block_q5_k *dst, int64_t n_blocks);
void dequantize_row_iq4_nl(const block_iq4_nl *src, float *dst, int64_t n_blocks);
void quantize_row_iq4_nl(const float *src, const float *qw, block_iq4_nl *dst, int64_t n_blocks);
void dequantize_row_iq4_xs(const block_iq4_xs *src, float *dst, int64_t n_blocks);
void quantize_row_iq4_xs(const float *src, const float *qw, block_iq4_xs *dst, int64_t n_blocks);
void dequantize_row_mxfp4(const block_mxfp4 *src, float *dst, int64_t n_blocks);
void quantize_row_mxfp4(const float *src, block_mxfp4 *dst, int64_t n_blocks);
void dequantize_row_iq2_xxs(const block_iq2_xxs *src, float *dst, int64_t n_blocks);
void dequantize_row_iq2_xs(const block_iq2_xs *src, float *dst, int64_t n_blocks);
void dequantize_row_iq2_s(const block_iq2_s *src, float *dst, int64_t n_blocks);
void dequantize_row_iq3_xxs(const block_iq3_xxs *src, float *dst, int64_t n_blocks);
void dequantize_row_iq3_s(const block_iq3_s *src, float *dst, int64_t n_blocks);
void dequantize_row_iq1_s(const block_iq1_s *src, float *dst, int64_t n_blocks);
void dequantize_row_iq1_m(const block_iq1_m *src, float *dst, int64_t n_blocks);

// Quantizers with an importance matrix: one row of n_blocks blocks, qw[n_blocks * block] the
// row's importance (quant_weighted.cpp; the IQ files). The IQ types below take qw = nullptr
// where ggml does (IQ4, IQ3, IQ2_S, IQ1_M); IQ2_XXS, IQ2_XS and IQ1_S need it.
void quantize_row_q2_k_weighted(const float *src, const float *qw, block_q2_k *dst, int64_t n_blocks);
void quantize_row_q3_k_weighted(const float *src, const float *qw, block_q3_k *dst, int64_t n_blocks);
void quantize_row_q4_k_weighted(const float *src, const float *qw, block_q4_k *dst, int64_t n_blocks);
void quantize_row_q5_k_weighted(const float *src, const float *qw, block_q5_k *dst, int64_t n_blocks);
void quantize_row_q6_k_weighted(const float *src, const float *qw, block_q6_k *dst, int64_t n_blocks);
void quantize_row_q4_0_weighted(const float *src, const float *qw, block_q4_0 *dst, int64_t n_blocks);
void quantize_row_q4_1_weighted(const float *src, const float *qw, block_q4_1 *dst, int64_t n_blocks);
void quantize_row_q5_0_weighted(const float *src, const float *qw, block_q5_0 *dst, int64_t n_blocks);
void quantize_row_q5_1_weighted(const float *src, const float *qw, block_q5_1 *dst, int64_t n_blocks);
void quantize_row_iq2_xxs(const float *src, const float *qw, block_iq2_xxs *dst, int64_t n_blocks);
void quantize_row_iq2_xs(const float *src, const float *qw, block_iq2_xs *dst, int64_t n_blocks);
void quantize_row_iq2_s(const float *src, const float *qw, block_iq2_s *dst, int64_t n_blocks);
void quantize_row_iq3_xxs(const float *src, const float *qw, block_iq3_xxs *dst, int64_t n_blocks);
void quantize_row_iq3_s(const float *src, const float *qw, block_iq3_s *dst, int64_t n_blocks);
void quantize_row_iq1_s(const float *src, const float *qw, block_iq1_s *dst, int64_t n_blocks);
void quantize_row_iq1_m(const float *src, const float *qw, block_iq1_m *dst, int64_t n_blocks);

void dequantize_row_f16(const uint16_t *src, float *dst, int64_t n);
void quantize_row_f16(const float *src, uint16_t *dst, int64_t n);
void dequantize_row_bf16(const uint16_t *src, float *dst, int64_t n);
void quantize_row_bf16(const float *src, uint16_t *dst, int64_t n);

}  // namespace tandem::quant_detail
