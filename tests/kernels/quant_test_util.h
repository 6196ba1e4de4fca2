// tests/kernels/quant_test_util.h - seeded random weight matrices in a GGUF type, their view as
// the CPU twin's matrix, and a dense product's arguments: what the product-kernel tests share.
#pragma once

#include "gpu_test_util.h"
#include "cuda/matvec.h"
#include "src/cpu/cpu_ops.h"
#include "tandem/quant.h"

#include <cstdint>
#include <random>
#include <vector>

namespace tandem::test {

// n_out rows of n_in random weights quantised to `type`, back to back (with a uniform importance
// for the types ggml quantizes only with one: IQ2_XXS, IQ2_XS, IQ1_S).
inline std::vector<uint8_t> random_matrix(std::mt19937_64 &rng, ggml_type type, int64_t n_in, int64_t n_out, float std) {
    const size_t row_bytes = ggml_row_bytes(type, n_in);
    std::vector<uint8_t> bytes(row_bytes * size_t(n_out));
    const std::vector<float> importance(size_t(n_in), 1.0f);
    const float *imp = ggml_type_needs_importance(type) ? importance.data() : nullptr;
    for (int64_t r = 0; r < n_out; ++r) {
        const std::vector<float> w = random_floats(rng, size_t(n_in), std);
        quantize_rows(type, w.data(), bytes.data() + size_t(r) * row_bytes, 1, n_in, imp);
    }
    return bytes;
}

inline cpu::cpu_matrix host_matrix(const std::vector<uint8_t> &bytes, ggml_type type, int64_t n_in, int64_t n_out) {
    return {bytes.data(), type, n_in, n_out, ggml_row_bytes(type, n_in)};
}

// The arguments of a dense product of n_rows rows: y [n_rows][n_out] = W [n_out][n_in] x [n_rows][n_in],
// rows packed (strides n_in and n_out); the other fields keep their defaults.
inline cuda::matvec_args dense_product_args(const void *w, ggml_type type, int32_t n_in, int32_t n_out, const float *x,
                                            float *y, int32_t n_rows) {
    cuda::matvec_args a;
    a.w = w;
    a.type = type;
    a.n_in = n_in;
    a.n_out = n_out;
    a.x = x;
    a.x_stride = n_in;
    a.y = y;
    a.y_stride = n_out;
    a.n_pairs = n_rows;
    return a;
}

// What moe_route wrote that the grouped products read.
struct route_groups {
    const int32_t *pair_x = nullptr, *pair_y = nullptr, *group_mat = nullptr, *group_off = nullptr, *n_groups = nullptr;
    int32_t max_groups = 1;
};

// The grouped expert FFN of n_rows rows of x [n_rows][d] routed k ways: gate and up (SwiGLU) into
// act [n_rows * k][ff], then down into out [n_rows * k][d], as the engine launches them.
struct grouped_ffn_args {
    cuda::matvec_args gate_up, down;
};
inline grouped_ffn_args grouped_ffn(const void *gate, const void *up, const void *down, ggml_type type, int32_t d, int32_t ff,
                                    const float *x, float *act, float *out, const route_groups &rg, int32_t n_rows, int32_t k) {
    grouped_ffn_args f;
    cuda::matvec_args &g = f.gate_up;
    g.w = gate;
    g.w_up = up;
    g.type = type;
    g.n_in = d;
    g.n_out = ff;
    g.x = x;
    g.x_stride = d;
    g.y = act;
    g.y_stride = ff;
    g.x_rows = rg.pair_x;
    g.y_rows = rg.pair_y;
    g.group_mat = rg.group_mat;
    g.group_off = rg.group_off;
    g.n_groups = rg.n_groups;
    g.max_groups = rg.max_groups;
    g.n_pairs = n_rows * k;          // all groups together
    cuda::matvec_args &dn = f.down;
    dn = g;
    dn.w = down;
    dn.w_up = nullptr;
    dn.n_in = ff;
    dn.n_out = d;
    dn.x = act;
    dn.x_stride = ff;
    dn.y = out;
    dn.y_stride = d;
    dn.x_rows = rg.pair_y;
    return f;
}

// The CPU twin's outputs of the same FFN for `ids` [n_rows][k]: [n_rows * k][d]. A padding pair
// (id < 0) is computed as expert 0; callers ignore it.
inline std::vector<float> cpu_grouped_ffn(const std::vector<uint8_t> &gate, const std::vector<uint8_t> &up,
                                          const std::vector<uint8_t> &down, ggml_type type, int32_t n_expert, int32_t d,
                                          int32_t ff, const std::vector<float> &x, std::vector<int32_t> ids, int32_t k) {
    const int32_t n_rows = int32_t(ids.size()) / k;
    for (auto &e : ids) e = e < 0 ? 0 : e;
    std::vector<float> out(ids.size() * size_t(d));
    cpu::moe_grouped_args ma;
    ma.gate_exps = host_matrix(gate, type, d, int64_t(ff) * n_expert);
    ma.up_exps = host_matrix(up, type, d, int64_t(ff) * n_expert);
    ma.down_exps = host_matrix(down, type, ff, int64_t(d) * n_expert);
    ma.x = x.data();
    ma.ids = ids.data();
    ma.out = out.data();
    ma.n_rows = n_rows;
    ma.k = k;
    ma.n_expert = n_expert;
    ma.d_model = d;
    ma.d_ff = ff;
    cpu::moe_grouped(cpu::cpu_context{4}, ma);
    return out;
}

}  // namespace tandem::test
