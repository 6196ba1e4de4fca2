// src/gguf/quant_mxfp4.cpp - MXFP4 rows (OCP microscaling FP4, gpt-oss): dequantize and ggml's
// reference quantizer (quantize_row_mxfp4_ref), block for block the same bytes.
#include "quant_rows.h"

#include <bit>
#include <cmath>

namespace tandem::quant_detail {
namespace {

// kvalues_mxfp4: the E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 (and their negatives, sign bit 3),
// doubled so they are integers; the block scale is halved to match.
constexpr int8_t e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// E8M0 exponent e -> 2^(e - 127) / 2 (ggml_e8m0_to_fp32_half): exact, subnormal for e < 2.
float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    return std::bit_cast<float>(bits);
}

// best_index_mxfp4: the first code with the smallest |value * d - x|.
int best_code(float x, float d) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(e2m1_doubled[0]) * d - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(static_cast<float>(e2m1_doubled[i]) * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

}  // namespace

void dequantize_row_mxfp4(const block_mxfp4 *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = e8m0_half(src[b].e);
        float *y = dst + b * 32;
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>(e2m1_doubled[src[b].qs[j] & 0xF]) * d;
            y[j + 16] = static_cast<float>(e2m1_doubled[src[b].qs[j] >> 4]) * d;
        }
    }
}

// e = floor(log2(amax)) - 2 + 127, so amax lands in the top binade of the doubled values (4..8
// times the halved scale). ggml converts that float to uint8_t directly; for amax below 2^-125
// the value is negative, and x86-64 code (a 32-bit truncation, then the low byte) gives
// e = value mod 256, reproduced here without undefined behaviour.
void quantize_row_mxfp4(const float *src, block_mxfp4 *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *x = src + b * 32;
        float amax = 0;
        for (int j = 0; j < 32; ++j)
            if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
        const float biased = std::floor(std::log2(amax)) - 2 + 127;
        const uint8_t e = amax > 0 ? static_cast<uint8_t>(static_cast<int32_t>(biased)) : 0;
        const float d = e8m0_half(e);
        dst[b].e = e;
        for (int j = 0; j < 16; ++j)
            dst[b].qs[j] = static_cast<uint8_t>(best_code(x[j], d) | (best_code(x[j + 16], d) << 4));
    }
}

}  // namespace tandem::quant_detail
