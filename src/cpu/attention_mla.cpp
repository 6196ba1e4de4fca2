// src/cpu/attention_mla.cpp - multi-head latent attention of each (row, head) over the row's slot
// cache of latents and roped keys, in the absorbed form: no key or value is decompressed.
#include "cpu_ops.h"

#include "tandem/quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::cpu {

void attention_mla(const cpu_context &ctx, const attention_mla_args &a) {
    const int64_t stride = a.kv_lora + a.d_rope;  // one cached position: latent, then roped key
    const int64_t n_items = a.n_rows * a.n_head;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ctx.n_threads) if (n_items > 1)
    for (int64_t item = 0; item < n_items; ++item) {
        const int64_t r = item / a.n_head;
        const int64_t n_pos = int64_t(a.positions[r]) + 1;
        const float *q_lat = a.q_lat + item * a.kv_lora;
        const float *q_rope = a.q_rope + item * a.d_rope;
        const float *cache = a.cache[r];
        thread_local std::vector<float> scores;
        scores.resize(static_cast<size_t>(n_pos));
        float max_score = -INFINITY;
        for (int64_t p = 0; p < n_pos; ++p) {
            const float *c = cache + p * stride;
            const float s = dot_f32(q_lat, c, a.kv_lora) + dot_f32(q_rope, c + a.kv_lora, a.d_rope);
            scores[p] = s * a.scale;
            max_score = std::max(max_score, scores[p]);
        }
        float sum = 0.0f;
        for (int64_t p = 0; p < n_pos; ++p) sum += scores[p] = std::exp(scores[p] - max_score);
        float *out = a.out_lat + item * a.kv_lora;
        std::fill(out, out + a.kv_lora, 0.0f);
        for (int64_t p = 0; p < n_pos; ++p) {
            const float *c = cache + p * stride;
            const float weight = scores[p];
            for (int64_t i = 0; i < a.kv_lora; ++i) out[i] += weight * c[i];
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < a.kv_lora; ++i) out[i] *= inv;
    }
}

}  // namespace tandem::cpu
