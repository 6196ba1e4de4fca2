// src/jinja/jinja_unicode.cpp - UTF-8 coding and Python's str character semantics, with ICU for
// the Unicode database (case mapping, categories, numeric types).
#include "jinja_unicode.h"

#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/locid.h>

namespace tandem::jinja {

namespace {

constexpr char32_t escape_base = 0xDC00;  // surrogateescape: byte b decodes to U+DC00 + b

bool is_escape(char32_t cp) { return cp >= 0xDC80 && cp <= 0xDCFF; }

bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

char32_t utf8_next(std::string_view s, size_t &pos) {
    const auto b0 = static_cast<unsigned char>(s[pos]);
    if (b0 < 0x80) {
        ++pos;
        return b0;
    }
    const size_t left = s.size() - pos;
    auto at = [&](size_t k) { return static_cast<unsigned char>(s[pos + k]); };
    char32_t cp = 0;
    size_t n = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF && left >= 2 && is_cont(at(1))) {
        cp = ((b0 & 0x1Fu) << 6) | (at(1) & 0x3Fu);
        n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF && left >= 3 && is_cont(at(1)) && is_cont(at(2))) {
        cp = ((b0 & 0x0Fu) << 12) | ((at(1) & 0x3Fu) << 6) | (at(2) & 0x3Fu);
        n = 3;
        // Overlong forms and UTF-16 surrogates are not valid UTF-8.
        if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) n = 0;
    } else if (b0 >= 0xF0 && b0 <= 0xF4 && left >= 4 && is_cont(at(1)) && is_cont(at(2)) && is_cont(at(3))) {
        cp = ((b0 & 0x07u) << 18) | ((at(1) & 0x3Fu) << 12) | ((at(2) & 0x3Fu) << 6) | (at(3) & 0x3Fu);
        n = 4;
        if (cp < 0x10000 || cp > 0x10FFFF) n = 0;
    }
    if (n == 0) {
        ++pos;
        return escape_base + b0;
    }
    pos += n;
    return cp;
}

void utf8_append(std::string &out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        if (is_escape(cp)) {
            out += static_cast<char>(cp - escape_base);
            return;
        }
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

bool is_ascii(std::string_view s) {
    for (char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
}

size_t utf8_length(std::string_view s) {
    if (is_ascii(s)) return s.size();
    size_t n = 0;
    for (size_t pos = 0; pos < s.size(); ++n) utf8_next(s, pos);
    return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
    std::vector<size_t> out;
    out.reserve(s.size() + 1);
    for (size_t pos = 0; pos < s.size();) {
        out.push_back(pos);
        utf8_next(s, pos);
    }
    out.push_back(s.size());
    return out;
}

bool py_isspace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

bool py_isprintable(char32_t c) {
    if (c < 0x80) return c >= 0x20 && c < 0x7F;
    if (is_escape(c)) return false;
    switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR:
    case U_GENERAL_OTHER_TYPES: case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR: case U_SPACE_SEPARATOR:
        return false;
    default:
        return true;
    }
}

bool py_isalpha(char32_t c) {
    if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    return !is_escape(c) && u_isalpha(static_cast<UChar32>(c));
}

bool py_isdecimal(char32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    return u_charType(static_cast<UChar32>(c)) == U_DECIMAL_DIGIT_NUMBER;
}

bool py_isdigit(char32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    const int t = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
    return t == U_NT_DECIMAL || t == U_NT_DIGIT;
}

bool py_isnumeric(char32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    return u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

bool py_isalnum(char32_t c) { return py_isalpha(c) || py_isdecimal(c) || py_isdigit(c) || py_isnumeric(c); }

bool py_is_word(char32_t c) { return c == '_' || py_isalnum(c); }

namespace {

enum class case_op { upper, lower };

// Maps runs of valid text through ICU's full (SpecialCasing, context-aware) root-locale mapping;
// escaped bytes pass through untouched.
std::string icu_case(std::string_view s, case_op op) {
    std::string out;
    out.reserve(s.size());
    icu::UnicodeString run;
    auto flush = [&] {
        if (run.isEmpty()) return;
        if (op == case_op::upper) run.toUpper(icu::Locale::getRoot());
        else run.toLower(icu::Locale::getRoot());
        run.toUTF8String(out);
        run.remove();
    };
    for (size_t pos = 0; pos < s.size();) {
        const char32_t cp = utf8_next(s, pos);
        if (is_escape(cp)) {
            flush();
            utf8_append(out, cp);
        } else {
            run.append(static_cast<UChar32>(cp));
        }
    }
    flush();
    return out;
}

bool is_cased(char32_t c) { return !is_escape(c) && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }
bool is_lower_cp(char32_t c) { return !is_escape(c) && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_LOWERCASE); }
bool is_upper_cp(char32_t c) { return !is_escape(c) && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_UPPERCASE); }
bool is_title_cp(char32_t c) { return !is_escape(c) && u_charType(static_cast<UChar32>(c)) == U_TITLECASE_LETTER; }

char32_t simple_title(char32_t c) { return is_escape(c) ? c : static_cast<char32_t>(u_totitle(static_cast<UChar32>(c))); }
char32_t simple_lower(char32_t c) { return is_escape(c) ? c : static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))); }
char32_t simple_upper(char32_t c) { return is_escape(c) ? c : static_cast<char32_t>(u_toupper(static_cast<UChar32>(c))); }

}  // namespace

std::string py_upper(std::string_view s) {
    if (!is_ascii(s)) return icu_case(s, case_op::upper);
    std::string out(s);
    for (char &c : out)
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    return out;
}

std::string py_lower(std::string_view s) {
    if (!is_ascii(s)) return icu_case(s, case_op::lower);
    std::string out(s);
    for (char &c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return out;
}

std::string py_title(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool previous_cased = false;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t cp = utf8_next(s, pos);
        utf8_append(out, previous_cased ? simple_lower(cp) : simple_title(cp));
        previous_cased = is_cased(cp);
    }
    return out;
}

std::string py_capitalize(std::string_view s) {
    if (s.empty()) return {};
    size_t pos = 0;
    const char32_t first = utf8_next(s, pos);
    std::string out;
    utf8_append(out, simple_title(first));
    out += py_lower(s.substr(pos));
    return out;
}

std::string py_swapcase(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
        const char32_t cp = utf8_next(s, pos);
        utf8_append(out, is_upper_cp(cp) ? simple_lower(cp) : is_lower_cp(cp) ? simple_upper(cp) : cp);
    }
    return out;
}

bool py_islower(std::string_view s) {
    bool cased = false;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t cp = utf8_next(s, pos);
        if (is_upper_cp(cp) || is_title_cp(cp)) return false;
        if (is_lower_cp(cp)) cased = true;
    }
    return cased;
}

bool py_isupper(std::string_view s) {
    bool cased = false;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t cp = utf8_next(s, pos);
        if (is_lower_cp(cp) || is_title_cp(cp)) return false;
        if (is_upper_cp(cp)) cased = true;
    }
    return cased;
}

bool py_istitle(std::string_view s) {
    bool cased = false, previous_cased = false;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t cp = utf8_next(s, pos);
        if (is_upper_cp(cp) || is_title_cp(cp)) {
            if (previous_cased) return false;
            previous_cased = cased = true;
        } else if (is_lower_cp(cp)) {
            if (!previous_cased) return false;
            previous_cased = cased = true;
        } else {
            previous_cased = false;
        }
    }
    return cased;
}

std::vector<std::pair<size_t, size_t>> py_splitlines(std::string_view s) {
    std::vector<std::pair<size_t, size_t>> lines;
    size_t start = 0;
    for (size_t pos = 0; pos < s.size();) {
        const size_t at = pos;
        const char32_t cp = utf8_next(s, pos);
        const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
                         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!brk) continue;
        lines.emplace_back(start, at);
        if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
        start = pos;
    }
    if (start < s.size()) lines.emplace_back(start, s.size());
    return lines;
}

}  // namespace tandem::jinja
