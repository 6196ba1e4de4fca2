// src/cpu/digits_avx2.cpp - the digit products on AVX2: as the AVX-512 variant (lane = weight row,
// 4 quants a lane, activation digits broadcast), 8 rows a vector and a tile in two halves; u8 x s8
// products by vpmaddubsw, summed in int16 where the bound allows and widened by vpmaddwd. The
// integer sums are exact and the mins and folds are the scalar variant's operations lane by lane.
#include "digits_kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tandem::cpu {
namespace {

constexpr int lanes = 8;

// r[k] (row k: 8 dwords) -> r[k] (dword k of rows 0..7).
TANDEM_AVX2 inline void transpose8(__m256i (&r)[8]) {
    __m256i t[8], u[8];
    for (int k = 0; k < 4; ++k) {
        t[2 * k] = _mm256_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; ++k) {
        u[4 * k + 0] = _mm256_unpacklo_epi64(t[4 * k + 0], t[4 * k + 2]);
        u[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k + 0], t[4 * k + 2]);
        u[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        u[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    for (int e = 0; e < 4; ++e) {
        r[e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x20);
        r[4 + e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x31);
    }
}

struct half_rows {
    const uint8_t *row[lanes];
    __m256i offsets;
    int n;  // valid rows (1..8)
};
TANDEM_AVX2 half_rows rows_of(const digits_product_args &a, int64_t first, int64_t end) {
    half_rows h;
    alignas(32) int32_t off[lanes];
    h.n = int(end - first);
    for (int k = 0; k < lanes; ++k) {
        h.row[k] = a.w.data + size_t(k < h.n ? first + k : first) * a.w.row_bytes;
        off[k] = int32_t(h.row[k] - h.row[0]);
    }
    h.offsets = _mm256_load_si256(reinterpret_cast<const __m256i *>(off));
    return h;
}

TANDEM_AVX2 inline __m256i gather_dword(const half_rows &h, size_t at) {
    return _mm256_i32gather_epi32(reinterpret_cast<const int *>(h.row[0] + at), h.offsets, 1);
}

// The low 16 bits of each lane as fp16 -> float.
TANDEM_AVX2 inline __m256 half_lanes(__m256i v) {
    const __m256i low = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1)));
}

TANDEM_AVX2 inline __m256i x_group(const int8_t *xd, int k, int d) {
    int32_t v;
    std::memcpy(&v, xd + (k / 8) * 64 + ((k % 8) / 2) * 16 + d * 8 + (k % 2) * 4, 4);
    return _mm256_set1_epi32(v);
}

TANDEM_AVX2 inline void store_partials(const __m256 *part, int32_t k_split, const half_rows &h, float *y) {
    __m256 sum = part[0];
    for (int v = 1; v < k_split; ++v) sum = _mm256_add_ps(sum, part[v]);
    alignas(32) float out[lanes];
    _mm256_store_ps(out, sum);
    std::memcpy(y, out, size_t(h.n) * sizeof(float));
}

// The rows' tiles of a half: a tile's kernel for rows [first, end) (at most 8).
template <class F>
void by_halves(int64_t out_begin, int64_t out_end, F &&half) {
    for (int64_t first = out_begin; first < out_end; first += lanes) half(first, first + lanes < out_end ? first + lanes : out_end);
}

template <class T>
T *blocks_in(digits_scratch &s, int64_t nb) {
    const size_t need = size_t(nb) * sizeof(T) + 64;
    if (s.bytes.size() < need) s.bytes.resize(need);
    return reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(s.bytes.data()) + 63) & ~uintptr_t(63));
}

// ---- Q4_K ----

struct q4_k_half_block {
    __m256i q[8][8];
    __m256i sc[8];  // int16 pairs (sc, sc): vpmaddwd applies the scale and widens at once
    __m256i m[8];
    __m256 d, dm;
};

TANDEM_AVX2 void unpack_q4_k(const half_rows &h, int64_t c, q4_k_half_block &out) {
    const size_t base = size_t(c) * sizeof(block_q4_k);
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
        __m256i r[lanes];
        for (int k = 0; k < lanes; ++k) r[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(h.row[k] + base + 16 + 32 * p));
        transpose8(r);
        for (int k = 0; k < lanes; ++k) {
            out.q[2 * p][k] = _mm256_and_si256(r[k], low);
            out.q[2 * p + 1][k] = _mm256_and_si256(_mm256_srli_epi32(r[k], 4), low);
        }
    }
    const __m256i head = gather_dword(h, base), s0 = gather_dword(h, base + 4), s1 = gather_dword(h, base + 8),
                  s2 = gather_dword(h, base + 12);
    out.d = half_lanes(head);
    out.dm = half_lanes(_mm256_srli_epi32(head, 16));
    const __m256i m63 = _mm256_set1_epi32(63), m15 = _mm256_set1_epi32(15), m3 = _mm256_set1_epi32(3);
    for (int j = 0; j < 8; ++j) {
        __m256i sc;
        if (j < 4) {
            sc = _mm256_and_si256(_mm256_srli_epi32(s0, 8 * j), m63);
            out.m[j] = _mm256_and_si256(_mm256_srli_epi32(s1, 8 * j), m63);
        } else {
            const int b = 8 * (j - 4);
            sc = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, b), m15),
                                 _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(s0, b + 6), m3), 4));
            out.m[j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, b + 4), m15),
                                       _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(s1, b + 6), m3), 4));
        }
        out.sc[j] = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
    }
}

// digit_mins lane by lane: the exact integer sum of m_j t_j, rounded toward zero through a double
// whose low 29 mantissa bits are cleared.
TANDEM_AVX2 inline __m256 mins8(const q4_k_half_block &w, const int32_t *t) {
    __m256i sum = _mm256_mullo_epi32(w.m[0], _mm256_set1_epi32(t[0]));
    for (int j = 1; j < 8; ++j) sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(w.m[j], _mm256_set1_epi32(t[j])));
    const __m256d mask = _mm256_castsi256_pd(_mm256_set1_epi64x(~((int64_t(1) << 29) - 1)));
    const __m128 lo = _mm256_cvtpd_ps(_mm256_and_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(sum)), mask));
    const __m128 hi = _mm256_cvtpd_ps(_mm256_and_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(sum, 1)), mask));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

// Rows r0 .. r0 + R - 1 against every block of the half: R rows share each weight vector load.
template <int R>
TANDEM_AVX2 void q4_k_rows(const q4_k_half_block *blocks, int64_t nb, const digits_product_args &a, int64_t r0, const half_rows &h,
                           int64_t first) {
    const int8_t *xrow[R];
    const float *xs[R];
    const int32_t *xt[R];
    for (int r = 0; r < R; ++r) {
        const int64_t xr = a.x_rows ? a.x_rows[r0 + r] : r0 + r;
        xrow[r] = a.x->digits_of(xr);
        xs[r] = a.x->scales_of(xr);
        xt[r] = a.x->mins_t_of(xr);
    }
    __m256 part[R][digits_max_k_split];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < a.k_split; ++v) part[r][v] = _mm256_setzero_ps();
    const __m256 inv256 = _mm256_set1_ps(1.0f / 256.0f);
    for (int64_t c = 0; c < nb; ++c) {
        const q4_k_half_block &w = blocks[c];
        const int8_t *xd[R];
        for (int r = 0; r < R; ++r) xd[r] = xrow[r] + c * digit_block * digits_per_element;
        __m256i acc0[R], acc1[R];
        for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            // int16 sums of 16 products of 15 x 127: at most 30,480, no overflow.
            __m256i p0[R], p1[R];
            for (int r = 0; r < R; ++r) p0[r] = p1[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const __m256i q = w.q[j][k];
                for (int r = 0; r < R; ++r) {
                    p0[r] = _mm256_add_epi16(p0[r], _mm256_maddubs_epi16(q, x_group(xd[r], 8 * j + k, 0)));
                    p1[r] = _mm256_add_epi16(p1[r], _mm256_maddubs_epi16(q, x_group(xd[r], 8 * j + k, 1)));
                }
            }
            for (int r = 0; r < R; ++r) {
                acc0[r] = _mm256_add_epi32(acc0[r], _mm256_madd_epi16(p0[r], w.sc[j]));
                acc1[r] = _mm256_add_epi32(acc1[r], _mm256_madd_epi16(p1[r], w.sc[j]));
            }
        }
        for (int r = 0; r < R; ++r) {
            const __m256 cm = mins8(w, xt[r] + c * 8);
            const __m256 dots = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc1[r]), inv256, _mm256_cvtepi32_ps(acc0[r]));
            const __m256 pr = _mm256_fmsub_ps(w.d, dots, _mm256_mul_ps(w.dm, _mm256_mul_ps(cm, inv256)));
            __m256 &p = part[r][c % a.k_split];
            p = _mm256_fmadd_ps(_mm256_set1_ps(xs[r][c]), pr, p);
        }
    }
    for (int r = 0; r < R; ++r) store_partials(part[r], a.k_split, h, a.y[r0 + r] + first);
}

TANDEM_AVX2 void q4_k_half(const digits_product_args &a, int64_t first, int64_t end, digits_scratch &scratch) {
    const int64_t nb = a.w.n_in / digit_block;
    const half_rows h = rows_of(a, first, end);
    q4_k_half_block *blocks = blocks_in<q4_k_half_block>(scratch, nb);
    for (int64_t c = 0; c < nb; ++c) unpack_q4_k(h, c, blocks[c]);
    int64_t r = 0;
    for (; r + 2 <= a.n_rows; r += 2) q4_k_rows<2>(blocks, nb, a, r, h, first);
    if (r < a.n_rows) q4_k_rows<1>(blocks, nb, a, r, h, first);
}

// ---- Q6_K and Q8_0: quants unpacked per row into bytes, then transposed ----

// 8 rows of 256 bytes (row k at src + 256 k) -> q[g] (4 bytes of each row, group g = 0..63).
TANDEM_AVX2 void transpose_bytes(const uint8_t *src, __m256i *q) {
    for (int part = 0; part < 8; ++part) {
        __m256i r[lanes];
        for (int k = 0; k < lanes; ++k) r[k] = _mm256_load_si256(reinterpret_cast<const __m256i *>(src + 256 * k + 32 * part));
        transpose8(r);
        for (int k = 0; k < lanes; ++k) q[8 * part + k] = r[k];
    }
}

struct q6_k_half_block {
    __m256i q[64];
    __m256i sc[16];
    __m256 d;
};

TANDEM_AVX2 void unpack_q6_k(const half_rows &h, int64_t c, q6_k_half_block &out) {
    alignas(32) uint8_t bytes[lanes * 256];
    const size_t base = size_t(c) * sizeof(block_q6_k);
    const __m256i low = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    for (int k = 0; k < lanes; ++k) {
        const auto *b = reinterpret_cast<const block_q6_k *>(h.row[k] + base);
        for (int half = 0; half < 2; ++half) {
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qh + 32 * half));
            for (int q = 0; q < 2; ++q) {  // ql bytes 0-31 (quarters 0, 2), 32-63 (quarters 1, 3)
                const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->ql + 64 * half + 32 * q));
                const __m256i h_lo = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), three);
                const __m256i h_hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * q + 4), three);
                const __m256i lo = _mm256_or_si256(_mm256_and_si256(ql, low), _mm256_slli_epi16(h_lo, 4));
                const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), low), _mm256_slli_epi16(h_hi, 4));
                _mm256_store_si256(reinterpret_cast<__m256i *>(bytes + 256 * k + 128 * half + 32 * q), lo);
                _mm256_store_si256(reinterpret_cast<__m256i *>(bytes + 256 * k + 128 * half + 64 + 32 * q), hi);
            }
        }
    }
    transpose_bytes(bytes, out.q);
    const size_t sc_at = base + offsetof(block_q6_k, scales);
    for (int w = 0; w < 4; ++w) {
        const __m256i s = gather_dword(h, sc_at + 4 * w);
        for (int b = 0; b < 4; ++b) out.sc[4 * w + b] = _mm256_srai_epi32(_mm256_slli_epi32(s, 24 - 8 * b), 24);
    }
    out.d = half_lanes(_mm256_srli_epi32(gather_dword(h, base + sizeof(block_q6_k) - 4), 16));
}

TANDEM_AVX2 void q6_k_half(const digits_product_args &a, int64_t first, int64_t end, digits_scratch &scratch) {
    const int64_t nb = a.w.n_in / digit_block;
    const half_rows h = rows_of(a, first, end);
    q6_k_half_block *blocks = blocks_in<q6_k_half_block>(scratch, nb);
    for (int64_t c = 0; c < nb; ++c) unpack_q6_k(h, c, blocks[c]);
    const __m256 inv256 = _mm256_set1_ps(1.0f / 256.0f);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t r = 0; r < a.n_rows; ++r) {
        const int64_t xr = a.x_rows ? a.x_rows[r] : r;
        const int8_t *xrow = a.x->digits_of(xr);
        const float *xs = a.x->scales_of(xr);
        const int32_t *gs = a.x->group_sums_of(xr);
        __m256 out = _mm256_setzero_ps();
        for (int64_t c = 0; c < nb; ++c) {
            const q6_k_half_block &w = blocks[c];
            const int8_t *xd = xrow + c * digit_block * digits_per_element;
            __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            for (int g = 0; g < 16; ++g)
                for (int d = 0; d < 2; ++d) {
                    // Two vpmaddubsw of 63 x 127 pairs (<= 32,004) in int16, then widened.
                    __m256i p = _mm256_set1_epi32(-32 * gs[c * 32 + 2 * g + d]);
                    for (int k = 0; k < 4; k += 2) {
                        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(w.q[4 * g + k], x_group(xd, 4 * g + k, d)),
                                                           _mm256_maddubs_epi16(w.q[4 * g + k + 1], x_group(xd, 4 * g + k + 1, d)));
                        p = _mm256_add_epi32(p, _mm256_madd_epi16(s, ones));
                    }
                    acc[d] = _mm256_add_epi32(acc[d], _mm256_mullo_epi32(p, w.sc[g]));
                }
            const __m256 dots = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[1]), inv256, _mm256_cvtepi32_ps(acc[0]));
            out = _mm256_fmadd_ps(_mm256_set1_ps(xs[c]), _mm256_mul_ps(w.d, dots), out);
        }
        store_partials(&out, 1, h, a.y[r] + first);
    }
}

struct q8_0_half_block {
    __m256i mag[64];   // |q| (unsigned; 128 for -128), 4 a lane
    __m256i sign[64];  // q: the sign given to the digits
    __m256 d[8];
};

TANDEM_AVX2 void unpack_q8_0(const half_rows &h, int64_t c, q8_0_half_block &out) {
    alignas(32) uint8_t bytes[lanes * 256];
    const size_t base = size_t(c) * 8 * sizeof(block_q8_0);
    for (int k = 0; k < lanes; ++k)
        for (int b = 0; b < 8; ++b)
            std::memcpy(bytes + 256 * k + 32 * b, reinterpret_cast<const block_q8_0 *>(h.row[k] + base)[b].qs, 32);
    transpose_bytes(bytes, out.sign);
    for (int g = 0; g < 64; ++g) out.mag[g] = _mm256_abs_epi8(out.sign[g]);
    for (int b = 0; b < 8; ++b) out.d[b] = half_lanes(gather_dword(h, base + size_t(b) * sizeof(block_q8_0)));
}

TANDEM_AVX2 void q8_0_half(const digits_product_args &a, int64_t first, int64_t end, digits_scratch &scratch) {
    const int64_t nb = a.w.n_in / digit_block;
    const half_rows h = rows_of(a, first, end);
    q8_0_half_block *blocks = blocks_in<q8_0_half_block>(scratch, nb);
    for (int64_t c = 0; c < nb; ++c) unpack_q8_0(h, c, blocks[c]);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t r = 0; r < a.n_rows; ++r) {
        const int64_t xr = a.x_rows ? a.x_rows[r] : r;
        const int8_t *xrow = a.x->digits_of(xr);
        const float *xs = a.x->scales_of(xr);
        __m256 out = _mm256_setzero_ps();
        for (int64_t c = 0; c < nb; ++c) {
            const q8_0_half_block &w = blocks[c];
            const int8_t *xd = xrow + c * digit_block * digits_per_element;
            __m256 part = _mm256_setzero_ps();
            for (int b = 0; b < 8; ++b) {
                __m256i dot[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                for (int k = 0; k < 8; ++k)
                    for (int d = 0; d < 2; ++d) {
                        // |q| x (+-digit): pairs of 128 x 127 at most, no saturation (digits are never -128).
                        const __m256i x = _mm256_sign_epi8(x_group(xd, 8 * b + k, d), w.sign[8 * b + k]);
                        dot[d] = _mm256_add_epi32(dot[d], _mm256_madd_epi16(_mm256_maddubs_epi16(w.mag[8 * b + k], x), ones));
                    }
                const __m256i tb = _mm256_add_epi32(_mm256_slli_epi32(dot[0], 8), dot[1]);
                part = _mm256_fmadd_ps(w.d[b], _mm256_cvtepi32_ps(tb), part);
            }
            out = _mm256_fmadd_ps(_mm256_set1_ps(xs[c] * (1.0f / 256.0f)), part, out);
        }
        store_partials(&out, 1, h, a.y[r] + first);
    }
}

}  // namespace

void digits_q4_k_avx2(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &scratch) {
    by_halves(out_begin, out_end, [&](int64_t first, int64_t end) { q4_k_half(a, first, end, scratch); });
}
void digits_q6_k_avx2(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &scratch) {
    by_halves(out_begin, out_end, [&](int64_t first, int64_t end) { q6_k_half(a, first, end, scratch); });
}
void digits_q8_0_avx2(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &scratch) {
    by_halves(out_begin, out_end, [&](int64_t first, int64_t end) { q8_0_half(a, first, end, scratch); });
}

}  // namespace tandem::cpu

#endif  // __x86_64__
