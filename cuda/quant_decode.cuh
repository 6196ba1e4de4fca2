// cuda/quant_decode.cuh - device decoding of GGUF weight rows into 32-element items, shared by
// the kernel families. An item is 32 weights of one row, held as four runs of 8 consecutive
// elements (`start[t]` .. `start[t] + 7` hold v[8t] .. v[8t + 7]); item i of a row covers:
//   Q4_K: block i / 8, bytes qs[16 (i % 8) .. +16): sub-blocks 2c, 2c+1 (c = (i % 8) / 2);
//   Q6_K: block i / 8, half h = (i % 8) / 4, l = 8 (i % 4) .. +8 of that half's four quarters;
//   Q8_0: block i; F32/F16/BF16: elements 32 i .. 32 i + 31.
// Values use dequantize_row_*'s expressions (d * sc * q - dmin * m for Q4_K, d * sc * q for
// Q6_K, q * d for Q8_0), so each weight equals the CPU's dequantised weight bitwise.
#pragma once

#include "tandem/quant_blocks.h"
#include "tandem/types.h"

#include <cuda_fp16.h>

#include <cstdint>

namespace tandem::cuda {

static_assert(sizeof(block_q4_k) == 144 && sizeof(block_q6_k) == 210 && sizeof(block_q8_0) == 34);

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
