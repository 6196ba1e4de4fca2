// src/cpu/digits.cpp - the digit format's producer, the products' scalar variant (the portable one,
// written to be obviously right) and the table that picks a variant for the CPU it runs on.
#include "digits.h"
#include "digits_kernels.h"

#include "tandem/error.h"
#include "tandem/quant.h"
#include "tandem/quant_blocks.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace tandem::cpu {

void digit_rows::resize(int64_t rows, int64_t n_elems) {
    TANDEM_ASSERT(rows >= 0 && n_elems >= 0 && n_elems % digit_block == 0, "digit rows {} x {}", rows, n_elems);
    n_rows = rows;
    n = n_elems;
    const size_t nb = size_t(rows * (n_elems / digit_block));
    // resize never gives memory back: a smaller call reuses the larger one's storage.
    digits.resize(std::max(digits.size(), size_t(rows * digits_per_element * n_elems)));
    scales.resize(std::max(scales.size(), nb));
    sums.resize(std::max(sums.size(), nb * 16));
    mins_t.resize(std::max(mins_t.size(), nb * 8));
    group_sums.resize(std::max(group_sums.size(), size_t(rows * (n_elems / 16) * 2)));
}

namespace {

uint16_t bf16_round(float v) {
    const uint32_t u = std::bit_cast<uint32_t>(v);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// One block of 256 elements of x into the format (digits.h); every operation as the GPU's warp does
// it (cuda/digits.cuh, digits_of_lane), so the bits agree. One exception: a block whose largest |x|
// is below 2^-121 has no finite 1 / s (the GPU's arithmetic overflows there into meaningless
// digits); here its digits are zero, so the block adds nothing, as its size says it should.
void quantize_block(const float *x, int8_t *digits, float &scale, uint16_t *sums, int32_t *mins_t, int32_t *group_sums) {
    bool finite = true;
    for (int i = 0; i < digit_block; ++i) finite = finite && std::isfinite(x[i]);
    float mx = 0.0f;
    if (finite)
        for (int i = 0; i < digit_block; ++i) mx = std::max(mx, std::fabs(x[i]));
    int e = 0;
    if (mx > 0.0f) {
        int k;
        std::frexp(mx, &k);  // mx < 2^k
        e = k - 7;
        if (std::ldexp(127.0f, e) < mx) ++e;
    }
    scale = finite ? std::ldexp(1.0f, e) : std::numeric_limits<float>::quiet_NaN();
    const bool zero = !finite || e <= -128;
    const float inv = zero ? 0.0f : std::ldexp(1.0f, -e);
    int8_t d0[digit_block], d1[digit_block];
    for (int i = 0; i < digit_block; ++i) {
        const float q = (zero ? 0.0f : x[i]) * inv;  // exact: a power of two; so is q - a below
        const float a = std::nearbyint(q);            // |q| <= 127
        const float b = std::min(std::max(std::nearbyint((q - a) * 256.0f), -127.0f), 127.0f);
        d0[i] = int8_t(a);
        d1[i] = int8_t(b);
    }
    for (int j = 0; j < 8; ++j) {
        int32_t s_j = 0;  // |S_j| <= 32 (256 127 + 127) < 2^20
        for (int l = 0; l < 32; ++l) s_j += 256 * d0[32 * j + l] + d1[32 * j + l];
        for (int t = 0; t < 4; ++t) {
            std::memcpy(digits + (j * 4 + t) * 16, d0 + 32 * j + 8 * t, 8);
            std::memcpy(digits + (j * 4 + t) * 16 + 8, d1 + 32 * j + 8 * t, 8);
        }
        const float sf = float(s_j);
        const uint32_t hi = std::bit_cast<uint32_t>(sf) & 0xFFFF0000u;
        const uint16_t lo = bf16_round(sf - std::bit_cast<float>(hi));
        uint16_t *su = sums + (j >> 1) * 4 + (j & 1);
        su[0] = uint16_t(hi >> 16);
        su[2] = lo;
        mins_t[j] = int32_t(std::bit_cast<float>(hi) + std::bit_cast<float>(uint32_t(lo) << 16));  // exact: both integers
    }
    for (int g = 0; g < 16; ++g) {  // each 16-element group's digit sums
        int32_t a = 0, b = 0;
        for (int i = 0; i < 16; ++i) {
            a += d0[16 * g + i];
            b += d1[16 * g + i];
        }
        group_sums[2 * g] = a;
        group_sums[2 * g + 1] = b;
    }
}

}  // namespace

void digits_quantize_row(const float *x, digit_rows &out, int64_t r) {
    TANDEM_ASSERT(r >= 0 && r < out.n_rows, "digit row {} of {}", r, out.n_rows);
    const int64_t nb = out.n / digit_block;
    int8_t *digits = out.digits.data() + r * digits_per_element * out.n;
    for (int64_t c = 0; c < nb; ++c)
        quantize_block(x + c * digit_block, digits + c * digit_block * digits_per_element, out.scales[size_t(r * nb + c)],
                       out.sums.data() + (r * nb + c) * 16, out.mins_t.data() + (r * nb + c) * 8,
                       out.group_sums.data() + (r * nb + c) * 32);
}

void digits_quantize(const float *x, int64_t x_stride, int64_t n_rows, int64_t n, digit_rows &out) {
    TANDEM_ASSERT(n > 0 && n % digit_block == 0 && x_stride >= n, "digits_quantize: n {} (a multiple of 256), stride {}", n, x_stride);
    out.resize(n_rows, n);
    for (int64_t r = 0; r < n_rows; ++r) digits_quantize_row(x + r * x_stride, out, r);
}

float digit_mins(const uint8_t *m, const int32_t *t) {
    int32_t sum = 0;  // |m_j t_j| < 2^26: no overflow in eight terms
    for (int j = 0; j < 8; ++j) sum += int32_t(m[j]) * t[j];
    return digit_mins_round(sum);
}

bool digits_apply(ggml_type type, int64_t n_in) {
    const bool typed = type == ggml_type::q4_k || type == ggml_type::q6_k || type == ggml_type::q8_0;
    return typed && n_in > 0 && n_in % digit_block == 0;
}

bool cpu_isa_supported(cpu_isa isa) {
    switch (isa) {
    case cpu_isa::scalar:
    case cpu_isa::best: return true;
#if defined(__x86_64__)
    case cpu_isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case cpu_isa::avx512_vnni:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
#endif
    default: return false;
    }
}

const char *cpu_isa_name(cpu_isa isa) {
    switch (isa) {
    case cpu_isa::scalar: return "scalar";
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx512_vnni: return "avx512-vnni";
    case cpu_isa::best: return "best";
    }
    return "?";
}

cpu_isa cpu_isa_best() {
    static const cpu_isa isa = cpu_isa_supported(cpu_isa::avx512_vnni) ? cpu_isa::avx512_vnni
                               : cpu_isa_supported(cpu_isa::avx2)      ? cpu_isa::avx2
                                                                       : cpu_isa::scalar;
    return isa;
}

namespace {

// The one table of variants: a type's product for each instruction set.
using tile_fn = void (*)(const digits_product_args &, int64_t, int64_t, digits_scratch &);
tile_fn pick(ggml_type type, cpu_isa isa) {
    switch (isa) {
#if defined(__x86_64__)
    case cpu_isa::avx512_vnni:
        return type == ggml_type::q4_k ? digits_q4_k_avx512 : type == ggml_type::q6_k ? digits_q6_k_avx512 : digits_q8_0_avx512;
    case cpu_isa::avx2:
        return type == ggml_type::q4_k ? digits_q4_k_avx2 : type == ggml_type::q6_k ? digits_q6_k_avx2 : digits_q8_0_avx2;
#endif
    default:
        return type == ggml_type::q4_k ? digits_q4_k_scalar : type == ggml_type::q6_k ? digits_q6_k_scalar : digits_q8_0_scalar;
    }
}

}  // namespace

void digits_product_tile(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &scratch) {
    TANDEM_ASSERT(digits_apply(a.w.type, a.w.n_in), "digit products take Q4_K, Q6_K or Q8_0 rows of whole 256-blocks, not {} x {}",
                  ggml_type_name(a.w.type), a.w.n_in);
    TANDEM_ASSERT(a.x && a.x->n == a.w.n_in, "digit rows of {} elements for a matrix of {}", a.x ? a.x->n : 0, a.w.n_in);
    TANDEM_ASSERT(a.k_split >= 1 && a.k_split <= digits_max_k_split, "k_split {}", a.k_split);
    TANDEM_ASSERT(out_begin >= 0 && out_begin <= out_end && out_end <= a.w.n_out && out_end - out_begin <= digits_tile_rows,
                  "outputs {}..{} of {}", out_begin, out_end, a.w.n_out);
    if (out_end == out_begin || a.n_rows == 0) return;
    const cpu_isa isa = a.isa == cpu_isa::best ? cpu_isa_best() : a.isa;
    TANDEM_ASSERT(cpu_isa_supported(isa), "this CPU has no {}", cpu_isa_name(isa));
    pick(a.w.type, isa)(a, out_begin, out_end, scratch);
}

// ---- the scalar variant ----

namespace {

int64_t x_row(const digits_product_args &a, int64_t r) { return a.x_rows ? a.x_rows[r] : r; }

// Digit d of element e (0..255) of a block's digits.
int32_t digit_at(const int8_t *xd, int e, int d) {
    const int j = e / 32, l = e % 32;
    return xd[(j * 4 + l / 8) * 16 + 8 * d + l % 8];
}

}  // namespace

void digits_q4_k_scalar(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &) {
    const int64_t nb = a.w.n_in / digit_block;
    for (int64_t o = out_begin; o < out_end; ++o) {
        const auto *blocks = reinterpret_cast<const block_q4_k *>(a.w.data + size_t(o) * a.w.row_bytes);
        for (int64_t r = 0; r < a.n_rows; ++r) {
            const int64_t xr = x_row(a, r);
            float part[digits_max_k_split] = {};
            for (int64_t c = 0; c < nb; ++c) {
                const block_q4_k &b = blocks[c];
                const int8_t *xd = a.x->digits_of(xr) + c * digit_block * digits_per_element;
                int32_t acc[2] = {0, 0};
                uint8_t mins[8];
                for (int j = 0; j < 8; ++j) {
                    const q4_k_scale_min sm = q4_k_get_scale_min(b.scales, j);
                    mins[j] = sm.min;
                    for (int d = 0; d < 2; ++d) {
                        int32_t dot = 0;
                        for (int l = 0; l < 32; ++l) {
                            const uint8_t byte = b.qs[32 * (j / 2) + l];
                            dot += int32_t(j % 2 ? byte >> 4 : byte & 0xF) * digit_at(xd, 32 * j + l, d);
                        }
                        acc[d] += int32_t(sm.scale) * dot;
                    }
                }
                const float cm = digit_mins(mins, a.x->mins_t_of(xr) + c * 8);
                float &p = part[c % a.k_split];
                p = digit_fold(acc[0], acc[1], cm, fp16_to_fp32(b.d), fp16_to_fp32(b.dmin), a.x->scales_of(xr)[c], p);
            }
            float y = part[0];
            for (int v = 1; v < a.k_split; ++v) y += part[v];
            a.y[r][o] = y;
        }
    }
}

void digits_q6_k_scalar(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &) {
    const int64_t nb = a.w.n_in / digit_block;
    for (int64_t o = out_begin; o < out_end; ++o) {
        const auto *blocks = reinterpret_cast<const block_q6_k *>(a.w.data + size_t(o) * a.w.row_bytes);
        for (int64_t r = 0; r < a.n_rows; ++r) {
            const int64_t xr = x_row(a, r);
            float out = 0.0f;
            for (int64_t c = 0; c < nb; ++c) {
                const block_q6_k &b = blocks[c];
                const int8_t *xd = a.x->digits_of(xr) + c * digit_block * digits_per_element;
                const int32_t *gs = a.x->group_sums_of(xr) + c * 32;
                int32_t acc[2] = {0, 0};
                for (int g = 0; g < 16; ++g)
                    for (int d = 0; d < 2; ++d) {
                        int32_t dot = 0;
                        for (int l = 0; l < 16; ++l) dot += int32_t(q6_k_quant(b, 16 * g + l)) * digit_at(xd, 16 * g + l, d);
                        acc[d] += int32_t(b.scales[g]) * (dot - 32 * gs[2 * g + d]);
                    }
                out = q6_k_fold(acc[0], acc[1], fp16_to_fp32(b.d), a.x->scales_of(xr)[c], out);
            }
            a.y[r][o] = out;
        }
    }
}

void digits_q8_0_scalar(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &) {
    const int64_t nb = a.w.n_in / digit_block;
    for (int64_t o = out_begin; o < out_end; ++o) {
        const auto *blocks = reinterpret_cast<const block_q8_0 *>(a.w.data + size_t(o) * a.w.row_bytes);
        for (int64_t r = 0; r < a.n_rows; ++r) {
            const int64_t xr = x_row(a, r);
            float out = 0.0f;
            for (int64_t c = 0; c < nb; ++c) {
                const int8_t *xd = a.x->digits_of(xr) + c * digit_block * digits_per_element;
                float part = 0.0f;
                for (int bi = 0; bi < 8; ++bi) {
                    const block_q8_0 &b = blocks[c * 8 + bi];
                    int32_t dot[2] = {0, 0};
                    for (int d = 0; d < 2; ++d)
                        for (int l = 0; l < 32; ++l) dot[d] += int32_t(b.qs[l]) * digit_at(xd, 32 * bi + l, d);
                    part = q8_0_fold_block(dot[0], dot[1], fp16_to_fp32(b.d), part);
                }
                out = std::fma(a.x->scales_of(xr)[c] * (1.0f / 256.0f), part, out);
            }
            a.y[r][o] = out;
        }
    }
}

}  // namespace tandem::cpu
