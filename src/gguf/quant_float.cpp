// src/gguf/quant_float.cpp - f16 and bf16: scalar conversions (quant.h) and their row loops.
#include "tandem/quant.h"

#include "quant_rows.h"

namespace tandem {

uint16_t fp32_to_fp16(float f) { return quant_detail::float_to_half(f); }
float fp16_to_fp32(uint16_t h) { return quant_detail::half_to_float(h); }
uint16_t fp32_to_bf16(float f) { return quant_detail::float_to_bf16(f); }
float bf16_to_fp32(uint16_t h) { return quant_detail::bf16_bits_to_float(h); }

namespace quant_detail {

// Element loops over the inline, branch-free conversions, in chunks of a fixed 64 so g++'s -O2
// cost model (which will not add a remainder loop itself) vectorizes them; then the tail.
template <class From, class To, class Convert>
void convert_row(const From *__restrict src, To *__restrict dst, int64_t n, Convert convert) {
    constexpr int chunk = 64;
    int64_t i = 0;
    for (; i + chunk <= n; i += chunk)
        for (int j = 0; j < chunk; ++j) dst[i + j] = convert(src[i + j]);
    for (; i < n; ++i) dst[i] = convert(src[i]);
}

void dequantize_row_f16(const uint16_t *src, float *dst, int64_t n) { convert_row(src, dst, n, half_to_float); }
void quantize_row_f16(const float *src, uint16_t *dst, int64_t n) { convert_row(src, dst, n, float_to_half); }
void dequantize_row_bf16(const uint16_t *src, float *dst, int64_t n) { convert_row(src, dst, n, bf16_bits_to_float); }
void quantize_row_bf16(const float *src, uint16_t *dst, int64_t n) { convert_row(src, dst, n, float_to_bf16); }

}  // namespace quant_detail
}  // namespace tandem
