// src/jinja/jinja_unicode.h - UTF-8 and Python str semantics: code points, whitespace, case,
// character classes. Invalid UTF-8 bytes decode to U+DC80..U+DCFF and encode back to the same
// byte (Python's surrogateescape), so any byte string survives a round trip.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

// Decodes the code point at `pos` and advances `pos` past it.
char32_t utf8_next(std::string_view s, size_t &pos);
void utf8_append(std::string &out, char32_t cp);
bool is_ascii(std::string_view s);
size_t utf8_length(std::string_view s);  // in code points
// Byte offset of every code point, plus s.size() at the end (n_code_points + 1 entries).
std::vector<size_t> utf8_offsets(std::string_view s);

bool py_isspace(char32_t cp);      // str.isspace for one character
bool py_isprintable(char32_t cp);  // str.isprintable for one character (repr escapes the rest)
bool py_isalpha(char32_t cp);
bool py_isdecimal(char32_t cp);
bool py_isdigit(char32_t cp);
bool py_isnumeric(char32_t cp);
bool py_isalnum(char32_t cp);
bool py_is_word(char32_t cp);      // regex \w: alphanumeric or underscore

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_swapcase(std::string_view s);
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);
bool py_istitle(std::string_view s);

// Python's str.splitlines() line boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
// Returns [begin, end) byte ranges of the lines, without their terminators.
std::vector<std::pair<size_t, size_t>> py_splitlines(std::string_view s);

}  // namespace tandem::jinja
