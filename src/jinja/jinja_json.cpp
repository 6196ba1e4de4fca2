// src/jinja/jinja_json.cpp - JSON into values (the render's variables) and values out as JSON,
// byte for byte as Python's json.dumps writes them (transformers' tojson): separators, indent,
// ensure_ascii, sort_keys, float repr, NaN/Infinity, key coercion, and a marked string's token
// marked whole.
#include "jinja_eval.h"

#include "jinja_unicode.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::jinja {

value from_json(const nlohmann::ordered_json &j, bool marked, int depth) {
    if (depth > max_nesting) failf(jinja_error_kind::limit, "values nested deeper than {} levels", max_nesting);
    using t = nlohmann::ordered_json::value_t;
    switch (j.type()) {
    case t::null: return value::none();
    case t::boolean: return value::boolean(j.get<bool>());
    case t::number_integer: return value::integer(j.get<int64_t>());
    case t::number_unsigned: {
        const uint64_t u = j.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            failf(jinja_error_kind::runtime, "integer {} is beyond the 64-bit integers templates compute with", u);
        return value::integer(static_cast<int64_t>(u));
    }
    case t::number_float: return value::floating(j.get<double>());
    case t::string: {
        str_data s;
        s.text = j.get<std::string>();
        if (marked && !s.text.empty()) s.marks.push_back({0, s.text.size()});
        return value::string(std::move(s));
    }
    case t::array: {
        std::vector<value> items;
        items.reserve(j.size());
        for (const auto &x : j) items.push_back(from_json(x, marked, depth + 1));
        return value::list(std::move(items));
    }
    case t::object: {
        auto d = std::make_shared<dict_data>();
        d->items.reserve(j.size());
        for (const auto &[k, x] : j.items()) {
            str_data key;
            key.text = k;
            if (marked && !k.empty()) key.marks.push_back({0, k.size()});
            d->items.emplace_back(value::string(std::move(key)), from_json(x, marked, depth + 1));
        }
        return value::dict(std::move(d));
    }
    default: fail(jinja_error_kind::runtime, "unsupported JSON value (binary or discarded)");
    }
}

namespace {

void json_string(const std::string &t, bool marked, bool ensure_ascii, mstring &out) {
    std::string buf;
    buf.reserve(t.size() + 2);
    buf += '"';
    for (size_t pos = 0; pos < t.size();) {
        const auto b = static_cast<unsigned char>(t[pos]);
        if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') {
            buf += static_cast<char>(b);
            ++pos;
            continue;
        }
        const size_t at = pos;
        const char32_t cp = utf8_next(t, pos);
        switch (cp) {
        case '"': buf += "\\\""; break;
        case '\\': buf += "\\\\"; break;
        case '\n': buf += "\\n"; break;
        case '\r': buf += "\\r"; break;
        case '\t': buf += "\\t"; break;
        case '\b': buf += "\\b"; break;
        case '\f': buf += "\\f"; break;
        default:
            if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
                if (cp >= 0x10000) {
                    const char32_t v = cp - 0x10000;
                    buf += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    buf += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
                }
            } else {
                buf.append(t, at, pos - at);
            }
        }
    }
    buf += '"';
    out.add(buf, marked);
}

std::string json_float(double f) {
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
    return float_repr(f);
}

// A dict key as json.dumps coerces it; fails for keys JSON cannot hold.
std::pair<std::string, bool> json_key(const value &k) {
    switch (k.kind()) {
    case vkind::string: return {k.text(), !k.str().marks.empty()};
    case vkind::floating: return {json_float(k.as_float()), false};
    case vkind::boolean: return {k.as_bool() ? "true" : "false", false};
    case vkind::none: return {"null", false};
    case vkind::integer: return {std::to_string(k.as_int()), false};
    default: failf(jinja_error_kind::runtime, "keys must be str, int, float, bool or None, not {}", type_name(k));
    }
}

void newline(const json_style &style, int level, mstring &out) {
    out.add("\n");
    for (int i = 0; i < level; ++i) out.add(style.indent);
}

void encode(const value &v, const json_style &style, mstring &out, int depth, int level);

void encode_list(const std::vector<value> &items, const json_style &style, mstring &out, int depth, int level) {
    if (items.empty()) {
        out.add("[]");
        return;
    }
    out.add("[");
    if (style.has_indent) newline(style, level + 1, out);
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
            out.add(style.item_sep);
            if (style.has_indent) newline(style, level + 1, out);
        }
        encode(items[i], style, out, depth + 1, level + 1);
    }
    if (style.has_indent) newline(style, level, out);
    out.add("]");
}

void encode_dict(const dict_data &d, const json_style &style, mstring &out, int depth, int level) {
    if (d.items.empty()) {
        out.add("{}");
        return;
    }
    std::vector<const std::pair<value, value> *> items;
    for (const auto &kv : d.items) items.push_back(&kv);
    if (style.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto *a, const auto *b) { return py_less(a->first, b->first); });
    out.add("{");
    if (style.has_indent) newline(style, level + 1, out);
    bool first = true;
    for (const auto *kv : items) {
        if (!first) {
            out.add(style.item_sep);
            if (style.has_indent) newline(style, level + 1, out);
        }
        first = false;
        const auto [key, marked] = json_key(kv->first);
        json_string(key, marked, style.ensure_ascii, out);
        out.add(style.key_sep);
        encode(kv->second, style, out, depth + 1, level + 1);
    }
    if (style.has_indent) newline(style, level, out);
    out.add("}");
}

void encode(const value &v, const json_style &style, mstring &out, int depth, int level) {
    if (depth > max_nesting) failf(jinja_error_kind::limit, "values nested deeper than {} levels", max_nesting);
    if (out.bud) out.bud->step();
    switch (v.kind()) {
    case vkind::none: out.add("null"); return;
    case vkind::boolean: out.add(v.as_bool() ? "true" : "false"); return;
    case vkind::integer: out.add(std::to_string(v.as_int())); return;
    case vkind::floating: out.add(json_float(v.as_float())); return;
    case vkind::string: json_string(v.text(), !v.str().marks.empty(), style.ensure_ascii, out); return;
    case vkind::list: case vkind::tuple: encode_list(v.items(), style, out, depth, level); return;
    case vkind::dict: encode_dict(v.dict(), style, out, depth, level); return;
    default: failf(jinja_error_kind::runtime, "Object of type {} is not JSON serializable", type_name(v));
    }
}

}  // namespace

void to_json(const value &v, const json_style &style, mstring &out, int depth) { encode(v, style, out, depth, 0); }

}  // namespace tandem::jinja
