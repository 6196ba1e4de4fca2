// src/cpu/matmul.cpp - y = W x with W in its file type: exact (each tile of rows dequantised to float,
// multiplied in fp32) or on digits (the rows quantised once, integer products per tile of outputs).
#include "cpu_ops.h"
#include "digits.h"
#include "workspace.h"

#include "tandem/error.h"
#include "tandem/quant.h"

#include <omp.h>

#include <algorithm>
#include <memory>

namespace tandem::cpu {

cpu_matrix cpu_matrix::slice_rows(int64_t first, int64_t count) const {
    TANDEM_ASSERT(first >= 0 && count >= 0 && first + count <= n_out, "rows {}+{} of {}", first, count, n_out);
    cpu_matrix m = *this;
    m.data = data + size_t(first) * row_bytes;
    m.n_out = count;
    return m;
}

void matmul_tile(const matmul_args &args, int64_t out_begin, int64_t out_end) {
    const cpu_matrix &w = args.w;
    const int64_t n_in = w.n_in;
    const int64_t n_tile = out_end - out_begin;
    TANDEM_ASSERT(n_tile >= 0 && n_tile <= matmul_tile_rows);
    // The dequantised tile lives in a per-thread buffer reused across calls.
    thread_local std::vector<float> tile;
    const float *rows = nullptr;
    if (w.type == ggml_type::f32) {
        rows = reinterpret_cast<const float *>(w.data + size_t(out_begin) * w.row_bytes);
    } else {
        if (tile.size() < size_t(matmul_tile_rows * n_in)) tile.resize(size_t(matmul_tile_rows * n_in));
        dequantize_rows(w.type, w.data + size_t(out_begin) * w.row_bytes, tile.data(), n_tile, n_in);
        rows = tile.data();
    }
    for (int64_t r = 0; r < args.n_rows; ++r) {
        const float *x = args.x[r];
        float *y = args.y[r] + out_begin;
        for (int64_t j = 0; j < n_tile; ++j) y[j] = dot_f32(rows + j * n_in, x, n_in);
    }
}

namespace {

void matmul_exact(const cpu_context &ctx, const matmul_args &args) {
    const int64_t n_tiles = (args.w.n_out + matmul_tile_rows - 1) / matmul_tile_rows;
#pragma omp parallel for schedule(static) num_threads(ctx.n_threads) if (n_tiles > 1)
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t begin = t * matmul_tile_rows;
        matmul_tile(args, begin, std::min(begin + matmul_tile_rows, args.w.n_out));
    }
}

void matmul_digits(const cpu_context &ctx, cpu_workspace &ws, const matmul_args &args) {
    const cpu_matrix &w = args.w;
    ws.x_digits.resize(args.n_rows, w.n_in);
#pragma omp parallel for schedule(static) num_threads(ctx.n_threads) if (args.n_rows > 1)
    for (int64_t r = 0; r < args.n_rows; ++r) digits_quantize_row(args.x[r], ws.x_digits, r);
    digits_product_args a;
    a.w = w;
    a.x = &ws.x_digits;
    a.y = args.y;
    a.n_rows = args.n_rows;
    a.k_split = digits_k_split(false, w.n_in);
    ws.reserve_threads(ctx.n_threads);
    const int64_t n_tiles = (w.n_out + digits_tile_rows - 1) / digits_tile_rows;
#pragma omp parallel for schedule(static) num_threads(ctx.n_threads) if (n_tiles > 1)
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t begin = t * digits_tile_rows;
        digits_product_tile(a, begin, std::min(begin + digits_tile_rows, w.n_out), ws.tiles[size_t(omp_get_thread_num())]);
    }
}

}  // namespace

void matmul(const cpu_context &ctx, const matmul_args &args) {
    if (args.n_rows == 0 || args.w.n_out == 0) return;
    if (ctx.arithmetic == cpu_arithmetic::digits && digits_apply(args.w.type, args.w.n_in)) {
        std::unique_ptr<cpu_workspace> local;
        if (!ctx.ws) local = std::make_unique<cpu_workspace>();
        matmul_digits(ctx, ctx.ws ? *ctx.ws : *local, args);
    } else {
        matmul_exact(ctx, args);
    }
}

void matmul(const cpu_context &ctx, const cpu_matrix &w, const float *x, float *y, int64_t n_rows) {
    std::unique_ptr<cpu_workspace> local;
    if (!ctx.ws) local = std::make_unique<cpu_workspace>();
    cpu_workspace &ws = ctx.ws ? *ctx.ws : *local;
    const float **xs = grow(ws.x_ptrs, size_t(n_rows));
    float **ys = grow(ws.y_ptrs, size_t(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
        xs[r] = x + r * w.n_in;
        ys[r] = y + r * w.n_out;
    }
    cpu_context c = ctx;
    c.ws = &ws;
    matmul(c, matmul_args{w, xs, ys, n_rows});
}

}  // namespace tandem::cpu
