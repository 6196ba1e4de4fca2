// src/jinja/jinja_lexer.cpp - the tokenizer: jinja2's lexer rules with the environment transformers
// uses (trim_blocks and lstrip_blocks on, keep_trailing_newline off, newlines normalized to \n).
#include "jinja_lexer.h"

#include "jinja_unicode.h"
#include "jinja_value.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace tandem::jinja {

namespace {

enum class tag { variable, block, comment };

[[noreturn]] void syntax_error(uint32_t line, uint32_t col, const std::string &message) {
    throw jinja_error(jinja_error_kind::syntax, static_cast<int>(line), static_cast<int>(col), message);
}

// jinja2 splits the source on \r\n, \r and \n and joins with \n, dropping one trailing newline.
std::string normalize_source(std::string_view src) {
    std::string out;
    out.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] == '\r') {
            out += '\n';
            if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
        } else {
            out += src[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

size_t skip_py_space(std::string_view s, size_t pos) {
    while (pos < s.size()) {
        size_t next = pos;
        if (!py_isspace(utf8_next(s, next))) break;
        pos = next;
    }
    return pos;
}

size_t rstrip_py_space(std::string_view s) {
    size_t end = 0;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t cp = utf8_next(s, pos);
        if (!py_isspace(cp)) end = pos;
    }
    return end;
}

bool is_name_start(char32_t c) { return c == '_' || (c < 0x80 ? py_isalpha(c) : py_isalnum(c)); }
bool is_name_char(char32_t c) { return c == '_' || py_isalnum(c); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class lexer {
public:
    explicit lexer(std::string_view source) : src_(normalize_source(source)) {}

    std::vector<token> run() {
        bool line_starting = true;
        while (pos_ < src_.size()) {
            const size_t start = find_tag_start(pos_);
            if (start == std::string::npos) {
                emit_data(std::string_view(src_).substr(pos_));
                advance_to(src_.size());
                break;
            }
            const char kind_char = src_[start + 1];
            const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
            const bool has_sign = sign == '-' || sign == '+';
            const tag kind = kind_char == '{' ? tag::variable : kind_char == '%' ? tag::block : tag::comment;
            size_t raw_end = 0;
            const bool raw = kind == tag::block && match_raw_begin(start, raw_end);
            std::string_view text = std::string_view(src_).substr(pos_, start - pos_);
            text = strip_before_tag(text, has_sign ? sign : '\0', kind != tag::variable, line_starting);
            emit_data(text);
            advance_to(start);
            if (raw) {
                advance_to(raw_end);
                line_starting = src_[raw_end - 1] == '\n';
                line_starting = lex_raw(line_starting);
                continue;
            }
            const uint32_t tag_line = line_, tag_col = col_;
            advance_to(start + 2 + (has_sign ? 1 : 0));
            if (kind == tag::comment) {
                line_starting = lex_comment(tag_line, tag_col);
            } else {
                push(kind == tag::variable ? tok::var_begin : tok::block_begin, "", tag_line, tag_col);
                line_starting = lex_tag(kind, tag_line, tag_col);
            }
        }
        push(tok::eof, "", line_, col_);
        return std::move(out_);
    }

private:
    size_t find_tag_start(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
            if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        return std::string::npos;
    }

    // `{%`, optional sign, whitespace, `raw`, whitespace, then `-%}` with any whitespace, or `%}`.
    bool match_raw_begin(size_t start, size_t &end) const {
        size_t p = start + 2;
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
        p = skip_py_space(src_, p);
        if (src_.compare(p, 3, "raw") != 0) return false;
        p = skip_py_space(src_, p + 3);
        if (src_.compare(p, 3, "-%}") == 0) {
            end = skip_py_space(src_, p + 3);
            return true;
        }
        if (src_.compare(p, 2, "%}") == 0) {
            end = p + 2;
            return true;
        }
        return false;
    }

    // The text before a tag: `-` strips all trailing whitespace; otherwise lstrip_blocks removes
    // spaces and tabs between the line start and a block or comment tag.
    static std::string_view strip_before_tag(std::string_view text, char sign, bool lstrip, bool line_starting) {
        if (sign == '-') return text.substr(0, rstrip_py_space(text));
        if (sign == '+' || !lstrip) return text;
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos == 0 && !line_starting) return text;
        for (size_t i = l_pos; i < text.size(); ++i)
            if (text[i] != ' ' && text[i] != '\t') return text;
        return text.substr(0, l_pos);
    }

    // Consumes a tag's end: `+%}` keeps what follows, `-%}` eats all whitespace, `%}` eats one
    // newline (trim_blocks). Returns whether the match ended with a newline (jinja2's line_starting).
    bool end_tag(std::string_view close, bool trim_newline) {
        size_t p = pos_;
        char sign = '\0';
        if (src_[p] == '+' || src_[p] == '-') sign = src_[p++];
        size_t end = p + close.size();
        if (sign == '-') end = skip_py_space(src_, end);
        else if (sign == '\0' && trim_newline && end < src_.size() && src_[end] == '\n') ++end;
        advance_to(end);
        return src_[end - 1] == '\n';
    }

    bool lex_comment(uint32_t line, uint32_t col) {
        const size_t content = pos_;
        for (size_t q = src_.find("#}", content); q != std::string::npos; q = src_.find("#}", q + 1)) {
            size_t p = q;
            if (q > content && (src_[q - 1] == '-' || src_[q - 1] == '+')) p = q - 1;
            advance_to(p);
            return end_tag("#}", true);
        }
        syntax_error(line, col, "Missing end of comment tag");
    }

    bool lex_raw(bool line_starting) {
        for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 1)) {
            size_t p = q + 2;
            const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : '\0';
            if (sign) ++p;
            p = skip_py_space(src_, p);
            if (src_.compare(p, 6, "endraw") != 0) continue;
            p = skip_py_space(src_, p + 6);
            const bool closes = src_.compare(p, 2, "%}") == 0 ||
                                ((src_[p] == '-' || src_[p] == '+') && src_.compare(p + 1, 2, "%}") == 0);
            if (!closes) continue;
            std::string_view text = std::string_view(src_).substr(pos_, q - pos_);
            emit_data(strip_before_tag(text, sign, true, line_starting));
            advance_to(p);
            return end_tag("%}", true);
        }
        syntax_error(line_, col_, "Missing end of raw directive");
    }

    bool lex_tag(tag kind, uint32_t line, uint32_t col) {
        std::vector<char> balance;
        const std::string_view close = kind == tag::variable ? "}}" : "%}";
        while (true) {
            pos_ = skip_space_tracking(pos_);
            if (pos_ >= src_.size())
                syntax_error(line, col, kind == tag::variable ? "unexpected end of template, expected end of print statement"
                                                              : "unexpected end of template, expected end of statement block");
            if (balance.empty()) {
                const bool signed_close = (src_[pos_] == '-' || (src_[pos_] == '+' && kind == tag::block)) &&
                                          src_.compare(pos_ + 1, 2, close) == 0;
                if (signed_close || src_.compare(pos_, 2, close) == 0) {
                    push(kind == tag::variable ? tok::var_end : tok::block_end, "", line_, col_);
                    return end_tag(close, kind == tag::block);
                }
            }
            lex_token(balance);
        }
    }

    size_t skip_space_tracking(size_t p) {
        const size_t end = skip_py_space(src_, p);
        advance_to(end);
        return end;
    }

    void lex_token(std::vector<char> &balance) {
        const uint32_t line = line_, col = col_;
        const char c = src_[pos_];
        if (is_digit(c)) return lex_number(line, col);
        if (c == '\'' || c == '"') return lex_string(line, col);
        size_t p = pos_;
        const char32_t cp = utf8_next(src_, p);
        if (is_name_start(cp)) {
            while (p < src_.size()) {
                size_t q = p;
                if (!is_name_char(utf8_next(src_, q))) break;
                p = q;
            }
            push(tok::name, src_.substr(pos_, p - pos_), line, col);
            advance_to(p);
            return;
        }
        static const char *const two[] = {"**", "//", "==", "!=", ">=", "<="};
        for (const char *o : two)
            if (src_.compare(pos_, 2, o) == 0) {
                push(tok::op, o, line, col);
                advance_to(pos_ + 2);
                return;
            }
        if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
            syntax_error(line, col, fmt::format("unexpected char {} at {}", quote_char(cp), pos_));
        if (c == '(' || c == '[' || c == '{') {
            balance.push_back(c);
        } else if (c == ')' || c == ']' || c == '}') {
            const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (balance.empty()) syntax_error(line, col, fmt::format("unexpected '{}'", c));
            if (balance.back() != open)
                syntax_error(line, col, fmt::format("unexpected '{}', expected '{}'", c,
                                                    balance.back() == '(' ? ')' : balance.back() == '[' ? ']' : '}'));
            balance.pop_back();
        }
        push(tok::op, std::string(1, c), line, col);
        advance_to(pos_ + 1);
    }

    static std::string quote_char(char32_t cp) {
        std::string s = "'";
        utf8_append(s, cp);
        return s + "'";
    }

    size_t digits_run(size_t p, bool (*ok)(char)) const {
        // Underscores may separate digits: (\d+_)*\d+
        const size_t start = p;
        while (p < src_.size() && (ok(src_[p]) || (src_[p] == '_' && p > start && p + 1 < src_.size() && ok(src_[p + 1]))))
            ++p;
        return p;
    }

    void lex_number(uint32_t line, uint32_t col) {
        const size_t start = pos_;
        if (src_[pos_] == '0' && pos_ + 1 < src_.size() && std::string_view("bBoOxX").find(src_[pos_ + 1]) != std::string_view::npos) {
            const char b = static_cast<char>(src_[pos_ + 1] | 0x20);
            const int base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
            size_t p = pos_ + 2;
            std::string digits;
            while (p < src_.size()) {
                const char d = src_[p];
                const bool ok = base == 16 ? std::isxdigit(static_cast<unsigned char>(d)) : (d >= '0' && d < '0' + base);
                if (d == '_' && p + 1 < src_.size()) { ++p; continue; }
                if (!ok) break;
                digits += d;
                ++p;
            }
            if (!digits.empty()) {
                int64_t v = 0;
                if (std::from_chars(digits.data(), digits.data() + digits.size(), v, base).ec != std::errc())
                    syntax_error(line, col, "integer literal too large (integers are 64-bit)");
                token t;
                t.kind = tok::integer;
                t.ival = v;
                push(std::move(t), line, col);
                advance_to(p);
                return;
            }
        }
        size_t p = digits_run(pos_, is_digit);
        bool is_float = false;
        if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
            p = digits_run(p + 1, is_digit);
            is_float = true;
        }
        if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
            size_t q = p + 1;
            if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
            if (q < src_.size() && is_digit(src_[q])) {
                p = digits_run(q, is_digit);
                is_float = true;
            }
        }
        std::string text;
        for (size_t i = start; i < p; ++i)
            if (src_[i] != '_') text += src_[i];
        token t;
        if (is_float) {
            t.kind = tok::floating;
            t.fval = std::strtod(text.c_str(), nullptr);
        } else {
            t.kind = tok::integer;
            if (std::from_chars(text.data(), text.data() + text.size(), t.ival).ec != std::errc())
                syntax_error(line, col, "integer literal too large (integers are 64-bit)");
        }
        push(std::move(t), line, col);
        advance_to(p);
    }

    void lex_string(uint32_t line, uint32_t col) {
        const char quote = src_[pos_];
        size_t p = pos_ + 1;
        while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
        if (p >= src_.size()) syntax_error(line, col, "unexpected char '" + std::string(1, quote) + "'");
        token t;
        t.kind = tok::string;
        t.text = unescape(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1), line, col);
        push(std::move(t), line, col);
        advance_to(p + 1);
    }

    // Python's unicode-escape decoding of the literal (after non-ASCII characters were written as
    // backslash escapes, which is what jinja2 does).
    static std::string unescape(std::string_view s, uint32_t line, uint32_t col) {
        std::string out;
        out.reserve(s.size());
        auto hex = [&](size_t at, int n) -> char32_t {
            if (at + static_cast<size_t>(n) > s.size()) syntax_error(line, col, "truncated escape in string literal");
            uint32_t v = 0;
            if (std::from_chars(s.data() + at, s.data() + at + n, v, 16).ptr != s.data() + at + n)
                syntax_error(line, col, "truncated escape in string literal");
            return v;
        };
        for (size_t i = 0; i < s.size();) {
            if (s[i] != '\\' || i + 1 >= s.size()) {
                out += s[i++];
                continue;
            }
            const char e = s[i + 1];
            i += 2;
            switch (e) {
            case '\n': break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'v': out += '\v'; break;
            case 'x': utf8_append(out, hex(i, 2)); i += 2; break;
            case 'u': utf8_append(out, hex(i, 4)); i += 4; break;
            case 'U': {
                const char32_t cp = hex(i, 8);
                if (cp > 0x10FFFF) syntax_error(line, col, "illegal Unicode character in string literal");
                utf8_append(out, cp);
                i += 8;
                break;
            }
            default:
                if (e >= '0' && e <= '7') {
                    uint32_t v = static_cast<uint32_t>(e - '0');
                    for (int k = 0; k < 2 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++k) v = v * 8 + static_cast<uint32_t>(s[i++] - '0');
                    utf8_append(out, v);
                } else if (static_cast<unsigned char>(e) >= 0x80) {
                    // A backslash before a non-ASCII character keeps the backslash and the
                    // character's own escape text (jinja2's backslashreplace round trip).
                    size_t at = i - 1;
                    const char32_t cp = utf8_next(s, at);
                    out += cp <= 0xFF ? fmt::format("\\x{:02x}", static_cast<unsigned>(cp))
                           : cp <= 0xFFFF ? fmt::format("\\u{:04x}", static_cast<unsigned>(cp))
                                          : fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
                    i = at;
                } else {
                    out += '\\';
                    out += e;
                }
            }
        }
        return out;
    }

    void emit_data(std::string_view text) {
        if (text.empty()) return;
        if (!out_.empty() && out_.back().kind == tok::data) {
            out_.back().text.append(text);
            return;
        }
        push(tok::data, std::string(text), line_, col_);
    }

    void push(tok kind, std::string text, uint32_t line, uint32_t col) {
        token t;
        t.kind = kind;
        t.text = std::move(text);
        push(std::move(t), line, col);
    }

    void push(token t, uint32_t line, uint32_t col) {
        t.line = line;
        t.col = col;
        out_.push_back(std::move(t));
    }

    void advance_to(size_t p) {
        for (; pos_ < p; ++pos_) {
            if (src_[pos_] == '\n') {
                ++line_;
                col_ = 1;
            } else {
                ++col_;
            }
        }
    }

    std::string src_;
    size_t pos_ = 0;
    uint32_t line_ = 1, col_ = 1;
    std::vector<token> out_;
};

}  // namespace

std::vector<token> lex(std::string_view source) { return lexer(source).run(); }

std::string describe(const token &t) {
    switch (t.kind) {
    case tok::data: return "template data";
    case tok::var_begin: return "begin of print statement";
    case tok::var_end: return "end of print statement";
    case tok::block_begin: return "begin of statement block";
    case tok::block_end: return "end of statement block";
    case tok::string: return "string";
    case tok::integer: return "integer";
    case tok::floating: return "float";
    case tok::eof: return "end of template";
    default: return "'" + t.text + "'";
    }
}

}  // namespace tandem::jinja
