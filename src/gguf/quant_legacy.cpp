// src/gguf/quant_legacy.cpp - Q4_0, Q4_1, Q5_0, Q5_1 rows: dequantize and ggml's reference
// quantizers (quantize_row_q{4,5}_{0,1}_ref), block for block the same bytes.
#include "quant_rows.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace tandem::quant_detail {
namespace {

constexpr int qk = 32;

// Element j (< 16) of a legacy block sits in the low nibble of qs[j], element j + 16 in its high
// nibble; Q5's fifth bits are bit j of the little-endian u32 qh.
uint32_t load_qh(const uint8_t *qh) {
    uint32_t v;
    std::memcpy(&v, qh, 4);
    return v;
}

// The largest |x| of a block and the signed value that has it (the first one on ties).
void signed_absmax(const float *x, float &amax, float &max) {
    amax = 0.0f;
    max = 0.0f;
    for (int j = 0; j < qk; ++j)
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
}

void min_max(const float *x, float &min, float &max) {
    min = FLT_MAX;
    max = -FLT_MAX;
    for (int j = 0; j < qk; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
}

}  // namespace

void dequantize_row_q4_0(const block_q4_0 *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d);
        float *y = dst + b * qk;
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>((src[b].qs[j] & 0xF) - 8) * d;
            y[j + 16] = static_cast<float>((src[b].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_row_q4_1(const block_q4_1 *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d), m = half_to_float(src[b].m);
        float *y = dst + b * qk;
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>(src[b].qs[j] & 0xF) * d + m;
            y[j + 16] = static_cast<float>(src[b].qs[j] >> 4) * d + m;
        }
    }
}

void dequantize_row_q5_0(const block_q5_0 *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d);
        const uint32_t qh = load_qh(src[b].qh);
        float *y = dst + b * qk;
        for (int j = 0; j < 16; ++j) {
            const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = static_cast<float>(((src[b].qs[j] & 0xF) | h0) - 16) * d;
            y[j + 16] = static_cast<float>(((src[b].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void dequantize_row_q5_1(const block_q5_1 *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d), m = half_to_float(src[b].m);
        const uint32_t qh = load_qh(src[b].qh);
        float *y = dst + b * qk;
        for (int j = 0; j < 16; ++j) {
            const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = static_cast<float>((src[b].qs[j] & 0xF) | h0) * d + m;
            y[j + 16] = static_cast<float>((src[b].qs[j] >> 4) | h1) * d + m;
        }
    }
}

// quantize_row_q4_0_ref: d = -max / 8 (the value of largest magnitude maps to -8), q = x / d
// rounded by truncating x / d + 8.5, capped at 15.
void quantize_row_q4_0(const float *src, block_q4_0 *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *x = src + b * qk;
        float amax, max;
        signed_absmax(x, amax, max);
        const float d = max / -8;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        dst[b].d = checked_half(d, "q4_0", b);
        for (int j = 0; j < 16; ++j) {
            const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
            const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
            dst[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

// quantize_row_q4_1_ref: d = (max - min) / 15, m = min, q = trunc((x - min) / d + 0.5) capped at 15.
void quantize_row_q4_1(const float *src, block_q4_1 *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *x = src + b * qk;
        float min, max;
        min_max(x, min, max);
        const float d = (max - min) / 15;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        dst[b].d = checked_half(d, "q4_1", b);
        dst[b].m = checked_half(min, "q4_1", b);
        for (int j = 0; j < 16; ++j) {
            const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
            const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
            dst[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

// quantize_row_q5_0_ref: d = -max / 16, q = trunc(x / d + 16.5) capped at 31.
void quantize_row_q5_0(const float *src, block_q5_0 *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *x = src + b * qk;
        float amax, max;
        signed_absmax(x, amax, max);
        const float d = max / -16;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        dst[b].d = checked_half(d, "q5_0", b);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
            const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
            dst[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
            qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
        }
        std::memcpy(dst[b].qh, &qh, 4);
    }
}

// quantize_row_q5_1_ref: d = (max - min) / 31, q = trunc((x - min) / d + 0.5) (at most 31 by
// construction, so ggml does not cap it).
void quantize_row_q5_1(const float *src, block_q5_1 *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *x = src + b * qk;
        float min, max;
        min_max(x, min, max);
        const float d = (max - min) / 31;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        dst[b].d = checked_half(d, "q5_1", b);
        dst[b].m = checked_half(min, "q5_1", b);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            const int q0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
            const int q1 = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
            dst[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
            qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
        }
        std::memcpy(dst[b].qh, &qh, 4);
    }
}

}  // namespace tandem::quant_detail
