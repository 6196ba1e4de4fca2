// tandem/types.h - ggml tensor types: ids as stored in GGUF files and their block layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem {

// Numeric ids are ggml's (they are what GGUF files store); do not renumber.
enum class ggml_type : uint32_t {
    f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
    q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
    iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22,
    iq4_xs = 23, i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
    tq1_0 = 34, tq2_0 = 35, mxfp4 = 39,
};

struct ggml_type_traits {
    std::string_view name;   // ggml's lower-case name, e.g. "q4_K"
    int64_t block_elems;     // elements per block (1 for plain types)
    int64_t block_bytes;     // bytes per block
    bool computable;         // Tandem can dequantize / compute with it
};

// Traits of a known type, or nullopt for an id this build does not know (files name it in errors).
std::optional<ggml_type_traits> ggml_type_info(uint32_t id);
const ggml_type_traits &ggml_type_info(ggml_type type);
std::string_view ggml_type_name(ggml_type type);
// Parses "f32", "q4_k", "Q4_K", ... ; nullopt if unknown.
std::optional<ggml_type> ggml_type_from_name(std::string_view name);

// Bytes of one row of n elements; n must be a multiple of the block size.
size_t ggml_row_bytes(ggml_type type, int64_t n);

constexpr int64_t qk_k = 256;  // super-block size of the K-quants
constexpr int64_t qk8_0 = 32;  // block size of Q8_0

}  // namespace tandem
