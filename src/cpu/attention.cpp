// src/cpu/attention.cpp - causal attention for each (row, head) over the row's slot cache.
#include "cpu_ops.h"

#include "tandem/quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::cpu {

namespace {

// out[i] <- element e0 + i of a q8_0 cache (elements counted across its rows), i < n, block by
// block: float(q) * float(d) as dequantize_row_q8_0.
void q8_0_load(const block_q8_0 *cache, int64_t e0, int64_t n, float *out) {
    for (int64_t i = 0; i < n;) {
        const block_q8_0 &b = cache[(e0 + i) / 32];
        const float d = fp16_to_fp32(b.d);
        const int64_t j0 = (e0 + i) % 32, m = std::min<int64_t>(32 - j0, n - i);
        for (int64_t j = 0; j < m; ++j) out[i + j] = static_cast<float>(b.qs[j0 + j]) * d;
        i += m;
    }
}

}  // namespace

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
        thread_local std::vector<float> scores, loaded;
        scores.resize(static_cast<size_t>(n_pos));
        loaded.resize(static_cast<size_t>(a.d_head));
        // Position p's key or value of this head: in place, or dequantized into `loaded`.
        auto row = [&](const float *const *f32, const block_q8_0 *const *q8, int64_t p) -> const float * {
            if (!q8) return f32[r] + p * kv_stride + kvh * a.d_head;
            q8_0_load(q8[r], p * kv_stride + kvh * a.d_head, a.d_head, loaded.data());
            return loaded.data();
        };
        float max_score = -INFINITY;
        for (int64_t p = 0; p < n_pos; ++p) {
            scores[p] = dot_f32(q, row(a.k, a.k_q8, p), a.d_head) * a.scale;
            max_score = std::max(max_score, scores[p]);
        }
        float sum = 0.0f;
        for (int64_t p = 0; p < n_pos; ++p) sum += scores[p] = std::exp(scores[p] - max_score);
        float *out = a.out + item * a.d_head;
        std::fill(out, out + a.d_head, 0.0f);
        for (int64_t p = 0; p < n_pos; ++p) {
            const float *v = row(a.v, a.v_q8, p);
            const float weight = scores[p];
            for (int64_t i = 0; i < a.d_head; ++i) out[i] += weight * v[i];
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < a.d_head; ++i) out[i] *= inv;
    }
}

}  // namespace tandem::cpu
