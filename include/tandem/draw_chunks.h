// tandem/draw_chunks.h - the temperature draw over a whole logits row that the host and the GPU
// compute to the same bits, so that the token can be drawn where the row is (on the device) and
// only the token leaves it.
//
// A draw by chunks, for a request with a temperature T > 0, min_p and no top_k or top_p:
//   - weights: w_i = e^((l_i - max) / T) in float (draw_exp: basic float operations only, never
//     contracted, so host and device round alike), 0 below the sampler's cutoff (max - 30 T), and 0
//     below min_p x the best's weight (1) except for the row's best;
//   - chunk sums: chunk c is ids [256 c, 256 c + 256); lane l of 32 sums, in double, ids
//     256 c + 32 k + l for k = 0..7 in order; then a fixed butterfly (lanes l and l ^ o for
//     o = 16, 8, 4, 2, 1) gives every lane the chunk's sum;
//   - group sums: group g is chunks [32 g, 32 g + 32), summed in order; the total Z sums the groups
//     in order;
//   - the pick, for the sampler's uniform number u in [0, 1): r = u x Z; acc = 0; walk the groups in
//     order: the first with acc + G_g > r is entered, else acc += G_g; then its chunks the same way;
//     then the chunk's ids: acc += w_i, the first with acc > r is drawn. A walk that runs out (r
//     at the very top, by rounding) draws the last id of positive weight in the group, chunk or row.
// Both the host twin (tandem::draw_by_chunks, sampler.h) and the device (cuda/logits_draw.h)
// follow these steps in this order.
#pragma once

#include "tandem/host_device.h"

#include <cstdint>
#include <cstring>

namespace tandem {

constexpr int32_t draw_chunk = 256;          // ids a chunk
constexpr int32_t draw_lane_ids = 8;         // ids a lane sums of a chunk
constexpr int32_t draw_group_chunks = 32;    // chunks a group
static_assert(draw_chunk == 32 * draw_lane_ids);

// One row's draw request, the sampler's (sampler::draw_request) and the engine's input
// (engine::forward_draw). temperature <= 0: no draw for the row.
struct row_draw {
    float temperature = 0.0f;
    float inv_temp = 0.0f;  // float(1.0 / double(temperature)), made by the host
    float min_p = 0.0f;
    float pad_ = 0.0f;
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

// Token weight of a logit in a row whose best is max_logit (cutoff from draw_cutoff).
TANDEM_HOST_DEVICE inline float draw_weight(float logit, float max_logit, float cutoff, const row_draw &d) {
    if (logit == max_logit) return 1.0f;
    if (!(logit >= cutoff)) return 0.0f;
    const float w = draw_exp(draw_ops::mul(draw_ops::sub(logit, max_logit), d.inv_temp));
    return d.min_p > 0.0f && !(w >= d.min_p) ? 0.0f : w;
}

}  // namespace tandem
