// src/cpu/digits_avx512.cpp - the digit products on AVX-512 VNNI: a tile's 16 weight rows unpacked
// once into 16-lane vectors (lane = weight row, 4 consecutive quants a lane), then each activation
// row's digits broadcast 4 at a time into vpdpbusd; the integer sums are exact, and the mins and folds
// are the scalar variant's operations lane by lane, so the bits are the scalar variant's.
#include "digits_kernels.h"

#if defined(__x86_64__)

#include "tandem/error.h"

#include <immintrin.h>

#include <cstring>

// GCC 12's AVX-512 headers start vectors from _mm512_undefined_*, which -Wuninitialized reports
// once inlined here (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

namespace tandem::cpu {
namespace {

constexpr int lanes = 16;  // weight rows a vector (= digits_tile_rows)
static_assert(digits_tile_rows == lanes, "a tile is one vector of weight rows");

// r[k] (row k: 16 dwords) -> r[k] (dword k of rows 0..15).
TANDEM_AVX512 inline void transpose16(__m512i (&r)[16]) {
    __m512i t[16], u[16];
    for (int k = 0; k < 8; ++k) {
        t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; ++k) {
        u[4 * k + 0] = _mm512_unpacklo_epi64(t[4 * k + 0], t[4 * k + 2]);
        u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k + 0], t[4 * k + 2]);
        u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    // u[4k + e], 128-bit lane l: rows 4k .. 4k + 3 of dword 4l + e.
    for (int e = 0; e < 4; ++e) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x88), v1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xDD);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x88), v3 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xDD);
        r[e] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[8 + e] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        r[4 + e] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[12 + e] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

// The tile's rows: row k of the tile is matrix row out_begin + k, or out_begin past the matrix (its
// lanes are computed and never stored).
struct tile_rows {
    const uint8_t *row[lanes];
    __m512i offsets;  // byte offset of each row from row[0], for gathers
    __mmask16 store_mask;
};
TANDEM_AVX512 tile_rows rows_of(const digits_product_args &a, int64_t out_begin, int64_t out_end) {
    tile_rows t;
    alignas(64) int32_t off[lanes];
    const int n = int(out_end - out_begin);
    for (int k = 0; k < lanes; ++k) {
        t.row[k] = a.w.data + size_t(k < n ? out_begin + k : out_begin) * a.w.row_bytes;
        off[k] = int32_t(t.row[k] - t.row[0]);
    }
    t.offsets = _mm512_load_si512(off);
    t.store_mask = __mmask16((1u << n) - 1u);
    return t;
}

// The 16 lanes' dword at byte `at` of each row (unaligned).
TANDEM_AVX512 inline __m512i gather_dword(const tile_rows &t, size_t at) {
    return _mm512_i32gather_epi32(t.offsets, t.row[0] + at, 1);
}

// A row's digits of element group k (elements 4k .. 4k + 3 of a block), digit d, broadcast.
TANDEM_AVX512 inline __m512i x_group(const int8_t *xd, int k, int d) {
    int32_t v;
    std::memcpy(&v, xd + (k / 8) * 64 + ((k % 8) / 2) * 16 + d * 8 + (k % 2) * 4, 4);
    return _mm512_set1_epi32(v);
}

// y[r][out_begin ..] <- the partial sums added in order, the tile's valid lanes.
TANDEM_AVX512 inline void store_partials(const __m512 *part, int32_t k_split, const tile_rows &t, float *y) {
    __m512 sum = part[0];
    for (int v = 1; v < k_split; ++v) sum = _mm512_add_ps(sum, part[v]);
    _mm512_mask_storeu_ps(y, t.store_mask, sum);
}

// ---- Q4_K ----

// One block of a tile unpacked: q[j][k] the quants of sub-block j, group k (4 bytes a lane); sc[j]
// the scales; m[j] the mins as doubles (rows 0-7, 8-15); d and dm.
struct q4_k_tile_block {
    __m512i q[8][8];
    __m512i sc[8];
    __m512d m[8][2];
    __m512 d, dm;
};

TANDEM_AVX512 void unpack_q4_k(const tile_rows &t, int64_t c, q4_k_tile_block &out) {
    const size_t base = size_t(c) * sizeof(block_q4_k);
    for (int half = 0; half < 2; ++half) {  // qs bytes 0-63 (sub-blocks 0-3), 64-127 (4-7)
        __m512i r[lanes];
        for (int k = 0; k < lanes; ++k) r[k] = _mm512_loadu_si512(t.row[k] + base + 16 + 64 * half);
        transpose16(r);
        const __m512i low = _mm512_set1_epi8(0x0F);
        for (int k = 0; k < lanes; ++k) {  // dword k of the half: pair 2 half + k / 8, group k % 8
            const int j = 2 * (2 * half + k / 8);
            out.q[j][k % 8] = _mm512_and_si512(r[k], low);
            out.q[j + 1][k % 8] = _mm512_and_si512(_mm512_srli_epi32(r[k], 4), low);
        }
    }
    const __m512i head = gather_dword(t, base), s0 = gather_dword(t, base + 4), s1 = gather_dword(t, base + 8),
                  s2 = gather_dword(t, base + 12);
    out.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
    out.dm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
    const __m512i m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
    for (int j = 0; j < 8; ++j) {
        __m512i sc, mn;
        if (j < 4) {  // q4_k_get_scale_min, 16 rows at once
            sc = _mm512_and_si512(_mm512_srli_epi32(s0, 8 * j), m63);
            mn = _mm512_and_si512(_mm512_srli_epi32(s1, 8 * j), m63);
        } else {
            const int b = 8 * (j - 4);
            sc = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, b), m15),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, b + 6), m3), 4));
            mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, b + 4), m15),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, b + 6), m3), 4));
        }
        out.sc[j] = sc;
        out.m[j][0] = _mm512_cvtepi32_pd(_mm512_castsi512_si256(mn));
        out.m[j][1] = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(mn, 1));
    }
}

// digit_mins for 16 weight rows against one activation row's block: b = hi_0..7, lo_0..7.
TANDEM_AVX512 inline __m512 mins16(const q4_k_tile_block &w, const float *b) {
    __m512d sum[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    for (int j = 0; j < 8; ++j) {
        const __m512d hi = _mm512_set1_pd(double(b[j])), lo = _mm512_set1_pd(double(b[8 + j]));
        for (int h = 0; h < 2; ++h) sum[h] = _mm512_fmadd_pd(w.m[j][h], lo, _mm512_fmadd_pd(w.m[j][h], hi, sum[h]));
    }
    const __m256 lo8 = _mm512_cvt_roundpd_ps(sum[0], _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 hi8 = _mm512_cvt_roundpd_ps(sum[1], _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo8), hi8, 1);
}

}  // namespace

TANDEM_AVX512 void digits_q4_k_avx512(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &scratch) {
    const int64_t nb = a.w.n_in / digit_block;
    const tile_rows t = rows_of(a, out_begin, out_end);
    const size_t need = size_t(nb) * sizeof(q4_k_tile_block) + 64;
    if (scratch.bytes.size() < need) scratch.bytes.resize(need);
    auto *blocks = reinterpret_cast<q4_k_tile_block *>((reinterpret_cast<uintptr_t>(scratch.bytes.data()) + 63) & ~uintptr_t(63));
    for (int64_t c = 0; c < nb; ++c) unpack_q4_k(t, c, blocks[c]);
    const __m512 inv256 = _mm512_set1_ps(1.0f / 256.0f);
    for (int64_t r = 0; r < a.n_rows; ++r) {
        const int64_t xr = a.x_rows ? a.x_rows[r] : r;
        const int8_t *xrow = a.x->digits_of(xr);
        const float *xs = a.x->scales_of(xr), *xb = a.x->mins_b_of(xr);
        __m512 part[digits_max_k_split];
        for (int v = 0; v < a.k_split; ++v) part[v] = _mm512_setzero_ps();
        for (int64_t c = 0; c < nb; ++c) {
            const q4_k_tile_block &w = blocks[c];
            const int8_t *xd = xrow + c * digit_block * digits_per_element;
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
            for (int j = 0; j < 8; ++j) {
                __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
                for (int k = 0; k < 8; ++k) {
                    p0 = _mm512_dpbusd_epi32(p0, w.q[j][k], x_group(xd, 8 * j + k, 0));
                    p1 = _mm512_dpbusd_epi32(p1, w.q[j][k], x_group(xd, 8 * j + k, 1));
                }
                acc0 = _mm512_add_epi32(acc0, _mm512_mullo_epi32(p0, w.sc[j]));
                acc1 = _mm512_add_epi32(acc1, _mm512_mullo_epi32(p1, w.sc[j]));
            }
            const __m512 cm = mins16(w, xb + c * 16);
            const __m512 dots = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1), inv256, _mm512_cvtepi32_ps(acc0));
            const __m512 pr = _mm512_fmsub_ps(w.d, dots, _mm512_mul_ps(w.dm, _mm512_mul_ps(cm, inv256)));
            __m512 &p = part[c % a.k_split];
            p = _mm512_fmadd_ps(_mm512_set1_ps(xs[c]), pr, p);
        }
        store_partials(part, a.k_split, t, a.y[r] + out_begin);
    }
}

// ---- Q6_K and Q8_0: quants unpacked per row into bytes, then transposed ----

namespace {

// 16 rows of 256 bytes (row k at src + 256 k) -> q[g] (4 bytes of each row, group g = 0..63).
TANDEM_AVX512 void transpose_bytes(const uint8_t *src, __m512i *q) {
    for (int quarter = 0; quarter < 4; ++quarter) {
        __m512i r[lanes];
        for (int k = 0; k < lanes; ++k) r[k] = _mm512_loadu_si512(src + 256 * k + 64 * quarter);
        transpose16(r);
        for (int k = 0; k < lanes; ++k) q[16 * quarter + k] = r[k];
    }
}

struct q6_k_tile_block {
    __m512i q[64];   // quants 0..63 (unsigned), 4 a lane
    __m512i sc[16];  // sub-block scales (signed)
    __m512 d;
};

TANDEM_AVX512 void unpack_q6_k(const tile_rows &t, int64_t c, q6_k_tile_block &out) {
    alignas(64) uint8_t bytes[lanes * 256];
    const size_t base = size_t(c) * sizeof(block_q6_k);
    const __m512i low = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3);
    for (int k = 0; k < lanes; ++k) {
        const auto *b = reinterpret_cast<const block_q6_k *>(t.row[k] + base);
        for (int h = 0; h < 2; ++h) {
            const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qh + 32 * h));
            const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            const __m512i lo = _mm512_or_si512(_mm512_and_si512(ql, low), _mm512_slli_epi16(_mm512_and_si512(qh2, three), 4));
            const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low),
                                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh2, 4), three), 4));
            _mm512_store_si512(bytes + 256 * k + 128 * h, lo);
            _mm512_store_si512(bytes + 256 * k + 128 * h + 64, hi);
        }
    }
    transpose_bytes(bytes, out.q);
    const size_t sc_at = base + offsetof(block_q6_k, scales);
    for (int w = 0; w < 4; ++w) {
        const __m512i s = gather_dword(t, sc_at + 4 * w);
        for (int b = 0; b < 4; ++b) out.sc[4 * w + b] = _mm512_srai_epi32(_mm512_slli_epi32(s, 24 - 8 * b), 24);
    }
    // d is the block's last two bytes: the dword ending there, high half.
    out.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(gather_dword(t, base + sizeof(block_q6_k) - 4), 16)));
}

}  // namespace

TANDEM_AVX512 void digits_q6_k_avx512(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &scratch) {
    const int64_t nb = a.w.n_in / digit_block;
    const tile_rows t = rows_of(a, out_begin, out_end);
    const size_t need = size_t(nb) * sizeof(q6_k_tile_block) + 64;
    if (scratch.bytes.size() < need) scratch.bytes.resize(need);
    auto *blocks = reinterpret_cast<q6_k_tile_block *>((reinterpret_cast<uintptr_t>(scratch.bytes.data()) + 63) & ~uintptr_t(63));
    for (int64_t c = 0; c < nb; ++c) unpack_q6_k(t, c, blocks[c]);
    const __m512 inv256 = _mm512_set1_ps(1.0f / 256.0f);
    for (int64_t r = 0; r < a.n_rows; ++r) {
        const int64_t xr = a.x_rows ? a.x_rows[r] : r;
        const int8_t *xrow = a.x->digits_of(xr);
        const float *xs = a.x->scales_of(xr);
        const int32_t *gs = a.x->group_sums_of(xr);
        __m512 out = _mm512_setzero_ps();
        for (int64_t c = 0; c < nb; ++c) {
            const q6_k_tile_block &w = blocks[c];
            const int8_t *xd = xrow + c * digit_block * digits_per_element;
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
            for (int g = 0; g < 16; ++g) {
                __m512i p0 = _mm512_set1_epi32(-32 * gs[c * 32 + 2 * g]), p1 = _mm512_set1_epi32(-32 * gs[c * 32 + 2 * g + 1]);
                for (int k = 0; k < 4; ++k) {
                    p0 = _mm512_dpbusd_epi32(p0, w.q[4 * g + k], x_group(xd, 4 * g + k, 0));
                    p1 = _mm512_dpbusd_epi32(p1, w.q[4 * g + k], x_group(xd, 4 * g + k, 1));
                }
                acc0 = _mm512_add_epi32(acc0, _mm512_mullo_epi32(p0, w.sc[g]));
                acc1 = _mm512_add_epi32(acc1, _mm512_mullo_epi32(p1, w.sc[g]));
            }
            const __m512 dots = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1), inv256, _mm512_cvtepi32_ps(acc0));
            out = _mm512_fmadd_ps(_mm512_set1_ps(xs[c]), _mm512_mul_ps(w.d, dots), out);
        }
        store_partials(&out, 1, t, a.y[r] + out_begin);
    }
}

namespace {

struct q8_0_tile_block {
    __m512i q[64];  // quants + 128 (unsigned), 4 a lane
    __m512 d[8];    // the eight Q8_0 blocks' scales
};

TANDEM_AVX512 void unpack_q8_0(const tile_rows &t, int64_t c, q8_0_tile_block &out) {
    alignas(64) uint8_t bytes[lanes * 256];
    const size_t base = size_t(c) * 8 * sizeof(block_q8_0);
    const __m256i bias = _mm256_set1_epi8(char(0x80));
    for (int k = 0; k < lanes; ++k)
        for (int b = 0; b < 8; ++b) {
            const auto *blk = reinterpret_cast<const block_q8_0 *>(t.row[k] + base) + b;
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk->qs));
            _mm256_store_si256(reinterpret_cast<__m256i *>(bytes + 256 * k + 32 * b), _mm256_xor_si256(q, bias));
        }
    transpose_bytes(bytes, out.q);
    for (int b = 0; b < 8; ++b)
        out.d[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gather_dword(t, base + size_t(b) * sizeof(block_q8_0))));
}

}  // namespace

TANDEM_AVX512 void digits_q8_0_avx512(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &scratch) {
    const int64_t nb = a.w.n_in / digit_block;
    const tile_rows t = rows_of(a, out_begin, out_end);
    const size_t need = size_t(nb) * sizeof(q8_0_tile_block) + 64;
    if (scratch.bytes.size() < need) scratch.bytes.resize(need);
    auto *blocks = reinterpret_cast<q8_0_tile_block *>((reinterpret_cast<uintptr_t>(scratch.bytes.data()) + 63) & ~uintptr_t(63));
    for (int64_t c = 0; c < nb; ++c) unpack_q8_0(t, c, blocks[c]);
    for (int64_t r = 0; r < a.n_rows; ++r) {
        const int64_t xr = a.x_rows ? a.x_rows[r] : r;
        const int8_t *xrow = a.x->digits_of(xr);
        const float *xs = a.x->scales_of(xr);
        const int32_t *gs = a.x->group_sums_of(xr);
        __m512 out = _mm512_setzero_ps();
        for (int64_t c = 0; c < nb; ++c) {
            const q8_0_tile_block &w = blocks[c];
            const int8_t *xd = xrow + c * digit_block * digits_per_element;
            __m512 part = _mm512_setzero_ps();
            for (int b = 0; b < 8; ++b) {
                const int32_t *g = gs + c * 32 + 4 * b;  // the two 16-groups of Q8_0 block b
                __m512i p0 = _mm512_set1_epi32(-128 * (g[0] + g[2])), p1 = _mm512_set1_epi32(-128 * (g[1] + g[3]));
                for (int k = 0; k < 8; ++k) {
                    p0 = _mm512_dpbusd_epi32(p0, w.q[8 * b + k], x_group(xd, 8 * b + k, 0));
                    p1 = _mm512_dpbusd_epi32(p1, w.q[8 * b + k], x_group(xd, 8 * b + k, 1));
                }
                const __m512i tb = _mm512_add_epi32(_mm512_slli_epi32(p0, 8), p1);
                part = _mm512_fmadd_ps(w.d[b], _mm512_cvtepi32_ps(tb), part);
            }
            out = _mm512_fmadd_ps(_mm512_set1_ps(xs[c] * (1.0f / 256.0f)), part, out);
        }
        store_partials(&out, 1, t, a.y[r] + out_begin);
    }
}

}  // namespace tandem::cpu

#endif  // __x86_64__
