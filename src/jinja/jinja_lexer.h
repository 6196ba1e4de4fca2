// src/jinja/jinja_lexer.h - template source to tokens, with jinja2's whitespace control resolved
// here (trim_blocks, lstrip_blocks, `-` and `+` modifiers, one trailing newline dropped), so the
// parser sees data tokens holding exactly the text to emit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

enum class tok : uint8_t {
    data,         // text outside tags (also a raw block's content)
    var_begin,    // {{
    var_end,      // }}
    block_begin,  // {%
    block_end,    // %}
    name,
    string,       // text holds the decoded value
    integer,
    floating,
    op,           // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
    eof,
};

struct token {
    tok kind = tok::eof;
    std::string text;
    int64_t ival = 0;
    double fval = 0;
    uint32_t line = 1, col = 1;

    bool is_op(std::string_view o) const { return kind == tok::op && text == o; }
    bool is_name(std::string_view n) const { return kind == tok::name && text == n; }
};

// Throws jinja_error(syntax) naming line and column.
std::vector<token> lex(std::string_view source);

// Human-readable token description for syntax errors ("end of print statement", "'x'").
std::string describe(const token &t);

}  // namespace tandem::jinja
