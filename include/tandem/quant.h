// tandem/quant.h - conversion between float and the block layouts of ggml's tensor types, and
// the fixed-order dot product of the CPU engine.
// Layouts are bit-identical to ggml's; the block structs are in quant_blocks.h. Dequantization
// computes each value with the same float operations in the same order as ggml's reference C
// (dequantize_row_*), so results are bitwise equal to it. Computable types: f32, f16, bf16, the
// legacy q4_0, q4_1, q5_0, q5_1, q8_0, the K-quants q2_K..q6_K, iq4_nl, iq4_xs, iq3_xxs, iq3_s,
// iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m and mxfp4.
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

// dst[n_rows] (rows of row_len elements of `type`, ggml_row_bytes(type, row_len) bytes each) <-
// src[n_rows][row_len], as ggml_quantize_chunk does: with the same float operations in the same
// order, so the blocks equal ggml's. importance[row_len] (one weight per column, the same for
// every row, as llama-quantize passes an importance matrix) or nullptr. Without it: ggml's
// reference quantizers for the legacy types, the K-quants and mxfp4 (quantize_row_*_ref), the
// imatrix-free searches of iq4_nl/iq4_xs (ntry 7), iq3_xxs/iq3_s (weights x^2), iq2_s and iq1_m;
// with it: quantize_row_*_impl for the K-quants and legacy types and the weighted searches of the
// IQ types (q8_0, mxfp4, f16, bf16 and f32 ignore it, as ggml does). iq2_xxs, iq2_xs and iq1_s
// exist only with one (unsupported without). f16/bf16 round to nearest even.
// Errors (invalid_request): a non-finite input in a block type or importance value, a block
// whose scale overflows fp16, a negative row count.
void quantize_rows(ggml_type type, const float *src, void *dst, int64_t n_rows, int64_t row_len,
                   const float *importance);
// quantize_rows of one row of n elements without importance.
void quantize_row(ggml_type type, const float *src, void *dst, int64_t n);
bool ggml_type_can_quantize(ggml_type type);      // a quantizer exists (perhaps needing importance)
bool ggml_type_needs_importance(ggml_type type);  // iq2_xxs, iq2_xs, iq1_s
bool ggml_type_uses_importance(ggml_type type);   // the result depends on an importance matrix

// The first of n_blocks blocks of `type` at data whose fp16 scale (d, dmin or m) is inf or NaN,
// or -1 when all are finite (and for types without such fields). A model with one is refused at
// load: its values would be garbage.
int64_t find_nonfinite_scale(ggml_type type, const void *data, int64_t n_blocks);

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
