// tandem/quant.h - conversion between float and the block layouts of ggml's tensor types, and
// the fixed-order dot product of the CPU engine.
// Layouts are bit-identical to ggml's (block_q8_0, block_q4_K, block_q6_K, fp16, bf16); the block
// structs are in quant_blocks.h. Dequantization computes each value with the same float
// operations in the same order as ggml's reference C (dequantize_row_*), so results are bitwise
// equal to it. Computable types: f32, f16, bf16, q8_0, q4_k, q6_k.
//
// Errors: a type that is not computable throws error(unsupported) naming it; n < 0 or n not a
// multiple of the type's block size throws error(invalid_request). quantize_row also throws
// invalid_request for a non-finite input in a block type, or a block whose scale overflows fp16.
#pragma once

#include "tandem/types.h"

#include <cstdint>

namespace tandem {

// dst[n] <- src (n elements of `type`, n a multiple of the block size).
void dequantize_row(ggml_type type, const void *src, float *dst, int64_t n);

// dst[n_rows][row_len] <- src (n_rows rows of row_len elements of `type`, back to back, each
// ggml_row_bytes(type, row_len) bytes).
void dequantize_rows(ggml_type type, const void *src, float *dst, int64_t n_rows, int64_t row_len);

// dst (n elements of `type`) <- src[n]. K-quants use ggml's reference quantizers (no importance
// matrix): make_qkx2_quants' scale/min search for Q4_K, make_qx_quants for Q6_K, with the same
// float operations in the same order, so blocks equal quantize_row_*_ref's. Q8_0: d = amax/127,
// q = round(x/d) half away from zero. f16/bf16 round to nearest even; no error for them.
void quantize_row(ggml_type type, const float *src, void *dst, int64_t n);

// sum_i a[i] * b[i] over n floats in a summation order that depends only on n: element i is
// added to lane i % 32 (in increasing i, each lane starting at +0), then lanes are combined as
// a butterfly: for w = 16, 8, 4, 2, 1: lane[j] += lane[j + w] for j < w; the result is lane[0].
// A CUDA warp with lane j striding over i = j, j + 32, ... and xor-shuffles by 16, 8, 4, 2, 1
// (no FMA) reproduces it bitwise. Reproducible and batch-invariant by construction.
float dot_f32(const float *a, const float *b, int64_t n);  // a[n], b[n]

// Scalar conversions, bit-exact with ggml on x86-64 (ggml uses F16C there):
// fp32_to_fp16 rounds to nearest even, overflows to inf, keeps subnormals, and turns a NaN into
// a quiet NaN with the sign and top payload bits kept; fp16_to_fp32 is exact.
// fp32_to_bf16 is ggml_compute_fp32_to_bf16: round to nearest even, NaN quieted (bit 6 set).
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
float bf16_to_fp32(uint16_t h);

}  // namespace tandem
