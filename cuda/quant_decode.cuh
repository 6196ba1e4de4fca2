// cuda/quant_decode.cuh - device decoding of GGUF weight rows into 32-element items, shared by
// the kernel families. An item is 32 weights of one row, held as four runs of 8 consecutive
// elements (`start[t]` .. `start[t] + 7` hold v[8t] .. v[8t + 7]); item i of a row covers:
//   Q4_K: block i / 8, bytes qs[16 (i % 8) .. +16): sub-blocks 2c, 2c+1 (c = (i % 8) / 2);
//   Q6_K: block i / 8, half h = (i % 8) / 4, l = 8 (i % 4) .. +8 of that half's four quarters;
//   Q8_0 and the other 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): block i;
//   Q5_K, Q3_K, Q2_K, IQ4_XS and the grid IQ types: block i / 8, elements 32 (i % 8) .. +31 of it;
//   F32/F16/BF16: elements 32 i .. 32 i + 31.
// Values use dequantize_row_*'s expressions (d * sc * q - dmin * m for Q4_K, d * sc * q for
// Q6_K, q * d for Q8_0; the others are quoted at their decoders), so each weight equals the
// CPU's dequantised weight bitwise. Blocks of 17, 18, 22 and 110 bytes are read a byte or two
// bytes at a time, blocks of 20, 24, 84, 136 and 176 bytes four at a time: a row starts at its
// matrix's alignment plus whole rows, so only the block size limits a load's alignment. The IQ
// types with lookup grids decode in quant_decode_iq.cuh.
#pragma once

#include "quant_decode_iq.cuh"

#include "tandem/quant_blocks.h"
#include "tandem/types.h"

#include <cuda_fp16.h>

#include <cstdint>

namespace tandem::cuda {

static_assert(sizeof(block_q4_k) == 144 && sizeof(block_q6_k) == 210 && sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q5_k) == 176 && sizeof(block_q3_k) == 110 && sizeof(block_q2_k) == 84 && sizeof(block_iq4_xs) == 136);
static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24 &&
              sizeof(block_iq4_nl) == 18 && sizeof(block_mxfp4) == 17);

__device__ __forceinline__ float half_bits_to_float(uint32_t h) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xFFFFu)));
}
__device__ __forceinline__ float bf16_bits_to_float(uint32_t h) { return __uint_as_float((h & 0xFFFFu) << 16); }

// Byte k (0..11) of the packed Q4_K scales held in three words (no run-time register indexing).
__device__ __forceinline__ uint32_t scale_byte(uint32_t s0, uint32_t s1, uint32_t s2, int k) {
    const uint32_t w = k < 4 ? s0 : (k < 8 ? s1 : s2);
    return (w >> (8 * (k & 3))) & 0xFFu;
}
// ggml's get_scale_min_k4 on the three words.
__device__ __forceinline__ void q4_k_scale_min_dev(uint32_t s0, uint32_t s1, uint32_t s2, int j, float &sc, float &m) {
    if (j < 4) {
        sc = float(scale_byte(s0, s1, s2, j) & 63u);
        m = float(scale_byte(s0, s1, s2, j + 4) & 63u);
    } else {
        sc = float((scale_byte(s0, s1, s2, j + 4) & 0xFu) | ((scale_byte(s0, s1, s2, j - 4) >> 6) << 4));
        m = float((scale_byte(s0, s1, s2, j + 4) >> 4) | ((scale_byte(s0, s1, s2, j) >> 6) << 4));
    }
}

// Loads from blocks whose size limits alignment: two bytes (a 16-bit field, or a word from two),
// four, or a word assembled from single bytes (MXFP4's 17-byte blocks).
__device__ __forceinline__ uint32_t u16_at(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
__device__ __forceinline__ uint32_t u32_at_a2(const uint8_t *p) { return u16_at(p) | (u16_at(p + 2) << 16); }
__device__ __forceinline__ uint32_t u32_at_a4(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }
__device__ __forceinline__ uint32_t u32_at_a1(const uint8_t *p) {
    return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
// n bytes from p (n a multiple of 4) as words, each load of `align` bytes (1, 2 or 4).
template <int align, int n_words>
__device__ __forceinline__ void load_words(const uint8_t *p, uint32_t (&w)[n_words]) {
#pragma unroll
    for (int i = 0; i < n_words; ++i) w[i] = align >= 4 ? u32_at_a4(p + 4 * i) : align == 2 ? u32_at_a2(p + 4 * i) : u32_at_a1(p + 4 * i);
}
// Byte j of words w (j known at compile time after unrolling: no register indexing).
template <int n_words>
__device__ __forceinline__ uint32_t byte_of(const uint32_t (&w)[n_words], int j) { return (w[j >> 2] >> (8 * (j & 3))) & 0xFFu; }

// A 16-entry int8 table as four words (entries 0-3, 4-7, 8-11, 12-15), looked up by a nibble
// with two byte permutes instead of a memory read.
struct nibble_table {
    uint32_t w0, w1, w2, w3;
};
__device__ __forceinline__ int nibble_lookup(const nibble_table &t, uint32_t n) {
    const uint32_t lo = __byte_perm(t.w0, t.w1, n & 7u), hi = __byte_perm(t.w2, t.w3, n & 7u);
    return int(int8_t((n & 8u ? hi : lo) & 0xFFu));
}
constexpr uint32_t pack_int8x4(int8_t a, int8_t b, int8_t c, int8_t d) {
    return uint32_t(uint8_t(a)) | (uint32_t(uint8_t(b)) << 8) | (uint32_t(uint8_t(c)) << 16) | (uint32_t(uint8_t(d)) << 24);
}
// kvalues_iq4nl (IQ4_NL, IQ4_XS) and kvalues_mxfp4 (E2M1 doubled), as ggml-common.h lists them.
constexpr uint32_t iq4nl_w0 = pack_int8x4(-127, -104, -83, -65), iq4nl_w1 = pack_int8x4(-49, -35, -22, -10);
constexpr uint32_t iq4nl_w2 = pack_int8x4(1, 13, 25, 38), iq4nl_w3 = pack_int8x4(53, 69, 89, 113);
constexpr uint32_t mxfp4_w0 = pack_int8x4(0, 1, 2, 3), mxfp4_w1 = pack_int8x4(4, 6, 8, 12);
constexpr uint32_t mxfp4_w2 = pack_int8x4(0, -1, -2, -3), mxfp4_w3 = pack_int8x4(-4, -6, -8, -12);

// Q3_K's signed 6-bit scale of sub-block s (0..15) before the -32 (the CPU's q3_k_scale).
__device__ __forceinline__ int q3_k_scale_dev(const uint8_t *sc, int s) {
    const int low = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
    return low | (((sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3) << 4);
}

// The runs of a contiguous item: elements 32 item .. 32 item + 31.
__device__ __forceinline__ void contiguous_starts(int item, int (&start)[4]) {
    const int s0 = item * 32;
    start[0] = s0; start[1] = s0 + 8; start[2] = s0 + 16; start[3] = s0 + 24;
}

// Q5_K, item i: sub-block j = i % 8 of block i / 8; dequantize_row_q5_K:
// (d * sc) * (nibble + 16 * fifth bit) - dmin * m.
__device__ __forceinline__ void decode_q5_k(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 176;
    const int j = item & 7, c = j >> 1, hf = j & 1;
    const uint32_t dd = u32_at_a4(blk);
    float sc, mn;
    q4_k_scale_min_dev(u32_at_a4(blk + 4), u32_at_a4(blk + 8), u32_at_a4(blk + 12), j, sc, mn);
    const float dl = __fmul_rn(half_bits_to_float(dd), sc), ml = __fmul_rn(half_bits_to_float(dd >> 16), mn);
    uint32_t qh[8], qs[8];
    load_words<4>(blk + 16, qh);
    load_words<4>(blk + 48 + 32 * c, qs);
    const int shift = 4 * hf, hbit = 2 * c + hf;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        const uint32_t q = ((byte_of(qs, l) >> shift) & 0xFu) + (((byte_of(qh, l) >> hbit) & 1u) << 4);
        v[l] = __fsub_rn(__fmul_rn(dl, float(q)), ml);
    }
}

// Q3_K, item i: elements 32 j .. 32 j + 31 (j = i % 8: half j / 4, bit pair j % 4) of block i / 8,
// sub-blocks 2j and 2j + 1; dequantize_row_q3_K: (d * (sc - 32)) * (low - (high bit ? 0 : 4)).
__device__ __forceinline__ void decode_q3_k(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 110;
    const int j = item & 7, h = j >> 2, g = j & 3;
    const float d = half_bits_to_float(u16_at(blk + 108));
    const float dl0 = __fmul_rn(d, float(q3_k_scale_dev(blk + 96, 2 * j) - 32));
    const float dl1 = __fmul_rn(d, float(q3_k_scale_dev(blk + 96, 2 * j + 1) - 32));
    uint32_t hm[8], qs[8];
    load_words<2>(blk, hm);
    load_words<2>(blk + 32 + 32 * h, qs);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        const int low = int((byte_of(qs, l) >> (2 * g)) & 3u), high = int((byte_of(hm, l) >> j) & 1u);
        v[l] = __fmul_rn(l < 16 ? dl0 : dl1, float(low - (high ? 0 : 4)));
    }
}

// Q2_K, item i: elements 32 j .. 32 j + 31 of block i / 8 as Q3_K's low bits, sub-blocks 2j and
// 2j + 1; dequantize_row_q2_K: (d * sc) * q - dmin * m.
__device__ __forceinline__ void decode_q2_k(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 84;
    const int j = item & 7, h = j >> 2, g = j & 3;
    const uint32_t dd = u32_at_a4(blk + 80);
    const float d = half_bits_to_float(dd), dmin = half_bits_to_float(dd >> 16);
    const uint32_t s0 = blk[2 * j], s1 = blk[2 * j + 1];
    const float dl0 = __fmul_rn(d, float(s0 & 0xFu)), ml0 = __fmul_rn(dmin, float(s0 >> 4));
    const float dl1 = __fmul_rn(d, float(s1 & 0xFu)), ml1 = __fmul_rn(dmin, float(s1 >> 4));
    uint32_t qs[8];
    load_words<4>(blk + 16 + 32 * h, qs);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        const float q = float((byte_of(qs, l) >> (2 * g)) & 3u);
        v[l] = l < 16 ? __fsub_rn(__fmul_rn(dl0, q), ml0) : __fsub_rn(__fmul_rn(dl1, q), ml1);
    }
}

// IQ4_XS, item i: sub-block j = i % 8 of block i / 8; dequantize_row_iq4_xs:
// (d * (ls - 32)) * kvalues_iq4nl[q].
__device__ __forceinline__ void decode_iq4_xs(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    const uint8_t *blk = row + size_t(item >> 3) * 136;
    const int j = item & 7;
    const uint32_t head = u32_at_a4(blk), scales_l = u32_at_a4(blk + 4);  // d | scales_h << 16
    const int ls = int((scales_l >> (4 * j)) & 0xFu) | int(((head >> (16 + 2 * j)) & 3u) << 4);
    const float dl = __fmul_rn(half_bits_to_float(head), float(ls - 32));
    uint32_t qs[4];
    load_words<4>(blk + 8 + 16 * j, qs);
    const nibble_table tab{iq4nl_w0, iq4nl_w1, iq4nl_w2, iq4nl_w3};
#pragma unroll
    for (int l = 0; l < 16; ++l) {
        const uint32_t q = byte_of(qs, l);
        v[l] = __fmul_rn(dl, float(nibble_lookup(tab, q & 0xFu)));
        v[l + 16] = __fmul_rn(dl, float(nibble_lookup(tab, q >> 4)));
    }
}

// The 32-element blocks other than Q8_0: byte l of qs holds element l (low nibble) and l + 16
// (high nibble); the Q5 types' fifth bits are bit l of the little-endian word qh. As
// dequantize_row_*: Q4_0 (q - 8) * d; Q4_1 q * d + m; Q5_0 (q - 16) * d; Q5_1 q * d + m;
// IQ4_NL d * kvalues_iq4nl[q]; MXFP4 kvalues_mxfp4[q] * (2^(e - 127) / 2).
template <ggml_type T>
__device__ __forceinline__ void decode_block32(const uint8_t *__restrict__ row, int item, float (&v)[32]) {
    constexpr int bytes = T == ggml_type::q4_0 || T == ggml_type::iq4_nl ? 18
                          : T == ggml_type::q4_1                         ? 20
                          : T == ggml_type::q5_0                         ? 22
                          : T == ggml_type::q5_1                         ? 24
                                                                         : 17;
    constexpr int qs_off = bytes - 16;  // the nibbles end every block
    const uint8_t *blk = row + size_t(item) * bytes;
    uint32_t qs[4];
    float d = 0.0f, m = 0.0f;
    uint32_t qh = 0;
    if constexpr (T == ggml_type::mxfp4) {
        const uint32_t e = blk[0];
        d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);  // ggml_e8m0_to_fp32_half, exact
        load_words<1>(blk + qs_off, qs);
    } else if constexpr (T == ggml_type::q4_1 || T == ggml_type::q5_1) {
        const uint32_t dm = u32_at_a4(blk);
        d = half_bits_to_float(dm);
        m = half_bits_to_float(dm >> 16);
        if constexpr (T == ggml_type::q5_1) qh = u32_at_a4(blk + 4);
        load_words<4>(blk + qs_off, qs);
    } else {
        d = half_bits_to_float(u16_at(blk));
        if constexpr (T == ggml_type::q5_0) qh = u32_at_a2(blk + 2);
        load_words<2>(blk + qs_off, qs);
    }
    const nibble_table tab = T == ggml_type::mxfp4 ? nibble_table{mxfp4_w0, mxfp4_w1, mxfp4_w2, mxfp4_w3}
                                                   : nibble_table{iq4nl_w0, iq4nl_w1, iq4nl_w2, iq4nl_w3};
#pragma unroll
    for (int l = 0; l < 16; ++l) {
        const uint32_t q = byte_of(qs, l);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const uint32_t nib = hf ? q >> 4 : q & 0xFu;
            const uint32_t q5 = nib | (((qh >> (l + 16 * hf)) & 1u) << 4);
            float &out = v[l + 16 * hf];
            if constexpr (T == ggml_type::q4_0) out = __fmul_rn(float(int(nib) - 8), d);
            else if constexpr (T == ggml_type::q4_1) out = __fadd_rn(__fmul_rn(float(nib), d), m);
            else if constexpr (T == ggml_type::q5_0) out = __fmul_rn(float(int(q5) - 16), d);
            else if constexpr (T == ggml_type::q5_1) out = __fadd_rn(__fmul_rn(float(q5), d), m);
            else if constexpr (T == ggml_type::iq4_nl) out = __fmul_rn(d, float(nibble_lookup(tab, nib)));
            else out = __fmul_rn(float(nibble_lookup(tab, nib)), d);
        }
    }
}

// The types decoded through the generic path only, with contiguous items.
template <ggml_type T>
constexpr bool generic_only_type = T == ggml_type::q5_k || T == ggml_type::q3_k || T == ggml_type::q2_k ||
                                   T == ggml_type::iq4_xs || T == ggml_type::q4_0 || T == ggml_type::q4_1 ||
                                   T == ggml_type::q5_0 || T == ggml_type::q5_1 || T == ggml_type::iq4_nl ||
                                   T == ggml_type::mxfp4 || iq_grid_type<T>;

// Items per row of n_in elements (n_in a multiple of 32 and of the block).
__host__ __device__ constexpr int64_t items_per_row(int64_t n_in) { return n_in / 32; }

// Q4_K in two steps, so a loop can issue the next item's loads before decoding this one.
struct q4_k_raw {
    uint4 q;                  // 16 bytes of quants: 32 elements
    uint32_t dd, s0, s1, s2;  // d | dmin << 16, the 12 packed scale bytes
};
__device__ __forceinline__ q4_k_raw load_q4_k(const uint8_t *__restrict__ row, int item) {
    const uint8_t *blk = row + size_t(item >> 3) * 144;
    const int u = item & 7, c = u >> 1, hf = u & 1;
    const uint4 head = *reinterpret_cast<const uint4 *>(blk);  // d, dmin and the scales: one 16-byte load
    q4_k_raw r;
    r.dd = head.x;
    r.s0 = head.y;
    r.s1 = head.z;
    r.s2 = head.w;
    r.q = *reinterpret_cast<const uint4 *>(blk + 16 + 32 * c + 16 * hf);
    return r;
}
// The scales of an item's two sub-blocks (2c, 2c + 1): value = d1 * q - m1 (low nibbles) or
// d2 * q - m2 (high nibbles), as dequantize_row_q4_K computes them.
struct q4_k_item_scales {
    float d1, m1, d2, m2;
};
__device__ __forceinline__ q4_k_item_scales q4_k_scales_of(const q4_k_raw &r, int item) {
    const int c = (item & 7) >> 1;
    const float d = half_bits_to_float(r.dd), dmin = half_bits_to_float(r.dd >> 16);
    float sc1, m1s, sc2, m2s;
    q4_k_scale_min_dev(r.s0, r.s1, r.s2, 2 * c, sc1, m1s);
    q4_k_scale_min_dev(r.s0, r.s1, r.s2, 2 * c + 1, sc2, m2s);
    return {__fmul_rn(d, sc1), __fmul_rn(dmin, m1s), __fmul_rn(d, sc2), __fmul_rn(dmin, m2s)};
}
__device__ __forceinline__ void decode_q4_k(const q4_k_raw &r, int item, float (&v)[32], int (&start)[4]) {
    const int u = item & 7, c = u >> 1, hf = u & 1;
    const q4_k_item_scales k = q4_k_scales_of(r, item);
    const float d1 = k.d1, m1 = k.m1, d2 = k.d2, m2 = k.m2;
    const uint32_t qw[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
    for (int b = 0; b < 16; ++b) {
        const uint32_t byte = (qw[b >> 2] >> (8 * (b & 3))) & 0xFFu;
        v[b] = __fsub_rn(__fmul_rn(d1, float(byte & 0xFu)), m1);
        v[16 + b] = __fsub_rn(__fmul_rn(d2, float(byte >> 4)), m2);
    }
    const int s = (item >> 3) * 256 + 64 * c + 16 * hf;
    start[0] = s; start[1] = s + 8; start[2] = s + 32; start[3] = s + 40;
}

// Where item `item` of a row lives (the `start` decode_item would give), without decoding it.
template <ggml_type T>
__device__ __forceinline__ void item_starts(int item, int (&start)[4]) {
    if constexpr (T == ggml_type::q4_k) {
        const int u = item & 7, c = u >> 1, hf = u & 1;
        const int s = (item >> 3) * 256 + 64 * c + 16 * hf;
        start[0] = s; start[1] = s + 8; start[2] = s + 32; start[3] = s + 40;
    } else if constexpr (T == ggml_type::q6_k) {
        const int u = item & 7, h = u >> 2, l0 = 8 * (u & 3);
        const int s0 = (item >> 3) * 256 + 128 * h + l0;
        start[0] = s0; start[1] = s0 + 32; start[2] = s0 + 64; start[3] = s0 + 96;
    } else {
        const int s0 = item * 32;
        start[0] = s0; start[1] = s0 + 8; start[2] = s0 + 16; start[3] = s0 + 24;
    }
}

// Generic two-step form: Q4_K loads early; other types load inside decode.
template <ggml_type T>
struct item_raw {
    const uint8_t *row;
};
template <>
struct item_raw<ggml_type::q4_k> {
    q4_k_raw r;
};

template <ggml_type T>
__device__ __forceinline__ void decode_item(const uint8_t *__restrict__ row, int item, float (&v)[32], int (&start)[4]) {
    if constexpr (T == ggml_type::q4_k) {
        decode_q4_k(load_q4_k(row, item), item, v, start);
    } else if constexpr (T == ggml_type::q6_k) {
        const uint8_t *blk = row + size_t(item >> 3) * 210;
        const int u = item & 7, h = u >> 2, l0 = 8 * (u & 3), k = l0 >> 4;
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        const int8_t *sc = reinterpret_cast<const int8_t *>(blk + 192 + 8 * h);
        const float d = half_bits_to_float(*reinterpret_cast<const uint16_t *>(blk + 208));
        float s[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) s[t] = __fmul_rn(d, float(sc[2 * t + k]));
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int l = l0 + i;
            const uint32_t a = ql[l], b = ql[l + 32], hb = qh[l];
            v[i] = __fmul_rn(s[0], float(int((a & 0xFu) | (((hb >> 0) & 3u) << 4)) - 32));
            v[8 + i] = __fmul_rn(s[1], float(int((b & 0xFu) | (((hb >> 2) & 3u) << 4)) - 32));
            v[16 + i] = __fmul_rn(s[2], float(int((a >> 4) | (((hb >> 4) & 3u) << 4)) - 32));
            v[24 + i] = __fmul_rn(s[3], float(int((b >> 4) | (((hb >> 6) & 3u) << 4)) - 32));
        }
        const int s0 = (item >> 3) * 256 + 128 * h + l0;
        start[0] = s0; start[1] = s0 + 32; start[2] = s0 + 64; start[3] = s0 + 96;
    } else if constexpr (T == ggml_type::q8_0) {
        const uint8_t *blk = row + size_t(item) * 34;
        const float d = half_bits_to_float(*reinterpret_cast<const uint16_t *>(blk));
        const uint16_t *qs = reinterpret_cast<const uint16_t *>(blk + 2);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const uint32_t two = qs[i];
            v[2 * i] = __fmul_rn(float(int8_t(two & 0xFFu)), d);
            v[2 * i + 1] = __fmul_rn(float(int8_t(two >> 8)), d);
        }
        const int s0 = item * 32;
        start[0] = s0; start[1] = s0 + 8; start[2] = s0 + 16; start[3] = s0 + 24;
    } else if constexpr (T == ggml_type::q5_k) {
        decode_q5_k(row, item, v);
        contiguous_starts(item, start);
    } else if constexpr (T == ggml_type::q3_k) {
        decode_q3_k(row, item, v);
        contiguous_starts(item, start);
    } else if constexpr (T == ggml_type::q2_k) {
        decode_q2_k(row, item, v);
        contiguous_starts(item, start);
    } else if constexpr (T == ggml_type::iq4_xs) {
        decode_iq4_xs(row, item, v);
        contiguous_starts(item, start);
    } else if constexpr (iq_grid_type<T>) {
        decode_iq_grid<T>(row, item, v);
        contiguous_starts(item, start);
    } else if constexpr (T == ggml_type::q4_0 || T == ggml_type::q4_1 || T == ggml_type::q5_0 || T == ggml_type::q5_1 ||
                         T == ggml_type::iq4_nl || T == ggml_type::mxfp4) {
        decode_block32<T>(row, item, v);
        contiguous_starts(item, start);
    } else if constexpr (T == ggml_type::f32) {
        const float4 *p = reinterpret_cast<const float4 *>(row) + size_t(item) * 8;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float4 f = p[i];
            v[4 * i] = f.x; v[4 * i + 1] = f.y; v[4 * i + 2] = f.z; v[4 * i + 3] = f.w;
        }
        const int s0 = item * 32;
        start[0] = s0; start[1] = s0 + 8; start[2] = s0 + 16; start[3] = s0 + 24;
    } else {
        static_assert(T == ggml_type::f16 || T == ggml_type::bf16, "decode_item: unsupported type");
        const uint4 *p = reinterpret_cast<const uint4 *>(row) + size_t(item) * 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 q = p[i];
            const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if constexpr (T == ggml_type::f16) {
                    v[8 * i + 2 * j] = half_bits_to_float(w[j]);
                    v[8 * i + 2 * j + 1] = half_bits_to_float(w[j] >> 16);
                } else {
                    v[8 * i + 2 * j] = bf16_bits_to_float(w[j]);
                    v[8 * i + 2 * j + 1] = bf16_bits_to_float(w[j] >> 16);
                }
            }
        }
        const int s0 = item * 32;
        start[0] = s0; start[1] = s0 + 8; start[2] = s0 + 16; start[3] = s0 + 24;
    }
}

template <ggml_type T>
__device__ __forceinline__ item_raw<T> load_item(const uint8_t *__restrict__ row, int item) {
    if constexpr (T == ggml_type::q4_k) return {load_q4_k(row, item)};
    else return {row};
}
template <ggml_type T>
__device__ __forceinline__ void decode_raw(const item_raw<T> &raw, int item, float (&v)[32], int (&start)[4]) {
    if constexpr (T == ggml_type::q4_k) decode_q4_k(raw.r, item, v, start);
    else decode_item<T>(raw.row, item, v, start);
}

// Dequantises a whole row of n elements, items split over n_threads threads (embedding lookup).
template <ggml_type T>
__device__ __forceinline__ void decode_row(const uint8_t *__restrict__ row, float *__restrict__ out, int n, int tid, int n_threads) {
    for (int item = tid; item < n / 32; item += n_threads) {
        float v[32];
        int start[4];
        decode_item<T>(row, item, v, start);
#pragma unroll
        for (int t = 0; t < 4; ++t)
#pragma unroll
            for (int i = 0; i < 8; ++i) out[start[t] + i] = v[8 * t + i];
    }
}

// Shared by the decode products (matvec.cu, matvec_digits.cu): the lane layout of mma fragments.
// The bytes lane t of a quad needs of one Q4_K block of a row: the header (d, dmin, scales) and
// quant bytes 32c + 8t .. +7 for c = 0..3 (elements 8t .. 8t + 7 of sub-blocks 2c and 2c + 1).
struct q4_k_lane {
    uint4 head;
    uint2 qs[4];
};
__device__ __forceinline__ q4_k_lane load_q4_k_lane(const uint8_t *__restrict__ row, int blk, int t) {
    const uint8_t *b = row + size_t(blk) * 144;
    q4_k_lane r;
    r.head = *reinterpret_cast<const uint4 *>(b);
#pragma unroll
    for (int c = 0; c < 4; ++c) r.qs[c] = *reinterpret_cast<const uint2 *>(b + 16 + 32 * c + 8 * t);
    return r;
}

}  // namespace tandem::cuda
