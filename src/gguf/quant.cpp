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
// One row of n blocks (elements for plain types) with the row's importance (nullptr: none).
using quantize_fn = void (*)(const float *src, void *dst, int64_t n, const float *importance);
// Byte offsets of a block's fp16 scale fields, for the non-finite scan (-1: unused).
using scale_offsets = std::array<int, 2>;

// How a type's quantizer uses an importance matrix, as ggml_quantize_chunk dispatches.
enum class importance_use {
    ignored,   // q8_0, mxfp4, f16, bf16, f32: quantize_* never reads it
    optional,  // the reference quantizer without it, the *_impl search with it (or one search for both)
    required,  // iq2_xxs, iq2_xs, iq1_s: ggml_quantize_requires_imatrix
};

struct type_ops {
    ggml_type type;
    dequantize_fn dequantize;
    quantize_fn quantize;
    importance_use importance;
    scale_offsets halves;
};

// Adapters from the typed row kernels to the table's signatures.
template <class Block, void (*Fn)(const Block *, float *, int64_t)>
void dequantize_as(const void *src, float *dst, int64_t n) { Fn(static_cast<const Block *>(src), dst, n); }
// A quantizer that takes no importance.
template <class Block, void (*Fn)(const float *, Block *, int64_t)>
void quantize_plain(const float *src, void *dst, int64_t n, const float *) { Fn(src, static_cast<Block *>(dst), n); }
// ggml's quantize_<type> for the K-quants and legacy types: the reference without importance.
template <class Block, void (*Ref)(const float *, Block *, int64_t),
          void (*Weighted)(const float *, const float *, Block *, int64_t)>
void quantize_either(const float *src, void *dst, int64_t n, const float *importance) {
    if (importance) Weighted(src, importance, static_cast<Block *>(dst), n);
    else Ref(src, static_cast<Block *>(dst), n);
}
// The IQ quantizers, which handle a missing importance themselves.
template <class Block, void (*Fn)(const float *, const float *, Block *, int64_t)>
void quantize_iq(const float *src, void *dst, int64_t n, const float *importance) {
    Fn(src, importance, static_cast<Block *>(dst), n);
}

void copy_f32(const void *src, float *dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); }
void copy_f32_out(const float *src, void *dst, int64_t n, const float *) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

#define TANDEM_PLAIN(name, block, offsets) \
    type_ops{ggml_type::name, dequantize_as<block, dequantize_row_##name>, quantize_plain<block, quantize_row_##name>, \
             importance_use::ignored, offsets}
#define TANDEM_EITHER(name, block, offsets)                                                                     \
    type_ops{ggml_type::name, dequantize_as<block, dequantize_row_##name>,                                      \
             quantize_either<block, quantize_row_##name, quantize_row_##name##_weighted>, importance_use::optional, \
             offsets}
#define TANDEM_IQ(name, block, use, offsets) \
    type_ops{ggml_type::name, dequantize_as<block, dequantize_row_##name>, quantize_iq<block, quantize_row_##name>, use, offsets}

// Every computable type. The scale offsets name each fp16 field a block holds (IQ1_M spreads its
// scale over four nibbles; MXFP4's E8M0 exponent is always finite, so neither is listed).
const std::array<type_ops, 23> ops_table = {{
    {ggml_type::f32, copy_f32, copy_f32_out, importance_use::ignored, {-1, -1}},
    TANDEM_PLAIN(f16, uint16_t, (scale_offsets{-1, -1})),
    TANDEM_PLAIN(bf16, uint16_t, (scale_offsets{-1, -1})),
    TANDEM_EITHER(q4_0, block_q4_0, (scale_offsets{0, -1})),
    TANDEM_EITHER(q4_1, block_q4_1, (scale_offsets{0, 2})),
    TANDEM_EITHER(q5_0, block_q5_0, (scale_offsets{0, -1})),
    TANDEM_EITHER(q5_1, block_q5_1, (scale_offsets{0, 2})),
    TANDEM_PLAIN(q8_0, block_q8_0, (scale_offsets{0, -1})),
    TANDEM_EITHER(q2_k, block_q2_k, (scale_offsets{80, 82})),
    TANDEM_EITHER(q3_k, block_q3_k, (scale_offsets{108, -1})),
    TANDEM_EITHER(q4_k, block_q4_k, (scale_offsets{0, 2})),
    TANDEM_EITHER(q5_k, block_q5_k, (scale_offsets{0, 2})),
    TANDEM_EITHER(q6_k, block_q6_k, (scale_offsets{208, -1})),
    TANDEM_IQ(iq4_nl, block_iq4_nl, importance_use::optional, (scale_offsets{0, -1})),
    TANDEM_IQ(iq4_xs, block_iq4_xs, importance_use::optional, (scale_offsets{0, -1})),
    TANDEM_PLAIN(mxfp4, block_mxfp4, (scale_offsets{-1, -1})),
    TANDEM_IQ(iq2_xxs, block_iq2_xxs, importance_use::required, (scale_offsets{0, -1})),
    TANDEM_IQ(iq2_xs, block_iq2_xs, importance_use::required, (scale_offsets{0, -1})),
    TANDEM_IQ(iq2_s, block_iq2_s, importance_use::optional, (scale_offsets{0, -1})),
    TANDEM_IQ(iq3_xxs, block_iq3_xxs, importance_use::optional, (scale_offsets{0, -1})),
    TANDEM_IQ(iq3_s, block_iq3_s, importance_use::optional, (scale_offsets{0, -1})),
    TANDEM_IQ(iq1_s, block_iq1_s, importance_use::required, (scale_offsets{0, -1})),
    TANDEM_IQ(iq1_m, block_iq1_m, importance_use::optional, (scale_offsets{-1, -1})),
}};
#undef TANDEM_PLAIN
#undef TANDEM_EITHER
#undef TANDEM_IQ

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

bool ggml_type_can_quantize(ggml_type type) { return find_ops(type) != nullptr; }

bool ggml_type_needs_importance(ggml_type type) {
    const type_ops *ops = find_ops(type);
    return ops && ops->importance == importance_use::required;
}

bool ggml_type_uses_importance(ggml_type type) {
    const type_ops *ops = find_ops(type);
    return ops && ops->importance != importance_use::ignored;
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

namespace {

// The first non-finite value of v[n], or -1. The flag loop vectorizes; the index is found only on failure.
int64_t first_nonfinite(const float *v, int64_t n) {
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) finite &= std::fabs(v[i]) <= std::numeric_limits<float>::max();
    if (finite) return -1;
    int64_t i = 0;
    while (std::fabs(v[i]) <= std::numeric_limits<float>::max()) ++i;
    return i;
}

}  // namespace

void quantize_rows(ggml_type type, const float *src, void *dst, int64_t n_rows, int64_t row_len, const float *importance) {
    const type_ops &ops = checked_ops(type, row_len, "quantize");
    const ggml_type_traits &traits = ggml_type_info(type);
    if (n_rows < 0) fail(error_kind::invalid_request, "quantize: negative row count {}", n_rows);
    if (ops.importance == importance_use::required && !importance)
        fail(error_kind::unsupported, "quantize to {}: this type needs an importance matrix (ggml quantizes it only with one)",
             traits.name);
    if (ops.importance == importance_use::ignored) importance = nullptr;
    if (n_rows == 0 || row_len == 0) return;
    TANDEM_ASSERT(src != nullptr && dst != nullptr);
    if (row_len != 0 && n_rows > std::numeric_limits<int64_t>::max() / row_len)
        fail(error_kind::invalid_request, "quantize: {} rows of {} elements overflow", n_rows, row_len);
    if (importance) {
        // ggml's searches divide by weighted sums: inf or NaN weights would poison every choice.
        if (const int64_t i = first_nonfinite(importance, row_len); i >= 0)
            fail(error_kind::invalid_request, "quantize to {}: importance value {} is {}, not finite", traits.name, i,
                 importance[i]);
    }
    if (traits.block_elems > 1) {
        // The block quantizers search over scales; an inf or NaN would poison every block statistic.
        if (const int64_t i = first_nonfinite(src, n_rows * row_len); i >= 0)
            fail(error_kind::invalid_request, "quantize to {}: element {} is {}, not finite", traits.name, i, src[i]);
    }
    const size_t row_bytes = ggml_row_bytes(type, row_len);
    for (int64_t r = 0; r < n_rows; ++r)
        ops.quantize(src + r * row_len, static_cast<uint8_t *>(dst) + static_cast<size_t>(r) * row_bytes,
                     row_len / traits.block_elems, importance);
}

// Without importance every quantizer works block by block, so n elements are one row of n.
void quantize_row(ggml_type type, const float *src, void *dst, int64_t n) { quantize_rows(type, src, dst, 1, n, nullptr); }

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
