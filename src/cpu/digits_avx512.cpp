// src/cpu/digits_avx512.cpp - the digit products on AVX-512 VNNI: a tile's 16 weight rows unpacked
// once into 16-lane vectors (lane = weight row, 4 consecutive quants a lane), then each activation
// row's digits broadcast 4 at a time into vpdpbusd; the integer sums are exact, and the mins and folds
// are the scalar variant's operations lane by lane, so the bits are the scalar variant's.
#include "digits_kernels.h"

#if defined(__x86_64__)

#include "tandem/error.h"

#include <immintrin.h>

#include <algorithm>
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

// v's int16 value in both halves of each lane (v < 2^15).
TANDEM_AVX512 inline __m512i pair16(__m512i v) { return _mm512_or_si512(v, _mm512_slli_epi32(v, 16)); }
// Lane r: (lo_r, hi_r) as an int16 pair, from lanes holding values that fit int16.
TANDEM_AVX512 inline __m512i halves16(__m512i lo, __m512i hi) {
    return _mm512_mask_blend_epi16(__mmask32(0xAAAAAAAAu), lo, _mm512_slli_epi32(hi, 16));
}

// One block of a tile unpacked: q[j][k] the quants of sub-block j, group k (4 bytes a lane); sc[j]
// and m[j] the scales and mins; d and dm.
struct q4_k_tile_block {
    __m512i q[8][8];
    __m512i sc[8], m[8];  // sc: the scale in both int16 halves of a lane (pairs for vpdpwssd)
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
        if (j < 4) {  // q4_k_get_scale_min, 16 rows at once
            out.sc[j] = pair16(_mm512_and_si512(_mm512_srli_epi32(s0, 8 * j), m63));
            out.m[j] = _mm512_and_si512(_mm512_srli_epi32(s1, 8 * j), m63);
        } else {
            const int b = 8 * (j - 4);
            out.sc[j] = pair16(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, b), m15),
                                               _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, b + 6), m3), 4)));
            out.m[j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, b + 4), m15),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, b + 6), m3), 4));
        }
    }
}

// The rows r0 .. r0 + R - 1 against every block of the tile: R rows share each weight vector load
// (four digit products a load at R = 4).
template <int R>
TANDEM_AVX512 void q4_k_rows(const q4_k_tile_block *blocks, int64_t nb, const digits_product_args &a, int64_t r0, const tile_rows &t,
                             int64_t out_begin) {
    const int8_t *xrow[R];
    const float *xs[R];
    const int32_t *xt[R];
    for (int r = 0; r < R; ++r) {
        const int64_t xr = a.x_rows ? a.x_rows[r0 + r] : r0 + r;
        xrow[r] = a.x->digits_of(xr);
        xs[r] = a.x->scales_of(xr);
        xt[r] = a.x->mins_t_of(xr);
    }
    __m512 part[R][digits_max_k_split];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < a.k_split; ++v) part[r][v] = _mm512_setzero_ps();
    const __m512 inv256 = _mm512_set1_ps(1.0f / 256.0f);
    for (int64_t c = 0; c < nb; ++c) {
        const q4_k_tile_block &w = blocks[c];
        const int8_t *xd[R];
        for (int r = 0; r < R; ++r) xd[r] = xrow[r] + c * digit_block * digits_per_element;
        __m512i acc0[R], acc1[R];
        for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            // Each half sub-block's dot (16 elements: |dot| <= 16 * 15 * 127 < 2^15) in its own
            // accumulator; the halves packed as int16 pairs take the scale in one vpdpwssd.
            __m512i p0[2][R], p1[2][R];
            for (int r = 0; r < R; ++r) p0[0][r] = p0[1][r] = p1[0][r] = p1[1][r] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const __m512i q = w.q[j][k];
                for (int r = 0; r < R; ++r) {
                    p0[k / 4][r] = _mm512_dpbusd_epi32(p0[k / 4][r], q, x_group(xd[r], 8 * j + k, 0));
                    p1[k / 4][r] = _mm512_dpbusd_epi32(p1[k / 4][r], q, x_group(xd[r], 8 * j + k, 1));
                }
            }
            for (int r = 0; r < R; ++r) {
                acc0[r] = _mm512_dpwssd_epi32(acc0[r], halves16(p0[0][r], p0[1][r]), w.sc[j]);
                acc1[r] = _mm512_dpwssd_epi32(acc1[r], halves16(p1[0][r], p1[1][r]), w.sc[j]);
            }
        }
        for (int r = 0; r < R; ++r) {
            // digit_mins: the exact integer sum, rounded toward zero.
            __m512i mins = _mm512_mullo_epi32(w.m[0], _mm512_set1_epi32(xt[r][c * 8]));
            for (int j = 1; j < 8; ++j) mins = _mm512_add_epi32(mins, _mm512_mullo_epi32(w.m[j], _mm512_set1_epi32(xt[r][c * 8 + j])));
            const __m512 cm = _mm512_cvt_roundepi32_ps(mins, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m512 dots = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1[r]), inv256, _mm512_cvtepi32_ps(acc0[r]));
            const __m512 pr = _mm512_fmsub_ps(w.d, dots, _mm512_mul_ps(w.dm, _mm512_mul_ps(cm, inv256)));
            __m512 &p = part[r][c % a.k_split];
            p = _mm512_fmadd_ps(_mm512_set1_ps(xs[r][c]), pr, p);
        }
    }
    for (int r = 0; r < R; ++r) store_partials(part[r], a.k_split, t, a.y[r0 + r] + out_begin);
}

// 16 rows' 32 bytes at `at` (8 dwords a row) -> v[i] (dword i of rows 0..15): rows k and k + 8 share a
// vector, an 8 x 8 transpose in each 256-bit half, then the halves' quadwords interleaved.
TANDEM_AVX512 inline void transpose16x8(const tile_rows &t, size_t at, __m512i (&v)[8]) {
    __m512i r[8], u[8];
    for (int k = 0; k < 8; ++k)
        r[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(t.row[k] + at))),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i *>(t.row[k + 8] + at)), 1);
    for (int k = 0; k < 4; ++k) {
        u[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        u[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; ++k) {
        r[4 * k + 0] = _mm512_unpacklo_epi64(u[4 * k + 0], u[4 * k + 2]);
        r[4 * k + 1] = _mm512_unpackhi_epi64(u[4 * k + 0], u[4 * k + 2]);
        r[4 * k + 2] = _mm512_unpacklo_epi64(u[4 * k + 1], u[4 * k + 3]);
        r[4 * k + 3] = _mm512_unpackhi_epi64(u[4 * k + 1], u[4 * k + 3]);
    }
    // r[4k + e], 128-bit lane l of each half: rows 4k .. 4k + 3 (of the half's 8) of dword 4 (l % 2) + e.
    const __m512i even = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), odd = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    for (int e = 0; e < 4; ++e) {
        v[e] = _mm512_permutex2var_epi64(r[e], even, r[4 + e]);
        v[4 + e] = _mm512_permutex2var_epi64(r[e], odd, r[4 + e]);
    }
}

// q4_k_get_scale_min for 16 rows at once, from the scale bytes 0-3 (s0), 4-7 (s1) and 8-11 (s2).
TANDEM_AVX512 inline __m512i q4_k_scale(__m512i s0, __m512i s2, int j) {
    if (j < 4) return _mm512_and_si512(_mm512_srli_epi32(s0, 8 * j), _mm512_set1_epi32(63));
    const int b = 8 * (j - 4);
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, b), _mm512_set1_epi32(15)),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, b + 6), _mm512_set1_epi32(3)), 4));
}
TANDEM_AVX512 inline __m512i q4_k_min(__m512i s1, __m512i s2, int j) {
    if (j < 4) return _mm512_and_si512(_mm512_srli_epi32(s1, 8 * j), _mm512_set1_epi32(63));
    const int b = 8 * (j - 4);
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, b + 4), _mm512_set1_epi32(15)),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, b + 6), _mm512_set1_epi32(3)), 4));
}

// The next tile's weights (the rows after this tile's, contiguous), fetched into the cache a share
// a block while this tile is unpacked: 16 rows' streams stay ahead of the loads, which the hardware
// prefetcher alone does not keep (test_cpu_ops "[.bench]", the one-row head: slower without).
struct tile_prefetch {
    const uint8_t *next;
    size_t bytes, share;
    tile_prefetch(const digits_product_args &a, int64_t out_end, int64_t nb) {
        next = a.w.data + size_t(out_end) * a.w.row_bytes;
        bytes = size_t(std::min<int64_t>(a.w.n_out, out_end + lanes) - out_end) * a.w.row_bytes;
        share = (bytes / size_t(nb) + 63) & ~size_t(63);
    }
    void block(int64_t c) const {
        for (size_t o = size_t(c) * share; o < std::min(bytes, size_t(c + 1) * share); o += 64)
            _mm_prefetch(reinterpret_cast<const char *>(next + o), _MM_HINT_T0);
    }
};

// Few rows (decode): each block's quants unpacked in registers and used at once, nothing stored.
template <int R>
TANDEM_AVX512 void q4_k_streamed(const digits_product_args &a, int64_t nb, const tile_rows &t, int64_t out_begin, int64_t out_end) {
    const tile_prefetch prefetch(a, out_end, nb);
    const int8_t *xrow[R];
    const float *xs[R];
    const int32_t *xt[R];
    for (int r = 0; r < R; ++r) {
        const int64_t xr = a.x_rows ? a.x_rows[r] : r;
        xrow[r] = a.x->digits_of(xr);
        xs[r] = a.x->scales_of(xr);
        xt[r] = a.x->mins_t_of(xr);
    }
    __m512 part[R][digits_max_k_split];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < a.k_split; ++v) part[r][v] = _mm512_setzero_ps();
    const __m512 inv256 = _mm512_set1_ps(1.0f / 256.0f);
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int64_t c = 0; c < nb; ++c) {
        prefetch.block(c);
        const size_t base = size_t(c) * sizeof(block_q4_k);
        const __m512i s0 = gather_dword(t, base + 4), s1 = gather_dword(t, base + 8), s2 = gather_dword(t, base + 12);
        const int8_t *xd[R];
        __m512i acc0[R], acc1[R];
        for (int r = 0; r < R; ++r) {
            xd[r] = xrow[r] + c * digit_block * digits_per_element;
            acc0[r] = acc1[r] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {  // qs chunk p: sub-blocks 2p (low nibbles) and 2p + 1 (high)
            __m512i v[8];
            transpose16x8(t, base + 16 + 32 * p, v);
            const __m512i sc_lo = pair16(q4_k_scale(s0, s2, 2 * p)), sc_hi = pair16(q4_k_scale(s0, s2, 2 * p + 1));
            for (int r = 0; r < R; ++r) {
                // Half sub-blocks in their own accumulators (as q4_k_rows): sub-block 2p in p*, 2p + 1 in q*.
                __m512i p0[2], p1[2], q0[2], q1[2];
                for (int h = 0; h < 2; ++h) p0[h] = p1[h] = q0[h] = q1[h] = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int i = 0; i < 8; ++i) {
                    const __m512i lo = _mm512_and_si512(v[i], low), hi = _mm512_and_si512(_mm512_srli_epi32(v[i], 4), low);
                    p0[i / 4] = _mm512_dpbusd_epi32(p0[i / 4], lo, x_group(xd[r], 16 * p + i, 0));
                    p1[i / 4] = _mm512_dpbusd_epi32(p1[i / 4], lo, x_group(xd[r], 16 * p + i, 1));
                    q0[i / 4] = _mm512_dpbusd_epi32(q0[i / 4], hi, x_group(xd[r], 16 * p + 8 + i, 0));
                    q1[i / 4] = _mm512_dpbusd_epi32(q1[i / 4], hi, x_group(xd[r], 16 * p + 8 + i, 1));
                }
                acc0[r] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(acc0[r], halves16(p0[0], p0[1]), sc_lo), halves16(q0[0], q0[1]), sc_hi);
                acc1[r] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(acc1[r], halves16(p1[0], p1[1]), sc_lo), halves16(q1[0], q1[1]), sc_hi);
            }
        }
        const __m512i head = gather_dword(t, base);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head)), dm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
        __m512i mins[R];
        for (int r = 0; r < R; ++r) mins[r] = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) {
            const __m512i m = q4_k_min(s1, s2, j);
            for (int r = 0; r < R; ++r) mins[r] = _mm512_add_epi32(mins[r], _mm512_mullo_epi32(m, _mm512_set1_epi32(xt[r][c * 8 + j])));
        }
        for (int r = 0; r < R; ++r) {
            const __m512 cm = _mm512_cvt_roundepi32_ps(mins[r], _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m512 dots = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc1[r]), inv256, _mm512_cvtepi32_ps(acc0[r]));
            const __m512 pr = _mm512_fmsub_ps(d, dots, _mm512_mul_ps(dm, _mm512_mul_ps(cm, inv256)));
            __m512 &pt = part[r][c % a.k_split];
            pt = _mm512_fmadd_ps(_mm512_set1_ps(xs[r][c]), pr, pt);
        }
    }
    for (int r = 0; r < R; ++r) store_partials(part[r], a.k_split, t, a.y[r] + out_begin);
}

}  // namespace

TANDEM_AVX512 void digits_q4_k_avx512(const digits_product_args &a, int64_t out_begin, int64_t out_end, digits_scratch &scratch) {
    const int64_t nb = a.w.n_in / digit_block;
    const tile_rows t = rows_of(a, out_begin, out_end);
    // Up to 4 rows streamed, more row-blocked on unpacked tiles (test_cpu_ops "[.bench]": streamed
    // wins at 4 rows on every shape); both give the same bits.
    if (a.n_rows <= 4) {
        switch (a.n_rows) {
        case 1: q4_k_streamed<1>(a, nb, t, out_begin, out_end); break;
        case 2: q4_k_streamed<2>(a, nb, t, out_begin, out_end); break;
        case 3: q4_k_streamed<3>(a, nb, t, out_begin, out_end); break;
        default: q4_k_streamed<4>(a, nb, t, out_begin, out_end); break;
        }
        return;
    }
    const size_t need = size_t(nb) * sizeof(q4_k_tile_block) + 64;
    if (scratch.bytes.size() < need) scratch.bytes.resize(need);
    auto *blocks = reinterpret_cast<q4_k_tile_block *>((reinterpret_cast<uintptr_t>(scratch.bytes.data()) + 63) & ~uintptr_t(63));
    const tile_prefetch prefetch(a, out_end, nb);
    for (int64_t c = 0; c < nb; ++c) {
        prefetch.block(c);
        unpack_q4_k(t, c, blocks[c]);
    }
    int64_t r = 0;
    for (; r + 4 <= a.n_rows; r += 4) q4_k_rows<4>(blocks, nb, a, r, t, out_begin);
    switch (a.n_rows - r) {
    case 3: q4_k_rows<3>(blocks, nb, a, r, t, out_begin); break;
    case 2: q4_k_rows<2>(blocks, nb, a, r, t, out_begin); break;
    case 1: q4_k_rows<1>(blocks, nb, a, r, t, out_begin); break;
    default: break;
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
