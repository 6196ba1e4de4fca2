// src/cpu/moe.cpp - MoE routing (softmax, top-k, renormalise), the grouped expert FFN that reads
// each selected expert once for every (row, slot) pair routed to it, and the slot-order combine.
#include "cpu_ops.h"

#include "tandem/error.h"

#include <algorithm>
#include <cmath>
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

void moe_grouped(const cpu_context &ctx, const moe_grouped_args &a) {
    const int64_t n_pairs = a.n_rows * a.k;

    // Group the (row, slot) pairs by expert: pairs_of[e] lists pair indices r*k+s.
    std::vector<std::vector<int32_t>> pairs_of(static_cast<size_t>(a.n_expert));
    for (int64_t p = 0; p < n_pairs; ++p) {
        const int32_t e = a.ids[p];
        TANDEM_ASSERT(e >= 0 && e < a.n_expert, "expert id {} out of range", e);
        if (!a.owned || a.owned[e]) pairs_of[e].push_back(int32_t(p));
    }
    std::vector<int32_t> active;
    for (int32_t e = 0; e < a.n_expert; ++e)
        if (!pairs_of[e].empty()) active.push_back(e);

    // Per pair: its input row and its activation buffer [d_ff].
    std::vector<float> gate(static_cast<size_t>(n_pairs * a.d_ff)), up(static_cast<size_t>(n_pairs * a.d_ff));
    struct work { int32_t expert; int64_t begin, end; };
    auto make_work = [&](int64_t n_out) {
        std::vector<work> items;
        for (int32_t e : active)
            for (int64_t t = 0; t < n_out; t += matmul_tile_rows)
                items.push_back({e, t, std::min(t + matmul_tile_rows, n_out)});
        return items;
    };

    // Phase 1: gate and up projections for every pair, one expert's tile of rows at a time.
    const std::vector<work> items1 = make_work(a.d_ff);
#pragma omp parallel for schedule(dynamic, 1) num_threads(ctx.n_threads)
    for (size_t i = 0; i < items1.size(); ++i) {
        const work &w = items1[i];
        const int32_t e = w.expert;
        const auto &pairs = pairs_of[w.expert];
        std::vector<const float *> xs(pairs.size());
        std::vector<float *> gs(pairs.size()), us(pairs.size());
        for (size_t j = 0; j < pairs.size(); ++j) {
            xs[j] = a.x + (pairs[j] / a.k) * a.d_model;
            gs[j] = gate.data() + pairs[j] * a.d_ff;
            us[j] = up.data() + pairs[j] * a.d_ff;
        }
        const int64_t n = int64_t(pairs.size());
        matmul_tile({a.gate_exps.slice_rows(int64_t(e) * a.d_ff, a.d_ff), xs.data(), gs.data(), n}, w.begin, w.end);
        matmul_tile({a.up_exps.slice_rows(int64_t(e) * a.d_ff, a.d_ff), xs.data(), us.data(), n}, w.begin, w.end);
        for (size_t j = 0; j < pairs.size(); ++j)
            for (int64_t f = w.begin; f < w.end; ++f) {
                const float g = gs[j][f];
                gs[j][f] = g / (1.0f + std::exp(-g)) * us[j][f];  // SwiGLU: silu(gate) * up
            }
    }

    // Phase 2: down projection of each pair's activation into its slot output.
    const std::vector<work> items2 = make_work(a.d_model);
#pragma omp parallel for schedule(dynamic, 1) num_threads(ctx.n_threads)
    for (size_t i = 0; i < items2.size(); ++i) {
        const work &w = items2[i];
        const int32_t e = w.expert;
        const auto &pairs = pairs_of[w.expert];
        std::vector<const float *> xs(pairs.size());
        std::vector<float *> ys(pairs.size());
        for (size_t j = 0; j < pairs.size(); ++j) {
            xs[j] = gate.data() + pairs[j] * a.d_ff;
            ys[j] = a.out + pairs[j] * a.d_model;
        }
        matmul_tile({a.down_exps.slice_rows(int64_t(e) * a.d_model, a.d_model), xs.data(), ys.data(),
                     int64_t(pairs.size())},
                    w.begin, w.end);
    }
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
