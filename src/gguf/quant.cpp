// src/gguf/quant.cpp - quant.h's entry points: argument checks, the table of row functions per
// tensor type, the scan for non-finite block scales, dot_f32.
#include "tandem/quant.h"

#include "tandem/error.h"

#include "quant_rows.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace tandem {
namespace {

using namespace quant_detail;

using dequantize_fn = void (*)(const void *src, float *dst, int64_t n);  // n: blocks (elements for plain types)
using quantize_fn = void (*)(const float *src, void *dst, int64_t n);
// Byte offsets of a block's fp16 scale fields, for the non-finite scan (-1: unused).
using scale_offsets = std::array<int, 2>;

struct type_ops {
    ggml_type type;
    dequantize_fn dequantize;
    quantize_fn quantize;  // nullptr: ggml needs an importance matrix for this type
    scale_offsets halves;
};

// Adapters from the typed row kernels to the table's signatures.
template <class Block, void (*Fn)(const Block *, float *, int64_t)>
void dequantize_as(const void *src, float *dst, int64_t n) { Fn(static_cast<const Block *>(src), dst, n); }
template <class Block, void (*Fn)(const float *, Block *, int64_t)>
void quantize_as(const float *src, void *dst, int64_t n) { Fn(src, static_cast<Block *>(dst), n); }

void copy_f32(const void *src, float *dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); }
void copy_f32_out(const float *src, void *dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); }

#define TANDEM_OPS(name, block, offsets)                                                                     \
    type_ops{ggml_type::name, dequantize_as<block, dequantize_row_##name>, quantize_as<block, quantize_row_##name>, \
             offsets}
#define TANDEM_DEQUANT_OPS(name, block, offsets) \
    type_ops{ggml_type::name, dequantize_as<block, dequantize_row_##name>, nullptr, offsets}

// Every computable type. The scale offsets name each fp16 field a block holds (IQ1_M spreads its
// scale over four nibbles; MXFP4's E8M0 exponent is always finite, so neither is listed).
const std::array<type_ops, 23> ops_table = {{
    {ggml_type::f32, copy_f32, copy_f32_out, {-1, -1}},
    {ggml_type::f16, dequantize_as<uint16_t, dequantize_row_f16>, quantize_as<uint16_t, quantize_row_f16>, {-1, -1}},
    {ggml_type::bf16, dequantize_as<uint16_t, dequantize_row_bf16>, quantize_as<uint16_t, quantize_row_bf16>, {-1, -1}},
    TANDEM_OPS(q4_0, block_q4_0, (scale_offsets{0, -1})),
    TANDEM_OPS(q4_1, block_q4_1, (scale_offsets{0, 2})),
    TANDEM_OPS(q5_0, block_q5_0, (scale_offsets{0, -1})),
    TANDEM_OPS(q5_1, block_q5_1, (scale_offsets{0, 2})),
    TANDEM_OPS(q8_0, block_q8_0, (scale_offsets{0, -1})),
    TANDEM_OPS(q2_k, block_q2_k, (scale_offsets{80, 82})),
    TANDEM_OPS(q3_k, block_q3_k, (scale_offsets{108, -1})),
    TANDEM_OPS(q4_k, block_q4_k, (scale_offsets{0, 2})),
    TANDEM_OPS(q5_k, block_q5_k, (scale_offsets{0, 2})),
    TANDEM_OPS(q6_k, block_q6_k, (scale_offsets{208, -1})),
    TANDEM_OPS(iq4_nl, block_iq4_nl, (scale_offsets{0, -1})),
    TANDEM_OPS(iq4_xs, block_iq4_xs, (scale_offsets{0, -1})),
    TANDEM_OPS(mxfp4, block_mxfp4, (scale_offsets{-1, -1})),
    TANDEM_DEQUANT_OPS(iq2_xxs, block_iq2_xxs, (scale_offsets{0, -1})),
    TANDEM_DEQUANT_OPS(iq2_xs, block_iq2_xs, (scale_offsets{0, -1})),
    TANDEM_DEQUANT_OPS(iq2_s, block_iq2_s, (scale_offsets{0, -1})),
    TANDEM_DEQUANT_OPS(iq3_xxs, block_iq3_xxs, (scale_offsets{0, -1})),
    TANDEM_DEQUANT_OPS(iq3_s, block_iq3_s, (scale_offsets{0, -1})),
    TANDEM_DEQUANT_OPS(iq1_s, block_iq1_s, (scale_offsets{0, -1})),
    TANDEM_DEQUANT_OPS(iq1_m, block_iq1_m, (scale_offsets{-1, -1})),
}};
#undef TANDEM_OPS
#undef TANDEM_DEQUANT_OPS

const type_ops *find_ops(ggml_type type) {
    for (const type_ops &ops : ops_table)
        if (ops.type == type) return &ops;
    return nullptr;
}

// Checks n against the type and returns its table row; `what` names the operation in errors.
const type_ops &checked_ops(ggml_type type, int64_t n, const char *what) {
    const uint32_t id = static_cast<uint32_t>(type);
    if (!ggml_type_info(id)) fail(error_kind::unsupported, "{}: unknown tensor type id {}", what, id);
    const ggml_type_traits &traits = ggml_type_info(type);
    const type_ops *ops = find_ops(type);
    if (!ops) fail(error_kind::unsupported, "{}: tensor type {} is not supported", what, traits.name);
    if (n < 0) fail(error_kind::invalid_request, "{}: negative element count {} for {}", what, n, traits.name);
    if (n % traits.block_elems != 0)
        fail(error_kind::invalid_request, "{}: {} elements is not a multiple of {}'s block of {}", what, n, traits.name,
             traits.block_elems);
    return *ops;
}

}  // namespace

namespace quant_detail {

uint16_t checked_half(float v, const char *type_name, int64_t block_index) {
    const uint16_t h = float_to_half(v);
    if ((h & 0x7c00) == 0x7c00)
        fail(error_kind::invalid_request, "{} block {}: scale {} does not fit fp16 (the block's values are too large)",
             type_name, block_index, v);
    return h;
}

}  // namespace quant_detail

bool ggml_type_can_quantize(ggml_type type) {
    const type_ops *ops = find_ops(type);
    return ops && ops->quantize;
}

void dequantize_row(ggml_type type, const void *src, float *dst, int64_t n) {
    const type_ops &ops = checked_ops(type, n, "dequantize");
    if (n == 0) return;
    TANDEM_ASSERT(src != nullptr && dst != nullptr);
    ops.dequantize(src, dst, n / ggml_type_info(type).block_elems);
}

// Rows of a block type carry no padding (ggml_row_bytes is whole blocks), so n_rows rows of
// row_len elements are one run of n_rows * row_len elements.
void dequantize_rows(ggml_type type, const void *src, float *dst, int64_t n_rows, int64_t row_len) {
    checked_ops(type, row_len, "dequantize");
    if (n_rows < 0) fail(error_kind::invalid_request, "dequantize: negative row count {}", n_rows);
    if (row_len != 0 && n_rows > std::numeric_limits<int64_t>::max() / row_len)
        fail(error_kind::invalid_request, "dequantize: {} rows of {} elements overflow", n_rows, row_len);
    dequantize_row(type, src, dst, n_rows * row_len);
}

void quantize_row(ggml_type type, const float *src, void *dst, int64_t n) {
    const type_ops &ops = checked_ops(type, n, "quantize");
    const ggml_type_traits &traits = ggml_type_info(type);
    if (!ops.quantize)
        fail(error_kind::unsupported, "quantize: {} needs an importance matrix, which this quantizer does not take",
             traits.name);
    if (n == 0) return;
    TANDEM_ASSERT(src != nullptr && dst != nullptr);
    if (traits.block_elems > 1) {
        // The block quantizers search over scales; an inf or NaN would poison every block
        // statistic, so refuse it up front. The flag loop vectorizes; the index is found only on failure.
        bool finite = true;
        for (int64_t i = 0; i < n; ++i) finite &= std::fabs(src[i]) <= std::numeric_limits<float>::max();
        if (!finite) {
            int64_t i = 0;
            while (std::fabs(src[i]) <= std::numeric_limits<float>::max()) ++i;
            fail(error_kind::invalid_request, "quantize to {}: element {} is {}, not finite", traits.name, i, src[i]);
        }
    }
    ops.quantize(src, dst, n / traits.block_elems);
}

int64_t find_nonfinite_scale(ggml_type type, const void *data, int64_t n_blocks) {
    const type_ops *ops = find_ops(type);
    if (!ops || n_blocks <= 0) return -1;
    const auto &traits = ggml_type_info(type);
    const auto *bytes = static_cast<const uint8_t *>(data);
    const auto stride = static_cast<size_t>(traits.block_bytes);
    if (type == ggml_type::iq1_m) {
        // The scale's exponent is bits 10..14: the top nibbles of the third and fourth u16.
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t *s = bytes + static_cast<size_t>(b) * stride + 48;
            const int bits_8_to_14 = (s[5] >> 4) | ((s[7] >> 4) & 7) << 4;
            if ((bits_8_to_14 >> 2) == 31) return b;
        }
        return -1;
    }
    for (int off : ops->halves) {
        if (off < 0) continue;
        int64_t first = -1;
        // One flag per pass so the loop vectorizes; the block is located only when one is bad.
        bool bad = false;
        for (int64_t b = 0; b < n_blocks; ++b) {
            uint16_t h;
            std::memcpy(&h, bytes + static_cast<size_t>(b) * stride + static_cast<size_t>(off), 2);
            bad |= (h & 0x7c00) == 0x7c00;
        }
        if (!bad) continue;
        for (int64_t b = 0; b < n_blocks && first < 0; ++b) {
            uint16_t h;
            std::memcpy(&h, bytes + static_cast<size_t>(b) * stride + static_cast<size_t>(off), 2);
            if ((h & 0x7c00) == 0x7c00) first = b;
        }
        return first;
    }
    return -1;
}

// 32 independent lane sums: four 8-float vector accumulators, so the adds pipeline and the loop
// runs at load bandwidth; the order (see quant.h) depends only on n.
float dot_f32(const float *a, const float *b, int64_t n) {
    TANDEM_ASSERT(n >= 0, "dot_f32: negative length {}", n);
    constexpr int lanes = 32;
    float acc[lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        // Fully unrolled, g++ keeps the 32 lanes in four vector registers; as a loop it would
        // reload and store them every step.
#pragma GCC unroll 32
        for (int j = 0; j < lanes; ++j) acc[j] += a[i + j] * b[i + j];
    }
    for (int j = 0; i + j < n; ++j) acc[j] += a[i + j] * b[i + j];
    for (int w = lanes / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
    return acc[0];
}

}  // namespace tandem
