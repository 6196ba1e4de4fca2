// src/gguf/gguf_value.cpp - GGUF value types: names, sizes, array sizes, tensor element counts.
#include "gguf_format.h"

#include <fmt/format.h>

namespace tandem {

std::string_view gguf_type_name(gguf_type type) {
    // ggml's names (gguf_type_name in ggml/src/gguf.cpp), so messages read the same in both.
    switch (type) {
    case gguf_type::u8: return "u8";
    case gguf_type::i8: return "i8";
    case gguf_type::u16: return "u16";
    case gguf_type::i16: return "i16";
    case gguf_type::u32: return "u32";
    case gguf_type::i32: return "i32";
    case gguf_type::f32: return "f32";
    case gguf_type::boolean: return "bool";
    case gguf_type::string: return "str";
    case gguf_type::array: return "arr";
    case gguf_type::u64: return "u64";
    case gguf_type::i64: return "i64";
    case gguf_type::f64: return "f64";
    }
    return "unknown";
}

size_t gguf_array::size() const {
    switch (type) {
    case gguf_type::f32:
    case gguf_type::f64: return floats.size();
    case gguf_type::string: return strings.size();
    default: return ints.size();
    }
}

int64_t gguf_tensor_info::n_elements() const {
    if (ne.empty()) return 0;
    int64_t n = 1;
    // The reader and writer reject shapes whose product overflows, so this cannot wrap.
    for (int64_t d : ne) n *= d;
    return n;
}

namespace gguf_format {

size_t scalar_bytes(uint32_t type) {
    switch (static_cast<gguf_type>(type)) {
    case gguf_type::u8:
    case gguf_type::i8:
    case gguf_type::boolean: return 1;
    case gguf_type::u16:
    case gguf_type::i16: return 2;
    case gguf_type::u32:
    case gguf_type::i32:
    case gguf_type::f32: return 4;
    case gguf_type::u64:
    case gguf_type::i64:
    case gguf_type::f64: return 8;
    case gguf_type::string:
    case gguf_type::array: return 0;
    }
    return 0;
}

bool is_known(uint32_t type) { return type <= static_cast<uint32_t>(gguf_type::f64); }

bool is_integer(gguf_type type) {
    switch (type) {
    case gguf_type::u8:
    case gguf_type::i8:
    case gguf_type::u16:
    case gguf_type::i16:
    case gguf_type::u32:
    case gguf_type::i32:
    case gguf_type::u64:
    case gguf_type::i64: return true;
    default: return false;
    }
}

std::string printable(std::string_view name) {
    constexpr size_t max_shown = 96;
    std::string out;
    for (size_t i = 0; i < name.size() && i < max_shown; ++i) {
        const auto c = static_cast<unsigned char>(name[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
        else out += fmt::format("\\x{:02x}", c);
    }
    if (name.size() > max_shown) out += fmt::format("...({} bytes)", name.size());
    return out;
}

}  // namespace gguf_format
}  // namespace tandem
