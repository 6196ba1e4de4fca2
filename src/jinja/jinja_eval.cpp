// src/jinja/jinja_eval.cpp - expression evaluation: names through the scope chain, attribute and
// item lookup as jinja2's ImmutableSandboxedEnvironment does it, operators with Python semantics,
// calls of macros, builtins and methods.
#include "jinja_eval.h"

#include "jinja_unicode.h"

#include <algorithm>
#include <cmath>

namespace tandem::jinja {

bound_args bind_args(const call_args &args, std::string_view fn_name, std::initializer_list<const char *> params,
                     size_t n_required) {
    bound_args b;
    b.slots.resize(params.size());
    if (args.pos.size() > params.size())
        failf(jinja_error_kind::runtime, "{}() takes at most {} argument(s) ({} given)", fn_name, params.size(),
              args.pos.size());
    for (size_t i = 0; i < args.pos.size(); ++i) b.slots[i] = args.pos[i];
    for (const auto &[k, v] : args.kw) {
        size_t i = 0;
        for (const char *p : params) {
            if (k == p) break;
            ++i;
        }
        if (i == params.size()) failf(jinja_error_kind::runtime, "{}() got an unexpected keyword argument '{}'", fn_name, k);
        if (b.slots[i]) failf(jinja_error_kind::runtime, "{}() got multiple values for argument '{}'", fn_name, k);
        b.slots[i] = v;
    }
    for (size_t i = 0; i < n_required; ++i)
        if (!b.slots[i])
            failf(jinja_error_kind::runtime, "{}() missing required argument '{}'", fn_name, *(params.begin() + i));
    return b;
}

std::string builtin_obj::repr() const {
    static const char *const names[] = {"range", "dict", "namespace", "raise_exception", "strftime_now", "joiner", "cycler"};
    return std::string("<function ") + names[static_cast<int>(fn)] + ">";
}

interp::interp(const program &p, const jinja_render_options &o) : bud(o.limits), prog(p), opts(o) {
    const size_t n = prog.symbols.names.size();
    root = std::make_shared<scope>();
    root->is_root = true;
    root_vals.resize(n);
    root_set.assign(n, 0);
    builtins.resize(n);
    static const std::pair<const char *, builtin_fn> table[] = {
        {"range", builtin_fn::range}, {"dict", builtin_fn::dict}, {"namespace", builtin_fn::namespace_},
        {"raise_exception", builtin_fn::raise_exception}, {"strftime_now", builtin_fn::strftime_now},
        {"joiner", builtin_fn::joiner}, {"cycler", builtin_fn::cycler}};
    for (const auto &[name, fn] : table) {
        const int id = prog.symbols.find(name);
        if (id >= 0) builtins[static_cast<size_t>(id)] = value::object(std::make_shared<builtin_obj>(fn));
    }
}

// ---- names and assignment ----

value interp::lookup(int id, const scope_ptr &sc) const {
    const auto slot = static_cast<size_t>(id);
    for (const scope *s = sc.get(); s; s = s->parent.get()) {
        if (s->is_root) {
            if (root_set[slot]) return root_vals[slot];
            break;
        }
        for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it)
            if (it->first == id) return it->second;
    }
    if (!builtins[slot].is_undefined()) return builtins[slot];
    return value::undefined("'" + prog.symbols.names[slot] + "' is undefined");
}

namespace {

void set_var(interp &in, scope &s, int id, const value &v) {
    if (s.is_root) {
        in.root_vals[static_cast<size_t>(id)] = v;
        in.root_set[static_cast<size_t>(id)] = 1;
        return;
    }
    for (auto &[k, old] : s.vars)
        if (k == id) {
            old = v;
            return;
        }
    s.vars.emplace_back(id, v);
}

}  // namespace

void interp::assign(const target &t, const value &v, const scope_ptr &sc) {
    switch (t.kind) {
    case target::kind_t::name: set_var(*this, *sc, t.id, v); return;
    case target::kind_t::tuple: {
        std::vector<value> items = iterate(v);
        if (items.size() < t.items.size())
            failf(jinja_error_kind::runtime, "not enough values to unpack (expected {}, got {})", t.items.size(), items.size());
        if (items.size() > t.items.size())
            failf(jinja_error_kind::runtime, "too many values to unpack (expected {})", t.items.size());
        for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], sc);
        return;
    }
    case target::kind_t::ns_attr: {
        const value ns = lookup(t.id, sc);
        if (!ns.is_object() || ns.object().kind != okind::ns)
            fail(jinja_error_kind::runtime, "cannot assign attribute on non-namespace object");
        auto &data = static_cast<ns_data &>(ns.object());
        if (value *slot = data.find(t.attr)) *slot = v;
        else data.attrs.emplace_back(t.attr, v);
        return;
    }
    }
}

// ---- lookup ----

void interp::fail_undefined(const value &v) const {
    const undefined_data *u = v.undef();
    if (u && u->security) fail(jinja_error_kind::security, u->message);
    fail(jinja_error_kind::runtime, u ? u->message : "undefined value");
}

namespace {

value missing_attr(const value &obj, std::string_view name) {
    return value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

value missing_element(const value &obj, const value &key) {
    mstring r;
    py_repr(key, r);
    return value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), r.text));
}

value unsafe_attr(const value &obj, std::string_view name) {
    return value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)), true);
}

bool as_index(const value &key, int64_t &i) {
    if (!key.is_int() && !key.is_bool()) return false;
    i = key.as_int();
    return true;
}

}  // namespace

value interp::getattr(const value &obj, std::string_view name) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.is_object()) {
        object_data &o = obj.object();
        switch (o.kind) {
        case okind::ns: {
            value *v = static_cast<ns_data &>(o).find(name);
            return v ? *v : missing_attr(obj, name);
        }
        case okind::loop: return loop_attr(obj, name);
        case okind::macro:
            if (name == "name") return value::string(static_cast<macro_obj &>(o).def->name);
            return missing_attr(obj, name);
        case okind::cycler:
            if (name == "current") {
                auto &c = static_cast<cycler_obj &>(o);
                return c.items.empty() ? value::none() : c.items[c.pos];
            }
            break;
        default: break;
        }
    }
    bool unsafe = false;
    if (has_method(obj, name, unsafe))
        return unsafe ? unsafe_attr(obj, name) : value::object(std::make_shared<method_obj>(obj, std::string(name)));
    if (obj.is_dict()) {
        if (const value *v = obj.dict().find(name)) return *v;
    }
    return missing_attr(obj, name);
}

value interp::getitem(const value &obj, const value &key) {
    if (obj.is_undefined()) fail_undefined(obj);
    int64_t i = 0;
    if (obj.is_dict() && is_hashable(key)) {
        if (const value *v = obj.dict().find(key)) return *v;
    } else if (obj.is_sequence() && as_index(key, i)) {
        const auto &items = obj.items();
        const auto n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else if (obj.is_string() && as_index(key, i)) {
        const str_data &s = obj.str();
        const std::vector<size_t> offsets = utf8_offsets(s.text);
        const auto n = static_cast<int64_t>(offsets.size() - 1);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            mstring out(&bud);
            out.add(s, offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1]);
            return value::string(std::move(out));
        }
    }
    if (key.is_string()) {
        bool unsafe = false;
        if (obj.is_object() || has_method(obj, key.text(), unsafe)) return getattr(obj, key.text());
        return missing_attr(obj, key.text());
    }
    return missing_element(obj, key);
}

value interp::slice(const value &obj, const value *start, const value *stop, const value *step) {
    if (obj.is_undefined()) fail_undefined(obj);
    auto bound = [](const value *v, int64_t &out) {
        if (!v || v->is_none()) return true;
        if (!v->is_int() && !v->is_bool()) return false;
        out = v->as_int();
        return true;
    };
    int64_t st = 1;
    if (!bound(step, st)) return value::undefined("slice indices must be integers or None");
    if (st == 0) fail(jinja_error_kind::runtime, "slice step cannot be zero");
    std::vector<size_t> offsets;
    int64_t n = 0;
    if (obj.is_string()) {
        offsets = utf8_offsets(obj.text());
        n = static_cast<int64_t>(offsets.size() - 1);
    } else if (obj.is_sequence()) {
        n = static_cast<int64_t>(obj.items().size());
    } else {
        return value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
    }
    const int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
    int64_t b = st > 0 ? lower : upper, e = st > 0 ? upper : lower;
    auto clamp = [&](int64_t &x) {
        if (x < 0) x = std::max(x + n, lower);
        else x = std::min(x, upper);
    };
    if (start && !start->is_none()) {
        if (!bound(start, b)) return value::undefined("slice indices must be integers or None");
        clamp(b);
    }
    if (stop && !stop->is_none()) {
        if (!bound(stop, e)) return value::undefined("slice indices must be integers or None");
        clamp(e);
    }
    if (obj.is_string()) {
        const str_data &s = obj.str();
        mstring out(&bud);
        if (st == 1) {
            if (b < e) out.add(s, offsets[static_cast<size_t>(b)], offsets[static_cast<size_t>(e)]);
        } else {
            for (int64_t k = b; st > 0 ? k < e : k > e; k += st)
                out.add(s, offsets[static_cast<size_t>(k)], offsets[static_cast<size_t>(k) + 1]);
        }
        return value::string(std::move(out));
    }
    std::vector<value> items;
    const auto &src = obj.items();
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st) items.push_back(src[static_cast<size_t>(k)]);
    bud.charge_alloc(items.size() * sizeof(value));
    return obj.is_tuple() ? value::tuple(std::move(items)) : value::list(std::move(items));
}

std::vector<value> interp::iterate(const value &v) {
    switch (v.kind()) {
    case vkind::undefined: return {};
    case vkind::list: case vkind::tuple:
        bud.charge_steps(v.items().size());
        return v.items();
    case vkind::dict: {
        std::vector<value> keys;
        for (const auto &kv : v.dict().items) keys.push_back(kv.first);
        bud.charge_steps(keys.size());
        return keys;
    }
    case vkind::string: {
        const str_data &s = v.str();
        std::vector<value> chars;
        for (size_t pos = 0; pos < s.text.size();) {
            const size_t at = pos;
            utf8_next(s.text, pos);
            mstring c(&bud);
            c.add(s, at, pos);
            chars.push_back(value::string(std::move(c)));
        }
        bud.charge_steps(chars.size());
        return chars;
    }
    default: failf(jinja_error_kind::runtime, "'{}' object is not iterable", type_name(v));
    }
}

bool interp::contains(const value &container, const value &item) {
    switch (container.kind()) {
    case vkind::undefined: return false;
    case vkind::string:
        if (!item.is_string())
            failf(jinja_error_kind::runtime, "'in <string>' requires string as left operand, not {}", type_name(item));
        return container.text().find(item.text()) != std::string::npos;
    case vkind::list: case vkind::tuple:
        bud.charge_steps(container.items().size());
        for (const auto &x : container.items())
            if (py_equal(x, item)) return true;
        return false;
    case vkind::dict:
        if (!is_hashable(item)) failf(jinja_error_kind::runtime, "unhashable type: '{}'", type_name(item));
        return container.dict().find(item) != nullptr;
    default: failf(jinja_error_kind::runtime, "argument of type '{}' is not iterable", type_name(container));
    }
}

// ---- operators ----

namespace {

[[noreturn]] void bad_operands(const char *op, const value &a, const value &b) {
    failf(jinja_error_kind::runtime, "unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

value add_strings(const value &a, const value &b, budget &bud) {
    mstring out(&bud);
    const str_data &x = a.str(), &y = b.str();
    // markupsafe: Markup + str escapes the plain side and stays Markup.
    if (x.markup != y.markup) {
        const str_data &plain = x.markup ? y : x;
        str_data escaped;
        escaped.text = html_escape(plain.text);
        if (!plain.marks.empty()) escaped.marks.push_back({0, escaped.text.size()});
        out.add(x.markup ? x : escaped);
        out.add(x.markup ? escaped : y);
        out.markup = true;
    } else {
        out.add(x);
        out.add(y);
        out.markup = x.markup;
    }
    return value::string(std::move(out));
}

value repeat(const value &seq, int64_t times, budget &bud) {
    if (times < 0) times = 0;
    if (seq.is_string()) {
        const str_data &s = seq.str();
        bud.check_size(s.text.size() * static_cast<size_t>(std::min<int64_t>(times, INT32_MAX)));
        mstring out(&bud);
        for (int64_t k = 0; k < times; ++k) out.add(s);
        out.markup = s.markup;
        return value::string(std::move(out));
    }
    const auto &items = seq.items();
    const size_t n = items.size() * static_cast<size_t>(std::min<int64_t>(times, INT32_MAX));
    bud.charge_alloc(n * sizeof(value));
    std::vector<value> out;
    out.reserve(n);
    for (int64_t k = 0; k < times; ++k) out.insert(out.end(), items.begin(), items.end());
    return seq.is_tuple() ? value::tuple(std::move(out)) : value::list(std::move(out));
}

value int_pow(int64_t base, int64_t exp) {
    if (exp < 0) {
        if (base == 0) fail(jinja_error_kind::runtime, "0.0 cannot be raised to a negative power");
        return value::floating(std::pow(static_cast<double>(base), static_cast<double>(exp)));
    }
    int64_t result = 1;
    while (exp > 0) {
        if (exp & 1) result = checked_mul(result, base);
        exp >>= 1;
        if (exp > 0) base = checked_mul(base, base);
    }
    return value::integer(result);
}

value float_pow(double a, double b) {
    if (a == 0 && b < 0) fail(jinja_error_kind::runtime, "0.0 cannot be raised to a negative power");
    if (a < 0 && b != std::floor(b)) fail(jinja_error_kind::runtime, "complex results are not supported");
    const double r = std::pow(a, b);
    if (std::isinf(r) && std::isfinite(a) && std::isfinite(b))
        fail(jinja_error_kind::runtime, "(34, 'Numerical result out of range')");
    return value::floating(r);
}

}  // namespace

value interp::binary(binop op, const value &a, const value &b) {
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    const bool nums = a.is_number() && b.is_number();
    const bool ints = nums && !a.is_float() && !b.is_float();
    switch (op) {
    case binop::add:
        if (ints) return value::integer(checked_add(a.as_int(), b.as_int()));
        if (nums) return value::floating(a.as_float() + b.as_float());
        if (a.is_string() && b.is_string()) return add_strings(a, b, bud);
        if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
            std::vector<value> out = a.items();
            out.insert(out.end(), b.items().begin(), b.items().end());
            bud.charge_alloc(out.size() * sizeof(value));
            return a.is_tuple() ? value::tuple(std::move(out)) : value::list(std::move(out));
        }
        if (a.is_string() || a.is_sequence())
            failf(jinja_error_kind::runtime, "can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
        bad_operands("+", a, b);
    case binop::sub:
        if (ints) return value::integer(checked_sub(a.as_int(), b.as_int()));
        if (nums) return value::floating(a.as_float() - b.as_float());
        bad_operands("-", a, b);
    case binop::mul:
        if (ints) return value::integer(checked_mul(a.as_int(), b.as_int()));
        if (nums) return value::floating(a.as_float() * b.as_float());
        if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), bud);
        if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), bud);
        bad_operands("*", a, b);
    case binop::div:
        if (nums) {
            if (b.as_float() == 0) fail(jinja_error_kind::runtime, "division by zero");
            return value::floating(a.as_float() / b.as_float());
        }
        bad_operands("/", a, b);
    case binop::floordiv:
        if (ints) return value::integer(floor_div(a.as_int(), b.as_int()));
        if (nums) return value::floating(float_floor_div(a.as_float(), b.as_float()));
        bad_operands("//", a, b);
    case binop::mod:
        if (ints) return value::integer(floor_mod(a.as_int(), b.as_int()));
        if (nums) return value::floating(float_mod(a.as_float(), b.as_float()));
        if (a.is_string()) return percent_format(a, b, bud);
        bad_operands("%", a, b);
    case binop::pow:
        if (ints) return int_pow(a.as_int(), b.as_int());
        if (nums) return float_pow(a.as_float(), b.as_float());
        bad_operands("** or pow()", a, b);
    }
    bad_operands("?", a, b);
}

namespace {

bool compare(cmpop op, const value &a, const value &b, interp &in) {
    switch (op) {
    case cmpop::eq: return py_equal(a, b);
    case cmpop::ne: return !py_equal(a, b);
    case cmpop::in: return in.contains(b, a);
    case cmpop::notin: return !in.contains(b, a);
    default: break;
    }
    if (a.is_undefined()) in.fail_undefined(a);
    if (b.is_undefined()) in.fail_undefined(b);
    if (a.is_number() && b.is_number() && (a.is_float() || b.is_float())) {
        const double x = a.as_float(), y = b.as_float();
        if (std::isnan(x) || std::isnan(y)) return false;
    }
    switch (op) {
    case cmpop::lt: return py_less(a, b);
    case cmpop::gt: return py_less(b, a);
    case cmpop::le: return py_less(a, b) || py_equal(a, b);
    case cmpop::ge: return py_less(b, a) || py_equal(a, b);
    default: return false;
    }
}

}  // namespace

value interp::eval_compare(const expr &e, const scope_ptr &sc) {
    value left = eval(*e.args[0], sc);
    for (size_t i = 0; i < e.ops.size(); ++i) {
        value right = eval(*e.args[i + 1], sc);
        if (!compare(e.ops[i], left, right, *this)) return value::boolean(false);
        left = std::move(right);
    }
    return value::boolean(true);
}

// ---- calls ----

call_args interp::eval_args(const expr &e, size_t first, const scope_ptr &sc) {
    call_args a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(e.args[i] ? eval(*e.args[i], sc) : value());
    for (const auto &kw : e.kwargs) a.kw.emplace_back(kw.name, eval(*kw.value, sc));
    if (e.dyn_args) {
        for (auto &v : iterate(eval(*e.dyn_args, sc))) a.pos.push_back(std::move(v));
    }
    if (e.dyn_kwargs) {
        const value d = eval(*e.dyn_kwargs, sc);
        if (!d.is_dict()) fail(jinja_error_kind::runtime, "argument after ** must be a mapping");
        for (const auto &[k, v] : d.dict().items) {
            if (!k.is_string()) fail(jinja_error_kind::runtime, "keywords must be strings");
            a.kw.emplace_back(k.text(), v);
        }
    }
    return a;
}

value interp::eval_call(const expr &e, const scope_ptr &sc) {
    const expr &callee = *e.args[0];
    if (callee.kind == ekind::getattr) {
        const value obj = eval(*callee.args[0], sc);
        return call_attr(obj, callee.name, eval_args(e, 1, sc));
    }
    const value fn = eval(callee, sc);
    return call(fn, eval_args(e, 1, sc));
}

value interp::call_attr(const value &obj, const std::string &name, call_args args) {
    if (obj.is_undefined()) fail_undefined(obj);
    bool unsafe = false;
    if (!obj.is_object() && has_method(obj, name, unsafe)) {
        if (unsafe) fail_undefined(unsafe_attr(obj, name));
        return *call_method(obj, name, args);
    }
    if (obj.is_object()) {
        const okind k = obj.object().kind;
        if (k == okind::loop || k == okind::cycler)
            if (auto r = call_method(obj, name, args)) return *r;
    }
    return call(getattr(obj, name), std::move(args));
}

value interp::call(const value &callee, call_args args) {
    if (callee.is_undefined()) fail_undefined(callee);
    if (!callee.is_object()) failf(jinja_error_kind::runtime, "'{}' object is not callable", type_name(callee));
    object_data &o = callee.object();
    switch (o.kind) {
    case okind::macro: return call_macro(static_cast<macro_obj &>(o), std::move(args));
    case okind::builtin: return call_builtin(static_cast<builtin_obj &>(o).fn, std::move(args));
    case okind::method: {
        auto &m = static_cast<method_obj &>(o);
        if (auto r = call_method(m.self, m.name, args)) return *r;
        break;
    }
    case okind::joiner: {
        auto &j = static_cast<joiner_obj &>(o);
        if (!args.pos.empty() || !args.kw.empty()) fail(jinja_error_kind::runtime, "joiner takes no arguments");
        if (!j.used) {
            j.used = true;
            return value::string("");
        }
        return j.sep;
    }
    default: break;
    }
    failf(jinja_error_kind::runtime, "'{}' object is not callable", type_name(callee));
}

// ---- the evaluator ----

namespace {

// Evaluation recursion through expressions and macro calls together; keeps the C++ stack bounded
// whatever the template nests.
constexpr int max_eval_depth = 1500;

struct eval_depth_guard {
    budget &bud;
    explicit eval_depth_guard(budget &b) : bud(b) {
        if (++bud.eval_depth > max_eval_depth)
            failf(jinja_error_kind::limit, "expressions and macro calls nested deeper than {}", max_eval_depth);
    }
    ~eval_depth_guard() { --bud.eval_depth; }
};

}  // namespace

value interp::eval(const expr &e, const scope_ptr &sc) {
    bud.step();
    try {
        eval_depth_guard guard(bud);
        return eval_inner(e, sc);
    } catch (const jinja_error &err) {
        if (err.line() != 0) throw;
        throw jinja_error(err.jinja_kind(), static_cast<int>(e.line), static_cast<int>(e.col), err.message());
    }
}

value interp::eval_inner(const expr &e, const scope_ptr &sc) {
    switch (e.kind) {
    case ekind::constant: return e.constant;
    case ekind::name: return lookup(e.id, sc);
    case ekind::getattr: return getattr(eval(*e.args[0], sc), e.name);
    case ekind::getitem: {
        const value obj = eval(*e.args[0], sc);
        return getitem(obj, eval(*e.args[1], sc));
    }
    case ekind::slice: {
        const value obj = eval(*e.args[0], sc);
        value parts[3];
        for (int k = 0; k < 3; ++k)
            parts[k] = e.args[static_cast<size_t>(k) + 1] ? eval(*e.args[static_cast<size_t>(k) + 1], sc) : value::none();
        return slice(obj, &parts[0], &parts[1], &parts[2]);
    }
    case ekind::call: return eval_call(e, sc);
    case ekind::filter: {
        const value operand = e.args[0] ? eval(*e.args[0], sc) : value();
        return apply_filter(e, operand, eval_args(e, 1, sc));
    }
    case ekind::test: {
        const value operand = eval(*e.args[0], sc);
        return value::boolean(apply_test(e, operand, eval_args(e, 1, sc)));
    }
    case ekind::block_input: return filter_inputs.back();
    case ekind::not_: return value::boolean(!truthy(eval(*e.args[0], sc)));
    case ekind::neg: case ekind::pos: {
        const value v = eval(*e.args[0], sc);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number())
            failf(jinja_error_kind::runtime, "bad operand type for unary {}: '{}'", e.kind == ekind::neg ? '-' : '+', type_name(v));
        if (e.kind == ekind::pos) return v.is_bool() ? value::integer(v.as_int()) : v;
        if (v.is_float()) return value::floating(-v.as_float());
        return value::integer(checked_sub(0, v.as_int()));
    }
    case ekind::binary: {
        const value a = eval(*e.args[0], sc);
        return binary(e.op, a, eval(*e.args[1], sc));
    }
    case ekind::and_: {
        value a = eval(*e.args[0], sc);
        return truthy(a) ? eval(*e.args[1], sc) : a;
    }
    case ekind::or_: {
        value a = eval(*e.args[0], sc);
        return truthy(a) ? a : eval(*e.args[1], sc);
    }
    case ekind::concat: {
        mstring out(&bud);
        for (const auto &arg : e.args) py_str(eval(*arg, sc), out);
        return value::string(std::move(out));
    }
    case ekind::compare: return eval_compare(e, sc);
    case ekind::cond:
        if (truthy(eval(*e.args[1], sc))) return eval(*e.args[0], sc);
        if (e.args[2]) return eval(*e.args[2], sc);
        return value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was defined.", e.line));
    case ekind::list: case ekind::tuple: {
        std::vector<value> items;
        items.reserve(e.args.size());
        for (const auto &arg : e.args) items.push_back(eval(*arg, sc));
        bud.charge_alloc(items.size() * sizeof(value));
        return e.kind == ekind::list ? value::list(std::move(items)) : value::tuple(std::move(items));
    }
    case ekind::dict: {
        auto d = std::make_shared<dict_data>();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
            value k = eval(*e.args[i], sc);
            if (!is_hashable(k)) failf(jinja_error_kind::runtime, "unhashable type: '{}'", type_name(k));
            d->set(std::move(k), eval(*e.args[i + 1], sc));
        }
        bud.charge_alloc(d->items.size() * 2 * sizeof(value));
        return value::dict(std::move(d));
    }
    }
    fail(jinja_error_kind::runtime, "unknown expression");
}

}  // namespace tandem::jinja
