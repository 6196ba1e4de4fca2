// src/tokenizer/utf8.h - UTF-8 well-formedness (Unicode table 3-7) and U+FFFD replacement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::utf8 {

// Offset of the first byte that does not start a well-formed sequence, or npos.
size_t first_invalid(std::string_view s);

// Appends s to out, replacing each maximal ill-formed subpart with U+FFFD. When `final` is
// false an incomplete but so far well-formed tail is not consumed. Returns bytes consumed.
size_t sanitize_append(std::string_view s, bool final, std::string &out);

// Appends the UTF-8 encoding of a code point (< 0x110000).
void append_code_point(uint32_t cp, std::string &out);

}  // namespace tandem::utf8
