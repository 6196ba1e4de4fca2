// src/grammar/schema_regex.cpp - JSON Schema `pattern` (an ECMAScript regex subset) to GBNF over
// JSON string content. Supported: literals, escapes, classes with ranges and negation, `.`,
// groups ((...), (?:...), (?<name>...)), `|`, quantifiers (* + ? {m} {m,} {m,n}, lazy or not),
// `^` at the start and `$` at the end of a top-level alternative. Refused with an error:
// backreferences, lookaround, word boundaries, \p{...}, anchors elsewhere. \d \w \s are ASCII
// (plus the Unicode spaces both ECMAScript and Python count as \s), and their negations match
// ASCII characters only, so an output matches under ECMAScript and Python's `re` alike.
#include "json_schema_gbnf.h"
#include "utf8_ranges.h"

#include <fmt/format.h>

namespace tandem::grammar_detail {

namespace {

constexpr uint32_t regex_nesting_max = 40;  // each group may add two GBNF parentheses

std::vector<cp_range> digit_set() { return {{'0', '9'}}; }
std::vector<cp_range> word_set() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
std::vector<cp_range> space_set() {
    return {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
            {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
}

// ASCII characters outside `set` (and, for \S, outside what Python also counts as space).
std::vector<cp_range> ascii_complement(std::vector<cp_range> set) {
    set.push_back({0x80, 0x10FFFF});
    set.push_back({0x1C, 0x1F});
    return cp_ranges_normalize(std::move(set), true);
}

std::vector<cp_range> intersect_ascii(const std::vector<cp_range> &set) {
    std::vector<cp_range> out;
    for (const cp_range &r : set) {
        if (r.lo <= 0x7F) out.push_back({r.lo, std::min<uint32_t>(r.hi, 0x7F)});
    }
    return out;
}

class regex_compiler {
public:
    regex_compiler(std::string_view pattern, const std::string &pointer) : p_(pattern), ptr_(pointer) {}

    std::string run() {
        std::vector<std::string> branches;
        do {
            bool start = false, end = false;
            if (peek() == '^') start = true, ++pos_;
            std::string body = sequence(true, end);
            branches.push_back(std::string(start ? "" : "json-char* ") + "( " + body + " )" + (end ? "" : " json-char*"));
        } while (peek() == '|' && ++pos_);
        if (pos_ < p_.size()) fail("')' without a matching '('");
        if (branches.size() == 1) return branches[0];
        std::string out = "(";
        for (size_t i = 0; i < branches.size(); ++i) out += (i ? " | " : "") + branches[i];
        return out + ")";
    }

private:
    std::string_view p_;
    std::string ptr_;
    size_t pos_ = 0;
    uint32_t depth_ = 0;

    [[noreturn]] void fail(const std::string &what) const {
        schema_fail(ptr_, fmt::format("pattern: at offset {}: {}", pos_, what));
    }
    char peek(size_t k = 0) const { return pos_ + k < p_.size() ? p_[pos_ + k] : '\0'; }
    bool at_end() const { return pos_ >= p_.size(); }

    std::string set_gbnf(const std::vector<cp_range> &set) {
        const std::string s = json_char_set(set);
        if (s.empty()) fail("a character class that matches no character");
        return s;
    }

    std::string alternation() {
        std::vector<std::string> alts;
        bool end = false;
        do {
            alts.push_back(sequence(false, end));
        } while (peek() == '|' && ++pos_);
        if (alts.size() == 1) return alts[0];
        std::string out = "(";
        for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
        return out + ")";
    }

    // top: `$` may end it (sets end).
    std::string sequence(bool top, bool &end) {
        std::string out;
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$') {
                ++pos_;
                if (!top || !(at_end() || peek() == '|')) fail("'$' is only supported at the end of the pattern");
                end = true;
                break;
            }
            std::string item = atom();
            item = quantified(item);
            out += (out.empty() ? "" : " ") + item;
        }
        return out.empty() ? R"("")" : out;
    }

    bool parse_bounds(uint32_t &min, uint32_t &max) {
        // {m}, {m,}, {m,n}; anything else leaves the '{' a literal (as ECMAScript's Annex B).
        size_t i = pos_ + 1;
        const auto number = [&](uint64_t &v) {
            const size_t start = i;
            v = 0;
            while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9' && i - start < 12) v = v * 10 + uint64_t(p_[i++] - '0');
            return i > start;
        };
        uint64_t lo, hi;
        if (!number(lo)) return false;
        hi = lo;
        if (i < p_.size() && p_[i] == ',') {
            ++i;
            if (!number(hi)) hi = repeat_unbounded;
        }
        if (i >= p_.size() || p_[i] != '}') return false;
        pos_ = i + 1;
        if (lo > max_repeat || (hi != repeat_unbounded && hi > max_repeat)) fail(fmt::format("a repetition count above {}", max_repeat));
        if (hi < lo) fail("a repetition {m,n} with n below m");
        min = uint32_t(lo), max = uint32_t(hi);
        return true;
    }

    std::string quantified(const std::string &item) {
        uint32_t min, max;
        const char c = peek();
        if (c == '*') {
            ++pos_, min = 0, max = repeat_unbounded;
        } else if (c == '+') {
            ++pos_, min = 1, max = repeat_unbounded;
        } else if (c == '?') {
            ++pos_, min = 0, max = 1;
        } else if (c != '{' || !parse_bounds(min, max)) {
            return item;
        }
        if (peek() == '?') ++pos_;  // lazy: the same strings
        if (peek() == '*' || peek() == '+' || peek() == '?' || (peek() == '{' && is_quantifier_brace())) fail("nothing to repeat");
        const std::string inner = "( " + item + " )";
        if (max == repeat_unbounded) return min == 0 ? inner + "*" : min == 1 ? inner + "+" : fmt::format("{}{{{},}}", inner, min);
        if (min == 0 && max == 1) return inner + "?";
        return min == max ? fmt::format("{}{{{}}}", inner, min) : fmt::format("{}{{{},{}}}", inner, min, max);
    }

    bool is_quantifier_brace() {
        const size_t save = pos_;
        uint32_t a, b;
        const bool ok = parse_bounds(a, b);
        pos_ = save;
        return ok;
    }

    std::string atom() {
        const char c = peek();
        if (c == '(') return group();
        if (c == '[') return set_gbnf(char_class());
        if (c == '.') {
            ++pos_;
            return set_gbnf(cp_ranges_normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true));
        }
        if (c == '*' || c == '+' || c == '?' || (c == '{' && is_quantifier_brace())) fail("nothing to repeat");
        if (c == '^') fail("'^' is only supported at the start of the pattern");
        if (c == '\\') return set_gbnf(escape(false));
        uint32_t cp;
        const size_t n = utf8_decode(p_, pos_, cp);
        if (n == 0) fail("invalid UTF-8");
        pos_ += n;
        return set_gbnf({{cp, cp}});
    }

    std::string group() {
        if (++depth_ > regex_nesting_max) fail(fmt::format("groups nested deeper than {}", regex_nesting_max));
        ++pos_;
        if (peek() == '?') {
            if (peek(1) == ':') {
                pos_ += 2;
            } else if (peek(1) == '<' && peek(2) != '=' && peek(2) != '!') {
                const size_t close = p_.find('>', pos_);
                if (close == std::string_view::npos) fail("unterminated group name");
                pos_ = close + 1;
            } else if (peek(1) == '=' || peek(1) == '!' || peek(1) == '<') {
                fail("lookaround assertions are not supported");
            } else {
                fail("unsupported group syntax '(?'");
            }
        }
        std::string inner = alternation();
        if (peek() != ')') fail("'(' is never closed");
        ++pos_;
        --depth_;
        return "( " + inner + " )";
    }

    uint32_t hex(size_t n) {
        uint32_t v = 0;
        for (size_t i = 0; i < n; ++i) {
            const char c = peek();
            const int h = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
            if (h < 0) fail(fmt::format("expected {} hex digits", n));
            v = v * 16 + uint32_t(h);
            ++pos_;
        }
        return v;
    }

    // After '\': a set (\d, a literal); in_class: \b is backspace there.
    std::vector<cp_range> escape(bool in_class) {
        ++pos_;
        if (at_end()) fail("'\\' at the end of the pattern");
        const char e = p_[pos_++];
        const auto one = [](uint32_t c) { return std::vector<cp_range>{{c, c}}; };
        switch (e) {
        case 'd': return digit_set();
        case 'w': return word_set();
        case 's': return space_set();
        case 'D': return ascii_complement(digit_set());
        case 'W': return ascii_complement(word_set());
        case 'S': return ascii_complement(space_set());
        case 't': return one('\t');
        case 'n': return one('\n');
        case 'r': return one('\r');
        case 'v': return one('\v');
        case 'f': return one('\f');
        case '0':
            if (peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
            return one(0);
        case 'x': return one(hex(2));
        case 'u': {
            if (peek() == '{') fail("\\u{...} is not supported");
            const uint32_t c = hex(4);
            if (c >= 0xD800 && c <= 0xDFFF) fail("surrogate escapes are not supported");
            return one(c);
        }
        case 'b':
            if (in_class) return one('\b');
            fail("word boundaries (\\b) are not supported");
        case 'B': fail("word boundaries (\\B) are not supported");
        case 'p': case 'P': fail("Unicode property escapes are not supported");
        case 'k': fail("named backreferences are not supported");
        case 'c': fail("control escapes (\\c) are not supported");
        default: break;
        }
        if (e >= '1' && e <= '9') fail("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) fail(fmt::format("unknown escape '\\{}'", e));
        --pos_;
        uint32_t cp;
        const size_t n = utf8_decode(p_, pos_, cp);
        if (n == 0) fail("invalid UTF-8");
        pos_ += n;
        return one(cp);
    }

    // One class member: a code point (returns true) or a shorthand set (added to `set`).
    bool class_member(std::vector<cp_range> &set, uint32_t &cp, bool &shorthand) {
        if (peek() == '\\') {
            std::vector<cp_range> s = escape(true);
            if (s.size() == 1 && s[0].lo == s[0].hi) {
                cp = s[0].lo;
                return true;
            }
            shorthand = true;
            set.insert(set.end(), s.begin(), s.end());
            return false;
        }
        const size_t n = utf8_decode(p_, pos_, cp);
        if (n == 0) fail("invalid UTF-8");
        pos_ += n;
        return true;
    }

    std::vector<cp_range> char_class() {
        const size_t open = pos_++;
        bool negated = false, shorthand = false;
        if (peek() == '^') negated = true, ++pos_;
        std::vector<cp_range> set;
        while (peek() != ']') {
            if (at_end()) {
                pos_ = open;
                fail("unterminated character class");
            }
            uint32_t lo;
            if (!class_member(set, lo, shorthand)) continue;
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < p_.size()) {
                ++pos_;
                uint32_t hi;
                if (!class_member(set, hi, shorthand)) {
                    set.push_back({lo, lo});
                    set.push_back({'-', '-'});
                    continue;
                }
                if (hi < lo) fail("a class range that ends before it starts");
                set.push_back({lo, hi});
            } else {
                set.push_back({lo, lo});
            }
        }
        ++pos_;
        std::vector<cp_range> out = cp_ranges_normalize(std::move(set), negated);
        return negated && shorthand ? intersect_ascii(out) : out;
    }
};

}  // namespace

std::string pattern_gbnf(std::string_view pattern, const std::string &pointer) {
    return regex_compiler(pattern, pointer).run();
}

}  // namespace tandem::grammar_detail
