// src/cpu/moe.cpp - MoE routing (softmax, top-k, renormalise), the grouped expert FFN that reads
// each selected expert once for every (row, slot) pair routed to it, and the slot-order combine.
#include "cpu_ops.h"
#include "digits.h"
#include "workspace.h"

#include "tandem/error.h"
#include "tandem/swiglu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

namespace tandem::cpu {

void moe_route(const float *logits, int64_t n_rows, int64_t n_expert, int64_t k, bool renormalise, int32_t *ids,
               float *weights) {
    TANDEM_ASSERT(k >= 1 && k <= n_expert);
    std::vector<float> probs(static_cast<size_t>(n_expert));
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    for (int64_t r = 0; r < n_rows; ++r) {
        const float *l = logits + r * n_expert;
        // Softmax in float32, as Hugging Face's Qwen3-MoE router does (dtype=torch.float).
        const float max_l = *std::max_element(l, l + n_expert);
        float sum = 0.0f;
        for (int64_t e = 0; e < n_expert; ++e) sum += probs[e] = std::exp(l[e] - max_l);
        for (int64_t e = 0; e < n_expert; ++e) probs[e] /= sum;
        for (int64_t e = 0; e < n_expert; ++e) order[e] = int32_t(e);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
        });
        float top_sum = 0.0f;
        for (int64_t s = 0; s < k; ++s) top_sum += probs[order[s]];
        for (int64_t s = 0; s < k; ++s) {
            ids[r * k + s] = order[s];
            weights[r * k + s] = renormalise ? probs[order[s]] / top_sum : probs[order[s]];
        }
    }
}

int64_t moe_count_experts(const int32_t *ids, int64_t n_pairs, int64_t n_expert, const uint8_t *owned) {
    std::vector<char> seen(size_t(n_expert), 0);
    int64_t count = 0;
    for (int64_t p = 0; p < n_pairs; ++p) {
        const int32_t e = ids[p];
        if (e >= 0 && e < n_expert && (!owned || owned[e]) && !seen[e]) {
            seen[e] = 1;
            ++count;
        }
    }
    return count;
}

namespace {

// The call's pairs grouped by expert: ws.pairs[expert_off[e] .. expert_off[e + 1]) are the pair
// indices r * k + s routed to owned expert e, ascending.
void group_pairs(const moe_grouped_args &a, cpu_workspace &ws) {
    const int64_t n_pairs = a.n_rows * a.k;
    int32_t *off = grow(ws.expert_off, size_t(a.n_expert + 1));
    std::fill(off, off + a.n_expert + 1, 0);
    for (int64_t p = 0; p < n_pairs; ++p) {
        const int32_t e = a.ids[p];
        TANDEM_ASSERT(e >= 0 && e < a.n_expert, "expert id {} out of range", e);
        if (!a.owned || a.owned[e]) ++off[e + 1];
    }
    for (int64_t e = 0; e < a.n_expert; ++e) off[e + 1] += off[e];
    int32_t *pairs = grow(ws.pairs, size_t(n_pairs));
    int32_t *fill = grow(ws.rows, size_t(a.n_expert));
    std::copy(off, off + a.n_expert, fill);
    for (int64_t p = 0; p < n_pairs; ++p) {
        const int32_t e = a.ids[p];
        if (!a.owned || a.owned[e]) pairs[fill[e]++] = int32_t(p);
    }
}

// The (expert, tile) work items of products with n_out outputs in tiles of tile_rows: item =
// expert * n_tiles + tile; returns n_tiles.
int64_t make_items(const moe_grouped_args &a, cpu_workspace &ws, int64_t n_out, int64_t tile_rows) {
    const int64_t n_tiles = (n_out + tile_rows - 1) / tile_rows;
    ws.items.clear();
    for (int64_t e = 0; e < a.n_expert; ++e)
        if (ws.expert_off[size_t(e + 1)] > ws.expert_off[size_t(e)])
            for (int64_t t = 0; t < n_tiles; ++t) ws.items.push_back(e * n_tiles + t);
    return n_tiles;
}

// Exact: fp32 products of dequantised tiles (matmul_tile), pointer arrays in pair order.
void experts_exact(const cpu_context &ctx, const moe_grouped_args &a, cpu_workspace &ws) {
    const int64_t n_pairs = a.n_rows * a.k;
    const int32_t *pairs = ws.pairs.data(), *off = ws.expert_off.data();
    float *gate = grow(ws.gate, size_t(n_pairs * a.d_ff)), *act = grow(ws.act, size_t(n_pairs * a.d_ff));
    const float **xs = grow(ws.x_ptrs, size_t(n_pairs));
    float **gs = grow(ws.y_ptrs, size_t(n_pairs)), **us = grow(ws.y2_ptrs, size_t(n_pairs));
    for (int64_t i = 0; i < off[a.n_expert]; ++i) {
        xs[i] = a.x + (pairs[i] / a.k) * a.d_model;
        gs[i] = gate + pairs[i] * a.d_ff;
        us[i] = act + pairs[i] * a.d_ff;
    }
    int64_t n_tiles = make_items(a, ws, a.d_ff, matmul_tile_rows);
    const int64_t n1 = int64_t(ws.items.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(ctx.n_threads)
    for (int64_t i = 0; i < n1; ++i) {
        const int64_t e = ws.items[size_t(i)] / n_tiles, begin = (ws.items[size_t(i)] % n_tiles) * matmul_tile_rows;
        const int64_t end = std::min(begin + matmul_tile_rows, a.d_ff), p0 = off[e], n = off[e + 1] - p0;
        matmul_tile({a.gate_exps.slice_rows(e * a.d_ff, a.d_ff), xs + p0, gs + p0, n}, begin, end);
        matmul_tile({a.up_exps.slice_rows(e * a.d_ff, a.d_ff), xs + p0, us + p0, n}, begin, end);
        for (int64_t j = p0; j < p0 + n; ++j)
            for (int64_t f = begin; f < end; ++f) us[j][f] = ::tandem::swiglu(gs[j][f], us[j][f]);
    }
    // Down: each pair's activation (in us) into its slot output.
    for (int64_t i = 0; i < off[a.n_expert]; ++i) {
        xs[i] = us[i];
        gs[i] = a.out + pairs[i] * a.d_model;
    }
    n_tiles = make_items(a, ws, a.d_model, matmul_tile_rows);
    const int64_t n2 = int64_t(ws.items.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(ctx.n_threads)
    for (int64_t i = 0; i < n2; ++i) {
        const int64_t e = ws.items[size_t(i)] / n_tiles, begin = (ws.items[size_t(i)] % n_tiles) * matmul_tile_rows;
        const int64_t p0 = off[e], n = off[e + 1] - p0;
        matmul_tile({a.down_exps.slice_rows(e * a.d_model, a.d_model), xs + p0, gs + p0, n}, begin,
                    std::min(begin + matmul_tile_rows, a.d_model));
    }
}

// Digits: the rows quantised once, gate and up of a tile for all of the expert's pairs, SwiGLU,
// the activations quantised (a pair a row), then down. A thread takes four consecutive tiles of an
// expert at a time, so each tile's prefetch of the next one serves the same thread.
void experts_digits(const cpu_context &ctx, const moe_grouped_args &a, cpu_workspace &ws) {
    const int64_t n_pairs = a.n_rows * a.k;
    const int32_t *pairs = ws.pairs.data(), *off = ws.expert_off.data();
    const int64_t n_grouped = off[a.n_expert];
    ws.x_digits.resize(a.n_rows, a.d_model);
#pragma omp parallel for schedule(static) num_threads(ctx.n_threads) if (a.n_rows > 1)
    for (int64_t r = 0; r < a.n_rows; ++r) digits_quantize_row(a.x + r * a.d_model, ws.x_digits, r);
    float *gate = grow(ws.gate, size_t(n_pairs * a.d_ff)), *act = grow(ws.act, size_t(n_pairs * a.d_ff));
    int32_t *x_rows = grow(ws.rows, size_t(n_grouped));
    float **gs = grow(ws.y_ptrs, size_t(n_grouped)), **us = grow(ws.y2_ptrs, size_t(n_grouped));
    for (int64_t i = 0; i < n_grouped; ++i) {
        x_rows[i] = int32_t(pairs[i] / a.k);
        gs[i] = gate + pairs[i] * a.d_ff;
        us[i] = act + pairs[i] * a.d_ff;
    }
    ws.reserve_threads(ctx.n_threads);
    int64_t n_tiles = make_items(a, ws, a.d_ff, digits_tile_rows);
    const int64_t n1 = int64_t(ws.items.size());
#pragma omp parallel for schedule(dynamic, 4) num_threads(ctx.n_threads)
    for (int64_t i = 0; i < n1; ++i) {
        const int64_t e = ws.items[size_t(i)] / n_tiles, begin = (ws.items[size_t(i)] % n_tiles) * digits_tile_rows;
        const int64_t end = std::min(begin + digits_tile_rows, a.d_ff), p0 = off[e], n = off[e + 1] - p0;
        digits_scratch &scratch = ws.tiles[size_t(omp_get_thread_num())];
        digits_product_args pa;
        pa.x = &ws.x_digits;
        pa.x_rows = x_rows + p0;
        pa.n_rows = n;
        pa.k_split = digits_k_split(true, a.d_model);
        pa.w = a.gate_exps.slice_rows(e * a.d_ff, a.d_ff);
        pa.y = gs + p0;
        digits_product_tile(pa, begin, end, scratch);
        pa.w = a.up_exps.slice_rows(e * a.d_ff, a.d_ff);
        pa.y = us + p0;
        digits_product_tile(pa, begin, end, scratch);
        for (int64_t j = p0; j < p0 + n; ++j)
            for (int64_t f = begin; f < end; ++f) us[j][f] = ::tandem::swiglu(gs[j][f], us[j][f]);
    }
    // Down: pair i of the grouped order reads activation row i (quantised in that order).
    ws.act_digits.resize(n_grouped, a.d_ff);
#pragma omp parallel for schedule(static) num_threads(ctx.n_threads)
    for (int64_t i = 0; i < n_grouped; ++i) digits_quantize_row(us[i], ws.act_digits, i);
    for (int64_t i = 0; i < n_grouped; ++i) {
        x_rows[i] = int32_t(i);
        gs[i] = a.out + pairs[i] * a.d_model;
    }
    n_tiles = make_items(a, ws, a.d_model, digits_tile_rows);
    const int64_t n2 = int64_t(ws.items.size());
#pragma omp parallel for schedule(dynamic, 4) num_threads(ctx.n_threads)
    for (int64_t i = 0; i < n2; ++i) {
        const int64_t e = ws.items[size_t(i)] / n_tiles, begin = (ws.items[size_t(i)] % n_tiles) * digits_tile_rows;
        const int64_t p0 = off[e];
        digits_product_args pa;
        pa.w = a.down_exps.slice_rows(e * a.d_model, a.d_model);
        pa.x = &ws.act_digits;
        pa.x_rows = x_rows + p0;
        pa.y = gs + p0;
        pa.n_rows = off[e + 1] - p0;
        pa.k_split = digits_k_split(false, a.d_ff);
        digits_product_tile(pa, begin, std::min(begin + digits_tile_rows, a.d_model), ws.tiles[size_t(omp_get_thread_num())]);
    }
}

}  // namespace

void moe_grouped(const cpu_context &ctx, const moe_grouped_args &a) {
    std::unique_ptr<cpu_workspace> local;
    if (!ctx.ws) local = std::make_unique<cpu_workspace>();
    cpu_workspace &ws = ctx.ws ? *ctx.ws : *local;
    group_pairs(a, ws);
    const bool digits = ctx.arithmetic == cpu_arithmetic::digits && digits_apply(a.gate_exps.type, a.d_model) &&
                        digits_apply(a.up_exps.type, a.d_model) && digits_apply(a.down_exps.type, a.d_ff);
    if (digits)
        experts_digits(ctx, a, ws);
    else
        experts_exact(ctx, a, ws);
}

void moe_combine(float *x, const float *out, const float *weights, int64_t n_rows, int64_t k, int64_t d_model) {
    std::vector<float> acc(static_cast<size_t>(d_model));
    for (int64_t r = 0; r < n_rows; ++r) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t s = 0; s < k; ++s) {  // fixed slot order: the same sum on any placement
            const float w = weights[r * k + s];
            const float *o = out + (r * k + s) * d_model;
            for (int64_t i = 0; i < d_model; ++i) acc[i] += w * o[i];
        }
        float *xr = x + r * d_model;
        for (int64_t i = 0; i < d_model; ++i) xr[i] += acc[i];
    }
}

}  // namespace tandem::cpu
