// src/tokenizer/byte_level.cpp - builds the byte-level alphabet once.
#include "byte_level.h"

#include "utf8.h"

namespace tandem::byte_level {

namespace {

alphabet build() {
    alphabet a;
    a.byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        // '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF are printable and kept as they are.
        const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        const uint32_t cp = keep ? static_cast<uint32_t>(b) : next++;
        a.code_point[b] = cp;
        a.byte_of[cp] = static_cast<int16_t>(b);
        utf8::append_code_point(cp, a.text[b]);
    }
    return a;  // next ends at 256 + 68 = 324
}

}  // namespace

const alphabet &get() {
    static const alphabet a = build();
    return a;
}

}  // namespace tandem::byte_level
