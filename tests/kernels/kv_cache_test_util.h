// tests/kernels/kv_cache_test_util.h - the attention kernels' KV cache element types on the host:
// floats, halves (attention_args::kv_f16) or ggml's q8_0 blocks (kv_q8_0). A cache's rows are
// whole 32-value blocks laid end to end, so quantizing the whole array in blocks of 32 is
// quantizing each row, as the engines do.
#pragma once

#include "cuda/attention.h"
#include "tandem/quant.h"
#include "tandem/quant_blocks.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace tandem::test {

enum class cache_elem { f32, f16, q8_0 };

inline const char *cache_elem_name(cache_elem e) { return e == cache_elem::f32 ? "f32" : e == cache_elem::f16 ? "f16" : "q8_0"; }

// The values in the cache's layout: floats, fp16 bits, or q8_0 blocks (quantize_row_q8_0).
inline std::vector<uint8_t> cache_encode(const std::vector<float> &v, cache_elem e) {
    std::vector<uint8_t> out;
    if (e == cache_elem::f32) {
        out.resize(v.size() * sizeof(float));
        std::memcpy(out.data(), v.data(), out.size());
    } else if (e == cache_elem::f16) {
        out.resize(v.size() * 2);
        for (size_t i = 0; i < v.size(); ++i) {
            const uint16_t h = fp32_to_fp16(v[i]);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    } else {
        out.resize(v.size() / 32 * sizeof(block_q8_0));
        quantize_row(ggml_type::q8_0, v.data(), out.data(), int64_t(v.size()));
    }
    return out;
}

// n values back from the cache's layout, exactly as the kernels read them.
inline std::vector<float> cache_decode(const std::vector<uint8_t> &b, cache_elem e, size_t n) {
    std::vector<float> out(n);
    if (e == cache_elem::f32) {
        std::memcpy(out.data(), b.data(), n * sizeof(float));
    } else if (e == cache_elem::f16) {
        for (size_t i = 0; i < n; ++i) {
            uint16_t h = 0;
            std::memcpy(&h, b.data() + 2 * i, 2);
            out[i] = fp16_to_fp32(h);
        }
    } else {
        dequantize_row(ggml_type::q8_0, b.data(), out.data(), int64_t(n));
    }
    return out;
}

// Each value as a cache of this type holds it (the engines' rounding of keys and values).
inline std::vector<float> cache_round(const std::vector<float> &v, cache_elem e) {
    return e == cache_elem::f32 ? v : cache_decode(cache_encode(v, e), e, v.size());
}

template <class Args>
void cache_flags(Args &a, cache_elem e) {
    a.kv_f16 = e == cache_elem::f16;
    a.kv_q8_0 = e == cache_elem::q8_0;
}

}  // namespace tandem::test
