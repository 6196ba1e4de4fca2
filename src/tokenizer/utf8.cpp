// src/tokenizer/utf8.cpp - UTF-8 validation, replacement of ill-formed bytes, and the streamer.
#include "utf8.h"

#include "tandem/tokenizer.h"

namespace tandem::utf8 {

namespace {

// Sequence length announced by a lead byte, 0 when the byte cannot start a sequence
// (continuation bytes, the overlong leads C0/C1, and F5..FF beyond U+10FFFF).
int lead_length(uint8_t b) {
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 0;
}

// Allowed range of the second byte; it excludes overlongs (E0, F0), surrogates (ED) and code
// points past U+10FFFF (F4). Later bytes are always 80..BF.
void second_range(uint8_t lead, uint8_t &lo, uint8_t &hi) {
    lo = 0x80;
    hi = 0xBF;
    if (lead == 0xE0) lo = 0xA0;
    else if (lead == 0xED) hi = 0x9F;
    else if (lead == 0xF0) lo = 0x90;
    else if (lead == 0xF4) hi = 0x8F;
}

enum class step { ok, invalid, incomplete };

// Looks at the sequence starting at s[i]: `len` is how many bytes it spans when ok, or the
// length of the maximal subpart when invalid/incomplete (at least 1).
step next(std::string_view s, size_t i, size_t &len) {
    const uint8_t lead = static_cast<uint8_t>(s[i]);
    const int n = lead_length(lead);
    len = 1;
    if (n == 0) return step::invalid;
    if (n == 1) return step::ok;
    uint8_t lo, hi;
    second_range(lead, lo, hi);
    for (int j = 1; j < n; ++j) {
        if (i + j >= s.size()) return step::incomplete;
        const uint8_t b = static_cast<uint8_t>(s[i + j]);
        if (b < lo || b > hi) return step::invalid;
        len = j + 1;
        lo = 0x80;
        hi = 0xBF;
    }
    return step::ok;
}

constexpr std::string_view replacement = "\xEF\xBF\xBD";

}  // namespace

size_t first_invalid(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        size_t len = 0;
        if (next(s, i, len) != step::ok) return i;
        i += len;
    }
    return std::string_view::npos;
}

size_t sanitize_append(std::string_view s, bool final, std::string &out) {
    size_t i = 0;
    while (i < s.size()) {
        size_t len = 0;
        switch (next(s, i, len)) {
        case step::ok:
            out.append(s.substr(i, len));
            break;
        case step::invalid:
            out.append(replacement);
            break;
        case step::incomplete:
            if (!final) return i;
            out.append(replacement);
            len = s.size() - i;
            break;
        }
        i += len;
    }
    return i;
}

void append_code_point(uint32_t cp, std::string &out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

}  // namespace tandem::utf8

namespace tandem {

std::string utf8_sanitize(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    utf8::sanitize_append(bytes, true, out);
    return out;
}

std::string token_streamer::push(int32_t id) { return push_bytes(tok_->token_bytes(id)); }

std::string token_streamer::push_bytes(std::string_view bytes) {
    pending_.append(bytes);
    std::string out;
    const size_t used = utf8::sanitize_append(pending_, false, out);
    pending_.erase(0, used);
    return out;
}

std::string token_streamer::flush() {
    std::string out;
    utf8::sanitize_append(pending_, true, out);
    pending_.clear();
    return out;
}

}  // namespace tandem
