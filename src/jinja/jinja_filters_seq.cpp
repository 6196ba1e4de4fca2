// src/jinja/jinja_filters_seq.cpp - jinja2's filters over sequences and mappings (length,
// first/last, join, map, select/reject, sort, unique, dictsort, batch/slice, sum, min/max).
#include "jinja_filters.h"

#include "jinja_unicode.h"

#include <algorithm>
#include <optional>

namespace tandem::jinja::filters {

value str_of(interp &in, const value &v) { return to_string_value(v, in.bud); }

std::vector<value> as_list(interp &in, const value &v) { return in.iterate(v); }

value list_value(interp &in, std::vector<value> items) {
    in.bud.charge_alloc(items.size() * sizeof(value));
    return value::list(std::move(items));
}

std::vector<value> attr_path(const value &attribute) {
    if (!attribute.is_string()) return {attribute};
    std::vector<value> parts;
    const std::string &t = attribute.text();
    size_t start = 0;
    while (true) {
        const size_t dot = t.find('.', start);
        const std::string part = t.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        int64_t n = 0;
        if (digits && part.size() < 18) {
            for (char c : part) n = n * 10 + (c - '0');
            parts.push_back(value::integer(n));
        } else {
            parts.push_back(value::string(part));
        }
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return parts;
}

value get_attr_path(interp &in, value item, const std::vector<value> &path, const value *dflt) {
    for (const auto &part : path) {
        item = in.getitem(item, part);
        if (dflt && !dflt->is_none() && item.is_undefined()) item = *dflt;
    }
    return item;
}

value sort_key(const value &v, bool case_sensitive) {
    if (case_sensitive || !v.is_string()) return v;
    return value::string(py_lower(v.text()));
}

value f_batch(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "batch", {"linecount", "fill_with"}, 1);
    const value &linecount = *a.get(0);
    std::vector<value> out, tmp;
    // As jinja2: a batch is emitted when its size equals linecount (so 0 yields one empty batch).
    for (auto &item : as_list(in, v)) {
        if (py_equal(value::integer(static_cast<int64_t>(tmp.size())), linecount)) {
            out.push_back(value::list(std::move(tmp)));
            tmp.clear();
        }
        tmp.push_back(std::move(item));
    }
    if (!tmp.empty()) {
        if (a.get(1) && !a.get(1)->is_none()) {
            if (!linecount.is_number()) failf(jinja_error_kind::runtime, "'<' not supported between instances of 'int' and '{}'", type_name(linecount));
            while (static_cast<double>(tmp.size()) < linecount.as_float()) tmp.push_back(*a.get(1));
        }
        out.push_back(value::list(std::move(tmp)));
    }
    return list_value(in, std::move(out));
}

value f_dictsort(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "dictsort", {"case_sensitive", "by", "reverse"});
    const bool cs = a.get(0) && truthy(*a.get(0));
    const bool rev = a.get(2) && truthy(*a.get(2));
    size_t pos = 0;
    if (a.get(1)) {
        const std::string by = a.get(1)->is_string() ? a.get(1)->text() : "";
        if (by == "value") pos = 1;
        else if (by != "key") fail(jinja_error_kind::runtime, "You can only sort by either 'key' or 'value'");
    }
    if (!v.is_dict()) in.fail_undefined(value::undefined(fmt::format("'{}' has no attribute 'items'", object_type_repr(v))));
    std::vector<value> items;
    for (const auto &[k, x] : v.dict().items) items.push_back(value::tuple({k, x}));
    std::stable_sort(items.begin(), items.end(), [&](const value &l, const value &r) {
        const value kl = sort_key(l.items()[pos], cs), kr = sort_key(r.items()[pos], cs);
        return rev ? py_less(kr, kl) : py_less(kl, kr);
    });
    return list_value(in, std::move(items));
}

value f_first(interp &in, const value &v, call_args &args) {
    bind_args(args, "first", {});
    if (v.is_sequence()) return v.items().empty() ? value::undefined("No first item, sequence was empty.") : v.items()[0];
    const auto items = as_list(in, v);
    return items.empty() ? value::undefined("No first item, sequence was empty.") : items[0];
}

value f_last(interp &in, const value &v, call_args &args) {
    bind_args(args, "last", {});
    if (v.is_sequence()) return v.items().empty() ? value::undefined("No last item, sequence was empty.") : v.items().back();
    const auto items = as_list(in, v);
    return items.empty() ? value::undefined("No last item, sequence was empty.") : items.back();
}

value f_items(interp &in, const value &v, call_args &args) {
    bind_args(args, "items", {});
    if (v.is_undefined()) return value::list({});
    if (!v.is_dict()) fail(jinja_error_kind::runtime, "Can only get item pairs from a mapping.");
    call_args none;
    return *in.call_method(v, "items", none);
}

value f_join(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "join", {"d", "attribute"});
    std::vector<value> items = as_list(in, v);
    if (a.get(1) && !a.get(1)->is_none()) {
        const auto path = attr_path(*a.get(1));
        for (auto &item : items) item = get_attr_path(in, item, path, nullptr);
    }
    const value sep = a.get(0) ? str_of(in, *a.get(0)) : value::string("");
    mstring out(&in.bud);
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out.add(sep.str());
        py_str(items[i], out);
    }
    return value::string(std::move(out));
}

value f_length(interp &in, const value &v, call_args &args) {
    bind_args(args, "length", {});
    switch (v.kind()) {
    case vkind::undefined: return value::integer(0);
    case vkind::string: return value::integer(static_cast<int64_t>(utf8_length(v.text())));
    case vkind::list: case vkind::tuple: return value::integer(static_cast<int64_t>(v.items().size()));
    case vkind::dict: return value::integer(static_cast<int64_t>(v.dict().items.size()));
    default:
        if (v.is_object() && v.object().kind == okind::loop)
            return value::integer(static_cast<loop_obj &>(v.object()).length());
        failf(jinja_error_kind::runtime, "object of type '{}' has no len()", type_name(v));
    }
    (void)in;
}

value f_list(interp &in, const value &v, call_args &args) {
    bind_args(args, "list", {});
    return list_value(in, as_list(in, v));
}

value f_map(interp &in, const value &v, call_args &args) {
    std::vector<value> items = as_list(in, v);
    if (args.pos.empty()) {
        const value *attribute = nullptr, *dflt = nullptr;
        for (const auto &[k, x] : args.kw) {
            if (k == "attribute") attribute = &x;
            else if (k == "default") dflt = &x;
            else failf(jinja_error_kind::runtime, "Unexpected keyword argument '{}'", k);
        }
        if (!attribute) fail(jinja_error_kind::runtime, "map requires a filter name or attribute=");
        const auto path = attr_path(*attribute);
        for (auto &item : items) item = get_attr_path(in, item, path, dflt);
        return list_value(in, std::move(items));
    }
    const value name = args.pos[0];
    if (!name.is_string()) fail(jinja_error_kind::runtime, "map filter name must be a string");
    call_args rest;
    rest.pos.assign(args.pos.begin() + 1, args.pos.end());
    rest.kw = args.kw;
    for (auto &item : items) item = call_filter_named(in, name.text(), item, rest);
    return list_value(in, std::move(items));
}

static value min_max(interp &in, const value &v, call_args &args, bool want_max) {
    const auto a = bind_args(args, want_max ? "max" : "min", {"case_sensitive", "attribute"});
    const bool cs = a.get(0) && truthy(*a.get(0));
    std::vector<value> items = as_list(in, v);
    if (items.empty()) return value::undefined("No aggregated item, sequence was empty.");
    std::vector<value> path;
    if (a.get(1) && !a.get(1)->is_none()) path = attr_path(*a.get(1));
    auto key = [&](const value &x) { return sort_key(path.empty() ? x : get_attr_path(in, x, path, nullptr), cs); };
    size_t best = 0;
    value best_key = key(items[0]);
    for (size_t i = 1; i < items.size(); ++i) {
        const value k = key(items[i]);
        if (want_max ? py_less(best_key, k) : py_less(k, best_key)) {
            best = i;
            best_key = k;
        }
    }
    return items[best];
}

value f_max(interp &in, const value &v, call_args &args) { return min_max(in, v, args, true); }

value f_min(interp &in, const value &v, call_args &args) { return min_max(in, v, args, false); }

// select / reject / selectattr / rejectattr share jinja2's select_or_reject.
static value select_or_reject(interp &in, const value &v, call_args &args, bool by_attr, bool keep_if) {
    std::vector<value> path;
    size_t off = 0;
    if (by_attr) {
        if (args.pos.empty()) fail(jinja_error_kind::runtime, "Missing parameter for attribute name");
        path = attr_path(args.pos[0]);
        off = 1;
    }
    std::optional<std::string> test;
    call_args rest;
    if (args.pos.size() > off) {
        if (!args.pos[off].is_string()) fail(jinja_error_kind::runtime, "test name must be a string");
        test = args.pos[off].text();
        rest.pos.assign(args.pos.begin() + static_cast<long>(off) + 1, args.pos.end());
        rest.kw = args.kw;
    }
    std::vector<value> out;
    for (const auto &item : as_list(in, v)) {
        const value x = by_attr ? get_attr_path(in, item, path, nullptr) : item;
        const bool ok = test ? run_test_named(in, *test, x, rest) : truthy(x);
        if (ok == keep_if) out.push_back(item);
    }
    return list_value(in, std::move(out));
}

value f_select(interp &in, const value &v, call_args &args) { return select_or_reject(in, v, args, false, true); }

value f_reject(interp &in, const value &v, call_args &args) { return select_or_reject(in, v, args, false, false); }

value f_selectattr(interp &in, const value &v, call_args &args) { return select_or_reject(in, v, args, true, true); }

value f_rejectattr(interp &in, const value &v, call_args &args) { return select_or_reject(in, v, args, true, false); }

value f_reverse(interp &in, const value &v, call_args &args) {
    bind_args(args, "reverse", {});
    std::vector<value> items = as_list(in, v);
    if (v.is_string()) {
        mstring out(&in.bud);
        for (auto it = items.rbegin(); it != items.rend(); ++it) out.add(it->str());
        return value::string(std::move(out));
    }
    std::reverse(items.begin(), items.end());
    return list_value(in, std::move(items));
}

value f_slice(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "slice", {"slices", "fill_with"}, 1);
    const int64_t slices = a.get(0)->as_int();
    if (slices <= 0) fail(jinja_error_kind::runtime, "slice count must be a positive integer");
    const std::vector<value> seq = as_list(in, v);
    const auto length = static_cast<int64_t>(seq.size());
    const int64_t per = length / slices, extra = length % slices;
    int64_t offset = 0;
    std::vector<value> out;
    for (int64_t i = 0; i < slices && i < 100000; ++i) {
        const int64_t start = offset + i * per;
        if (i < extra) ++offset;
        const int64_t end = offset + (i + 1) * per;
        std::vector<value> part(seq.begin() + start, seq.begin() + end);
        if (a.get(1) && !a.get(1)->is_none() && i >= extra) part.push_back(*a.get(1));
        out.push_back(value::list(std::move(part)));
    }
    return list_value(in, std::move(out));
}

value f_sort(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "sort", {"reverse", "case_sensitive", "attribute"});
    const bool rev = a.get(0) && truthy(*a.get(0));
    const bool cs = a.get(1) && truthy(*a.get(1));
    std::vector<value> items = as_list(in, v);
    // jinja2's make_multi_attrgetter: "a,b.c" sorts by several attributes in turn.
    std::vector<std::vector<value>> paths;
    if (a.get(2) && !a.get(2)->is_none()) {
        if (a.get(2)->is_string()) {
            const std::string &spec = a.get(2)->text();
            for (size_t start = 0;;) {
                const size_t comma = spec.find(',', start);
                paths.push_back(attr_path(value::string(spec.substr(start, comma == std::string::npos ? comma : comma - start))));
                if (comma == std::string::npos) break;
                start = comma + 1;
            }
        } else {
            paths.push_back(attr_path(*a.get(2)));
        }
    }
    std::vector<std::pair<value, value>> keyed;
    for (auto &item : items) {
        if (paths.size() <= 1) {
            keyed.emplace_back(sort_key(paths.empty() ? item : get_attr_path(in, item, paths[0], nullptr), cs), item);
            continue;
        }
        std::vector<value> parts;
        for (const auto &p : paths) parts.push_back(sort_key(get_attr_path(in, item, p, nullptr), cs));
        keyed.emplace_back(value::list(std::move(parts)), item);
    }
    in.bud.charge_steps(keyed.size() * 8);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto &l, const auto &r) {
        return rev ? py_less(r.first, l.first) : py_less(l.first, r.first);
    });
    items.clear();
    for (auto &[k, item] : keyed) items.push_back(std::move(item));
    return list_value(in, std::move(items));
}

value f_sum(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "sum", {"attribute", "start"});
    value total = a.get(1) ? *a.get(1) : value::integer(0);
    std::vector<value> path;
    if (a.get(0) && !a.get(0)->is_none()) path = attr_path(*a.get(0));
    for (const auto &item : as_list(in, v)) {
        const value x = path.empty() ? item : get_attr_path(in, item, path, nullptr);
        if (total.is_string()) fail(jinja_error_kind::runtime, "sum() can't sum strings [use ''.join(seq) instead]");
        total = in.binary(binop::add, total, x);
    }
    return total;
}

value f_unique(interp &in, const value &v, call_args &args) {
    const auto a = bind_args(args, "unique", {"case_sensitive", "attribute"});
    const bool cs = a.get(0) && truthy(*a.get(0));
    std::vector<value> path;
    if (a.get(1) && !a.get(1)->is_none()) path = attr_path(*a.get(1));
    std::vector<value> out, seen;
    for (const auto &item : as_list(in, v)) {
        const value k = sort_key(path.empty() ? item : get_attr_path(in, item, path, nullptr), cs);
        if (!is_hashable(k)) failf(jinja_error_kind::runtime, "unhashable type: '{}'", type_name(k));
        in.bud.charge_steps(seen.size());
        if (std::any_of(seen.begin(), seen.end(), [&](const value &s) { return py_equal(s, k); })) continue;
        seen.push_back(k);
        out.push_back(item);
    }
    return list_value(in, std::move(out));
}

}  // namespace tandem::jinja::filters
