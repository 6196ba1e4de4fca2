// tandem/quant.h - conversion between float and the block layouts of ggml's tensor types.
// Layouts are bit-identical to ggml's (block_q8_0, block_q4_K, block_q6_K, fp16, bf16).
#pragma once

#include "tandem/types.h"

#include <cstdint>

namespace tandem {

// dst[n] <- src (n elements of `type`, n a multiple of the block size). Throws for types that
// are not computable.
void dequantize_row(ggml_type type, const void *src, float *dst, int64_t n);

// dst (n elements of `type`) <- src[n]. K-quants use an error-minimising search like ggml's
// reference quantizer (no importance matrix).
void quantize_row(ggml_type type, const float *src, void *dst, int64_t n);

// Scalar conversions, bit-exact with ggml (round to nearest even; NaN stays NaN).
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
float bf16_to_fp32(uint16_t h);

}  // namespace tandem
