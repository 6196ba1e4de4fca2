// src/jinja/jinja_eval.h - the renderer: scopes with jinja2's rules (a loop iteration, macro call
// or `with` opens one; `if` does not), expression evaluation with the immutable sandbox's
// attribute and item lookup, statements, macros, loops, and the objects templates can hold.
#pragma once

#include "jinja_ast.h"
#include "jinja_value.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::jinja {

struct scope;
using scope_ptr = std::shared_ptr<scope>;

// A variable scope; the root scope's variables live in the renderer's slots instead.
struct scope {
    scope_ptr parent;
    std::vector<std::pair<int, value>> vars;
    bool is_root = false;
};

struct call_args {
    std::vector<value> pos;
    std::vector<std::pair<std::string, value>> kw;
};

// Python-style binding of a builtin's arguments: positional then keyword, no duplicates, no
// unknown keywords; a slot left unset has no value.
struct bound_args {
    std::vector<std::optional<value>> slots;
    const value *get(size_t i) const { return slots[i] ? &*slots[i] : nullptr; }
};
bound_args bind_args(const call_args &args, std::string_view fn_name, std::initializer_list<const char *> params,
                     size_t n_required = 0);

class interp;

struct macro_obj : object_data {
    macro_obj() : object_data(okind::macro) {}
    std::string repr() const override { return "<Macro '" + def->name + "'>"; }
    const stmt *def = nullptr;  // a macro statement, or a call block (its caller)
    scope_ptr closure;
};

enum class builtin_fn : uint8_t { range, dict, namespace_, raise_exception, strftime_now, joiner, cycler };
struct builtin_obj : object_data {
    explicit builtin_obj(builtin_fn f) : object_data(okind::builtin), fn(f) {}
    std::string repr() const override;
    builtin_fn fn;
};

struct method_obj : object_data {
    method_obj(value s, std::string n) : object_data(okind::method), self(std::move(s)), name(std::move(n)) {}
    std::string repr() const override { return "<built-in method " + name + " of " + type_name(self) + " object>"; }
    value self;
    std::string name;
};

struct joiner_obj : object_data {
    joiner_obj() : object_data(okind::joiner) {}
    std::string repr() const override { return "<jinja2.utils.Joiner object>"; }
    value sep;
    bool used = false;
};

struct cycler_obj : object_data {
    cycler_obj() : object_data(okind::cycler) {}
    std::string repr() const override { return "<jinja2.utils.Cycler object>"; }
    std::vector<value> items;
    size_t pos = 0;
};

// A for loop's state, lazily filtered as jinja2's LoopContext consumes its iterator: loop.last
// and loop.nextitem look one accepted item ahead, loop.length consumes the rest.
struct loop_obj : object_data {
    loop_obj() : object_data(okind::loop) {}
    std::string repr() const override;
    interp *in = nullptr;
    const stmt *def = nullptr;
    scope_ptr outer;
    std::vector<value> source;
    size_t source_pos = 0;
    std::deque<value> ahead;  // accepted by the filter, not yet iterated
    int64_t index0 = -1;
    value current, before;
    std::optional<value> last_changed;

    bool pull(value &out);  // the next accepted item
    bool peek();            // ensures one item ahead, if any
    int64_t length();
};

enum class flow : uint8_t { normal, break_, continue_ };

// Weak references to every scope, namespace and macro a render creates: values can refer back
// to what holds them (a macro in the scope it closes over, ns.self = ns), so the render's end
// clears them all to free the cycles.
template <class T>
struct weak_registry {
    std::vector<std::weak_ptr<T>> items;
    size_t prune_at = 256;
    void add(const std::shared_ptr<T> &p) {
        if (items.size() >= prune_at) {
            std::erase_if(items, [](const std::weak_ptr<T> &w) { return w.expired(); });
            prune_at = std::max<size_t>(256, items.size() * 2);
        }
        items.push_back(p);
    }
};

class interp {
public:
    interp(const program &p, const jinja_render_options &opts);
    ~interp();
    interp(const interp &) = delete;
    interp &operator=(const interp &) = delete;

    scope_ptr new_scope(const scope_ptr &parent);
    weak_registry<scope> scopes;
    weak_registry<ns_data> namespaces;
    weak_registry<macro_obj> macros;

    jinja_output run(const std::vector<std::pair<std::string, value>> &vars);

    budget bud;
    const program &prog;
    const jinja_render_options &opts;

    // ---- expressions (jinja_eval.cpp) ----
    value eval(const expr &e, const scope_ptr &sc);
    value lookup(int id, const scope_ptr &sc) const;
    void assign(const target &t, const value &v, const scope_ptr &sc);
    value getattr(const value &obj, std::string_view name);
    value getitem(const value &obj, const value &key);
    value call(const value &callee, call_args args);
    value call_attr(const value &obj, const std::string &name, call_args args);
    std::vector<value> iterate(const value &v);
    bool contains(const value &container, const value &item);
    value binary(binop op, const value &a, const value &b);
    [[noreturn]] void fail_undefined(const value &v) const;

    // ---- statements (jinja_exec.cpp) ----
    flow exec(const body_t &body, const scope_ptr &sc, mstring &out);
    value call_macro(const macro_obj &m, call_args args);
    value render_body(const body_t &body, const scope_ptr &sc);
    value loop_attr(const value &loop, std::string_view name);
    bool loop_accepts(loop_obj &loop, const value &item);

    // ---- builtins (jinja_methods.cpp) ----
    value call_builtin(builtin_fn fn, call_args args);
    // Runs a str/list/dict/tuple method or a joiner/cycler/loop call; nullopt when `name` is not one.
    std::optional<value> call_method(const value &self, std::string_view name, call_args &args);
    // Whether `name` is a Python attribute of `self`'s type, and whether the immutable sandbox
    // refuses it (methods that modify a list or dict).
    bool has_method(const value &self, std::string_view name, bool &unsafe) const;

    // ---- filters and tests (jinja_filters.cpp, jinja_is_tests.cpp) ----
    value apply_filter(const expr &e, const value &operand, call_args args);
    bool apply_test(const expr &e, const value &operand, call_args args);

    std::vector<value> filter_inputs;  // the text of enclosing {% filter %} / {% set %} blocks
    std::vector<value> root_vals;
    std::vector<uint8_t> root_set;
    std::vector<value> builtins;  // by symbol id; undefined where none
    scope_ptr root;

private:
    value eval_inner(const expr &e, const scope_ptr &sc);
    value eval_call(const expr &e, const scope_ptr &sc);
    call_args eval_args(const expr &e, size_t first, const scope_ptr &sc);
    value eval_compare(const expr &e, const scope_ptr &sc);
    value slice(const value &obj, const value *start, const value *stop, const value *step);
    flow exec_for(const stmt &s, const scope_ptr &sc, mstring &out);
    void exec_stmt_set(const stmt &s, const scope_ptr &sc);
};

// JSON in and out (jinja_json.cpp).
value from_json(const nlohmann::ordered_json &j, bool marked, int depth = 0);
struct json_style {
    bool ensure_ascii = false;
    bool has_indent = false;
    std::string indent;
    std::string item_sep = ", ", key_sep = ": ";
    bool sort_keys = false;
};
void to_json(const value &v, const json_style &style, mstring &out, int depth = 0);

// Python string formatting (jinja_format.cpp): `fmt % args`, str.format, and strftime.
value percent_format(const value &fmt, const value &args, budget &bud);
value str_format(const value &fmt, const call_args &args, budget &bud);
std::string strftime_py(const std::string &format, int64_t unix_seconds, budget &bud);
// HTML escaping as markupsafe.escape does it (& < > " ').
std::string html_escape(std::string_view s);

}  // namespace tandem::jinja
