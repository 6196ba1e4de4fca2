// src/grammar/gbnf_parser.cpp - llama.cpp's GBNF text to expression trees; every error names its
// line and column.
#include "gbnf_ast.h"
#include "grammar_ir.h"
#include "utf8_ranges.h"

#include "tandem/error.h"

#include <algorithm>
#include <unordered_map>

namespace tandem::grammar_detail {

std::vector<cp_range> cp_ranges_normalize(std::vector<cp_range> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end(), [](const cp_range &a, const cp_range &b) { return a.lo < b.lo; });
    std::vector<cp_range> merged;
    for (const cp_range &r : ranges) {
        if (!merged.empty() && r.lo <= merged.back().hi + 1) {
            merged.back().hi = std::max(merged.back().hi, r.hi);
        } else {
            merged.push_back(r);
        }
    }
    if (negated) {
        std::vector<cp_range> complement;
        uint32_t next = 0;
        for (const cp_range &r : merged) {
            if (r.lo > next) complement.push_back({next, r.lo - 1});
            next = r.hi + 1;
        }
        if (next <= 0x10FFFF) complement.push_back({next, 0x10FFFF});
        merged = std::move(complement);
    }
    std::vector<cp_range> out;
    for (const cp_range &r : merged) {
        if (r.hi < 0xD800 || r.lo > 0xDFFF) {
            out.push_back(r);
            continue;
        }
        if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
        if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
    }
    return out;
}

namespace {

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class gbnf_parser {
public:
    explicit gbnf_parser(std::string_view text) : src_(text) {}

    ast_grammar parse() {
        if (src_.size() > max_gbnf_bytes) fail(0, "the grammar is larger than {} bytes", max_gbnf_bytes);
        skip_space(true);
        while (!at_end()) {
            parse_rule();
            skip_space(true);
        }
        for (size_t r = 0; r < g_.rules.size(); ++r) {
            if (g_.rules[r].body < 0) fail(first_use_[r], "undefined rule '{}'", g_.rules[r].name);
        }
        const auto root = rule_ids_.find("root");
        if (root == rule_ids_.end()) throw error(error_kind::invalid_request, "grammar: no rule named 'root' (the start rule)");
        g_.root = root->second;
        return std::move(g_);
    }

private:
    std::string_view src_;
    size_t pos_ = 0;
    uint32_t depth_ = 0;
    ast_grammar g_;
    std::unordered_map<std::string, int32_t> rule_ids_;
    std::vector<size_t> first_use_;  // [n_rules] offset of the first mention
    mutable size_t lc_at_ = 0;
    mutable uint32_t lc_line_ = 1, lc_column_ = 1;

    // Offsets are asked for in increasing order while parsing: scan on from the last answer.
    void line_column(size_t at, uint32_t &line, uint32_t &column) const {
        if (at < lc_at_) lc_at_ = 0, lc_line_ = 1, lc_column_ = 1;
        for (; lc_at_ < at && lc_at_ < src_.size(); ++lc_at_) {
            if (src_[lc_at_] == '\n') {
                ++lc_line_, lc_column_ = 1;
            } else if ((uint8_t(src_[lc_at_]) & 0xC0) != 0x80) {
                ++lc_column_;
            }
        }
        line = lc_line_, column = lc_column_;
    }

    template <class... Args>
    [[noreturn]] void fail(size_t at, fmt::format_string<Args...> format, Args &&...args) const {
        uint32_t line, column;
        line_column(at, line, column);
        throw error(error_kind::invalid_request, fmt::format("grammar: line {}, column {}: {}", line, column,
                                                             fmt::format(format, std::forward<Args>(args)...)));
    }

    bool at_end() const { return pos_ >= src_.size(); }
    char peek(size_t k = 0) const { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; }
    bool at_newline() const { return peek() == '\n' || peek() == '\r'; }

    // Spaces, tabs and comments; newlines too where the rule cannot end (inside parentheses,
    // after `::=` and `|`, between rules).
    void skip_space(bool newlines) {
        while (!at_end()) {
            const char c = peek();
            if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
                ++pos_;
            } else if (c == '#') {
                while (!at_end() && !at_newline()) ++pos_;
            } else {
                break;
            }
        }
    }

    std::string describe(char c) const {
        if (uint8_t(c) >= 0x21 && uint8_t(c) < 0x7F) return fmt::format("'{}'", c);
        return fmt::format("byte 0x{:02X}", uint8_t(c));
    }

    uint32_t add(ast_node n) {
        g_.nodes.push_back(std::move(n));
        return uint32_t(g_.nodes.size() - 1);
    }

    int32_t rule_id(const std::string &name, size_t at) {
        const auto [it, inserted] = rule_ids_.try_emplace(name, int32_t(g_.rules.size()));
        if (inserted) {
            if (g_.rules.size() >= max_rules) fail(at, "more than {} rules", max_rules);
            g_.rules.push_back({name, -1, 0, 0});
            first_use_.push_back(at);
        }
        return it->second;
    }

    void parse_rule() {
        const size_t start = pos_;
        std::string name;
        while (is_name_char(peek())) name.push_back(src_[pos_++]);
        if (name.empty()) fail(pos_, "expected a rule name, found {}", describe(peek()));
        skip_space(false);
        if (src_.substr(pos_, 3) != "::=") fail(pos_, "expected '::=' after the rule name '{}'", name);
        pos_ += 3;
        skip_space(true);
        const uint32_t body = parse_choice(false);
        skip_space(false);
        if (peek() == ')') fail(pos_, "')' without a matching '('");
        if (!at_end() && !at_newline()) fail(pos_, "unexpected {} in rule '{}'", describe(peek()), name);
        const int32_t id = rule_id(name, start);
        ast_rule &rule = g_.rules[size_t(id)];
        if (rule.body >= 0) fail(start, "rule '{}' is defined twice (first at line {})", name, rule.line);
        rule.body = int32_t(body);
        line_column(start, rule.line, rule.column);
    }

    uint32_t parse_choice(bool nested) {
        std::vector<uint32_t> alternatives{parse_sequence(nested)};
        while (peek() == '|') {
            ++pos_;
            skip_space(true);
            alternatives.push_back(parse_sequence(nested));
        }
        if (alternatives.size() == 1) return alternatives[0];
        ast_node n;
        n.kind = ast_kind::choice;
        n.children = std::move(alternatives);
        return add(std::move(n));
    }

    uint32_t parse_sequence(bool nested) {
        std::vector<uint32_t> items;
        for (;;) {
            skip_space(nested);
            if (at_end() || peek() == '|' || peek() == ')' || at_newline()) break;
            items.push_back(parse_item(nested));
        }
        if (items.size() == 1) return items[0];
        ast_node n;
        n.kind = ast_kind::sequence;
        n.children = std::move(items);
        return add(std::move(n));
    }

    uint32_t parse_item(bool nested) {
        uint32_t node = parse_primary();
        bool repeated = false;
        for (;;) {
            const size_t save = pos_;
            skip_space(nested);
            uint32_t min, max;
            const char c = peek();
            if (c == '*') {
                min = 0, max = repeat_unbounded, ++pos_;
            } else if (c == '+') {
                min = 1, max = repeat_unbounded, ++pos_;
            } else if (c == '?') {
                min = 0, max = 1, ++pos_;
            } else if (c == '{') {
                parse_bounds(min, max);
            } else {
                pos_ = save;
                return node;
            }
            if (repeated) {
                fail(save, "a second repetition operator needs parentheses around the first");
            }
            repeated = true;
            ast_node n;
            n.kind = ast_kind::repeat;
            n.children = {node};
            n.min = min, n.max = max;
            node = add(std::move(n));
        }
    }

    uint32_t parse_count() {
        const size_t at = pos_;
        if (!(peek() >= '0' && peek() <= '9')) fail(pos_, "expected a number in {{m,n}}, found {}", describe(peek()));
        uint64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + uint64_t(src_[pos_++] - '0');
            if (v > max_repeat) fail(at, "repetition count above the limit of {}", max_repeat);
        }
        return uint32_t(v);
    }

    void parse_bounds(uint32_t &min, uint32_t &max) {
        const size_t open = pos_++;
        skip_space(true);
        min = max = parse_count();
        skip_space(true);
        if (peek() == ',') {
            ++pos_;
            skip_space(true);
            max = (peek() >= '0' && peek() <= '9') ? parse_count() : repeat_unbounded;
            skip_space(true);
        }
        if (peek() != '}') fail(pos_, "expected '}}' to close the repetition opened at column {}", column_of(open));
        ++pos_;
        if (max < min) fail(open, "repetition {{{},{}}} has its maximum below its minimum", min, max);
    }

    uint32_t column_of(size_t at) const {
        uint32_t line, column;
        line_column(at, line, column);
        return column;
    }

    uint32_t parse_primary() {
        const size_t at = pos_;
        const char c = peek();
        if (c == '"') return parse_literal();
        if (c == '[') return parse_class();
        if (c == '.') {
            ++pos_;
            ast_node n;
            n.kind = ast_kind::char_class;
            n.ranges = cp_ranges_normalize({}, true);
            return add(std::move(n));
        }
        if (c == '(') {
            if (++depth_ > max_nesting) fail(at, "parentheses nested deeper than {}", max_nesting);
            ++pos_;
            skip_space(true);
            const uint32_t inner = parse_choice(true);
            skip_space(true);
            if (at_end()) fail(at, "'(' is never closed");
            if (peek() != ')') fail(pos_, "expected ')', found {}", describe(peek()));
            ++pos_;
            --depth_;
            return inner;
        }
        if (is_name_char(c)) {
            std::string name;
            while (is_name_char(peek())) name.push_back(src_[pos_++]);
            ast_node n;
            n.kind = ast_kind::rule_ref;
            n.rule = rule_id(name, at);
            return add(std::move(n));
        }
        if (c == '<' || c == '!') fail(at, "token references (<...>, !<...>) are not supported");
        if (c == ':' && src_.substr(pos_, 3) == "::=") fail(at, "'::=' inside a rule (a new rule must start on its own line)");
        fail(at, "unexpected {}", describe(c));
    }

    uint32_t parse_literal() {
        const size_t open = pos_++;
        ast_node n;
        n.kind = ast_kind::literal;
        for (;;) {
            if (at_end() || at_newline()) fail(open, "unterminated string literal");
            if (peek() == '"') break;
            utf8_append(n.bytes, parse_code_point());
        }
        ++pos_;
        return add(std::move(n));
    }

    uint32_t parse_class() {
        const size_t open = pos_++;
        bool negated = false;
        if (peek() == '^') negated = true, ++pos_;
        std::vector<cp_range> ranges;
        for (;;) {
            if (at_end()) fail(open, "unterminated character class");
            if (peek() == ']') break;
            const size_t at = pos_;
            const uint32_t lo = parse_code_point();
            uint32_t hi = lo;
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
                ++pos_;
                hi = parse_code_point();
                if (hi < lo) fail(at, "character range U+{:04X}-U+{:04X} ends before it starts", lo, hi);
            }
            ranges.push_back({lo, hi});
        }
        ++pos_;
        ast_node n;
        n.kind = ast_kind::char_class;
        n.ranges = cp_ranges_normalize(std::move(ranges), negated);
        return add(std::move(n));
    }

    uint32_t parse_hex(size_t digits, size_t at, char escape) {
        uint32_t v = 0;
        for (size_t i = 0; i < digits; ++i) {
            const int h = hex_value(peek());
            if (h < 0) fail(at, "\\{} needs {} hex digits", escape, digits);
            v = v * 16 + uint32_t(h);
            ++pos_;
        }
        return v;
    }

    uint32_t parse_code_point() {
        const size_t at = pos_;
        uint32_t cp = 0;
        if (peek() != '\\') {
            const size_t n = utf8_decode(src_, pos_, cp);
            if (n == 0) fail(at, "invalid UTF-8");
            pos_ += n;
            return cp;
        }
        ++pos_;
        const char e = peek();
        if (at_end()) fail(at, "'\\' at the end of the grammar");
        ++pos_;
        switch (e) {
        case 'x': cp = parse_hex(2, at, e); break;
        case 'u': cp = parse_hex(4, at, e); break;
        case 'U': cp = parse_hex(8, at, e); break;
        case 't': return '\t';
        case 'n': return '\n';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': return uint32_t(uint8_t(e));
        default: fail(at, "unknown escape '\\{}'", e);
        }
        if (cp > 0x10FFFF) fail(at, "code point U+{:X} is beyond U+10FFFF", cp);
        if (cp >= 0xD800 && cp <= 0xDFFF) fail(at, "code point U+{:04X} is a surrogate, which UTF-8 cannot encode", cp);
        return cp;
    }
};

}  // namespace

ast_grammar gbnf_parse(std::string_view text) { return gbnf_parser(text).parse(); }

}  // namespace tandem::grammar_detail
