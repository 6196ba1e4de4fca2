// src/jinja/jinja_format.cpp - Python's string formatting: `fmt % args` (the |format filter),
// str.format with simple fields and specs, datetime.strftime for strftime_now, and HTML escaping.
#include "jinja_eval.h"

#include "jinja_unicode.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace tandem::jinja {

std::string html_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
        }
    }
    return out;
}

namespace {

struct spec {
    std::string flags;
    int64_t width = -1, precision = -1;
    char conv = 's';
};

// Pads `s` to `width` code points (left-aligned with '-'), keeping its marks.
void add_padded(mstring &out, const str_data &s, const spec &sp) {
    const auto len = static_cast<int64_t>(utf8_length(s.text));
    const bool left = sp.flags.find('-') != std::string::npos;
    const int64_t pad = std::max<int64_t>(0, sp.width - len);
    if (out.bud) out.bud->check_size(out.text.size() + static_cast<size_t>(pad));
    if (!left) out.add(std::string(static_cast<size_t>(pad), ' '));
    out.add(s);
    if (left) out.add(std::string(static_cast<size_t>(pad), ' '));
}

std::string c_format(const spec &sp, char conv, const char *length, double f, long long i, bool is_float) {
    std::string f_spec = "%" + sp.flags;
    if (sp.width >= 0) f_spec += std::to_string(std::min<int64_t>(sp.width, 100000));
    if (sp.precision >= 0) f_spec += "." + std::to_string(std::min<int64_t>(sp.precision, 1000));
    f_spec += length;
    f_spec += conv;
    const int n = is_float ? std::snprintf(nullptr, 0, f_spec.c_str(), f) : std::snprintf(nullptr, 0, f_spec.c_str(), i);
    std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
    if (is_float) std::snprintf(out.data(), out.size(), f_spec.c_str(), f);
    else std::snprintf(out.data(), out.size(), f_spec.c_str(), i);
    out.resize(static_cast<size_t>(std::max(n, 0)));
    return out;
}

void format_one(const spec &sp, const value &arg, mstring &out, budget &bud) {
    switch (sp.conv) {
    case 's': case 'r': case 'a': {
        mstring tmp(&bud);
        if (sp.conv == 's') py_str(arg, tmp);
        else py_repr(arg, tmp);
        str_data s{std::move(tmp.text), std::move(tmp.marks), false};
        if (sp.precision >= 0) {
            const std::vector<size_t> off = utf8_offsets(s.text);
            const auto n = static_cast<size_t>(std::min<int64_t>(sp.precision, static_cast<int64_t>(off.size() - 1)));
            s.marks = marks_slice(s.marks, 0, off[n]);
            s.text.resize(off[n]);
        }
        add_padded(out, s, sp);
        return;
    }
    case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        if (!arg.is_number())
            failf(jinja_error_kind::runtime, "%{} format: {} is required, not {}", sp.conv,
                  sp.conv == 'd' || sp.conv == 'i' || sp.conv == 'u' ? "a real number" : "an integer", type_name(arg));
        if (arg.is_float() && !(sp.conv == 'd' || sp.conv == 'i' || sp.conv == 'u'))
            failf(jinja_error_kind::runtime, "%{} format: an integer is required, not float", sp.conv);
        int64_t i = arg.as_int();
        if (arg.is_float()) {
            const double d = arg.as_float();
            if (!std::isfinite(d)) fail(jinja_error_kind::runtime, "cannot convert float infinity or NaN to integer");
            i = static_cast<int64_t>(d);
        }
        const char conv = sp.conv == 'i' || sp.conv == 'u' ? 'd' : sp.conv;
        std::string s = c_format(sp, conv, "ll", 0, static_cast<long long>(i), false);
        // Python writes the octal prefix as 0o.
        if (conv == 'o' && sp.flags.find('#') != std::string::npos) {
            const size_t z = s.find('0');
            if (z != std::string::npos) s.insert(z + 1, "o");
        }
        out.add(s);
        return;
    }
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
        if (!arg.is_number())
            failf(jinja_error_kind::runtime, "must be real number, not {}", type_name(arg));
        out.add(c_format(sp, sp.conv, "", arg.as_float(), 0, true));
        return;
    }
    case 'c': {
        if (arg.is_string() && utf8_length(arg.text()) == 1) {
            add_padded(out, arg.str(), sp);
            return;
        }
        if (!arg.is_int()) fail(jinja_error_kind::runtime, "%c requires int or char");
        if (arg.as_int() < 0 || arg.as_int() > 0x10FFFF) fail(jinja_error_kind::runtime, "%c arg not in range(0x110000)");
        str_data d;
        utf8_append(d.text, static_cast<char32_t>(arg.as_int()));
        add_padded(out, d, sp);
        return;
    }
    default: failf(jinja_error_kind::runtime, "unsupported format character '{}'", sp.conv);
    }
}

}  // namespace

value percent_format(const value &fmt_v, const value &args, budget &bud) {
    const str_data &f = fmt_v.str();
    const std::string &t = f.text;
    std::vector<value> positional = args.is_tuple() ? args.items() : std::vector<value>{args};
    const dict_data *mapping = args.is_dict() ? &args.dict() : nullptr;
    size_t next = 0;
    bool used_mapping = false;
    mstring out(&bud);
    size_t lit = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] != '%') continue;
        out.add(f, lit, i);
        size_t p = i + 1;
        if (p >= t.size()) fail(jinja_error_kind::runtime, "incomplete format");
        const value *key_arg = nullptr;
        if (t[p] == '(') {
            const size_t close = t.find(')', p);
            if (close == std::string::npos) fail(jinja_error_kind::runtime, "incomplete format key");
            if (!mapping) fail(jinja_error_kind::runtime, "format requires a mapping");
            key_arg = mapping->find(std::string_view(t).substr(p + 1, close - p - 1));
            if (!key_arg) failf(jinja_error_kind::runtime, "KeyError: '{}'", t.substr(p + 1, close - p - 1));
            used_mapping = true;
            p = close + 1;
        }
        spec sp;
        while (p < t.size() && std::string_view("-+ #0").find(t[p]) != std::string_view::npos) sp.flags += t[p++];
        auto read_num = [&](int64_t &dst) {
            if (p < t.size() && t[p] == '*') fail(jinja_error_kind::runtime, "* width and precision are not supported");
            if (p >= t.size() || t[p] < '0' || t[p] > '9') return;
            dst = 0;
            while (p < t.size() && t[p] >= '0' && t[p] <= '9') dst = std::min<int64_t>(dst * 10 + (t[p++] - '0'), 1 << 24);
        };
        read_num(sp.width);
        if (p < t.size() && t[p] == '.') {
            ++p;
            sp.precision = 0;
            read_num(sp.precision);
        }
        while (p < t.size() && (t[p] == 'h' || t[p] == 'l' || t[p] == 'L')) ++p;
        if (p >= t.size()) fail(jinja_error_kind::runtime, "incomplete format");
        sp.conv = t[p];
        if (sp.conv == '%') {
            out.add("%");
        } else {
            const value *arg = key_arg;
            if (!arg) {
                if (next >= positional.size()) fail(jinja_error_kind::runtime, "not enough arguments for format string");
                arg = &positional[next++];
            }
            format_one(sp, *arg, out, bud);
        }
        i = p;
        lit = p + 1;
    }
    out.add(f, lit, t.size());
    if (!mapping && !used_mapping && next < positional.size())
        fail(jinja_error_kind::runtime, "not all arguments converted during string formatting");
    return value::string(std::move(out));
}

value str_format(const value &fmt_v, const call_args &args, budget &bud) {
    const str_data &f = fmt_v.str();
    const std::string &t = f.text;
    mstring out(&bud);
    size_t auto_index = 0, lit = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        const char c = t[i];
        if (c == '}') {
            if (i + 1 < t.size() && t[i + 1] == '}') {
                out.add(f, lit, i + 1);
                lit = i + 2;
                ++i;
                continue;
            }
            fail(jinja_error_kind::runtime, "Single '}' encountered in format string");
        }
        if (c != '{') continue;
        if (i + 1 < t.size() && t[i + 1] == '{') {
            out.add(f, lit, i + 1);
            lit = i + 2;
            ++i;
            continue;
        }
        out.add(f, lit, i);
        const size_t close = t.find('}', i);
        if (close == std::string::npos) fail(jinja_error_kind::runtime, "expected '}' before end of string");
        std::string field = t.substr(i + 1, close - i - 1);
        std::string format_spec;
        char conversion = 0;
        if (const size_t colon = field.find(':'); colon != std::string::npos) {
            format_spec = field.substr(colon + 1);
            field.resize(colon);
        }
        if (const size_t bang = field.find('!'); bang != std::string::npos) {
            conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
            field.resize(bang);
        }
        const value *arg = nullptr;
        if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
            const size_t idx = field.empty() ? auto_index++ : std::stoul(field.substr(0, 9));
            if (idx >= args.pos.size())
                failf(jinja_error_kind::runtime, "Replacement index {} out of range for positional args tuple", idx);
            arg = &args.pos[idx];
        } else {
            for (const auto &[k, v] : args.kw)
                if (k == field) arg = &v;
            if (!arg) failf(jinja_error_kind::runtime, "KeyError: '{}'", field);
        }
        spec sp;
        sp.conv = conversion == 'r' || conversion == 'a' ? 'r' : 's';
        if (!format_spec.empty()) {
            size_t p = 0;
            if (p < format_spec.size() && (format_spec[p] == '<' || format_spec[p] == '>')) {
                if (format_spec[p] == '<') sp.flags += '-';
                ++p;
            }
            int64_t w = 0;
            bool has_w = false;
            while (p < format_spec.size() && format_spec[p] >= '0' && format_spec[p] <= '9') {
                w = std::min<int64_t>(w * 10 + (format_spec[p++] - '0'), 1 << 24);
                has_w = true;
            }
            if (has_w) sp.width = w;
            if (p < format_spec.size() && format_spec[p] == '.') {
                ++p;
                sp.precision = 0;
                while (p < format_spec.size() && format_spec[p] >= '0' && format_spec[p] <= '9')
                    sp.precision = std::min<int64_t>(sp.precision * 10 + (format_spec[p++] - '0'), 1000);
            }
            if (p < format_spec.size()) {
                sp.conv = format_spec[p++];
                if (sp.conv == 'd' && !arg->is_int()) fail(jinja_error_kind::runtime, "Unknown format code 'd' for this value");
            }
            if (p != format_spec.size()) failf(jinja_error_kind::runtime, "unsupported format spec '{}'", format_spec);
            // Python right-aligns numbers and left-aligns strings by default.
            if (format_spec[0] != '>' && format_spec[0] != '<' && !arg->is_number()) sp.flags += '-';
        } else if (arg->is_string() && !conversion) {
            out.add(arg->str());
            i = close;
            lit = close + 1;
            continue;
        }
        format_one(sp, *arg, out, bud);
        i = close;
        lit = close + 1;
    }
    out.add(f, lit, t.size());
    return value::string(std::move(out));
}

std::string strftime_py(const std::string &format, int64_t unix_seconds, budget &bud) {
    const auto t = static_cast<std::time_t>(unix_seconds);
    std::tm tm{};
    localtime_r(&t, &tm);
    // Python expands %f itself and gives a naive datetime empty %z and %Z.
    std::string f;
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] == '%' && i + 1 < format.size()) {
            const char c = format[i + 1];
            if (c == 'f') f += "000000";
            else if (c == 'z' || c == 'Z') {
            } else {
                f += '%';
                f += c;
            }
            ++i;
            continue;
        }
        f += format[i];
    }
    if (f.empty()) return {};
    std::string out(std::max<size_t>(64, f.size() * 4), '\0');
    while (true) {
        const size_t n = std::strftime(out.data(), out.size(), f.c_str(), &tm);
        if (n > 0 || out.size() > f.size() * 64 + 1024) {
            out.resize(n);
            break;
        }
        out.resize(out.size() * 2);
    }
    bud.check_size(out.size());
    return out;
}

}  // namespace tandem::jinja
