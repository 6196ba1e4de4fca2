// src/jinja/jinja_ast.h - the parsed template: expression and statement nodes, names interned to
// small integers, filters and tests resolved to table indices at parse time.
#pragma once

#include "jinja_value.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem::jinja {

enum class ekind : uint8_t {
    constant, name, getattr, getitem, slice, call, filter, test, neg, pos, not_, binary, and_, or_,
    concat, compare, cond, list, tuple, dict, block_input,
};
enum class binop : uint8_t { add, sub, mul, div, floordiv, mod, pow };
enum class cmpop : uint8_t { eq, ne, lt, le, gt, ge, in, notin };

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct kwarg {
    std::string name;
    expr_ptr value;
};

// One node shape for every expression; which fields mean what depends on `kind`:
//   name: id;  getattr: args[0] obj, name;  getitem: args[0] obj, args[1] index;
//   slice: args[0] obj, args[1..3] start/stop/step (null when omitted);
//   call: args[0] callee, args[1..] positional;  filter/test: args[0] operand (null for a filter
//   block's input), args[1..] positional, name, fn (table index, -1 unknown);
//   neg/pos/not_: args[0];  binary: args[0] op args[1];  and_/or_: args[0], args[1];
//   concat: args;  compare: args[0] then ops[i] args[i+1];  cond: args[0] then-value, args[1]
//   test, args[2] else-value (null when omitted);  list/tuple: args;  dict: key, value pairs.
struct expr {
    ekind kind = ekind::constant;
    uint32_t line = 0, col = 0;
    value constant;
    std::string name;
    int id = -1;
    int fn = -1;
    binop op = binop::add;
    std::vector<expr_ptr> args;
    std::vector<cmpop> ops;
    std::vector<kwarg> kwargs;
    expr_ptr dyn_args, dyn_kwargs;  // f(*a, **k)
};

// An assignment target: a name, a tuple of targets, or a namespace attribute (ns.attr).
struct target {
    enum class kind_t : uint8_t { name, tuple, ns_attr } kind = kind_t::name;
    int id = -1;
    std::string attr;
    std::vector<target> items;
};

enum class skind : uint8_t {
    data, print, if_, for_, set, set_block, macro, call_block, filter_block, with, break_, continue_, generation,
};

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using body_t = std::vector<stmt_ptr>;

struct macro_param {
    int id = -1;
    std::string name;
    expr_ptr default_value;  // null: none
};

struct stmt {
    skind kind = skind::data;
    uint32_t line = 0, col = 0;
    std::string text;                                    // data
    expr_ptr value;                                      // print, for iterable, set, call_block call, filters
    expr_ptr cond;                                       // for's `if` filter
    std::vector<std::pair<expr_ptr, body_t>> branches;   // if / elif
    body_t body, else_body;
    target tgt;                                          // for, set, set_block
    std::vector<std::pair<target, expr_ptr>> assigns;    // with
    std::string name;                                    // macro
    int id = -1;                                         // macro
    std::vector<macro_param> params;                     // macro, call_block's caller
    bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

// Names used by the template, interned: ids index the renderer's variable slots.
struct symbol_table {
    std::vector<std::string> names;
    std::unordered_map<std::string, int> ids;
    int intern(const std::string &name);
    int find(std::string_view name) const;
};

struct program {
    body_t body;
    symbol_table symbols;
    int id_loop = -1, id_caller = -1, id_varargs = -1, id_kwargs = -1;
};

// Throws jinja_error(syntax) naming line and column.
std::unique_ptr<program> parse_program(std::string_view source);

// Filter and test tables (jinja_filters.cpp, jinja_is_tests.cpp): index by name, -1 when unknown.
int filter_index(std::string_view name);
int test_index(std::string_view name);

}  // namespace tandem::jinja
