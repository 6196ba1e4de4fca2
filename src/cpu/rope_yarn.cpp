// src/cpu/rope_yarn.cpp - rotary embedding of adjacent pairs (DeepSeek's and llama.cpp's deepseek2
// layout) with YaRN's blend of interpolated and extrapolated frequencies, computed as Hugging Face does.
#include "cpu_ops.h"

#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tandem::cpu {

namespace {

// YaRN: the (fractional) pair index whose wavelength turns `rotations` times over n_ctx positions.
double correction_dim(double rotations, double dim, double base, double n_ctx) {
    return dim * std::log(n_ctx / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

std::vector<float> rope_inv_freq(float theta, int64_t d_rope, float yarn_factor, int64_t yarn_n_ctx_orig,
                                 float beta_fast, float beta_slow) {
    TANDEM_ASSERT(d_rope > 0 && d_rope % 2 == 0 && theta > 0.0f, "rope of {} dims, theta {}", d_rope, theta);
    const int64_t half = d_rope / 2;
    // Hugging Face: base^(2i/d) in float32; the angle is then float(pos) * inv_freq in float32.
    std::vector<float> pos_freq(static_cast<size_t>(half)), inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        pos_freq[i] = static_cast<float>(std::pow(double(theta), double(float(2 * i) / float(d_rope))));
        inv[i] = 1.0f / pos_freq[i];
    }
    if (!(yarn_factor > 1.0f)) return inv;
    TANDEM_ASSERT(yarn_n_ctx_orig > 0 && beta_fast > 0.0f && beta_slow > 0.0f);
    // Dims below `low` keep their frequency (extrapolate), above `high` are divided by the factor
    // (interpolate), linearly in between; bounds truncated to whole dims as transformers does.
    double low = std::floor(correction_dim(beta_fast, double(d_rope), theta, double(yarn_n_ctx_orig)));
    double high = std::ceil(correction_dim(beta_slow, double(d_rope), theta, double(yarn_n_ctx_orig)));
    low = std::max(low, 0.0);
    high = std::min(high, double(d_rope - 1));
    if (low == high) high += 0.001;  // no empty ramp
    const float lo = float(low), span = float(high - low);
    for (int64_t i = 0; i < half; ++i) {
        const float ramp = std::clamp((float(i) - lo) / span, 0.0f, 1.0f);
        const float extrapolate = 1.0f - ramp;
        const float interp = 1.0f / (yarn_factor * pos_freq[i]);
        inv[i] = interp * (1.0f - extrapolate) + inv[i] * extrapolate;
    }
    return inv;
}

void rope_pairs(float *x, const int32_t *positions, int64_t n_rows, int64_t row_stride, int64_t n_heads,
                int64_t head_stride, const float *inv_freq, int64_t d_rope, float mscale) {
    const int64_t half = d_rope / 2;
    std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
    for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t i = 0; i < half; ++i) {
            const float angle = float(positions[r]) * inv_freq[i];
            cos_v[i] = static_cast<float>(std::cos(double(angle))) * mscale;
            sin_v[i] = static_cast<float>(std::sin(double(angle))) * mscale;
        }
        for (int64_t h = 0; h < n_heads; ++h) {
            float *v = x + r * row_stride + h * head_stride;
            for (int64_t i = 0; i < half; ++i) {
                const float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * cos_v[i] - b * sin_v[i];
                v[2 * i + 1] = b * cos_v[i] + a * sin_v[i];
            }
        }
    }
}

}  // namespace tandem::cpu
