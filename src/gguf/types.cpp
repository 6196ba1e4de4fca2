// src/gguf/types.cpp - the ggml tensor type table: names, block sizes and block bytes by id.
#include "tandem/types.h"

#include "tandem/error.h"

#include <array>
#include <cctype>
#include <limits>

namespace tandem {
namespace {

struct type_row {
    uint32_t id;
    ggml_type_traits traits;
};

// Block sizes and bytes as in ggml's type_traits (ggml.c) and gguf-py's GGML_QUANT_SIZES; the
// byte counts are spelled as the sum of the block's fields so each one can be checked by eye.
constexpr std::array<type_row, 32> type_table = {{
    {0, {"f32", 1, 4, true}},
    {1, {"f16", 1, 2, true}},
    {2, {"q4_0", 32, 2 + 16, true}},
    {3, {"q4_1", 32, 2 + 2 + 16, true}},
    {6, {"q5_0", 32, 2 + 4 + 16, true}},
    {7, {"q5_1", 32, 2 + 2 + 4 + 16, true}},
    {8, {"q8_0", 32, 2 + 32, true}},
    // q8_1: ggml's block_q8_1 holds d and s as halves (36 bytes); gguf-py's table says 4 + 4 + 32,
    // but llama.cpp's loader uses sizeof(block_q8_1), which is what files are laid out with.
    {9, {"q8_1", 32, 2 + 2 + 32, false}},
    {10, {"q2_K", 256, 2 + 2 + 256 / 16 + 256 / 4, true}},
    {11, {"q3_K", 256, 2 + 256 / 4 + 256 / 8 + 12, true}},
    {12, {"q4_K", 256, 2 + 2 + 256 / 2 + 12, true}},
    {13, {"q5_K", 256, 2 + 2 + 256 / 2 + 256 / 8 + 12, true}},
    {14, {"q6_K", 256, 2 + 256 / 2 + 256 / 4 + 256 / 16, true}},
    {15, {"q8_K", 256, 4 + 256 + 256 / 8, false}},
    {16, {"iq2_xxs", 256, 2 + 256 / 4, true}},
    {17, {"iq2_xs", 256, 2 + 256 / 4 + 256 / 32, true}},
    {18, {"iq3_xxs", 256, 2 + 256 / 4 + 256 / 8, true}},
    {19, {"iq1_s", 256, 2 + 256 / 8 + 256 / 16, true}},
    {20, {"iq4_nl", 32, 2 + 16, true}},
    {21, {"iq3_s", 256, 2 + 256 / 4 + 256 / 8 + 256 / 32 + 4, true}},
    {22, {"iq2_s", 256, 2 + 256 / 4 + 256 / 16, true}},
    {23, {"iq4_xs", 256, 2 + 2 + 256 / 2 + 256 / 64, true}},
    {24, {"i8", 1, 1, false}},
    {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},
    {27, {"i64", 1, 8, false}},
    {28, {"f64", 1, 8, false}},
    {29, {"iq1_m", 256, 256 / 8 + 256 / 16 + 256 / 32, true}},
    {30, {"bf16", 1, 2, true}},
    {34, {"tq1_0", 256, 2 + 4 * 13, false}},
    {35, {"tq2_0", 256, 2 + 64, false}},
    {39, {"mxfp4", 32, 1 + 16, true}},
}};

// The K-quant sizes the quant code relies on (block_q4_K, block_q6_K, block_q8_0 in ggml-common.h).
static_assert(type_table[10].traits.block_bytes == 144);  // q4_K
static_assert(type_table[12].traits.block_bytes == 210);  // q6_K
static_assert(type_table[6].traits.block_bytes == 34);    // q8_0

const type_row *find_row(uint32_t id) {
    for (const type_row &row : type_table)
        if (row.id == id) return &row;
    return nullptr;
}

}  // namespace

std::optional<ggml_type_traits> ggml_type_info(uint32_t id) {
    const type_row *row = find_row(id);
    if (!row) return std::nullopt;
    return row->traits;
}

const ggml_type_traits &ggml_type_info(ggml_type type) {
    const type_row *row = find_row(static_cast<uint32_t>(type));
    // Only a value cast from an unchecked integer can miss; the reader checks ids first.
    TANDEM_ASSERT(row != nullptr, "unknown ggml type id {}", static_cast<uint32_t>(type));
    return row->traits;
}

std::string_view ggml_type_name(ggml_type type) { return ggml_type_info(type).name; }

std::optional<ggml_type> ggml_type_from_name(std::string_view name) {
    for (const type_row &row : type_table) {
        std::string_view known = row.traits.name;
        if (known.size() != name.size()) continue;
        bool same = true;
        for (size_t i = 0; i < name.size() && same; ++i)
            same = std::tolower(static_cast<unsigned char>(known[i])) ==
                   std::tolower(static_cast<unsigned char>(name[i]));
        if (same) return static_cast<ggml_type>(row.id);
    }
    return std::nullopt;
}

size_t ggml_row_bytes(ggml_type type, int64_t n) {
    const ggml_type_traits &t = ggml_type_info(type);
    TANDEM_ASSERT(n >= 0 && n % t.block_elems == 0, "row of {} elements is not a multiple of {}'s block of {}",
                  n, t.name, t.block_elems);
    const int64_t n_blocks = n / t.block_elems;
    TANDEM_ASSERT(n_blocks <= std::numeric_limits<int64_t>::max() / t.block_bytes,
                  "row of {} {} elements overflows", n, t.name);
    return static_cast<size_t>(n_blocks * t.block_bytes);
}

}  // namespace tandem
