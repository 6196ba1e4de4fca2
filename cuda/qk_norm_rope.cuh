// cuda/qk_norm_rope.cuh - a head's QK RMSNorm and NeoX RoPE held by one warp (element i in lane
// i % 32, slot i / 32), bitwise the CPU twin's order; shared by the decode attention kernels
// (attention.cu, attention_mma.cu), which do qk_rope_kv's work in their prologue when fused.
#pragma once

#include "warp_reduce.cuh"

#include <cuda_runtime.h>

namespace tandem::cuda {

constexpr int max_dpl = 8;  // d_head up to 256 (8 elements per lane)

// This lane's cos/sin of a position's NeoX rotation angles: float32 angles, double cos/sin rounded
// to float, as the CPU twin computes them. d_head 32: element i (lane i) rotates with lane i + 16,
// angle index lane % 16; otherwise element i with i + d_head/2, dpl/2 slots on in the same lane.
// rope_angle: slot t's (zeros past the slots in use).
__device__ __forceinline__ void rope_angle(int pos, const float *inv_freq, int dpl, int lane, int t, float &c, float &s) {
    const int fi = dpl == 1 ? (lane & 15) : lane + 32 * t;
    c = s = 0.0f;
    if (t < dpl / 2 || (dpl == 1 && t == 0)) {
        const float angle = __fmul_rn(float(pos), inv_freq[fi]);
        double sd, cd;
        sincos(double(angle), &sd, &cd);
        c = float(cd);
        s = float(sd);
    }
}
__device__ __forceinline__ void rope_angles(int pos, const float *inv_freq, int dpl, int lane, float (&cs)[max_dpl / 2],
                                            float (&sn)[max_dpl / 2]) {
#pragma unroll
    for (int t = 0; t < max_dpl / 2; ++t) rope_angle(pos, inv_freq, dpl, lane, t, cs[t], sn[t]);
}

// The lane's share of the Q and K norm weights (element lane + 32 t in slot t; zeros past dpl).
__device__ __forceinline__ void load_norm_weights(const float *q_norm, const float *k_norm, int dpl, int lane,
                                                  float (&qn)[max_dpl], float (&kn)[max_dpl]) {
#pragma unroll
    for (int t = 0; t < max_dpl; ++t) {
        qn[t] = t < dpl ? q_norm[lane + 32 * t] : 0.0f;
        kn[t] = t < dpl ? k_norm[lane + 32 * t] : 0.0f;
    }
}

// One head held by a warp (val[t] = element lane + 32 t): per-head RMSNorm with weights nw
// (bitwise the CPU's order: element i in lane i % 32, butterfly), then the NeoX rotation.
__device__ __forceinline__ void norm_rope_head(float (&val)[max_dpl], const float (&nw)[max_dpl], const float (&cs)[max_dpl / 2],
                                               const float (&sn)[max_dpl / 2], int dpl, int lane, float eps) {
    const int dh = 32 * dpl, half_t = dpl / 2;
    float acc = 0.0f;
#pragma unroll
    for (int t = 0; t < max_dpl; ++t)
        if (t < dpl) acc = __fadd_rn(acc, __fmul_rn(val[t], val[t]));
    const float mean_sq = __fdiv_rn(__shfl_sync(0xFFFFFFFFu, warp_sum_fixed(acc), 0), float(dh));
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, eps)));
#pragma unroll
    for (int t = 0; t < max_dpl; ++t)
        if (t < dpl) val[t] = __fmul_rn(__fmul_rn(val[t], inv), nw[t]);
    if (dpl == 1) {
        const float other = __shfl_xor_sync(0xFFFFFFFFu, val[0], 16);
        val[0] = lane < 16 ? __fsub_rn(__fmul_rn(val[0], cs[0]), __fmul_rn(other, sn[0]))
                           : __fadd_rn(__fmul_rn(val[0], cs[0]), __fmul_rn(other, sn[0]));
    }
#pragma unroll
    for (int t = 0; t < max_dpl / 2; ++t) {
        if (t >= half_t) continue;
        const float c = cs[t], s = sn[t];
        float x0 = val[t], x1 = val[t];
#pragma unroll
        for (int u = 0; u < max_dpl; ++u)
            if (u == t + half_t) x1 = val[u];
        const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        const float y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
        val[t] = y0;
#pragma unroll
        for (int u = 0; u < max_dpl; ++u)
            if (u == t + half_t) val[u] = y1;
    }
}

}  // namespace tandem::cuda
