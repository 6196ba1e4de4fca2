// src/cpu/ffn_dense.cpp - the SwiGLU FFN every row takes (DeepSeek's shared experts and its dense
// leading layers), and the combine that adds it after the routed experts.
#include "cpu_ops.h"

#include "tandem/error.h"
#include "tandem/swiglu.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::cpu {

void ffn_swiglu(const cpu_context &ctx, const ffn_swiglu_args &a) {
    const int64_t d_ff = a.gate.n_out, d_model = a.gate.n_in;
    TANDEM_ASSERT(a.up.n_out == d_ff && a.up.n_in == d_model && a.down.n_in == d_ff && a.down.n_out == d_model);
    std::vector<float> gate(size_t(a.n_rows * d_ff)), up(size_t(a.n_rows * d_ff));
    matmul(ctx, a.gate, a.x, gate.data(), a.n_rows);
    matmul(ctx, a.up, a.x, up.data(), a.n_rows);
    for (size_t i = 0; i < gate.size(); ++i) {
        const float g = gate[i];
        gate[i] = ::tandem::swiglu(g, up[i]);  // as the grouped experts compute it
    }
    matmul(ctx, a.down, gate.data(), a.out, a.n_rows);
}

void moe_combine_dense(float *x, const float *out, const float *weights, const float *dense, int64_t n_rows,
                       int64_t k, int64_t d_model) {
    std::vector<float> acc(static_cast<size_t>(d_model));
    for (int64_t r = 0; r < n_rows; ++r) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t s = 0; s < k; ++s) {  // fixed slot order: the same sum on any placement
            const float w = weights[r * k + s];
            const float *o = out + (r * k + s) * d_model;
            for (int64_t i = 0; i < d_model; ++i) acc[i] += w * o[i];
        }
        const float *dr = dense + r * d_model;
        float *xr = x + r * d_model;
        for (int64_t i = 0; i < d_model; ++i) xr[i] += acc[i] + dr[i];
    }
}

}  // namespace tandem::cpu
