// src/cpu/rope.cpp - NeoX rotary position embedding, angles computed as Hugging Face does.
#include "cpu_ops.h"

#include <cmath>
#include <vector>

namespace tandem::cpu {

void rope_neox(float *x, const int32_t *positions, int64_t n_rows, int64_t n_heads, int64_t d_head, float theta) {
    const int64_t half = d_head / 2;
    // HF: inv_freq = 1 / theta^(2i/d) in float32, angle = float(pos) * inv_freq in float32,
    // cos/sin of that float32 angle. Matching it keeps long-context logits on the reference.
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i)
        inv_freq[i] = 1.0f / static_cast<float>(std::pow(double(theta), double(float(2 * i) / float(d_head))));
    std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
    for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t i = 0; i < half; ++i) {
            const float angle = float(positions[r]) * inv_freq[i];
            cos_v[i] = static_cast<float>(std::cos(double(angle)));
            sin_v[i] = static_cast<float>(std::sin(double(angle)));
        }
        for (int64_t h = 0; h < n_heads; ++h) {
            float *v = x + (r * n_heads + h) * d_head;
            for (int64_t i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half];
                v[i] = a * cos_v[i] - b * sin_v[i];
                v[i + half] = b * cos_v[i] + a * sin_v[i];
            }
        }
    }
}

}  // namespace tandem::cpu
