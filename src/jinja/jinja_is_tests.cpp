// src/jinja/jinja_is_tests.cpp - jinja2's builtin tests (`x is defined`, `x is divisibleby 3`, ...)
// with Python's type rules (bool is a number but not an integer; Undefined is iterable).
#include "jinja_eval.h"

#include "jinja_unicode.h"

#include <unordered_map>

namespace tandem::jinja {

namespace {

using test_fn = bool (*)(interp &, const value &, call_args &);

const value &one_arg(call_args &args, const char *name) {
    if (args.pos.size() + args.kw.size() != 1) failf(jinja_error_kind::runtime, "test '{}' takes one argument", name);
    return args.pos.empty() ? args.kw[0].second : args.pos[0];
}

void no_args(call_args &args, const char *name) {
    if (!args.pos.empty() || !args.kw.empty()) failf(jinja_error_kind::runtime, "test '{}' takes no arguments", name);
}

value remainder(interp &in, const value &v, const value &by) { return in.binary(binop::mod, v, by); }

bool t_defined(interp &, const value &v, call_args &a) { no_args(a, "defined"); return !v.is_undefined(); }
bool t_undefined(interp &, const value &v, call_args &a) { no_args(a, "undefined"); return v.is_undefined(); }
bool t_none(interp &, const value &v, call_args &a) { no_args(a, "none"); return v.is_none(); }
bool t_boolean(interp &, const value &v, call_args &a) { no_args(a, "boolean"); return v.is_bool(); }
bool t_true(interp &, const value &v, call_args &a) { no_args(a, "true"); return v.is_bool() && v.as_bool(); }
bool t_false(interp &, const value &v, call_args &a) { no_args(a, "false"); return v.is_bool() && !v.as_bool(); }
bool t_integer(interp &, const value &v, call_args &a) { no_args(a, "integer"); return v.is_int(); }
bool t_float(interp &, const value &v, call_args &a) { no_args(a, "float"); return v.is_float(); }
bool t_number(interp &, const value &v, call_args &a) { no_args(a, "number"); return v.is_number(); }
bool t_string(interp &, const value &v, call_args &a) { no_args(a, "string"); return v.is_string(); }
bool t_mapping(interp &, const value &v, call_args &a) { no_args(a, "mapping"); return v.is_dict(); }
bool t_escaped(interp &, const value &v, call_args &a) { no_args(a, "escaped"); return v.is_string() && v.str().markup; }

bool t_iterable(interp &, const value &v, call_args &a) {
    no_args(a, "iterable");
    if (v.is_object()) return v.object().kind == okind::loop;
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}

bool t_sequence(interp &, const value &v, call_args &a) {
    no_args(a, "sequence");
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}

bool t_callable(interp &, const value &v, call_args &a) {
    no_args(a, "callable");
    if (v.is_undefined()) return true;
    if (!v.is_object()) return false;
    const okind k = v.object().kind;
    return k != okind::ns && k != okind::cycler;
}

bool t_even(interp &in, const value &v, call_args &a) {
    no_args(a, "even");
    return py_equal(remainder(in, v, value::integer(2)), value::integer(0));
}

bool t_odd(interp &in, const value &v, call_args &a) {
    no_args(a, "odd");
    return py_equal(remainder(in, v, value::integer(2)), value::integer(1));
}

bool t_divisibleby(interp &in, const value &v, call_args &a) {
    return py_equal(remainder(in, v, one_arg(a, "divisibleby")), value::integer(0));
}

bool t_lower(interp &in, const value &v, call_args &a) {
    no_args(a, "lower");
    return py_islower(to_string_value(v, in.bud).text());
}

bool t_upper(interp &in, const value &v, call_args &a) {
    no_args(a, "upper");
    return py_isupper(to_string_value(v, in.bud).text());
}

bool t_eq(interp &, const value &v, call_args &a) { return py_equal(v, one_arg(a, "eq")); }
bool t_ne(interp &, const value &v, call_args &a) { return !py_equal(v, one_arg(a, "ne")); }

bool ordered(interp &in, const value &x, const value &y) {
    if (x.is_undefined()) in.fail_undefined(x);
    if (y.is_undefined()) in.fail_undefined(y);
    return py_less(x, y);
}

bool t_lt(interp &in, const value &v, call_args &a) { return ordered(in, v, one_arg(a, "lt")); }
bool t_gt(interp &in, const value &v, call_args &a) { return ordered(in, one_arg(a, "gt"), v); }
bool t_le(interp &in, const value &v, call_args &a) {
    const value &o = one_arg(a, "le");
    return ordered(in, v, o) || py_equal(v, o);
}
bool t_ge(interp &in, const value &v, call_args &a) {
    const value &o = one_arg(a, "ge");
    return ordered(in, o, v) || py_equal(v, o);
}

bool t_in(interp &in, const value &v, call_args &a) { return in.contains(one_arg(a, "in"), v); }

bool t_sameas(interp &, const value &v, call_args &a) {
    const value &o = one_arg(a, "sameas");
    if (v.kind() != o.kind()) return false;
    switch (v.kind()) {
    case vkind::none: return true;
    case vkind::boolean: return v.as_bool() == o.as_bool();
    // CPython caches the small integers, so `1 is 1` holds while larger equal ints are distinct.
    case vkind::integer: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case vkind::floating: return false;
    default: return v.identity() != nullptr && v.identity() == o.identity();
    }
}

bool t_filter(interp &, const value &v, call_args &a) {
    no_args(a, "filter");
    return v.is_string() && filter_index(v.text()) >= 0;
}

bool t_test(interp &, const value &v, call_args &a) {
    no_args(a, "test");
    return v.is_string() && test_index(v.text()) >= 0;
}

struct test_entry {
    const char *name;
    test_fn fn;
};

const test_entry test_table[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"escaped", t_escaped}, {"even", t_even}, {"false", t_false},
    {"filter", t_filter}, {"float", t_float}, {"ge", t_ge}, {">=", t_ge}, {"gt", t_gt}, {"greaterthan", t_gt},
    {">", t_gt}, {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le}, {"<=", t_le},
    {"lower", t_lower}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"mapping", t_mapping}, {"ne", t_ne},
    {"!=", t_ne}, {"none", t_none}, {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas},
    {"sequence", t_sequence}, {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined},
    {"upper", t_upper},
};

}  // namespace

int test_index(std::string_view name) {
    static const std::unordered_map<std::string_view, int> index = [] {
        std::unordered_map<std::string_view, int> m;
        for (size_t i = 0; i < std::size(test_table); ++i) m.emplace(test_table[i].name, static_cast<int>(i));
        return m;
    }();
    auto it = index.find(name);
    return it == index.end() ? -1 : it->second;
}

bool interp::apply_test(const expr &e, const value &operand, call_args args) {
    if (e.fn < 0) fail(jinja_error_kind::runtime, "No test named '" + e.name + "'.");
    return test_table[e.fn].fn(*this, operand, args);
}

bool run_test_named(interp &in, const std::string &name, const value &v, call_args &args) {
    const int i = test_index(name);
    if (i < 0) fail(jinja_error_kind::runtime, "No test named '" + name + "'.");
    return test_table[i].fn(in, v, args);
}

}  // namespace tandem::jinja
