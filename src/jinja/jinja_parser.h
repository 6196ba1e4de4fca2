// src/jinja/jinja_parser.h - the parser: jinja2's grammar (precedence, tuples, call arguments,
// tests with a bare argument) and statements with the loopcontrols extension. Statements are in
// jinja_parser.cpp, expressions in jinja_parser_expr.cpp.
#pragma once

#include "jinja_ast.h"
#include "jinja_lexer.h"

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace tandem::jinja {

// Deeper nesting than this is refused before it can exhaust the stack.
constexpr int max_parse_depth = 200;

class parser {
public:
    explicit parser(std::vector<token> tokens) : toks_(std::move(tokens)) {
        prog_ = std::make_unique<program>();
        auto &s = prog_->symbols;
        prog_->id_loop = s.intern("loop");
        prog_->id_caller = s.intern("caller");
        prog_->id_varargs = s.intern("varargs");
        prog_->id_kwargs = s.intern("kwargs");
    }

    std::unique_ptr<program> run() {
        prog_->body = subparse({});
        if (cur().kind != tok::eof) fail_here("unexpected " + describe(cur()));
        return std::move(prog_);
    }

private:
    // ---- token stream ----
    const token &cur() const { return toks_[pos_]; }
    const token &look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
    const token &next() {
        const token &t = toks_[pos_];
        if (pos_ + 1 < toks_.size()) ++pos_;
        return t;
    }
    bool skip_op(std::string_view o) {
        if (!cur().is_op(o)) return false;
        next();
        return true;
    }
    bool skip_name(std::string_view n) {
        if (!cur().is_name(n)) return false;
        next();
        return true;
    }
    [[noreturn]] void fail_at(const token &t, const std::string &message) const {
        throw jinja_error(jinja_error_kind::syntax, static_cast<int>(t.line), static_cast<int>(t.col), message);
    }
    [[noreturn]] void fail_here(const std::string &message) const { fail_at(cur(), message); }
    const token &expect_op(std::string_view o) {
        if (!cur().is_op(o)) fail_here(fmt::format("expected token '{}', got {}", o, describe(cur())));
        return next();
    }
    const token &expect_kind(tok k, const char *what) {
        if (cur().kind != k) fail_here(fmt::format("expected token '{}', got {}", what, describe(cur())));
        return next();
    }
    const token &expect_name() {
        if (cur().kind != tok::name) fail_here("expected token 'name', got " + describe(cur()));
        return next();
    }

    struct depth_guard {
        parser &p;
        explicit depth_guard(parser &pp) : p(pp) {
            if (++p.depth_ > max_parse_depth) p.fail_here("the template is nested too deeply");
        }
        ~depth_guard() { --p.depth_; }
    };

    expr_ptr node(ekind kind, const token &at) {
        auto e = std::make_unique<expr>();
        e->kind = kind;
        e->line = at.line;
        e->col = at.col;
        return e;
    }

    // ---- statements (jinja_parser.cpp) ----
    body_t subparse(std::initializer_list<std::string_view> end_tokens);
    stmt_ptr statement(skind kind, const token &at);
    body_t parse_statements(std::initializer_list<std::string_view> end_tokens, bool drop_needle);
    stmt_ptr parse_statement(std::initializer_list<std::string_view> end_tokens);
    stmt_ptr parse_if();
    stmt_ptr parse_for();
    stmt_ptr parse_set();
    void parse_signature(stmt &s);
    // A macro or call block body: loop controls do not reach through it and `caller`, `varargs`
    // and `kwargs` references are recorded for it (and for every enclosing macro, as jinja2 does).
    body_t parse_callable_body(stmt &s, std::string_view end);
    stmt_ptr parse_macro();
    stmt_ptr parse_call_block();
    stmt_ptr parse_filter_block();
    stmt_ptr parse_with();
    // transformers renders {% generation %} as a call block: its body is a scope of its own that
    // loop controls do not reach through.
    stmt_ptr parse_generation();
    target parse_assign_target(bool with_tuple, bool with_namespace, std::initializer_list<std::string_view> extra_end);
    target to_target(const expr &e, const token &at);

    // ---- expressions (jinja_parser_expr.cpp) ----
    bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const;
    expr_ptr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end, bool explicit_parens = false);
    expr_ptr parse_tuple_simplified(std::initializer_list<std::string_view> extra_end);
    expr_ptr parse_expression(bool with_condexpr);
    expr_ptr parse_condexpr();
    expr_ptr binary_node(ekind kind, const token &at, expr_ptr l, expr_ptr r);
    expr_ptr parse_or();
    expr_ptr parse_and();
    expr_ptr parse_not();
    expr_ptr parse_compare();
    expr_ptr binop_node(const token &at, binop op, expr_ptr l, expr_ptr r);
    expr_ptr parse_math1();
    expr_ptr parse_concat();
    expr_ptr parse_math2();
    expr_ptr parse_pow();
    expr_ptr parse_unary(bool with_filter);
    expr_ptr parse_primary();
    expr_ptr parse_list();
    expr_ptr parse_dict();
    expr_ptr parse_postfix(expr_ptr e);
    expr_ptr parse_filter_expr(expr_ptr e);
    expr_ptr parse_subscript(expr_ptr obj);
    // `[a]`, or a slice `[a:b:c]` with any part omitted (returned as a slice node without its object).
    expr_ptr parse_subscribed();
    void parse_call_args(expr &e);
    expr_ptr parse_call(expr_ptr callee);
    expr_ptr parse_filter(expr_ptr operand, bool start_inline);
    expr_ptr parse_test(expr_ptr operand);

    std::vector<token> toks_;
    size_t pos_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
    bool soft_ = false;  // inside an if or a conditional expression: unknown filters fail at run time
    std::vector<stmt *> macros_;
    std::unique_ptr<program> prog_;
};

}  // namespace tandem::jinja
