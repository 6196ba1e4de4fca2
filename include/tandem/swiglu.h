// tandem/swiglu.h - silu(gate) * up, the experts' activation, in one arithmetic for the CPU and the
// GPU: the exponential is built from fmas and exactly rounded operations only (no library exp, whose
// last bit differs between glibc and CUDA), so a slot computed by the host tier has the bits of the
// same slot computed on a GPU.
#pragma once

#include "tandem/host_device.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tandem {

// 2^n for n in [-126, 127], exactly.
TANDEM_HOST_DEVICE inline float swiglu_pow2(int32_t n) {
    const int32_t bits = (n + 127) << 23;
#if defined(__CUDA_ARCH__)
    return __int_as_float(bits);
#else
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

// 1 + e^x, within an ulp of the exact value. Below x = -20 e^x is under half an ulp of 1.
TANDEM_HOST_DEVICE inline float swiglu_one_plus_exp(float x) {
    if (!(x <= 88.0f)) return x != x ? x : INFINITY;  // NaN stays NaN; e^88.7 overflows float
    if (x < -20.0f) return 1.0f;
    const float n = rintf(x * 1.44269504f);          // x = n ln2 + r, |r| <= ln2 / 2
    float r = fmaf(n, -0.693145751953125f, x);       // ln2's high part: n * it is exact for |n| < 2^11
    r = fmaf(n, -1.428606765330187e-06f, r);         // and its low part
    // e^r by Taylor to r^7: relative error below 1e-8 on |r| <= 0.35.
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return fmaf(p, swiglu_pow2(int32_t(n)), 1.0f);
}

// silu(gate) * up = gate / (1 + e^-gate) * up.
TANDEM_HOST_DEVICE inline float swiglu(float gate, float up) { return gate / swiglu_one_plus_exp(-gate) * up; }

}  // namespace tandem
