// src/grammar/json_schema_scalar.cpp - strings (length, pattern, format), integers with exact
// bounds (decimal range grammars), and numbers with bounds (a valid subset: the bounds rounded
// inwards to integers, a fraction of up to 16 digits, no exponent).
#include "json_schema_gbnf.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

namespace tandem::grammar_detail {

namespace {

// Integers are written with at most 16 digits: a model cannot spin on digits, and every value
// is exact in int64 and in a double.
constexpr int64_t int_limit = 9999999999999999;

std::string digits_gbnf(size_t n) {
    if (n == 0) return "";
    return n == 1 ? "[0-9]" : fmt::format("[0-9]{{{}}}", n);
}

std::string digit_class(char lo, char hi) {
    if (lo == hi) return gbnf_literal(std::string(1, lo));
    return fmt::format("[{}-{}]", lo, hi);
}

std::string join_alternatives(const std::vector<std::string> &alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

std::string concat(const std::string &a, const std::string &b) {
    if (a.empty()) return b;
    if (b.empty()) return a;
    return a + " " + b;
}

// Decimal strings of equal length x <= y: all strings of that length between them.
std::string same_length_range(const std::string &x, const std::string &y) {
    if (x == y) return gbnf_literal(x);
    size_t i = 0;
    while (x[i] == y[i]) ++i;
    const std::string prefix = i ? gbnf_literal(x.substr(0, i)) : "";
    const std::string xr = x.substr(i + 1), yr = y.substr(i + 1);
    const size_t r = xr.size();
    const bool low_full = xr.find_first_not_of('0') == std::string::npos;
    const bool high_full = yr.find_first_not_of('9') == std::string::npos;
    std::vector<std::string> alts;
    char from = x[i], to = y[i];
    if (!low_full) {
        alts.push_back(concat(concat(prefix, gbnf_literal(std::string(1, x[i]))), same_length_range(xr, std::string(r, '9'))));
        ++from;
    }
    std::string high;
    if (!high_full) {
        high = concat(concat(prefix, gbnf_literal(std::string(1, y[i]))), same_length_range(std::string(r, '0'), yr));
        --to;
    }
    if (from <= to) alts.push_back(concat(concat(prefix, digit_class(from, to)), digits_gbnf(r)));
    if (!high.empty()) alts.push_back(high);
    return join_alternatives(alts);
}

// Non-negative integers a..b without leading zeros.
std::string natural_range(int64_t a, int64_t b) {
    std::vector<std::string> alts;
    int64_t low = 0, high = 9;  // the values with `len` digits
    for (size_t len = 1; len <= 16; ++len) {
        const int64_t lo = std::max(a, low), hi = std::min(b, high);
        if (lo <= hi) alts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
        low = high + 1;
        high = high * 10 + 9;
    }
    return join_alternatives(alts);
}

// Integers lo..hi (both within +-int_limit).
std::string integer_range(int64_t lo, int64_t hi) {
    std::vector<std::string> alts;
    if (lo < 0) alts.push_back(R"("-" )" + natural_range(std::max<int64_t>(-hi, 1), -lo));
    if (hi >= 0) alts.push_back(natural_range(std::max<int64_t>(lo, 0), hi));
    return join_alternatives(alts);
}

std::optional<double> read_number(const nlohmann::ordered_json &s, const char *key, const std::string &ptr) {
    const auto it = s.find(key);
    if (it == s.end() || it->is_boolean()) return std::nullopt;
    if (!it->is_number()) schema_fail(ptr + "/" + key, "must be a number");
    return it->get<double>();
}

bool read_flag(const nlohmann::ordered_json &s, const char *key) {
    const auto it = s.find(key);
    return it != s.end() && it->is_boolean() && it->get<bool>();
}

int64_t clamp_limit(double v) { return int64_t(std::max(-double(int_limit) - 1, std::min(double(int_limit) + 1, v))); }

// The integer bounds [lo, hi] inside the schema's minimum/maximum (inclusive or exclusive, in the
// draft-4 boolean form too); false when there are none.
bool integer_bounds(const nlohmann::ordered_json &s, const std::string &ptr, int64_t &lo, int64_t &hi) {
    lo = -int_limit, hi = int_limit;
    bool any = false;
    if (const auto m = read_number(s, "minimum", ptr)) {
        any = true;
        const double v = read_flag(s, "exclusiveMinimum") ? std::floor(*m) + 1 : std::ceil(*m);
        lo = std::max(lo, clamp_limit(v));
    }
    if (const auto m = read_number(s, "exclusiveMinimum", ptr)) any = true, lo = std::max(lo, clamp_limit(std::floor(*m) + 1));
    if (const auto m = read_number(s, "maximum", ptr)) {
        any = true;
        const double v = read_flag(s, "exclusiveMaximum") ? std::ceil(*m) - 1 : std::floor(*m);
        hi = std::min(hi, clamp_limit(v));
    }
    if (const auto m = read_number(s, "exclusiveMaximum", ptr)) any = true, hi = std::min(hi, clamp_limit(std::ceil(*m) - 1));
    if (any && lo > hi) schema_fail(ptr, fmt::format("no integer of at most 16 digits lies within the minimum and maximum"));
    return any;
}

const std::string quote = R"("\"")";

std::string format_gbnf(const std::string &format) {
    const std::string date =
        R"([1-9] [0-9]{3} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | )"
        R"(( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))";
    const std::string time =
        R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? )"
        R"(( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))";
    const std::string hex = "[0-9a-fA-F]";
    if (format == "date") return date;
    if (format == "time") return time;
    if (format == "date-time") return date + R"( "T" )" + time;
    if (format == "uuid") {
        return fmt::format(R"({0}{{8}} "-" {0}{{4}} "-" {0}{{4}} "-" {0}{{4}} "-" {0}{{12}})", hex);
    }
    return "";
}

}  // namespace

std::string integer_gbnf(const nlohmann::ordered_json &s, const std::string &ptr) {
    int64_t lo, hi;
    if (!integer_bounds(s, ptr, lo, hi)) return "json-integer";
    return integer_range(lo, hi);
}

std::string number_gbnf(const nlohmann::ordered_json &s, const std::string &ptr) {
    int64_t lo, hi;
    if (!integer_bounds(s, ptr, lo, hi)) return "json-number";
    // v = k.f with k in [a, b-1] and any fraction, or exactly b: all of [a, b] and nothing else;
    // negative values mirror that on their magnitude.
    const std::string fraction = R"(( "." [0-9]{1,16} )?)";
    const auto magnitude = [&](int64_t a, int64_t b) {
        const std::string top = gbnf_literal(std::to_string(b));
        if (a == b) return top;
        return "(" + natural_range(a, b - 1) + " " + fraction + " | " + top + ")";
    };
    std::vector<std::string> alts;
    if (lo < 0) alts.push_back(R"("-" )" + magnitude(std::max<int64_t>(-hi, 0), -lo));
    if (hi >= 0) alts.push_back(magnitude(std::max<int64_t>(lo, 0), hi));
    return join_alternatives(alts);
}

std::string string_gbnf(const nlohmann::ordered_json &s, const std::string &ptr) {
    const auto length = [&](const char *key) -> std::optional<uint32_t> {
        const auto it = s.find(key);
        if (it == s.end()) return std::nullopt;
        if (!it->is_number_integer() || it->get<int64_t>() < 0) schema_fail(ptr + "/" + key, "must be a non-negative integer");
        if (it->get<int64_t>() > int64_t(max_repeat)) schema_fail(ptr + "/" + key, fmt::format("above the limit of {}", max_repeat));
        return uint32_t(it->get<int64_t>());
    };
    const std::optional<uint32_t> min = length("minLength"), max = length("maxLength");
    if (min && max && *min > *max) schema_fail(ptr, "minLength is above maxLength");
    if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) schema_fail(ptr + "/pattern", "must be a string");
        if (min || max) schema_fail(ptr, "'pattern' together with 'minLength'/'maxLength' is not supported");
        return quote + " " + pattern_gbnf(s["pattern"].get<std::string>(), ptr + "/pattern") + " " + quote;
    }
    if (min || max) {
        const std::string bounds = max ? fmt::format("{{{},{}}}", min.value_or(0), *max) : fmt::format("{{{},}}", *min);
        return quote + " json-char" + bounds + " " + quote;
    }
    if (s.contains("format") && s["format"].is_string()) {
        const std::string f = format_gbnf(s["format"].get<std::string>());
        if (!f.empty()) return quote + " " + f + " " + quote;
    }
    return "json-string";
}

}  // namespace tandem::grammar_detail
