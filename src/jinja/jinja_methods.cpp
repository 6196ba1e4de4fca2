// src/jinja/jinja_methods.cpp - Python methods of str, list, tuple and dict that templates call
// (marks kept on every piece of a string that survives), the sandbox's refusal of methods that
// modify a list or dict, and the global functions (range, dict, namespace, joiner, cycler,
// raise_exception, strftime_now).
#include "jinja_eval.h"

#include "jinja_unicode.h"

#include <algorithm>
#include <ctime>
#include <unordered_map>

namespace tandem::jinja {

namespace {

enum class m : uint8_t {
    // str
    startswith, endswith, split, rsplit, strip, lstrip, rstrip, replace, upper, lower, title, capitalize,
    swapcase, casefold, find, rfind, index_s, rindex, count_s, join, format, center, ljust, rjust, zfill,
    splitlines, partition, rpartition, removeprefix, removesuffix, isalpha, isdigit, isdecimal, isnumeric,
    isalnum, isspace, islower, isupper, istitle, isascii, isidentifier, isprintable,
    // list, tuple
    count_l, index_l, copy_l, pop_l, clear_l,
    // dict
    get, items, keys, values, copy_d,
};

const std::unordered_map<std::string_view, m> &str_methods() {
    static const std::unordered_map<std::string_view, m> t = {
        {"startswith", m::startswith}, {"endswith", m::endswith}, {"split", m::split}, {"rsplit", m::rsplit},
        {"strip", m::strip}, {"lstrip", m::lstrip}, {"rstrip", m::rstrip}, {"replace", m::replace},
        {"upper", m::upper}, {"lower", m::lower}, {"title", m::title}, {"capitalize", m::capitalize},
        {"swapcase", m::swapcase}, {"casefold", m::casefold}, {"find", m::find}, {"rfind", m::rfind},
        {"index", m::index_s}, {"rindex", m::rindex}, {"count", m::count_s}, {"join", m::join},
        {"format", m::format}, {"center", m::center}, {"ljust", m::ljust}, {"rjust", m::rjust}, {"zfill", m::zfill},
        {"splitlines", m::splitlines}, {"partition", m::partition}, {"rpartition", m::rpartition},
        {"removeprefix", m::removeprefix}, {"removesuffix", m::removesuffix}, {"isalpha", m::isalpha},
        {"isdigit", m::isdigit}, {"isdecimal", m::isdecimal}, {"isnumeric", m::isnumeric}, {"isalnum", m::isalnum},
        {"isspace", m::isspace}, {"islower", m::islower}, {"isupper", m::isupper}, {"istitle", m::istitle},
        {"isascii", m::isascii}, {"isidentifier", m::isidentifier}, {"isprintable", m::isprintable}};
    return t;
}

// The immutable sandbox refuses these on lists and dicts (jinja2's modifies_known_mutable).
bool list_unsafe(std::string_view n) {
    return n == "append" || n == "extend" || n == "insert" || n == "remove" || n == "reverse" || n == "sort";
}
bool dict_unsafe(std::string_view n) {
    return n == "clear" || n == "pop" || n == "popitem" || n == "setdefault" || n == "update";
}

std::optional<m> list_method(std::string_view n, bool is_tuple) {
    if (n == "count") return m::count_l;
    if (n == "index") return m::index_l;
    if (is_tuple) return std::nullopt;
    if (n == "copy") return m::copy_l;
    if (n == "pop") return m::pop_l;
    if (n == "clear") return m::clear_l;
    return std::nullopt;
}

std::optional<m> dict_method(std::string_view n) {
    if (n == "get") return m::get;
    if (n == "items") return m::items;
    if (n == "keys") return m::keys;
    if (n == "values") return m::values;
    if (n == "copy") return m::copy_d;
    return std::nullopt;
}

value substr(const str_data &s, size_t begin, size_t end, budget &bud) {
    mstring out(&bud);
    out.add(s, begin, end);
    return value::string(std::move(out));
}

// A whole-string transformation that cannot track ranges: the result is marked if any input was.
value transformed(const str_data &s, std::string text, budget &bud) {
    mstring out(&bud);
    out.add(text, !s.marks.empty());
    return value::string(std::move(out));
}

const std::string &want_str(const value *v, std::string_view what) {
    if (!v || !v->is_string())
        failf(jinja_error_kind::runtime, "{} must be str, not {}", what, v ? type_name(*v) : "nothing");
    return v->text();
}

int64_t want_int(const value *v, std::string_view what) {
    if (!v || !(v->is_int() || v->is_bool()))
        failf(jinja_error_kind::runtime, "'{}' object cannot be interpreted as an integer ({})", v ? type_name(*v) : "None", what);
    return v->as_int();
}

// Code points of `chars` for strip(); null means whitespace.
bool strip_match(char32_t cp, const std::vector<char32_t> *chars) {
    if (!chars) return py_isspace(cp);
    return std::find(chars->begin(), chars->end(), cp) != chars->end();
}

value strip(const str_data &s, const value *chars_v, bool left, bool right, budget &bud) {
    std::vector<char32_t> chars;
    const bool custom = chars_v && !chars_v->is_none();
    if (custom) {
        const std::string &c = want_str(chars_v, "strip arg");
        for (size_t p = 0; p < c.size();) chars.push_back(utf8_next(c, p));
    }
    const std::string &t = s.text;
    size_t b = 0, e = t.size();
    if (left) {
        while (b < e) {
            size_t p = b;
            if (!strip_match(utf8_next(t, p), custom ? &chars : nullptr)) break;
            b = p;
        }
    }
    if (right) {
        size_t last_keep = b;
        for (size_t p = b; p < e;) {
            const char32_t cp = utf8_next(t, p);
            if (!strip_match(cp, custom ? &chars : nullptr)) last_keep = p;
        }
        e = last_keep;
    }
    return substr(s, b, e, bud);
}

value split(const str_data &s, const value *sep_v, const value *max_v, bool from_right, budget &bud) {
    int64_t maxsplit = max_v && !max_v->is_none() ? want_int(max_v, "maxsplit") : -1;
    const std::string &t = s.text;
    std::vector<std::pair<size_t, size_t>> parts;
    if (!sep_v || sep_v->is_none()) {
        std::vector<std::pair<size_t, size_t>> words;
        for (size_t p = 0; p < t.size();) {
            size_t q = p;
            if (py_isspace(utf8_next(t, q))) {
                p = q;
                continue;
            }
            const size_t start = p;
            while (p < t.size()) {
                size_t r = p;
                if (py_isspace(utf8_next(t, r))) break;
                p = r;
            }
            words.emplace_back(start, p);
        }
        if (maxsplit < 0 || words.size() <= static_cast<size_t>(maxsplit)) {
            parts = std::move(words);
        } else if (!from_right) {
            // The remainder runs to the end of the string, trailing whitespace included.
            parts.assign(words.begin(), words.begin() + maxsplit);
            parts.emplace_back(words[static_cast<size_t>(maxsplit)].first, t.size());
        } else {
            const size_t keep = words.size() - static_cast<size_t>(maxsplit);
            parts.emplace_back(0, words[keep - 1].second);
            parts.insert(parts.end(), words.begin() + static_cast<long>(keep), words.end());
        }
    } else {
        const std::string &sep = want_str(sep_v, "separator");
        if (sep.empty()) fail(jinja_error_kind::runtime, "empty separator");
        if (!from_right) {
            size_t start = 0;
            for (size_t at = t.find(sep); at != std::string::npos && maxsplit != 0; at = t.find(sep, start)) {
                parts.emplace_back(start, at);
                start = at + sep.size();
                if (maxsplit > 0) --maxsplit;
            }
            parts.emplace_back(start, t.size());
        } else {
            size_t end = t.size();
            std::vector<std::pair<size_t, size_t>> rev;
            while (maxsplit != 0 && end >= sep.size()) {
                const size_t at = t.rfind(sep, end - sep.size());
                if (at == std::string::npos) break;
                rev.emplace_back(at + sep.size(), end);
                end = at;
                if (maxsplit > 0) --maxsplit;
            }
            rev.emplace_back(0, end);
            parts.assign(rev.rbegin(), rev.rend());
        }
    }
    std::vector<value> out;
    out.reserve(parts.size());
    for (const auto &[b, e] : parts) out.push_back(substr(s, b, e, bud));
    bud.charge_alloc(out.size() * sizeof(value));
    return value::list(std::move(out));
}

value replace(const str_data &s, const std::string &old, const str_data &with, int64_t count, budget &bud) {
    const std::string &t = s.text;
    mstring out(&bud);
    if (old.empty()) {
        size_t p = 0;
        int64_t n = 0;
        while (count < 0 || n < count) {
            out.add(with);
            ++n;
            if (p >= t.size()) break;
            const size_t q = p;
            utf8_next(t, p);
            out.add(s, q, p);
        }
        out.add(s, p, t.size());
        return value::string(std::move(out));
    }
    size_t start = 0;
    int64_t n = 0;
    for (size_t at = t.find(old); at != std::string::npos && (count < 0 || n < count); at = t.find(old, start)) {
        out.add(s, start, at);
        out.add(with);
        start = at + old.size();
        ++n;
        bud.step();
    }
    out.add(s, start, t.size());
    return value::string(std::move(out));
}

// [begin, end) byte offsets of the code point slice s[start:end] (Python's clamping).
std::pair<size_t, size_t> byte_window(const std::string &t, const value *start, const value *end) {
    const bool any = (start && !start->is_none()) || (end && !end->is_none());
    if (!any) return {0, t.size()};
    const std::vector<size_t> off = utf8_offsets(t);
    const auto n = static_cast<int64_t>(off.size() - 1);
    auto norm = [&](const value *v, int64_t dflt) {
        if (!v || v->is_none()) return dflt;
        int64_t i = want_int(v, "slice index");
        if (i < 0) i = std::max<int64_t>(0, i + n);
        return std::min(i, n);
    };
    const int64_t b = norm(start, 0), e = norm(end, n);
    if (b > e) return {t.size() + 1, t.size() + 1};  // empty window that matches nothing
    return {off[static_cast<size_t>(b)], off[static_cast<size_t>(e)]};
}

int64_t cp_index(const std::string &t, size_t byte) { return static_cast<int64_t>(utf8_length(std::string_view(t).substr(0, byte))); }

bool affix_match(const std::string &t, const value &affix, const value *start, const value *end, bool suffix) {
    const auto [b, e] = byte_window(t, start, end);
    if (b > t.size()) return false;
    const std::string_view window = std::string_view(t).substr(b, e - b);
    auto one = [&](const value &a) {
        const std::string &x = want_str(&a, suffix ? "endswith arg" : "startswith arg");
        return window.size() >= x.size() && (suffix ? window.substr(window.size() - x.size()) : window.substr(0, x.size())) == x;
    };
    if (affix.is_tuple()) {
        for (const auto &a : affix.items())
            if (one(a)) return true;
        return false;
    }
    return one(affix);
}

value pad(const str_data &s, int64_t width, const value *fill_v, int where, budget &bud) {
    std::string fill = " ";
    const bool fill_marked = fill_v && fill_v->is_string() && !fill_v->str().marks.empty();
    if (fill_v) {
        fill = want_str(fill_v, "fill character");
        if (utf8_length(fill) != 1) fail(jinja_error_kind::runtime, "The fill character must be exactly one character long");
    }
    const auto len = static_cast<int64_t>(utf8_length(s.text));
    const int64_t marg = width - len;
    if (marg <= 0) return value::string(s);
    bud.check_size(s.text.size() + static_cast<size_t>(marg) * fill.size());
    int64_t left = where < 0 ? 0 : where > 0 ? marg : marg / 2 + (marg & width & 1);
    mstring out(&bud);
    for (int64_t i = 0; i < left; ++i) out.add(fill, fill_marked);
    out.add(s);
    for (int64_t i = 0; i < marg - left; ++i) out.add(fill, fill_marked);
    return value::string(std::move(out));
}

template <class Pred>
bool all_chars(const std::string &t, Pred pred) {
    if (t.empty()) return false;
    for (size_t p = 0; p < t.size();)
        if (!pred(utf8_next(t, p))) return false;
    return true;
}

value str_method(interp &in, const value &self, m which, call_args &args) {
    budget &bud = in.bud;
    const str_data &s = self.str();
    const std::string &t = s.text;
    auto b = [&](std::initializer_list<const char *> params, size_t required = 0) {
        return bind_args(args, "str method", params, required);
    };
    switch (which) {
    case m::startswith: case m::endswith: {
        const auto a = b({"prefix", "start", "end"}, 1);
        return value::boolean(affix_match(t, *a.get(0), a.get(1), a.get(2), which == m::endswith));
    }
    case m::split: case m::rsplit: {
        const auto a = b({"sep", "maxsplit"});
        return split(s, a.get(0), a.get(1), which == m::rsplit, bud);
    }
    case m::strip: case m::lstrip: case m::rstrip: {
        const auto a = b({"chars"});
        return strip(s, a.get(0), which != m::rstrip, which != m::lstrip, bud);
    }
    case m::replace: {
        const auto a = b({"old", "new", "count"}, 2);
        const std::string &old = want_str(a.get(0), "replace() argument 1");
        want_str(a.get(1), "replace() argument 2");
        const int64_t count = a.get(2) ? want_int(a.get(2), "count") : -1;
        return replace(s, old, a.get(1)->str(), count, bud);
    }
    case m::upper: b({}); return transformed(s, py_upper(t), bud);
    case m::lower: b({}); return transformed(s, py_lower(t), bud);
    case m::casefold: b({}); return transformed(s, py_lower(t), bud);
    case m::title: b({}); return transformed(s, py_title(t), bud);
    case m::capitalize: b({}); return transformed(s, py_capitalize(t), bud);
    case m::swapcase: b({}); return transformed(s, py_swapcase(t), bud);
    case m::find: case m::rfind: case m::index_s: case m::rindex: case m::count_s: {
        const auto a = b({"sub", "start", "end"}, 1);
        const std::string &sub = want_str(a.get(0), "substring");
        const auto [lo, hi] = byte_window(t, a.get(1), a.get(2));
        if (which == m::count_s) {
            if (lo > t.size()) return value::integer(0);
            const std::string_view w = std::string_view(t).substr(lo, hi - lo);
            if (sub.empty()) return value::integer(static_cast<int64_t>(utf8_length(w)) + 1);
            int64_t n = 0;
            for (size_t at = w.find(sub); at != std::string_view::npos; at = w.find(sub, at + sub.size())) ++n;
            return value::integer(n);
        }
        size_t at = std::string::npos;
        if (lo <= t.size()) {
            const std::string_view w = std::string_view(t).substr(lo, hi - lo);
            const size_t rel = (which == m::find || which == m::index_s) ? w.find(sub) : w.rfind(sub);
            if (rel != std::string_view::npos) at = lo + rel;
        }
        if (at == std::string::npos) {
            if (which == m::index_s || which == m::rindex) fail(jinja_error_kind::runtime, "substring not found");
            return value::integer(-1);
        }
        return value::integer(cp_index(t, at));
    }
    case m::join: {
        const auto a = b({"iterable"}, 1);
        mstring out(&bud);
        size_t i = 0;
        for (const auto &item : in.iterate(*a.get(0))) {
            if (!item.is_string())
                failf(jinja_error_kind::runtime, "sequence item {}: expected str instance, {} found", i, type_name(item));
            if (i++) out.add(s);
            out.add(item.str());
        }
        return value::string(std::move(out));
    }
    case m::format: return str_format(self, args, bud);
    case m::center: case m::ljust: case m::rjust: {
        const auto a = b({"width", "fillchar"}, 1);
        return pad(s, want_int(a.get(0), "width"), a.get(1), which == m::center ? 0 : which == m::ljust ? -1 : 1, bud);
    }
    case m::zfill: {
        const auto a = b({"width"}, 1);
        const int64_t width = want_int(a.get(0), "width");
        const auto len = static_cast<int64_t>(utf8_length(t));
        if (width <= len) return self;
        bud.check_size(static_cast<size_t>(width));
        const bool sign = !t.empty() && (t[0] == '+' || t[0] == '-');
        mstring out(&bud);
        if (sign) out.add(s, 0, 1);
        out.add(std::string(static_cast<size_t>(width - len), '0'));
        out.add(s, sign ? 1 : 0, t.size());
        return value::string(std::move(out));
    }
    case m::splitlines: {
        const auto a = b({"keepends"});
        const bool keep = a.get(0) && truthy(*a.get(0));
        const auto lines = py_splitlines(t);
        std::vector<value> out;
        for (size_t i = 0; i < lines.size(); ++i) {
            const size_t end = keep ? (i + 1 < lines.size() ? lines[i + 1].first : t.size()) : lines[i].second;
            out.push_back(substr(s, lines[i].first, end, bud));
        }
        return value::list(std::move(out));
    }
    case m::partition: case m::rpartition: {
        const auto a = b({"sep"}, 1);
        const std::string &sep = want_str(a.get(0), "separator");
        if (sep.empty()) fail(jinja_error_kind::runtime, "empty separator");
        const size_t at = which == m::partition ? t.find(sep) : t.rfind(sep);
        if (at == std::string::npos) {
            const value empty = value::string("");
            return which == m::partition ? value::tuple({self, empty, empty}) : value::tuple({empty, empty, self});
        }
        return value::tuple({substr(s, 0, at, bud), substr(s, at, at + sep.size(), bud), substr(s, at + sep.size(), t.size(), bud)});
    }
    case m::removeprefix: case m::removesuffix: {
        const auto a = b({"affix"}, 1);
        const std::string &x = want_str(a.get(0), "affix");
        if (which == m::removeprefix && t.compare(0, x.size(), x) == 0) return substr(s, x.size(), t.size(), bud);
        if (which == m::removesuffix && !x.empty() && t.size() >= x.size() && t.compare(t.size() - x.size(), x.size(), x) == 0)
            return substr(s, 0, t.size() - x.size(), bud);
        return self;
    }
    case m::isalpha: b({}); return value::boolean(all_chars(t, py_isalpha));
    case m::isdigit: b({}); return value::boolean(all_chars(t, py_isdigit));
    case m::isdecimal: b({}); return value::boolean(all_chars(t, py_isdecimal));
    case m::isnumeric: b({}); return value::boolean(all_chars(t, py_isnumeric));
    case m::isalnum: b({}); return value::boolean(all_chars(t, py_isalnum));
    case m::isspace: b({}); return value::boolean(all_chars(t, py_isspace));
    case m::isprintable: b({}); return value::boolean(t.empty() || all_chars(t, py_isprintable));
    case m::islower: b({}); return value::boolean(py_islower(t));
    case m::isupper: b({}); return value::boolean(py_isupper(t));
    case m::istitle: b({}); return value::boolean(py_istitle(t));
    case m::isascii: b({}); return value::boolean(is_ascii(t));
    case m::isidentifier: {
        b({});
        if (t.empty()) return value::boolean(false);
        size_t p = 0;
        const char32_t first = utf8_next(t, p);
        if (!(first == '_' || py_isalpha(first))) return value::boolean(false);
        while (p < t.size())
            if (!py_is_word(utf8_next(t, p))) return value::boolean(false);
        return value::boolean(true);
    }
    default: break;
    }
    fail(jinja_error_kind::runtime, "unsupported str method");
}

value seq_method(interp &in, const value &self, m which, call_args &args) {
    auto &items = self.items();
    switch (which) {
    case m::count_l: {
        const auto a = bind_args(args, "count", {"value"}, 1);
        in.bud.charge_steps(items.size());
        return value::integer(std::count_if(items.begin(), items.end(), [&](const value &x) { return py_equal(x, *a.get(0)); }));
    }
    case m::index_l: {
        const auto a = bind_args(args, "index", {"value"}, 1);
        in.bud.charge_steps(items.size());
        for (size_t i = 0; i < items.size(); ++i)
            if (py_equal(items[i], *a.get(0))) return value::integer(static_cast<int64_t>(i));
        mstring r;
        py_repr(*a.get(0), r);
        failf(jinja_error_kind::runtime, "{} is not in {}", r.text, type_name(self));
    }
    case m::copy_l:
        bind_args(args, "copy", {});
        in.bud.charge_alloc(items.size() * sizeof(value));
        return value::list(items);
    case m::pop_l: {
        const auto a = bind_args(args, "pop", {"index"});
        if (items.empty()) fail(jinja_error_kind::runtime, "pop from empty list");
        int64_t i = a.get(0) ? want_int(a.get(0), "index") : -1;
        const auto n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) fail(jinja_error_kind::runtime, "pop index out of range");
        value out = items[static_cast<size_t>(i)];
        items.erase(items.begin() + i);
        return out;
    }
    case m::clear_l:
        bind_args(args, "clear", {});
        items.clear();
        return value::none();
    default: fail(jinja_error_kind::runtime, "unsupported list method");
    }
}

value dict_method_call(interp &in, const value &self, m which, call_args &args) {
    const dict_data &d = self.dict();
    switch (which) {
    case m::get: {
        const auto a = bind_args(args, "get", {"key", "default"}, 1);
        if (!is_hashable(*a.get(0))) failf(jinja_error_kind::runtime, "unhashable type: '{}'", type_name(*a.get(0)));
        if (const value *v = d.find(*a.get(0))) return *v;
        return a.get(1) ? *a.get(1) : value::none();
    }
    case m::items: case m::keys: case m::values: {
        bind_args(args, "items", {});
        std::vector<value> out;
        out.reserve(d.items.size());
        for (const auto &[k, v] : d.items)
            out.push_back(which == m::keys ? k : which == m::values ? v : value::tuple({k, v}));
        in.bud.charge_alloc(out.size() * sizeof(value) * (which == m::items ? 3 : 1));
        return value::list(std::move(out));
    }
    case m::copy_d: {
        bind_args(args, "copy", {});
        auto c = std::make_shared<dict_data>(d);
        in.bud.charge_alloc(c->items.size() * 2 * sizeof(value));
        return value::dict(std::move(c));
    }
    default: fail(jinja_error_kind::runtime, "unsupported dict method");
    }
}

}  // namespace

bool interp::has_method(const value &self, std::string_view name, bool &unsafe) const {
    unsafe = false;
    switch (self.kind()) {
    case vkind::string: return str_methods().count(name) != 0;
    case vkind::list:
        if (list_unsafe(name)) return unsafe = true;
        return list_method(name, false).has_value();
    case vkind::tuple: return list_method(name, true).has_value();
    case vkind::dict:
        if (dict_unsafe(name)) return unsafe = true;
        return dict_method(name).has_value();
    default: return false;
    }
}

std::optional<value> interp::call_method(const value &self, std::string_view name, call_args &args) {
    switch (self.kind()) {
    case vkind::string: {
        auto it = str_methods().find(name);
        if (it == str_methods().end()) return std::nullopt;
        return str_method(*this, self, it->second, args);
    }
    case vkind::list: case vkind::tuple: {
        auto which = list_method(name, self.is_tuple());
        if (!which) return std::nullopt;
        return seq_method(*this, self, *which, args);
    }
    case vkind::dict: {
        auto which = dict_method(name);
        if (!which) return std::nullopt;
        return dict_method_call(*this, self, *which, args);
    }
    case vkind::object: break;
    default: return std::nullopt;
    }
    object_data &o = self.object();
    if (o.kind == okind::loop) {
        auto &loop = static_cast<loop_obj &>(o);
        if (name == "cycle") {
            if (!args.kw.empty()) fail(jinja_error_kind::runtime, "cycle() takes no keyword arguments");
            if (args.pos.empty()) fail(jinja_error_kind::runtime, "no items for cycling given");
            return args.pos[static_cast<size_t>(loop.index0) % args.pos.size()];
        }
        if (name == "changed") {
            const value now = value::tuple(args.pos);
            if (loop.last_changed && py_equal(*loop.last_changed, now)) return value::boolean(false);
            loop.last_changed = now;
            return value::boolean(true);
        }
    } else if (o.kind == okind::cycler) {
        auto &c = static_cast<cycler_obj &>(o);
        if (name == "next") {
            if (c.items.empty()) return value::none();
            value v = c.items[c.pos];
            c.pos = (c.pos + 1) % c.items.size();
            return v;
        }
        if (name == "reset") {
            c.pos = 0;
            return value::none();
        }
    }
    return std::nullopt;
}

// ---- global functions ----

namespace {

value make_mapping(interp &in, const call_args &args, const char *fn_name, dict_data &out) {
    if (args.pos.size() > 1) failf(jinja_error_kind::runtime, "{} expected at most 1 argument, got {}", fn_name, args.pos.size());
    if (!args.pos.empty()) {
        const value &src = args.pos[0];
        if (src.is_dict()) {
            for (const auto &kv : src.dict().items) out.set(kv.first, kv.second);
        } else {
            for (const auto &pair : in.iterate(src)) {
                std::vector<value> kv = in.iterate(pair);
                if (kv.size() != 2)
                    failf(jinja_error_kind::runtime, "dictionary update sequence element has length {}; 2 is required", kv.size());
                if (!is_hashable(kv[0])) failf(jinja_error_kind::runtime, "unhashable type: '{}'", type_name(kv[0]));
                out.set(kv[0], kv[1]);
            }
        }
    }
    for (const auto &[k, v] : args.kw) out.set(value::string(k), v);
    in.bud.charge_alloc(out.items.size() * 2 * sizeof(value));
    return value::none();
}

}  // namespace

value interp::call_builtin(builtin_fn fn, call_args args) {
    switch (fn) {
    case builtin_fn::range: {
        if (!args.kw.empty()) fail(jinja_error_kind::runtime, "range() takes no keyword arguments");
        if (args.pos.empty() || args.pos.size() > 3)
            failf(jinja_error_kind::runtime, "range expected 1 to 3 arguments, got {}", args.pos.size());
        for (const auto &a : args.pos)
            if (!a.is_int() && !a.is_bool())
                failf(jinja_error_kind::runtime, "'{}' object cannot be interpreted as an integer", type_name(a));
        int64_t start = 0, stop = 0, step = 1;
        if (args.pos.size() == 1) stop = args.pos[0].as_int();
        else {
            start = args.pos[0].as_int();
            stop = args.pos[1].as_int();
            if (args.pos.size() == 3) step = args.pos[2].as_int();
        }
        if (step == 0) fail(jinja_error_kind::runtime, "range() arg 3 must not be zero");
        const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
        const __int128 astep = step > 0 ? step : -static_cast<__int128>(step);
        const __int128 n = span <= 0 ? 0 : (span + astep - 1) / astep;
        if (n > opts.limits.max_range)
            failf(jinja_error_kind::limit, "Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).",
                  opts.limits.max_range);
        std::vector<value> out;
        out.reserve(static_cast<size_t>(n));
        for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) out.push_back(value::integer(start + i * step));
        bud.charge_alloc(out.size() * sizeof(value));
        return value::list(std::move(out));
    }
    case builtin_fn::dict: {
        auto d = std::make_shared<dict_data>();
        make_mapping(*this, args, "dict", *d);
        return value::dict(std::move(d));
    }
    case builtin_fn::namespace_: {
        dict_data d;
        make_mapping(*this, args, "namespace", d);
        auto ns = std::make_shared<ns_data>();
        for (auto &[k, v] : d.items) {
            if (!k.is_string()) fail(jinja_error_kind::runtime, "keywords must be strings");
            ns->attrs.emplace_back(k.text(), v);
        }
        namespaces.add(ns);
        return value::object(std::move(ns));
    }
    case builtin_fn::raise_exception: {
        const auto a = bind_args(args, "raise_exception", {"message"}, 1);
        mstring text;
        py_str(*a.get(0), text);
        throw jinja_error(jinja_error_kind::raised, 0, 0, text.text);
    }
    case builtin_fn::strftime_now: {
        const auto a = bind_args(args, "strftime_now", {"format"}, 1);
        if (!a.get(0)->is_string())
            failf(jinja_error_kind::runtime, "strftime() argument 1 must be str, not {}", type_name(*a.get(0)));
        const int64_t now = opts.now_unix ? *opts.now_unix : static_cast<int64_t>(std::time(nullptr));
        // A format from marked data may put its own text in the result: mark it all.
        mstring out(&bud);
        out.add(strftime_py(a.get(0)->text(), now, bud), !a.get(0)->str().marks.empty());
        return value::string(std::move(out));
    }
    case builtin_fn::joiner: {
        const auto a = bind_args(args, "joiner", {"sep"});
        auto j = std::make_shared<joiner_obj>();
        j->sep = a.get(0) ? *a.get(0) : value::string(", ");
        return value::object(std::move(j));
    }
    case builtin_fn::cycler: {
        if (!args.kw.empty()) fail(jinja_error_kind::runtime, "cycler() takes no keyword arguments");
        auto c = std::make_shared<cycler_obj>();
        c->items = std::move(args.pos);
        return value::object(std::move(c));
    }
    }
    fail(jinja_error_kind::runtime, "unknown function");
}

}  // namespace tandem::jinja
