// src/jinja/jinja_filters.cpp - jinja2's builtin filters with their Python semantics (arguments,
// defaults, undefined handling), plus transformers' tojson; marks survive wherever text does.
#include "jinja_filters.h"

#include "jinja_unicode.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

namespace tandem::jinja {

using namespace filters;

namespace {

// ---- filters ----

value f_abs(interp &, const value &v, call_args &args) {
    bind_args(args, "abs", {});
    if (v.is_float()) return value::floating(std::fabs(v.as_float()));
    if (v.is_number()) return value::integer(v.as_int() < 0 ? checked_sub(0, v.as_int()) : v.as_int());
    failf(jinja_error_kind::runtime, "bad operand type for abs(): '{}'", type_name(v));
}

value f_attr(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "attr", {"name"}, 1);
    const value name = str_of(in, *a.get(0));
    bool unsafe = false;
    if (in.has_method(v, name.text(), unsafe) || v.is_object()) return in.getattr(v, name.text());
    return value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(v), name.text()));
}

value f_capitalize(interp &in, const value &v, call_args &args) {
    bind_args(args, "capitalize", {});
    return in.call_attr(str_of(in, v), "capitalize", {});
}

value f_center(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "center", {"width"});
    call_args c;
    c.pos.push_back(a.get(0) ? *a.get(0) : value::integer(80));
    return in.call_attr(str_of(in, v), "center", std::move(c));
}

value f_default(interp &, const value &v, call_args &args) {
    const auto a = bind_args(args, "default", {"default_value", "boolean"});
    const bool boolean = a.get(1) && truthy(*a.get(1));
    if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0) ? *a.get(0) : value::string("");
    return v;
}

value f_escape(interp &in, const value &v, call_args &args) {
    bind_args(args, "escape", {});
    if (v.is_string() && v.str().markup) return v;
    const value s = str_of(in, v);
    mstring out(&in.bud);
    out.add(html_escape(s.text()), !s.str().marks.empty());
    out.markup = true;
    return value::string(std::move(out));
}

value f_forceescape(interp &in, const value &v, call_args &args) {
    bind_args(args, "forceescape", {});
    const value s = str_of(in, v);
    mstring out(&in.bud);
    out.add(html_escape(s.text()), !s.str().marks.empty());
    out.markup = true;
    return value::string(std::move(out));
}

// Python's float(str): surrounding whitespace, underscores between digits, inf and nan.
bool parse_py_float(std::string s, double &out) {
    const size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
    if (b == std::string::npos) return false;
    s = s.substr(b, e - b + 1);
    std::string clean;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '_') {
            if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
                !std::isdigit(static_cast<unsigned char>(s[i + 1])))
                return false;
            continue;
        }
        clean += s[i];
    }
    std::string lower = py_lower(clean);
    const std::string unsigned_part = (!lower.empty() && (lower[0] == '+' || lower[0] == '-')) ? lower.substr(1) : lower;
    if (unsigned_part == "inf" || unsigned_part == "infinity" || unsigned_part == "nan") {
        out = unsigned_part == "nan" ? NAN : INFINITY;
        if (lower[0] == '-') out = -out;
        return true;
    }
    for (char c : unsigned_part)
        if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) return false;
    char *end = nullptr;
    out = std::strtod(clean.c_str(), &end);
    return end && *end == '\0' && end != clean.c_str();
}

value f_float(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "float", {"default"});
    const value dflt = a.get(0) ? *a.get(0) : value::floating(0.0);
    if (v.is_undefined()) in.fail_undefined(v);
    if (v.is_number()) return value::floating(v.as_float());
    double d = 0;
    if (v.is_string() && parse_py_float(v.text(), d)) return value::floating(d);
    return dflt;
}

bool parse_py_int(const std::string &s, int64_t base, int64_t &out) {
    const size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
    if (b == std::string::npos) return false;
    std::string t = s.substr(b, e - b + 1);
    bool negative = false;
    if (t[0] == '+' || t[0] == '-') {
        negative = t[0] == '-';
        t = t.substr(1);
    }
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        const std::string pfx = t.size() > 1 ? py_lower(t.substr(0, 2)) : "";
        const int64_t detected = pfx == "0x" ? 16 : pfx == "0o" ? 8 : pfx == "0b" ? 2 : 0;
        if (detected && (base == 0 || base == detected)) {
            base = detected;
            t = t.substr(2);
        } else if (base == 0) {
            base = 10;
        }
    }
    if (t.empty() || base < 2 || base > 36) return false;
    __int128 acc = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        const char c = t[i];
        if (c == '_' && i > 0 && i + 1 < t.size() && t[i - 1] != '_') continue;
        const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10 : 99;
        if (d >= base) return false;
        acc = acc * base + d;
        if (acc > (static_cast<__int128>(1) << 63)) fail(jinja_error_kind::runtime, "integer overflow (integers are 64-bit)");
    }
    if (negative) acc = -acc;
    if (acc > INT64_MAX) fail(jinja_error_kind::runtime, "integer overflow (integers are 64-bit)");
    out = static_cast<int64_t>(acc);
    return true;
}

value f_int(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "int", {"default", "base"});
    const value dflt = a.get(0) ? *a.get(0) : value::integer(0);
    const int64_t base = a.get(1) ? a.get(1)->as_int() : 10;
    if (v.is_undefined()) in.fail_undefined(v);
    if (v.is_float()) {
        const double d = v.as_float();
        if (std::isnan(d) || std::isinf(d)) return dflt;
        if (std::fabs(d) >= 9.2e18) fail(jinja_error_kind::runtime, "integer overflow (integers are 64-bit)");
        return value::integer(static_cast<int64_t>(d));
    }
    if (v.is_number()) return value::integer(v.as_int());
    if (!v.is_string()) return dflt;
    int64_t i = 0;
    if (parse_py_int(v.text(), base, i)) return value::integer(i);
    double d = 0;
    if (parse_py_float(v.text(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18) return value::integer(static_cast<int64_t>(d));
    return dflt;
}

value f_format(interp &in, const value &v, call_args &args) {
    if (!args.pos.empty() && !args.kw.empty())
        fail(jinja_error_kind::runtime, "can't handle positional and keyword arguments at the same time");
    const value fmt_v = str_of(in, v);
    if (!args.kw.empty()) {
        auto d = std::make_shared<dict_data>();
        for (auto &[k, x] : args.kw) d->items.emplace_back(value::string(k), x);
        return percent_format(fmt_v, value::dict(std::move(d)), in.bud);
    }
    return percent_format(fmt_v, value::tuple(args.pos), in.bud);
}

value f_indent(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "indent", {"width", "first", "blank"});
    std::string indention = "    ";
    bool indention_marked = false;
    if (a.get(0)) {
        if (a.get(0)->is_string()) {
            indention = a.get(0)->text();
            indention_marked = !a.get(0)->str().marks.empty();
        } else {
            const int64_t w = a.get(0)->as_int();
            in.bud.check_size(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(w, INT32_MAX))));
            indention = std::string(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
        }
    }
    const bool first = a.get(1) && truthy(*a.get(1));
    const bool blank = a.get(2) && truthy(*a.get(2));
    const value sv = str_of(in, v);
    // jinja2 appends a newline before splitting so that a trailing newline yields a last line.
    str_data s = sv.str();
    s.text += '\n';
    const auto lines = py_splitlines(s.text);
    mstring out(&in.bud);
    for (size_t i = 0; i < lines.size(); ++i) {
        const auto [b, e] = lines[i];
        if (i > 0) out.add("\n");
        const bool indent_line = i == 0 ? first : (blank || b != e);
        if (indent_line) out.add(indention, indention_marked);
        out.add(s, b, e);
    }
    return value::string(std::move(out));
}

value f_lower(interp &in, const value &v, call_args &args) {
    bind_args(args, "lower", {});
    return in.call_attr(str_of(in, v), "lower", {});
}

value f_upper(interp &in, const value &v, call_args &args) {
    bind_args(args, "upper", {});
    return in.call_attr(str_of(in, v), "upper", {});
}

value f_title(interp &in, const value &v, call_args &args) {
    bind_args(args, "title", {});
    return in.call_attr(str_of(in, v), "title", {});
}

value f_replace(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "replace", {"old", "new", "count"}, 2);
    call_args c;
    c.pos = {str_of(in, *a.get(0)), str_of(in, *a.get(1))};
    if (a.get(2) && !a.get(2)->is_none()) c.pos.push_back(*a.get(2));
    return in.call_attr(str_of(in, v), "replace", std::move(c));
}

value f_round(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "round", {"precision", "method"});
    const int64_t precision = a.get(0) ? a.get(0)->as_int() : 0;
    const std::string method = a.get(1) && a.get(1)->is_string() ? a.get(1)->text() : "common";
    if (method != "common" && method != "ceil" && method != "floor")
        fail(jinja_error_kind::runtime, "method must be common, ceil or floor");
    if (v.is_undefined()) in.fail_undefined(v);
    if (!v.is_number()) failf(jinja_error_kind::runtime, "type {} doesn't define __round__ method", type_name(v));
    if (method == "common") {
        if (!v.is_float()) {
            if (precision >= 0) return value::integer(v.as_int());
        } else if (precision >= 0 && precision < 300) {
            // printf rounds the exact binary value half-to-even, as Python's round() does.
            char buf[400];
            std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), v.as_float());
            return value::floating(std::strtod(buf, nullptr));
        }
        const double scale = std::pow(10.0, static_cast<double>(-precision));
        return value::floating(std::nearbyint(v.as_float() / scale) * scale);
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_float() * scale;
    return value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

value f_safe(interp &in, const value &v, call_args &args) {
    bind_args(args, "safe", {});
    str_data s = str_of(in, v).str();
    s.markup = true;
    return value::string(std::move(s));
}

value f_string(interp &in, const value &v, call_args &args) {
    bind_args(args, "string", {});
    return str_of(in, v);
}

value f_tojson(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
    json_style style;
    style.ensure_ascii = a.get(0) && truthy(*a.get(0));
    style.sort_keys = a.get(3) && truthy(*a.get(3));
    if (a.get(1) && !a.get(1)->is_none()) {
        style.has_indent = true;
        const value &ind = *a.get(1);
        if (ind.is_string()) style.indent = ind.text();
        else if (ind.is_int() || ind.is_bool()) style.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(ind.as_int(), 0, 4096)), ' ');
        else failf(jinja_error_kind::runtime, "can't multiply sequence by non-int of type '{}'", type_name(ind));
        style.item_sep = ",";
    }
    if (a.get(2) && !a.get(2)->is_none()) {
        const value &sep = *a.get(2);
        if (!sep.is_sequence() || sep.items().size() != 2 || !sep.items()[0].is_string() || !sep.items()[1].is_string())
            fail(jinja_error_kind::runtime, "separators must be a pair of strings");
        style.item_sep = sep.items()[0].text();
        style.key_sep = sep.items()[1].text();
    }
    mstring out(&in.bud);
    to_json(v, style, out);
    return value::string(std::move(out));
}

value f_trim(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "trim", {"chars"});
    call_args c;
    if (a.get(0)) c.pos.push_back(*a.get(0));
    return in.call_attr(str_of(in, v), "strip", std::move(c));
}

value f_truncate(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "truncate", {"length", "killwords", "end", "leeway"});
    const value s = str_of(in, v);
    const int64_t length = a.get(0) ? a.get(0)->as_int() : 255;
    const bool killwords = a.get(1) && truthy(*a.get(1));
    const value end = a.get(2) ? str_of(in, *a.get(2)) : value::string("...");
    const int64_t leeway = a.get(3) && !a.get(3)->is_none() ? a.get(3)->as_int() : 5;
    const auto end_len = static_cast<int64_t>(utf8_length(end.text()));
    if (length < end_len) failf(jinja_error_kind::runtime, "expected length >= {}, got {}", end_len, length);
    if (leeway < 0) failf(jinja_error_kind::runtime, "expected leeway >= 0, got {}", leeway);
    if (static_cast<int64_t>(utf8_length(s.text())) <= length + leeway) return s;
    std::vector<size_t> off = utf8_offsets(s.text());
    mstring cut(&in.bud);
    cut.add(s.str(), 0, off[static_cast<size_t>(length - end_len)]);
    value kept = value::string(std::move(cut));
    if (!killwords) {
        call_args r;
        r.pos = {value::string(" "), value::integer(1)};
        kept = in.call_attr(kept, "rsplit", std::move(r)).items()[0];
    }
    mstring out(&in.bud);
    out.add(kept.str());
    out.add(end.str());
    return value::string(std::move(out));
}

value f_wordcount(interp &in, const value &v, call_args &args) {
    bind_args(args, "wordcount", {});
    const std::string t = str_of(in, v).text();
    int64_t n = 0;
    bool in_word = false;
    for (size_t p = 0; p < t.size();) {
        const bool w = py_is_word(utf8_next(t, p));
        if (w && !in_word) ++n;
        in_word = w;
    }
    return value::integer(n);
}

struct filter_entry {
    const char *name;
    filter_fn fn;
};

const filter_entry filter_table[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_forceescape},
    {"format", f_format}, {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join},
    {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max},
    {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
    {"selectattr", f_selectattr}, {"slice", f_slice}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate}, {"unique", f_unique},
    {"upper", f_upper}, {"wordcount", f_wordcount},
};

}  // namespace

int filter_index(std::string_view name) {
    static const std::unordered_map<std::string_view, int> index = [] {
        std::unordered_map<std::string_view, int> m;
        for (size_t i = 0; i < std::size(filter_table); ++i) m.emplace(filter_table[i].name, static_cast<int>(i));
        return m;
    }();
    auto it = index.find(name);
    return it == index.end() ? -1 : it->second;
}

value interp::apply_filter(const expr &e, const value &operand, call_args args) {
    if (e.fn < 0) fail(jinja_error_kind::runtime, "No filter named '" + e.name + "'.");
    return filter_table[e.fn].fn(*this, operand, args);
}

value filters::call_filter_named(interp &in, const std::string &name, const value &v, call_args args) {
    const int i = filter_index(name);
    if (i < 0) fail(jinja_error_kind::runtime, "No filter named '" + name + "'.");
    return filter_table[i].fn(in, v, args);
}

}  // namespace tandem::jinja
