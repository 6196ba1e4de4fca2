// src/grammar/utf8_ranges.h - code point ranges as sequences of UTF-8 byte ranges, so the
// automata match bytes and tokens may end inside a character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::grammar_detail {

// One byte-range per encoded byte: matches exactly the code points lo..hi of one piece.
struct utf8_sequence {
    uint8_t n = 0;
    uint8_t lo[4] = {}, hi[4] = {};
};

// Appends sequences that together match exactly the code points in [lo, hi] (no surrogates
// inside: callers remove them first).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<utf8_sequence> &out);

// Appends the UTF-8 encoding of a code point (< 0x110000, not a surrogate).
void utf8_append(std::string &out, uint32_t cp);

// Decodes one code point starting at s[i]; returns its length, or 0 when the bytes there are not
// well-formed UTF-8 (overlong, surrogate, truncated, out of range).
size_t utf8_decode(std::string_view s, size_t i, uint32_t &cp);

}  // namespace tandem::grammar_detail
