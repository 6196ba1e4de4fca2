// src/grammar/utf8_ranges.cpp - code point ranges to UTF-8 byte-range sequences, and the small
// UTF-8 encode/decode helpers the grammar front ends share.
#include "utf8_ranges.h"

namespace tandem::grammar_detail {

namespace {

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(uint32_t cp, uint8_t out[4]) {
    switch (utf8_length(cp)) {
    case 1: out[0] = uint8_t(cp); break;
    case 2:
        out[0] = uint8_t(0xC0 | (cp >> 6));
        out[1] = uint8_t(0x80 | (cp & 0x3F));
        break;
    case 3:
        out[0] = uint8_t(0xE0 | (cp >> 12));
        out[1] = uint8_t(0x80 | ((cp >> 6) & 0x3F));
        out[2] = uint8_t(0x80 | (cp & 0x3F));
        break;
    default:
        out[0] = uint8_t(0xF0 | (cp >> 18));
        out[1] = uint8_t(0x80 | ((cp >> 12) & 0x3F));
        out[2] = uint8_t(0x80 | ((cp >> 6) & 0x3F));
        out[3] = uint8_t(0x80 | (cp & 0x3F));
        break;
    }
}

// [lo, hi] have the same encoded length n. Splits until, at every byte position, the range's
// bytes run from encode(lo) to encode(hi) independently of the other positions: that holds once
// the low 6*i bits of lo are all zero and those of hi all ones wherever the prefixes differ.
void split_same_length(uint32_t lo, uint32_t hi, int n, std::vector<utf8_sequence> &out) {
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (uint32_t(1) << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if ((lo & m) != 0) {
            split_same_length(lo, lo | m, n, out);
            split_same_length((lo | m) + 1, hi, n, out);
            return;
        }
        if ((hi & m) != m) {
            split_same_length(lo, (hi & ~m) - 1, n, out);
            split_same_length(hi & ~m, hi, n, out);
            return;
        }
    }
    utf8_sequence s;
    s.n = uint8_t(n);
    encode(lo, s.lo);
    encode(hi, s.hi);
    out.push_back(s);
}

}  // namespace

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<utf8_sequence> &out) {
    static constexpr uint32_t length_end[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int n = 1; n <= 4 && lo <= hi; ++n) {
        if (lo > length_end[n - 1]) continue;
        const uint32_t piece_hi = hi < length_end[n - 1] ? hi : length_end[n - 1];
        split_same_length(lo, piece_hi, n, out);
        lo = piece_hi + 1;
    }
}

void utf8_append(std::string &out, uint32_t cp) {
    uint8_t b[4];
    encode(cp, b);
    out.append(reinterpret_cast<const char *>(b), size_t(utf8_length(cp)));
}

size_t utf8_decode(std::string_view s, size_t i, uint32_t &cp) {
    const auto byte = [&](size_t k) { return uint8_t(s[k]); };
    const uint8_t b0 = byte(i);
    size_t n;
    uint32_t min;
    if (b0 < 0x80) {
        cp = b0;
        return 1;
    } else if ((b0 & 0xE0) == 0xC0) {
        n = 2, min = 0x80, cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
        n = 3, min = 0x800, cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
        n = 4, min = 0x10000, cp = b0 & 0x07;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((byte(i + k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

}  // namespace tandem::grammar_detail
