// src/gguf/quant_search.h - private to tandem_gguf: ggml's scale searches behind the quantizers
// that take an importance matrix (make_qx_quants, make_qkx3_quants, make_qp_quants), written as
// plain loops with ggml's float operations in ggml's order, so every choice is bitwise ggml's.
#pragma once

#include <cstdint>

namespace tandem::quant_detail {

constexpr float group_max_eps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group is all zero

// make_qx_quants(n, nmax, x, L, rmse_type = 1, qw): a symmetric scale for x ~ scale * l with
// l in -nmax..nmax-1, maximising (sum w x l)^2 / sum w l^2 over 19 grids; w = qw[i], or x[i]^2
// without qw. Returns the scale; L[n] gets l + nmax.
float make_qx(int n, int nmax, const float *x, int8_t *L, const float *qw);

// make_qkx3_quants(n, nmax, x, weights, L, &the_min, Laux, -0.9, 0.05, 36, false): x ~ scale * l
// + min with min <= 0 and l in 0..nmax, refit by weighted least squares over 37 grids. Returns
// scale; *neg_min = -min; L[n] gets l.
float make_qkx3(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *neg_min);

// make_qp_quants(n, nmax, x, L, qw): a scale for non-negative x ~ scale * l, l in 0..nmax (the
// super-block scales of the K-quants and the first guess of IQ2_XXS), refined by moving single
// quants. Returns the scale; L[n] gets l.
float make_qp(int n, int nmax, const float *x, uint8_t *L, const float *qw);

}  // namespace tandem::quant_detail
