// src/gguf/quant_q8_0.cpp - Q8_0 rows: dequantize and ggml's reference quantizer.
#include "tandem/error.h"

#include "quant_rows.h"

#include <algorithm>
#include <cmath>

namespace tandem::quant_detail {

// x = q * d with q converted to float first: dequantize_row_q8_0's exact expression.
void dequantize_row_q8_0(const block_q8_0 *__restrict src, float *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d = half_to_float(src[b].d);
        const int8_t *q = src[b].qs;
        float *y = dst + b * 32;
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d;
    }
}

// quantize_row_q8_0_ref: d = amax / 127 (stored as fp16), q = round(x / d) half away from zero,
// computed as x * (1/d) with the unrounded d, as ggml does. The block's largest |x| maps to
// +-127, so dequantize -> quantize reproduces the block.
void quantize_row_q8_0(const float *__restrict src, block_q8_0 *__restrict dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *x = src + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));  // ggml's MAX; inputs are finite
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = float_to_half(d);
        if ((dst[b].d & 0x7fff) == 0x7c00)
            fail(error_kind::invalid_request, "q8_0 block {}: |x| up to {} overflows the fp16 scale", b, amax);
        for (int j = 0; j < 32; ++j) dst[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    }
}

}  // namespace tandem::quant_detail
