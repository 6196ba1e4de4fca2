// cuda/norm.h - RMSNorm over rows (alone, or with the F32 router of decode rows), the split twin
// of rows no norm produces, and the embedding lookup that starts the forward.
// Owns: y = x / sqrt(mean(x^2) + eps) * w per row with the CPU twin's exact summation order
// (tandem::dot_f32's 32 lanes and butterfly, no FMA), so a row's norm is bitwise the CPU's for
// the same input. Does not own: the per-head QK norm (attention.h), the fused combine (moe.h).
#pragma once

#include "matvec_digits.h"
#include "tandem/types.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

struct rmsnorm_args {
    const float *x = nullptr;  // [n_rows][n]
    const float *w = nullptr;  // [n]
    float *y = nullptr;        // [n_rows][n]; may alias x
    int32_t n_rows = 0, n = 0;
    float eps = 1e-6f;
    // Optional: y also written split for the decode products (x_split.cuh; n a multiple of 32).
    uint4 *y_split = nullptr;  // [n_rows][n] as bf16 hi/lo halves
    float *y_sums = nullptr;   // [n_rows][n / 32]
    // Optional: y also written as int8 digits for the prompt rows' digit products (matvec_digits.h;
    // n a multiple of 256, x and y 16-byte aligned, not with y_split): bitwise digits_quantize of y,
    // without its launch.
    digit_rows y_digits{};
};
void rmsnorm(const rmsnorm_args &args, cudaStream_t stream);
// Whether rmsnorm can write these rows' y_digits (set them only then): n a multiple of 256, x, w
// and y 16-byte aligned, no split output.
bool rmsnorm_digits_applies(const rmsnorm_args &args);

// The FFN RMSNorm of decode rows and the F32 router in one launch: every block of a row computes
// the row's norm (rmsnorm's order, so h is bitwise rmsnorm's and the CPU's), writes its share of
// h (and of its split twin), and warp w the logit of one expert in tandem::dot_f32's order: the
// logits are bitwise the CPU's cpu::matmul of the same h. One launch instead of two (the norm and
// the router's K parts), and the expert choice is the CPU's whenever h is.
struct rmsnorm_router_args {
    const float *x = nullptr;       // [n_rows][n]
    const float *w_norm = nullptr;  // [n]
    const float *router = nullptr;  // [n_expert][n] F32, 16-byte aligned
    float *h = nullptr;             // [n_rows][n]; must not alias x
    uint4 *h_split = nullptr;       // optional: [n_rows][n] split (x_split.cuh)
    float *h_sums = nullptr;        // [n_rows][n / 32], with h_split only
    // Optional: h as int8 digits (matvec_digits.h; n a multiple of 256) for the experts'
    // gate/up; digits.digits null: none written.
    digit_rows h_digits;
    float *logits = nullptr;        // [n_rows][n_expert]
    int32_t n_rows = 0, n = 0, n_expert = 0;
    float eps = 1e-6f;
};
// Whether the fused launch takes this shape (n a multiple of 32 up to 4,096: shared memory within
// 48 KiB).
bool rmsnorm_router_applies(int32_t n, int32_t n_expert);
void rmsnorm_router(const rmsnorm_router_args &args, cudaStream_t stream);

// Rows split for the decode products (x_split.cuh) without a norm: the SwiGLU outputs, read by
// every block of the experts' down product, are split once here instead of by each block.
// Bitwise what the product computes itself from x (tests compare with the host split).
struct split_rows_args {
    const float *x = nullptr;  // [n_rows][stride]
    int32_t n_rows = 0, n = 0;  // n a multiple of 32, at most stride
    int64_t stride = 0;         // a multiple of 32; split rows and sums share it (sums: stride / 32)
    uint4 *split = nullptr;     // [n_rows][stride] as bf16 hi/lo halves
    float *sums = nullptr;      // [n_rows][stride / 32]
};
void split_rows(const split_rows_args &args, cudaStream_t stream);

struct embed_args {
    const void *table = nullptr;     // [n_vocab][row_bytes] of `type`
    ggml_type type = ggml_type::f32;
    const int32_t *tokens = nullptr; // [n_rows], each in 0..n_vocab-1
    float *x = nullptr;              // [n_rows][d_model]
    int32_t n_rows = 0, d_model = 0;
};
// x[r] <- dequantised row tokens[r] of the table (bitwise the CPU's dequantize_row).
void embed(const embed_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
