// src/cpu/route_grouped.cpp - DeepSeek's routing: softmax or sigmoid scores, the selection bias
// (noaux_tc), group-limited top-k, normalised and scaled weights, as llama.cpp's deepseek2 and
// Hugging Face's DeepSeek-V3 router compute them.
#include "cpu_ops.h"

#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::cpu {

namespace {

// scores[e] from one row's logits, in float32 as the reference routers compute them.
void route_scores(const float *logits, int64_t n_expert, bool sigmoid, float *scores) {
    if (sigmoid) {
        for (int64_t e = 0; e < n_expert; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
        return;
    }
    const float max_l = *std::max_element(logits, logits + n_expert);
    float sum = 0.0f;
    for (int64_t e = 0; e < n_expert; ++e) sum += scores[e] = std::exp(logits[e] - max_l);
    for (int64_t e = 0; e < n_expert; ++e) scores[e] /= sum;
}

// Sets to -inf the selections of every expert outside the n_group_used groups whose two best
// selections sum highest (ties: the lower group).
void mask_groups(float *sel, int64_t n_expert, int64_t n_group, int64_t n_group_used, std::vector<float> &group_score,
                 std::vector<int32_t> &order) {
    const int64_t per = n_expert / n_group;
    group_score.resize(size_t(n_group));
    for (int64_t g = 0; g < n_group; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (int64_t e = g * per; e < (g + 1) * per; ++e) {
            if (sel[e] > best) {
                second = best;
                best = sel[e];
            } else if (sel[e] > second) {
                second = sel[e];
            }
        }
        group_score[g] = best + second;
    }
    order.resize(size_t(n_group));
    for (int64_t g = 0; g < n_group; ++g) order[g] = int32_t(g);
    std::partial_sort(order.begin(), order.begin() + n_group_used, order.end(), [&](int32_t a, int32_t b) {
        return group_score[a] > group_score[b] || (group_score[a] == group_score[b] && a < b);
    });
    std::vector<char> keep(size_t(n_group), 0);
    for (int64_t i = 0; i < n_group_used; ++i) keep[order[i]] = 1;
    for (int64_t e = 0; e < n_expert; ++e)
        if (!keep[e / per]) sel[e] = -INFINITY;
}

}  // namespace

void moe_route_grouped(const moe_route_grouped_args &a) {
    TANDEM_ASSERT(a.k >= 1 && a.k <= a.n_expert && a.n_group >= 1 && a.n_expert % a.n_group == 0);
    TANDEM_ASSERT(a.n_group_used >= 1 && a.n_group_used <= a.n_group && a.n_group_used * (a.n_expert / a.n_group) >= a.k);
    std::vector<float> scores(size_t(a.n_expert)), sel(size_t(a.n_expert)), group_score;
    std::vector<int32_t> order(size_t(a.n_expert)), group_order;
    // llama.cpp clamps the sum of the chosen weights to half precision's smallest normal.
    constexpr float min_sum = 6.103515625e-5f;
    for (int64_t r = 0; r < a.n_rows; ++r) {
        route_scores(a.logits + r * a.n_expert, a.n_expert, a.sigmoid, scores.data());
        for (int64_t e = 0; e < a.n_expert; ++e) sel[e] = a.bias ? scores[e] + a.bias[e] : scores[e];
        if (a.n_group > 1) mask_groups(sel.data(), a.n_expert, a.n_group, a.n_group_used, group_score, group_order);
        for (int64_t e = 0; e < a.n_expert; ++e) order[e] = int32_t(e);
        std::partial_sort(order.begin(), order.begin() + a.k, order.end(), [&](int32_t x, int32_t y) {
            return sel[x] > sel[y] || (sel[x] == sel[y] && x < y);
        });
        float sum = 0.0f;
        for (int64_t s = 0; s < a.k; ++s) sum += scores[order[s]];
        const float norm = a.normalise ? 1.0f / std::max(sum, min_sum) : 1.0f;
        for (int64_t s = 0; s < a.k; ++s) {
            a.ids[r * a.k + s] = order[s];
            float w = scores[order[s]];
            if (a.normalise) w *= norm;
            a.weights[r * a.k + s] = w * a.scale;
        }
    }
}

}  // namespace tandem::cpu
