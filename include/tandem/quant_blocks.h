// tandem/quant_blocks.h - the byte layouts of ggml's quantized blocks (legacy, K-quants, IQ, MXFP4).
// Plain structs with no dependencies so CUDA kernels can include them too. Every layout is
// ggml-common.h's, byte for byte: a GGUF tensor of these types is an array of these structs.
// Half-precision fields are raw IEEE binary16 bits (convert with fp16_to_fp32 in quant.h).
#pragma once

#include "tandem/host_device.h"  // lets CUDA kernels call the unpacking function below on the device

#include <cstdint>

namespace tandem {

// Q8_0: 32 elements, x[j] = d * qs[j].
struct block_q8_0 {
    uint16_t d;      // fp16 scale
    int8_t qs[32];   // quants
};
static_assert(sizeof(block_q8_0) == 2 + 32, "block_q8_0 must match ggml's 34-byte block");

// Q4_K: 256 elements in 8 sub-blocks of 32; sub-block j has a 6-bit scale sc_j and min m_j:
//   x = d * sc_j * q - dmin * m_j, q a 4-bit quant.
// scales[12] packs the 8 (sc, m) pairs, see q4_k_scale_min below.
// qs[128]: four chunks of 32 bytes; chunk c holds sub-block 2c in the low nibbles and sub-block
// 2c+1 in the high nibbles (byte l of chunk c: element 64c + l low, 64c + 32 + l high).
struct block_q4_k {
    uint16_t d;            // fp16 super-block scale of the scales
    uint16_t dmin;         // fp16 super-block scale of the mins
    uint8_t scales[12];    // 6-bit scales and mins, packed
    uint8_t qs[128];       // 4-bit quants
};
static_assert(sizeof(block_q4_k) == 2 + 2 + 12 + 128, "block_q4_k must match ggml's 144-byte block");

// Q6_K: 256 elements in 16 sub-blocks of 16 with int8 scales: x = d * scales[s] * (q - 32),
// q a 6-bit quant: low 4 bits in ql, high 2 bits in qh. Two halves of 128 elements; in half h
// (ql + 64h, qh + 32h, scales + 8h), for l in 0..31 with element e = 128h + l:
//   q[e]      = ql[l]      & 0xF | ((qh[l] >> 0) & 3) << 4
//   q[e + 32] = ql[l + 32] & 0xF | ((qh[l] >> 2) & 3) << 4
//   q[e + 64] = ql[l]      >> 4  | ((qh[l] >> 4) & 3) << 4
//   q[e + 96] = ql[l + 32] >> 4  | ((qh[l] >> 6) & 3) << 4
// and element e uses scales[e / 16].
struct block_q6_k {
    uint8_t ql[128];       // low 4 bits of the quants
    uint8_t qh[64];        // high 2 bits of the quants
    int8_t scales[16];     // 8-bit sub-block scales
    uint16_t d;            // fp16 super-block scale
};
static_assert(sizeof(block_q6_k) == 128 + 64 + 16 + 2, "block_q6_k must match ggml's 210-byte block");

// ---- legacy 32-element blocks: x = d * q (+ m) ----
// Q4_0: byte j holds element j (low nibble) and j + 16 (high nibble); x = d * (q - 8).
struct block_q4_0 {
    uint16_t d;
    uint8_t qs[16];
};
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must match ggml's 18-byte block");
// Q4_1: as Q4_0 without the offset; x = d * q + m.
struct block_q4_1 {
    uint16_t d, m;
    uint8_t qs[16];
};
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 must match ggml's 20-byte block");
// Q5_0: the Q4_0 nibbles plus a fifth bit per element in qh (bit j: element j, little-endian
// u32); x = d * (q - 16).
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
};
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 must match ggml's 22-byte block");
struct block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
};
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 must match ggml's 24-byte block");

// ---- K-quants (256 elements) ----
// Q2_K: 16 sub-blocks of 16; scales[s] = 4-bit scale (low) | 4-bit min (high);
// x = d * sc * q - dmin * m, q 2 bits: element 128h + 32g + l (l < 32) is bits 2g..2g+1 of qs[32h + l].
struct block_q2_k {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
};
static_assert(sizeof(block_q2_k) == 84, "block_q2_k must match ggml's 84-byte block");
// Q3_K: Q2_K's low bits plus hmask (bit g of hmask[e % 32] is the high bit of element 32g + e % 32,
// set meaning "no -4"); 16 signed 6-bit scales packed in 12 bytes; x = d * (sc - 32) * q.
struct block_q3_k {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
};
static_assert(sizeof(block_q3_k) == 110, "block_q3_k must match ggml's 110-byte block");
// Q5_K: Q4_K's scales and nibbles plus qh: bit 2c (2c + 1) of qh[l] is the fifth bit of element
// 64c + l (64c + 32 + l).
struct block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
static_assert(sizeof(block_q5_k) == 176, "block_q5_k must match ggml's 176-byte block");

// ---- IQ types (importance-weighted grids; see quant_iq_grids.h for the grids) ----
// IQ2_XXS: per 32 elements two u32: the first holds four 8-bit grid indices (8 values each),
// the second four 7-bit sign indices and a 4-bit scale in bits 28..31.
struct block_iq2_xxs {
    uint16_t d;
    uint16_t qs[32];
};
static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs must match ggml's 66-byte block");
// IQ2_XS: per 8 elements a u16 of 9-bit grid index and 7-bit sign index; 4-bit scales per 16.
struct block_iq2_xs {
    uint16_t d;
    uint16_t qs[32];
    uint8_t scales[8];
};
static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs must match ggml's 74-byte block");
// IQ2_S: 10-bit grid indices (qs low 8 bits, qh 2 bits each), explicit sign bytes after the
// 32 index bytes in qs, 4-bit scales per 16.
struct block_iq2_s {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t scales[8];
};
static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s must match ggml's 82-byte block");
// IQ3_XXS: 64 bytes of 8-bit grid indices (4 values each), then per 32 elements a u32 of four
// 7-bit sign indices and a 4-bit scale.
struct block_iq3_xxs {
    uint16_t d;
    uint8_t qs[96];
};
static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs must match ggml's 98-byte block");
// IQ3_S: 9-bit grid indices (qs + one qh bit each), explicit signs, 4-bit scales per 32.
struct block_iq3_s {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t signs[32];
    uint8_t scales[4];
};
static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s must match ggml's 110-byte block");
// IQ1_S: 11-bit grid indices (qs + 3 bits of qh each); qh[ib] bits 12..14 the scale, bit 15 the
// sign of the shift.
struct block_iq1_s {
    uint16_t d;
    uint8_t qs[32];
    uint16_t qh[8];
};
static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s must match ggml's 50-byte block");
// IQ1_M: no d field: the fp16 scale is spread over the top nibbles of the four u16 in scales.
struct block_iq1_m {
    uint8_t qs[32];
    uint8_t qh[16];
    uint8_t scales[8];
};
static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m must match ggml's 56-byte block");
// IQ4_NL: 32 elements, 4-bit indices into the non-linear table kvalues_iq4nl (Q4_0's nibble order).
struct block_iq4_nl {
    uint16_t d;
    uint8_t qs[16];
};
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl must match ggml's 18-byte block");
// IQ4_XS: 256 elements, IQ4_NL sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l,
// high 2 bits in scales_h), x = d * (ls - 32) * kvalues_iq4nl[q].
struct block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
};
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs must match ggml's 136-byte block");

// MXFP4 (OCP microscaling): 32 E2M1 values sharing an E8M0 exponent e; Q4_0's nibble order.
struct block_mxfp4 {
    uint8_t e;
    uint8_t qs[16];
};
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 must match ggml's 17-byte block");

// The 6-bit (scale, min) of Q4_K sub-block j (0..7), as ggml's get_scale_min_k4 unpacks them:
// j < 4: low 6 bits of scales[j] and scales[j + 4]; j >= 4: low/high nibble of scales[j + 4]
// with the top 2 bits of scales[j - 4] (scale) and scales[j] (min) as bits 4..5.
struct q4_k_scale_min {
    uint8_t scale, min;
};
TANDEM_HOST_DEVICE inline constexpr q4_k_scale_min q4_k_get_scale_min(const uint8_t *scales, int j) {
    if (j < 4) return {static_cast<uint8_t>(scales[j] & 63), static_cast<uint8_t>(scales[j + 4] & 63)};
    return {static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4)),
            static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}

}  // namespace tandem
