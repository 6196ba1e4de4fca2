// src/cpu/norm.cpp - RMSNorm over rows (model norms and the per-head QK norms).
#include "cpu_ops.h"

#include "tandem/quant.h"

#include <cmath>

namespace tandem::cpu {

void rmsnorm(const float *x, const float *w, float *y, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const float mean_sq = dot_f32(xr, xr, n) / float(n);
        const float inv = 1.0f / std::sqrt(mean_sq + eps);
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * inv) * w[i];
    }
}

}  // namespace tandem::cpu
