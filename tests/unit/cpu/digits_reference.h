// tests/unit/cpu/digits_reference.h - an independent scalar reference of the digit format and its
// products (src/cpu/digits.h), written from the format's definition: digits kept per element in
// element order, quants decoded element by element, sums in long double or int64. The products'
// SIMD and scalar variants are compared with it bit for bit.
#pragma once

#include "tandem/quant.h"
#include "tandem/quant_blocks.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tandem::test {

// One row's digits as the definition gives them.
struct ref_digits {
    std::vector<int32_t> d0, d1;           // [n] per element
    std::vector<float> scale;              // [n / 256]
    std::vector<float> hi, lo;             // [n / 32]: S_j's bf16 halves as floats
    std::vector<uint8_t> packed;           // [2 n] the stored layout (digits.h)
    std::vector<uint16_t> sums;            // [n / 256 * 16] the stored sums
};

inline uint16_t ref_bf16_rn(float v) {
    const uint32_t u = std::bit_cast<uint32_t>(v);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// The format's definition: s = 2^e the least power of two with 127 s >= max |x|, d0 = rint(x / s),
// d1 = clamp(rint((x / s - d0) 256)); a block with a non-finite element has zero digits and a NaN
// scale; a block whose 1 / s overflows fp32 (e <= -128) has zero digits.
inline ref_digits ref_quantize(const float *x, int64_t n) {
    ref_digits r;
    r.d0.assign(size_t(n), 0);
    r.d1.assign(size_t(n), 0);
    r.packed.assign(size_t(2 * n), 0);
    for (int64_t c = 0; c < n / 256; ++c) {
        const float *b = x + c * 256;
        bool finite = true;
        double mx = 0.0;
        for (int i = 0; i < 256; ++i) {
            finite = finite && std::isfinite(b[i]);
            mx = std::max(mx, std::fabs(double(b[i])));
        }
        int e = 0;
        if (!finite) {
            mx = 0.0;
        } else {
            while (mx > 0.0 && 127.0 * std::ldexp(1.0, e) < mx) ++e;
            while (mx > 0.0 && 127.0 * std::ldexp(1.0, e - 1) >= mx) --e;
        }
        r.scale.push_back(finite ? std::ldexp(1.0f, e) : std::numeric_limits<float>::quiet_NaN());
        for (int i = 0; i < 256; ++i) {
            const int64_t k = c * 256 + i;
            if (!finite || e <= -128) continue;
            const double q = std::ldexp(double(b[i]), -e);
            const double a = std::nearbyint(q);
            const double f = std::clamp(std::nearbyint((q - a) * 256.0), -127.0, 127.0);
            r.d0[size_t(k)] = int32_t(a);
            r.d1[size_t(k)] = int32_t(f);
        }
        for (int j = 0; j < 8; ++j) {
            int64_t s = 0;
            for (int l = 0; l < 32; ++l) s += 256 * r.d0[size_t(c * 256 + 32 * j + l)] + r.d1[size_t(c * 256 + 32 * j + l)];
            const float sf = float(s);
            const float hi = std::bit_cast<float>(std::bit_cast<uint32_t>(sf) & 0xFFFF0000u);
            const float lo = std::bit_cast<float>(uint32_t(ref_bf16_rn(sf - hi)) << 16);
            r.hi.push_back(hi);
            r.lo.push_back(lo);
        }
        for (int q = 0; q < 4; ++q)
            for (int w : {0, 1, 2, 3}) {
                const int j = 2 * q + (w & 1);
                const float v = w < 2 ? r.hi[size_t(c * 8 + j)] : r.lo[size_t(c * 8 + j)];
                r.sums.push_back(uint16_t(std::bit_cast<uint32_t>(v) >> 16));
            }
    }
    // Stored layout: block c, sub-block j, group t: d0 of elements 8t .. 8t + 7, then their d1.
    for (int64_t k = 0; k < n; ++k) {
        const int64_t c = k / 256, j = (k % 256) / 32, t = (k % 32) / 8, i = k % 8;
        uint8_t *g = r.packed.data() + c * 512 + j * 64 + t * 16;
        g[i] = uint8_t(int8_t(r.d0[size_t(k)]));
        g[8 + i] = uint8_t(int8_t(r.d1[size_t(k)]));
    }
    return r;
}

// The tensor core's rounding of the mins' exact sum: toward zero, to 24 significant bits.
inline float ref_round_mins(long double v) {
    if (v == 0) return 0.0f;
    int e;
    std::frexp(v, &e);
    const long double q = std::ldexp(1.0L, e - 24);
    return float(std::trunc(v / q) * q);
}

// Q4_K: the GPU's arithmetic (digits.h) for weight row w (n / 256 blocks) and activation row x.
inline float ref_q4_k(const block_q4_k *w, const ref_digits &x, int64_t n, int k_split) {
    std::vector<float> part(size_t(k_split), 0.0f);
    for (int64_t c = 0; c < n / 256; ++c) {
        const block_q4_k &b = w[c];
        int64_t acc[2] = {0, 0};
        long double cm = 0;
        for (int j = 0; j < 8; ++j) {
            const q4_k_scale_min sm = q4_k_get_scale_min(b.scales, j);
            for (int l = 0; l < 32; ++l) {
                const int e = 32 * j + l;
                const int q = (b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;  // chunk j / 2, nibble j % 2
                acc[0] += int64_t(sm.scale) * q * x.d0[size_t(c * 256 + e)];
                acc[1] += int64_t(sm.scale) * q * x.d1[size_t(c * 256 + e)];
            }
            cm += (long double)sm.min * x.hi[size_t(c * 8 + j)] + (long double)sm.min * x.lo[size_t(c * 8 + j)];
        }
        const float mins = ref_round_mins(cm);
        const float dots = std::fma(float(acc[1]), 1.0f / 256.0f, float(acc[0]));
        const float pr = std::fma(fp16_to_fp32(b.d), dots, -(fp16_to_fp32(b.dmin) * (mins * (1.0f / 256.0f))));
        float &p = part[size_t(c % k_split)];
        p = std::fma(x.scale[size_t(c)], pr, p);
    }
    float y = part[0];
    for (int v = 1; v < k_split; ++v) y = y + part[size_t(v)];
    return y;
}

// Q6_K: the CPU's own arithmetic (digits.h).
inline float ref_q6_k(const block_q6_k *w, const ref_digits &x, int64_t n) {
    float out = 0.0f;
    for (int64_t c = 0; c < n / 256; ++c) {
        const block_q6_k &b = w[c];
        int64_t acc[2] = {0, 0};
        for (int e = 0; e < 256; ++e) {
            const int half = e / 128, l = e % 32, quarter = (e % 128) / 32;
            const uint8_t ql = b.ql[64 * half + l + 32 * (quarter % 2)];
            const int low = quarter < 2 ? ql & 0xF : ql >> 4;
            const int high = (b.qh[32 * half + l] >> (2 * quarter)) & 3;
            const int q = (low | (high << 4)) - 32;
            acc[0] += int64_t(b.scales[e / 16]) * q * x.d0[size_t(c * 256 + e)];
            acc[1] += int64_t(b.scales[e / 16]) * q * x.d1[size_t(c * 256 + e)];
        }
        const float dots = std::fma(float(acc[1]), 1.0f / 256.0f, float(acc[0]));
        out = std::fma(x.scale[size_t(c)], fp16_to_fp32(b.d) * dots, out);
    }
    return out;
}

// Q8_0: the CPU's own arithmetic (digits.h).
inline float ref_q8_0(const block_q8_0 *w, const ref_digits &x, int64_t n) {
    float out = 0.0f;
    for (int64_t c = 0; c < n / 256; ++c) {
        float part = 0.0f;
        for (int b = 0; b < 8; ++b) {
            const block_q8_0 &blk = w[c * 8 + b];
            int64_t t = 0;
            for (int l = 0; l < 32; ++l) {
                const size_t e = size_t(c * 256 + 32 * b + l);
                t += int64_t(blk.qs[l]) * (256 * x.d0[e] + x.d1[e]);
            }
            part = std::fma(fp16_to_fp32(blk.d), float(t), part);
        }
        out = std::fma(x.scale[size_t(c)] / 256.0f, part, out);
    }
    return out;
}

}  // namespace tandem::test
