// src/gguf/quant.cpp - quant.h's entry points: argument checks, the per-type dispatch, dot_f32.
#include "tandem/quant.h"

#include "tandem/error.h"

#include "quant_rows.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace tandem {
namespace {

// Checks n against the type and returns its traits; `what` names the operation in errors.
const ggml_type_traits &checked_traits(ggml_type type, int64_t n, const char *what) {
    const uint32_t id = static_cast<uint32_t>(type);
    const std::optional<ggml_type_traits> info = ggml_type_info(id);
    if (!info) fail(error_kind::unsupported, "{}: unknown tensor type id {}", what, id);
    const ggml_type_traits &traits = ggml_type_info(type);  // the table's entry, by reference
    switch (type) {
    case ggml_type::f32: case ggml_type::f16: case ggml_type::bf16:
    case ggml_type::q8_0: case ggml_type::q4_k: case ggml_type::q6_k:
        break;
    default:
        fail(error_kind::unsupported, "{}: tensor type {} is not supported (supported: f32, f16, bf16, q8_0, q4_K, q6_K)",
             what, traits.name);
    }
    if (n < 0) fail(error_kind::invalid_request, "{}: negative element count {} for {}", what, n, traits.name);
    if (n % traits.block_elems != 0)
        fail(error_kind::invalid_request, "{}: {} elements is not a multiple of {}'s block of {}", what, n, traits.name,
             traits.block_elems);
    return traits;
}

}  // namespace

void dequantize_row(ggml_type type, const void *src, float *dst, int64_t n) {
    const ggml_type_traits &traits = checked_traits(type, n, "dequantize");
    if (n == 0) return;
    TANDEM_ASSERT(src != nullptr && dst != nullptr);
    const int64_t n_blocks = n / traits.block_elems;
    using namespace quant_detail;
    switch (type) {
    case ggml_type::f32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case ggml_type::f16: dequantize_row_f16(static_cast<const uint16_t *>(src), dst, n); break;
    case ggml_type::bf16: dequantize_row_bf16(static_cast<const uint16_t *>(src), dst, n); break;
    case ggml_type::q8_0: dequantize_row_q8_0(static_cast<const block_q8_0 *>(src), dst, n_blocks); break;
    case ggml_type::q4_k: dequantize_row_q4_k(static_cast<const block_q4_k *>(src), dst, n_blocks); break;
    case ggml_type::q6_k: dequantize_row_q6_k(static_cast<const block_q6_k *>(src), dst, n_blocks); break;
    default: TANDEM_ASSERT(false, "checked_traits let type {} through", static_cast<uint32_t>(type));
    }
}

// Rows of a block type carry no padding (ggml_row_bytes is whole blocks), so n_rows rows of
// row_len elements are one run of n_rows * row_len elements.
void dequantize_rows(ggml_type type, const void *src, float *dst, int64_t n_rows, int64_t row_len) {
    checked_traits(type, row_len, "dequantize");
    if (n_rows < 0) fail(error_kind::invalid_request, "dequantize: negative row count {}", n_rows);
    if (row_len != 0 && n_rows > std::numeric_limits<int64_t>::max() / row_len)
        fail(error_kind::invalid_request, "dequantize: {} rows of {} elements overflow", n_rows, row_len);
    dequantize_row(type, src, dst, n_rows * row_len);
}

void quantize_row(ggml_type type, const float *src, void *dst, int64_t n) {
    const ggml_type_traits &traits = checked_traits(type, n, "quantize");
    if (n == 0) return;
    TANDEM_ASSERT(src != nullptr && dst != nullptr);
    const int64_t n_blocks = n / traits.block_elems;
    using namespace quant_detail;
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
    switch (type) {
    case ggml_type::f32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case ggml_type::f16: quantize_row_f16(src, static_cast<uint16_t *>(dst), n); break;
    case ggml_type::bf16: quantize_row_bf16(src, static_cast<uint16_t *>(dst), n); break;
    case ggml_type::q8_0: quantize_row_q8_0(src, static_cast<block_q8_0 *>(dst), n_blocks); break;
    case ggml_type::q4_k: quantize_row_q4_k(src, static_cast<block_q4_k *>(dst), n_blocks); break;
    case ggml_type::q6_k: quantize_row_q6_k(src, static_cast<block_q6_k *>(dst), n_blocks); break;
    default: TANDEM_ASSERT(false, "checked_traits let type {} through", static_cast<uint32_t>(type));
    }
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
