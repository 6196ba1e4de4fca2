// src/jinja/jinja_value.cpp - values with Python's semantics (truth, ==, <, str, repr, float repr,
// integer arithmetic) and the marked-string builder.
#include "jinja_value.h"

#include "jinja_unicode.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tandem::jinja {

void fail(jinja_error_kind kind, const std::string &message) { throw jinja_error(kind, 0, 0, message); }

void budget::fail_steps() const {
    failf(jinja_error_kind::limit, "the template ran more than {} evaluation steps (max_steps)", limits.max_steps);
}

void budget::fail_alloc() const {
    failf(jinja_error_kind::limit, "the template created more than {} bytes of strings and lists (max_alloc_bytes)",
          limits.max_alloc_bytes);
}

void budget::fail_size(size_t bytes) const {
    failf(jinja_error_kind::limit, "a string of {} bytes is longer than the {} allowed (max_output_bytes)", bytes,
          limits.max_output_bytes);
}

// ---- mstring ----

void mstring::reserve_more(size_t n) {
    if (!bud) return;
    if (text.size() + n > bud->limits.max_output_bytes) {
        if (is_output)
            failf(jinja_error_kind::limit, "the output is longer than {} bytes (max_output_bytes)",
                  bud->limits.max_output_bytes);
        bud->fail_size(text.size() + n);
    }
    bud->charge_alloc(n);
}

void mstring::add(std::string_view s) {
    reserve_more(s.size());
    text.append(s);
}

void mstring::mark(size_t begin, size_t end) {
    if (begin >= end) return;
    if (!marks.empty() && marks.back().end >= begin) {
        marks.back().end = std::max(marks.back().end, end);
        return;
    }
    marks.push_back({begin, end});
}

void mstring::add(std::string_view s, bool marked) {
    const size_t at = text.size();
    add(s);
    if (marked) mark(at, text.size());
}

void mstring::add(const str_data &s) {
    const size_t at = text.size();
    add(s.text);
    for (const auto &r : s.marks) mark(at + r.begin, at + r.end);
}

void mstring::add(const str_data &s, size_t begin, size_t end) {
    const size_t at = text.size();
    add(std::string_view(s.text).substr(begin, end - begin));
    for (const auto &r : s.marks) {
        const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
        if (b < e) mark(at + b - begin, at + e - begin);
    }
}

std::vector<jinja_range> marks_slice(const std::vector<jinja_range> &marks, size_t begin, size_t end) {
    std::vector<jinja_range> out;
    for (const auto &r : marks) {
        const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
        if (b < e) out.push_back({b - begin, e - begin});
    }
    return out;
}

// ---- releasing nested values ----

namespace {
thread_local std::vector<value> *release_queue = nullptr;
}  // namespace

void release_values(std::vector<value> &items) {
    if (release_queue) {
        for (auto &v : items)
            if (v.is_sequence() || v.is_dict() || v.is_object()) release_queue->push_back(std::move(v));
        items.clear();
        return;
    }
    std::vector<value> queue = std::move(items);
    release_queue = &queue;
    // Each value dropped here hands its own contents to the queue instead of recursing.
    while (!queue.empty()) {
        value v = std::move(queue.back());
        queue.pop_back();
    }
    release_queue = nullptr;
}

list_data::~list_data() { release_values(items); }

dict_data::~dict_data() {
    std::vector<value> all;
    all.reserve(items.size() * 2);
    for (auto &[k, v] : items) {
        all.push_back(std::move(k));
        all.push_back(std::move(v));
    }
    items.clear();
    release_values(all);
}

ns_data::~ns_data() {
    std::vector<value> all;
    for (auto &kv : attrs) all.push_back(std::move(kv.second));
    attrs.clear();
    release_values(all);
}

// ---- value ----

value value::undefined(std::string message, bool security) {
    value v;
    v.p_ = std::make_shared<undefined_data>(undefined_data{std::move(message), security});
    return v;
}

value value::string(std::string text) {
    value v(vkind::string);
    auto d = std::make_shared<str_data>();
    d->text = std::move(text);
    v.p_ = std::move(d);
    return v;
}

value value::string(str_data s) {
    value v(vkind::string);
    v.p_ = std::make_shared<str_data>(std::move(s));
    return v;
}

value value::string(mstring &&s) {
    str_data d;
    d.text = std::move(s.text);
    d.marks = std::move(s.marks);
    d.markup = s.markup;
    return string(std::move(d));
}

value value::list(std::vector<value> items) {
    value v(vkind::list);
    v.p_ = std::make_shared<list_data>(list_data{std::move(items)});
    return v;
}

value value::tuple(std::vector<value> items) {
    value v(vkind::tuple);
    v.p_ = std::make_shared<list_data>(list_data{std::move(items)});
    return v;
}

value value::dict(std::shared_ptr<dict_data> d) {
    value v(vkind::dict);
    v.p_ = std::move(d);
    return v;
}

value value::object(std::shared_ptr<object_data> o) {
    value v(vkind::object);
    v.p_ = std::move(o);
    return v;
}

double value::as_float() const {
    if (kind_ == vkind::floating) return f_;
    return static_cast<double>(as_int());
}

const value *dict_data::find(const value &key) const {
    if (key.is_string()) return find(std::string_view(key.text()));
    for (const auto &[k, v] : items)
        if (py_equal(k, key)) return &v;
    return nullptr;
}

const value *dict_data::find(std::string_view key) const {
    for (const auto &[k, v] : items)
        if (k.is_string() && k.text() == key) return &v;
    return nullptr;
}

void dict_data::set(value key, value v) {
    for (auto &[k, old] : items)
        if (py_equal(k, key)) {
            old = std::move(v);
            return;
        }
    items.emplace_back(std::move(key), std::move(v));
}

value *ns_data::find(std::string_view name) {
    for (auto &[k, v] : attrs)
        if (k == name) return &v;
    return nullptr;
}

std::string ns_data::repr() const {
    mstring out;
    out.add("<Namespace {");
    for (size_t i = 0; i < attrs.size(); ++i) {
        if (i) out.add(", ");
        py_repr(value::string(attrs[i].first), out);
        out.add(": ");
        py_repr(attrs[i].second, out);
    }
    out.add("}>");
    return out.text;
}

std::string type_name(const value &v) {
    switch (v.kind()) {
    case vkind::undefined: return "Undefined";
    case vkind::none: return "NoneType";
    case vkind::boolean: return "bool";
    case vkind::integer: return "int";
    case vkind::floating: return "float";
    case vkind::string: return v.str().markup ? "Markup" : "str";
    case vkind::list: return "list";
    case vkind::tuple: return "tuple";
    case vkind::dict: return "dict";
    case vkind::object:
        switch (v.object().kind) {
        case okind::ns: return "Namespace";
        case okind::macro: return "Macro";
        case okind::builtin: return "function";
        case okind::method: return "builtin_function_or_method";
        case okind::loop: return "LoopContext";
        case okind::joiner: return "Joiner";
        case okind::cycler: return "Cycler";
        }
    }
    return "object";
}

std::string object_type_repr(const value &v) {
    if (v.is_none()) return "None";
    if (v.is_string() && v.str().markup) return "markupsafe.Markup object";
    if (v.is_object() && v.object().kind != okind::method && v.object().kind != okind::builtin)
        return "jinja2.utils." + type_name(v) + " object";
    return type_name(v) + " object";
}

bool truthy(const value &v) {
    switch (v.kind()) {
    case vkind::undefined: case vkind::none: return false;
    case vkind::boolean: return v.as_bool();
    case vkind::integer: return v.as_int() != 0;
    case vkind::floating: return v.as_float() != 0.0;
    case vkind::string: return !v.text().empty();
    case vkind::list: case vkind::tuple: return !v.items().empty();
    case vkind::dict: return !v.dict().items.empty();
    case vkind::object: return true;
    }
    return true;
}

namespace {

void check_depth(int depth) {
    if (depth > max_nesting)
        failf(jinja_error_kind::limit, "values nested deeper than {} levels", max_nesting);
}

// Exact comparison of an integer with a float, as Python does (no rounding of the integer).
int compare_int_float(int64_t i, double f) {
    const long double li = static_cast<long double>(i), lf = static_cast<long double>(f);
    return li < lf ? -1 : li > lf ? 1 : 0;
}

bool numbers_equal(const value &a, const value &b) {
    if (a.is_float() && b.is_float()) return a.as_float() == b.as_float();
    if (a.is_float()) return !std::isnan(a.as_float()) && compare_int_float(b.as_int(), a.as_float()) == 0;
    if (b.is_float()) return !std::isnan(b.as_float()) && compare_int_float(a.as_int(), b.as_float()) == 0;
    return a.as_int() == b.as_int();
}

}  // namespace

bool py_equal(const value &a, const value &b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) return numbers_equal(a, b);
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
    case vkind::undefined: case vkind::none: return true;
    case vkind::string: return a.text() == b.text();
    case vkind::list: case vkind::tuple: {
        const auto &x = a.items(), &y = b.items();
        if (x.size() != y.size()) return false;
        for (size_t i = 0; i < x.size(); ++i)
            if (!py_equal(x[i], y[i], depth + 1)) return false;
        return true;
    }
    case vkind::dict: {
        const auto &x = a.dict().items;
        if (x.size() != b.dict().items.size()) return false;
        for (const auto &[k, v] : x) {
            const value *other = b.dict().find(k);
            if (!other || !py_equal(v, *other, depth + 1)) return false;
        }
        return true;
    }
    default: return a.identity() == b.identity();
    }
}

bool py_less(const value &a, const value &b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() && b.is_float()) return a.as_float() < b.as_float();
        if (a.is_float()) return compare_int_float(b.as_int(), a.as_float()) > 0;
        if (b.is_float()) return compare_int_float(a.as_int(), b.as_float()) < 0;
        return a.as_int() < b.as_int();
    }
    if (a.is_string() && b.is_string()) return a.text() < b.text();
    if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
        const auto &x = a.items(), &y = b.items();
        const size_t n = std::min(x.size(), y.size());
        for (size_t i = 0; i < n; ++i)
            if (!py_equal(x[i], y[i], depth + 1)) return py_less(x[i], y[i], depth + 1);
        return x.size() < y.size();
    }
    failf(jinja_error_kind::runtime, "'<' not supported between instances of '{}' and '{}'", type_name(a),
          type_name(b));
}

bool is_hashable(const value &v) {
    switch (v.kind()) {
    case vkind::list: case vkind::dict: return false;
    case vkind::tuple:
        for (const auto &x : v.items())
            if (!is_hashable(x)) return false;
        return true;
    default: return true;
    }
}

std::string float_repr(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
    const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
    const bool negative = sci[0] == '-';
    const size_t e_at = sci.find('e');
    std::string digits;
    for (char c : sci.substr(negative ? 1 : 0, e_at - (negative ? 1 : 0)))
        if (c != '.') digits += c;
    int exponent = 0;
    std::from_chars(sci.data() + e_at + (sci[e_at + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exponent);
    const int decpt = exponent + 1;  // digits before the decimal point
    const int n_digits = static_cast<int>(digits.size());
    std::string out = negative ? "-" : "";
    // Python's repr switches to exponent notation outside 1e-4 <= |x| < 1e16.
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
        } else if (decpt >= n_digits) {
            out += digits + std::string(static_cast<size_t>(decpt - n_digits), '0') + ".0";
        } else {
            out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (n_digits > 1) out += "." + digits.substr(1);
    const int e = decpt - 1;
    out += fmt::format("e{}{:02d}", e < 0 ? '-' : '+', e < 0 ? -e : e);
    return out;
}

namespace {

void repr_string(const str_data &s, mstring &out) {
    const std::string &t = s.text;
    const char quote = (t.find('\'') != std::string::npos && t.find('"') == std::string::npos) ? '"' : '\'';
    const size_t at = out.text.size();
    std::string buf;
    buf.reserve(t.size() + 2);
    buf += quote;
    for (size_t pos = 0; pos < t.size();) {
        const char32_t cp = utf8_next(t, pos);
        if (cp == static_cast<char32_t>(quote) || cp == '\\') {
            buf += '\\';
            buf += static_cast<char>(cp);
        } else if (cp == '\t') {
            buf += "\\t";
        } else if (cp == '\n') {
            buf += "\\n";
        } else if (cp == '\r') {
            buf += "\\r";
        } else if (py_isprintable(cp)) {
            utf8_append(buf, cp);
        } else if (cp <= 0xFF) {
            buf += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
        } else if (cp <= 0xFFFF) {
            buf += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
        } else {
            buf += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
        }
    }
    buf += quote;
    out.add(buf);
    if (!s.marks.empty()) out.mark(at, out.text.size());
}

void repr_items(const std::vector<value> &items, mstring &out, int depth) {
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out.add(", ");
        py_repr(items[i], out, depth + 1);
    }
}

}  // namespace

void py_repr(const value &v, mstring &out, int depth) {
    check_depth(depth);
    switch (v.kind()) {
    case vkind::undefined: out.add("Undefined"); return;
    case vkind::string:
        if (v.str().markup) out.add("Markup(");
        repr_string(v.str(), out);
        if (v.str().markup) out.add(")");
        return;
    case vkind::list:
        out.add("[");
        repr_items(v.items(), out, depth);
        out.add("]");
        return;
    case vkind::tuple:
        out.add("(");
        repr_items(v.items(), out, depth);
        out.add(v.items().size() == 1 ? ",)" : ")");
        return;
    case vkind::dict: {
        out.add("{");
        bool first = true;
        for (const auto &[k, x] : v.dict().items) {
            if (!first) out.add(", ");
            first = false;
            py_repr(k, out, depth + 1);
            out.add(": ");
            py_repr(x, out, depth + 1);
        }
        out.add("}");
        return;
    }
    default: py_str(v, out, depth);
    }
}

void py_str(const value &v, mstring &out, int depth) {
    switch (v.kind()) {
    case vkind::undefined: return;
    case vkind::none: out.add("None"); return;
    case vkind::boolean: out.add(v.as_bool() ? "True" : "False"); return;
    case vkind::integer: out.add(std::to_string(v.as_int())); return;
    case vkind::floating: out.add(float_repr(v.as_float())); return;
    case vkind::string: out.add(v.str()); return;
    case vkind::object: out.add(v.object().repr()); return;
    default: py_repr(v, out, depth);
    }
}

value to_string_value(const value &v, budget &bud) {
    if (v.is_string()) return v;
    mstring out(&bud);
    py_str(v, out);
    return value::string(std::move(out));
}

// ---- arithmetic ----

int64_t checked_add(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) fail(jinja_error_kind::runtime, "integer overflow (integers are 64-bit)");
    return r;
}

int64_t checked_sub(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) fail(jinja_error_kind::runtime, "integer overflow (integers are 64-bit)");
    return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) fail(jinja_error_kind::runtime, "integer overflow (integers are 64-bit)");
    return r;
}

int64_t floor_div(int64_t a, int64_t b) {
    if (b == 0) fail(jinja_error_kind::runtime, "integer division or modulo by zero");
    if (a == std::numeric_limits<int64_t>::min() && b == -1)
        fail(jinja_error_kind::runtime, "integer overflow (integers are 64-bit)");
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
    if (b == 0) fail(jinja_error_kind::runtime, "integer division or modulo by zero");
    if (b == -1) return 0;
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
}

double float_floor_div(double a, double b) {
    if (b == 0) fail(jinja_error_kind::runtime, "float floor division by zero");
    double mod = std::fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0) {
        if ((b < 0) != (mod < 0)) div -= 1.0;
    }
    if (div != 0) {
        double floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
        return floordiv;
    }
    return std::copysign(0.0, a / b);
}

double float_mod(double a, double b) {
    if (b == 0) fail(jinja_error_kind::runtime, "float modulo");
    double mod = std::fmod(a, b);
    if (mod != 0) {
        if ((b < 0) != (mod < 0)) mod += b;
    } else {
        mod = std::copysign(0.0, b);
    }
    return mod;
}

}  // namespace tandem::jinja
