// tandem/draw_exact.h - the temperature draw from a logits row that the host and the GPU compute
// to the same token, so that the token can be drawn where the row is (on the device) and only the
// token leaves it. Every temperature draw of tandem::sampler is one.
//
// An exact draw, for a request with a temperature T > 0 and maybe top_k, min_p and top_p:
//   - order: the sampler's, logit descending then id ascending, as one 64-bit key (draw_key);
//   - candidates: the tokens with logit >= max - 30 T (the best always), of them only the top_k
//     best when top_k > 0;
//   - weights: w_i = e^((l_i - max) / T) in float (draw_exp: basic float operations only, never
//     contracted, so host and device round alike), 0 for non-candidates and below min_p x the
//     best's weight (1) except for the row's best; then as an integer, W_i = trunc(w_i x 2^40)
//     (the best weighs 2^40; weights under 2^-40 count as 0). Sums of integers are exact in any
//     order: no reduction order is part of the definition;
//   - the nucleus: Z = sum W_i; with top_p < 1, the smallest best-first prefix of the tokens of
//     positive weight whose mass reaches max(1, trunc(top_p x Z)) (in double); else all of them;
//   - the pick: with M the nucleus's mass and u the sampler's uniform number in [0, 1),
//     r = min(trunc(u x M), M - 1) (in double); the token is the first id, ascending, whose
//     running sum of nucleus weights exceeds r.
// Host twins: tandem::draw_exact (a whole row) and draw_exact_top (a row's 64 best, when they
// decide it: top_k <= 64, or every candidate among them); the device: cuda/logits_draw.h.
#pragma once

#include "tandem/host_device.h"

#include <cstdint>
#include <cstring>

namespace tandem {

constexpr int32_t draw_weight_bits = 40;  // W = trunc(w x 2^40)

// One row's draw request, the sampler's (sampler::draw_request) and the engine's input
// (engine_row::draw). temperature <= 0: no draw for the row.
struct row_draw {
    float temperature = 0.0f;
    float inv_temp = 0.0f;  // float(1.0 / double(temperature)), made by the host
    float min_p = 0.0f;
    float top_p = 1.0f;     // < 1: the draw is from the nucleus
    int32_t top_k = 0;      // > 0: only the top_k best are candidates
    int32_t pad_ = 0;
    double u = 0.0;         // the sampler's next uniform number, [0, 1)
};

namespace draw_ops {
// Single roundings that the device compiler may not fuse into an fma (the host build passes
// -ffp-contract=off).
TANDEM_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
TANDEM_HOST_DEVICE inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
TANDEM_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
TANDEM_HOST_DEVICE inline uint32_t to_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
#endif
}
TANDEM_HOST_DEVICE inline float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
#endif
}
}  // namespace draw_ops

// e^x for x <= 0 (NaN and x < -87, whose results would leave float's normal range, give 0):
// x = k ln 2 + r with k rounded to nearest by the 1.5 x 2^23 trick, ln 2 split so that k ln2_hi is
// exact, a degree-7 Taylor polynomial in r (|r| <= 0.35: error ~5e-9 relative) times 2^k. About
// 2 ulp; bitwise the same on host and device.
TANDEM_HOST_DEVICE inline float draw_exp(float x) {
    using namespace draw_ops;
    if (!(x >= -87.0f)) return 0.0f;
    if (x >= 0.0f) x = 0.0f;
    const float magic = 12582912.0f;  // 1.5 x 2^23: adding it rounds to an integer
    const float k = sub(add(mul(x, 0x1.715476p+0f), magic), magic);
    float r = sub(x, mul(k, 0.693359375f));  // 355 / 512: k x ln2_hi is exact
    r = sub(r, mul(k, -0x1.bd0106p-13f));  // ln 2 - ln2_hi
    float p = 0x1.a01a02p-13f;  // 1 / 7!, and below 1 / 6! .. 1 / 3!: hexadecimal, so no compiler folds a division
    p = add(mul(p, r), 0x1.6c16c2p-10f);
    p = add(mul(p, r), 0x1.111112p-7f);
    p = add(mul(p, r), 0x1.555556p-5f);
    p = add(mul(p, r), 0x1.555556p-3f);
    p = add(mul(p, r), 0.5f);
    p = add(mul(p, r), 1.0f);
    p = add(mul(p, r), 1.0f);
    const int32_t e = int32_t(k) + 127;  // k in [-126, 0]: 2^k is a normal float
    return mul(p, from_bits(uint32_t(e) << 23));
}

// A row's cutoff: the sampler's candidates are the logits >= max - 30 T.
TANDEM_HOST_DEVICE inline float draw_cutoff(float max_logit, const row_draw &d) {
    return draw_ops::sub(max_logit, draw_ops::mul(30.0f, d.temperature));
}

// Whether a logit passes the cutoff (the candidates before top_k).
TANDEM_HOST_DEVICE inline bool draw_passes(float logit, float max_logit, float cutoff) {
    return logit == max_logit || logit >= cutoff;
}

// Integer weight of a logit in a row whose best is max_logit (cutoff from draw_cutoff), top_k
// aside (the caller zeroes the tokens it leaves out).
TANDEM_HOST_DEVICE inline uint64_t draw_weight(float logit, float max_logit, float cutoff, const row_draw &d) {
    constexpr float scale = float(uint64_t(1) << draw_weight_bits);
    if (logit == max_logit) return uint64_t(1) << draw_weight_bits;
    if (!(logit >= cutoff)) return 0;
    const float w = draw_exp(draw_ops::mul(draw_ops::sub(logit, max_logit), d.inv_temp));
    if (d.min_p > 0.0f && !(w >= d.min_p)) return 0;
    return uint64_t(draw_ops::mul(w, scale));  // exact product (a power of two), truncated
}

// The sampler's order as one integer: the logit's bits mapped to an unsigned order (negative
// values reversed, -0 as +0) above, ~id below (a tie goes to the lower id). Larger is better.
TANDEM_HOST_DEVICE inline uint64_t draw_key(float logit, int32_t id) {
    uint32_t u = logit == 0.0f ? 0u : draw_ops::to_bits(logit);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t(u) << 32) | uint64_t(0xFFFFFFFFu - uint32_t(id));
}

// The mass the nucleus must reach: max(1, trunc(top_p x Z)), Z when top_p >= 1.
TANDEM_HOST_DEVICE inline uint64_t draw_nucleus_need(uint64_t total, float top_p) {
    if (!(top_p < 1.0f)) return total;
    const uint64_t need = uint64_t(double(top_p) * double(total));
    return need < 1 ? 1 : need;
}

// The pick's threshold in a nucleus of mass M > 0: min(trunc(u x M), M - 1).
TANDEM_HOST_DEVICE inline uint64_t draw_pick_threshold(double u, uint64_t mass) {
    const uint64_t r = uint64_t(u * double(mass));
    return r < mass ? r : mass - 1;
}

}  // namespace tandem
