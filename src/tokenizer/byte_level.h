// src/tokenizer/byte_level.h - GPT-2's bytes_to_unicode alphabet: every byte as one printable
// character, so BPE vocab entries are text. Printable Latin-1 bytes map to themselves; the other
// 68 bytes map, in increasing byte order, to U+0100, U+0101, ... (space -> U+0120 'Ġ').
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace tandem::byte_level {

struct alphabet {
    std::array<uint32_t, 256> code_point{};  // byte -> code point
    std::array<std::string, 256> text;       // byte -> its UTF-8 text
    std::array<int16_t, 324> byte_of{};      // code point (< 324) -> byte, -1 when not in the alphabet
};

const alphabet &get();

}  // namespace tandem::byte_level
