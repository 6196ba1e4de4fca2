// src/jinja/jinja_value.h - the values templates compute with, with Python's semantics: truth,
// equality, ordering, str() and repr(); strings carry the byte ranges that came from marked data;
// the budget every allocation and iteration is charged to.
#pragma once

#include "tandem/jinja.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::jinja {

// Fails without a place in the source; the evaluator adds the line and column of the node.
[[noreturn]] void fail(jinja_error_kind kind, const std::string &message);
template <class... Args>
[[noreturn]] void failf(jinja_error_kind kind, fmt::format_string<Args...> format, Args &&...args) {
    fail(kind, fmt::format(format, std::forward<Args>(args)...));
}

// One render's counters against its limits.
struct budget {
    const jinja_limits &limits;
    uint64_t steps = 0;
    size_t alloc = 0;
    int call_depth = 0;
    int eval_depth = 0;

    explicit budget(const jinja_limits &l) : limits(l) {}
    void step() {
        if (++steps > limits.max_steps) fail_steps();
    }
    void charge_steps(uint64_t n) {
        steps += n;
        if (steps > limits.max_steps) fail_steps();
    }
    void charge_alloc(size_t bytes) {
        alloc += bytes;
        if (alloc > limits.max_alloc_bytes) fail_alloc();
    }
    // A single string of `bytes` is about to be made.
    void check_size(size_t bytes) const {
        if (bytes > limits.max_output_bytes) fail_size(bytes);
    }
    [[noreturn]] void fail_steps() const;
    [[noreturn]] void fail_alloc() const;
    [[noreturn]] void fail_size(size_t bytes) const;
};

// A string: UTF-8 text, the byte ranges that came from marked data, and jinja2's Markup flag
// (set by |safe and |escape: `+` then escapes the other operand, as markupsafe does).
struct str_data {
    std::string text;
    std::vector<jinja_range> marks;  // sorted, disjoint, non-empty ranges
    bool markup = false;
};

// Builds a string or the output: appends text with or without marks, charging the budget.
struct mstring {
    std::string text;
    std::vector<jinja_range> marks;
    bool markup = false;
    budget *bud = nullptr;
    bool is_output = false;  // the limit names the output rather than a string

    explicit mstring(budget *b = nullptr, bool output = false) : bud(b), is_output(output) {}
    void add(std::string_view s);
    void add(char c) { add(std::string_view(&c, 1)); }
    void add(std::string_view s, bool marked);
    void add(const str_data &s);
    void add(const str_data &s, size_t begin, size_t end);  // bytes [begin, end) of s
    void mark(size_t begin, size_t end);                   // bytes of this builder
    bool any_marked() const { return !marks.empty(); }

private:
    void reserve_more(size_t n);
};

// Marks of bytes [begin, end) of a string, shifted to start at 0.
std::vector<jinja_range> marks_slice(const std::vector<jinja_range> &marks, size_t begin, size_t end);

enum class vkind : uint8_t { undefined, none, boolean, integer, floating, string, list, tuple, dict, object };

class value;

// Containers release their contents through one queue per thread, so dropping a value nested
// thousands deep (a template can build one in a loop) never recurses through the stack.
void release_values(std::vector<value> &items);

struct list_data {
    std::vector<value> items;
    ~list_data();
};
struct dict_data;
struct object_data;

// Why a value is undefined; printing it gives "", using it fails with this message.
struct undefined_data {
    std::string message;
    bool security = false;  // jinja2's unsafe_undefined: calling it raises SecurityError
};

class value {
public:
    value() : kind_(vkind::undefined), i_(0) {}
    static value undefined(std::string message, bool security = false);
    static value none() { return value(vkind::none); }
    static value boolean(bool b) {
        value v(vkind::boolean);
        v.b_ = b;
        return v;
    }
    static value integer(int64_t i) {
        value v(vkind::integer);
        v.i_ = i;
        return v;
    }
    static value floating(double f) {
        value v(vkind::floating);
        v.f_ = f;
        return v;
    }
    static value string(std::string text);  // unmarked
    static value string(str_data s);
    static value string(mstring &&s);
    static value list(std::vector<value> items);
    static value tuple(std::vector<value> items);
    static value dict(std::shared_ptr<dict_data> d);
    static value object(std::shared_ptr<object_data> o);

    vkind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == vkind::undefined; }
    bool is_none() const { return kind_ == vkind::none; }
    bool is_bool() const { return kind_ == vkind::boolean; }
    bool is_int() const { return kind_ == vkind::integer; }
    bool is_float() const { return kind_ == vkind::floating; }
    bool is_number() const { return kind_ == vkind::integer || kind_ == vkind::floating || kind_ == vkind::boolean; }
    bool is_string() const { return kind_ == vkind::string; }
    bool is_list() const { return kind_ == vkind::list; }
    bool is_tuple() const { return kind_ == vkind::tuple; }
    bool is_sequence() const { return kind_ == vkind::list || kind_ == vkind::tuple; }
    bool is_dict() const { return kind_ == vkind::dict; }
    bool is_object() const { return kind_ == vkind::object; }

    bool as_bool() const { return b_; }
    int64_t as_int() const { return kind_ == vkind::boolean ? (b_ ? 1 : 0) : i_; }  // integer or bool
    double as_float() const;                                                      // any number
    const str_data &str() const { return *static_cast<const str_data *>(p_.get()); }
    const std::string &text() const { return str().text; }
    std::vector<value> &items() const { return static_cast<list_data *>(p_.get())->items; }  // list, tuple
    dict_data &dict() const { return *static_cast<dict_data *>(p_.get()); }
    object_data &object() const { return *static_cast<object_data *>(p_.get()); }
    const undefined_data *undef() const { return static_cast<const undefined_data *>(p_.get()); }
    const void *identity() const { return p_.get(); }

private:
    explicit value(vkind k) : kind_(k), i_(0) {}
    vkind kind_;
    union {
        bool b_;
        int64_t i_;
        double f_;
    };
    std::shared_ptr<void> p_;
};

// An insertion-ordered dict; keys compare as Python does (1 == 1.0 == True).
struct dict_data {
    dict_data() = default;
    dict_data(const dict_data &) = default;
    ~dict_data();
    std::vector<std::pair<value, value>> items;
    const value *find(const value &key) const;
    const value *find(std::string_view key) const;
    void set(value key, value v);
};

// Namespaces, macros, loops and builtins; the evaluator knows each kind.
enum class okind : uint8_t { ns, macro, builtin, method, loop, joiner, cycler };
struct object_data {
    explicit object_data(okind k) : kind(k) {}
    virtual ~object_data() = default;
    virtual std::string repr() const = 0;  // as Python prints it, e.g. <Macro 'name'>
    const okind kind;
};

struct ns_data : object_data {
    ns_data() : object_data(okind::ns) {}
    ~ns_data() override;
    std::vector<std::pair<std::string, value>> attrs;
    value *find(std::string_view name);
    std::string repr() const override;
};

// Python's type(x).__name__, for messages.
std::string type_name(const value &v);
// "'dict object'", as jinja2's object_type_repr names what an undefined value came from.
std::string object_type_repr(const value &v);

bool truthy(const value &v);
bool py_equal(const value &a, const value &b, int depth = 0);
// a < b as Python orders them; fails with a runtime error for unorderable types.
bool py_less(const value &a, const value &b, int depth = 0);
bool is_hashable(const value &v);

// str(x) and repr(x) into a builder; marked strings keep their marks (repr marks the quoted form).
void py_str(const value &v, mstring &out, int depth = 0);
void py_repr(const value &v, mstring &out, int depth = 0);
value to_string_value(const value &v, budget &bud);  // str(x) as a value (strings unchanged)
std::string float_repr(double f);                     // Python's repr(float): 1.0, 0.1, 1e-05, inf

// Python-exact integer and float arithmetic; overflow beyond 64-bit integers is a runtime error.
int64_t checked_add(int64_t a, int64_t b);
int64_t checked_sub(int64_t a, int64_t b);
int64_t checked_mul(int64_t a, int64_t b);
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);
double float_floor_div(double a, double b);
double float_mod(double a, double b);

constexpr int max_nesting = 512;  // a hard ceiling on recursion through values, whatever the limits

}  // namespace tandem::jinja
