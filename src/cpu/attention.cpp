// src/cpu/attention.cpp - causal attention for each (row, head) over the row's slot cache.
#include "cpu_ops.h"

#include "tandem/quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::cpu {

void attention(const cpu_context &ctx, const attention_args &a) {
    const int64_t group = a.n_head / a.n_head_kv;  // query heads sharing one KV head (GQA)
    const int64_t kv_stride = a.n_head_kv * a.d_head;
    const int64_t n_items = a.n_rows * a.n_head;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ctx.n_threads) if (n_items > 1)
    for (int64_t item = 0; item < n_items; ++item) {
        const int64_t r = item / a.n_head, h = item % a.n_head;
        const int64_t kvh = h / group;
        const int64_t n_pos = int64_t(a.positions[r]) + 1;
        const float *q = a.q + item * a.d_head;
        thread_local std::vector<float> scores;
        scores.resize(static_cast<size_t>(n_pos));
        float max_score = -INFINITY;
        for (int64_t p = 0; p < n_pos; ++p) {
            scores[p] = dot_f32(q, a.k[r] + p * kv_stride + kvh * a.d_head, a.d_head) * a.scale;
            max_score = std::max(max_score, scores[p]);
        }
        float sum = 0.0f;
        for (int64_t p = 0; p < n_pos; ++p) sum += scores[p] = std::exp(scores[p] - max_score);
        float *out = a.out + item * a.d_head;
        std::fill(out, out + a.d_head, 0.0f);
        for (int64_t p = 0; p < n_pos; ++p) {
            const float *v = a.v[r] + p * kv_stride + kvh * a.d_head;
            const float weight = scores[p];
            for (int64_t i = 0; i < a.d_head; ++i) out[i] += weight * v[i];
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < a.d_head; ++i) out[i] *= inv;
    }
}

}  // namespace tandem::cpu
