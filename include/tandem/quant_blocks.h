// tandem/quant_blocks.h - the byte layouts of ggml's quantized blocks (Q8_0, Q4_K, Q6_K).
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
