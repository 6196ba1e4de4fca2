// src/jinja/jinja_parser.cpp - tokens to the AST, following jinja2's parser (precedence, tuples,
// call arguments, tests with a bare argument) and its statement set with the loopcontrols
// extension; file-system statements are refused.
#include "jinja_ast.h"
#include "jinja_lexer.h"

#include <algorithm>
#include <initializer_list>

namespace tandem::jinja {

int symbol_table::intern(const std::string &name) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    const int id = static_cast<int>(names.size());
    names.push_back(name);
    ids.emplace(name, id);
    return id;
}

int symbol_table::find(std::string_view name) const {
    auto it = ids.find(std::string(name));
    return it == ids.end() ? -1 : it->second;
}

namespace {

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

    // ---- statements ----
    body_t subparse(std::initializer_list<std::string_view> end_tokens) {
        body_t body;
        while (true) {
            const token &t = cur();
            if (t.kind == tok::eof) return body;
            if (t.kind == tok::data) {
                auto s = statement(skind::data, t);
                s->text = t.text;
                body.push_back(std::move(s));
                next();
            } else if (t.kind == tok::var_begin) {
                auto s = statement(skind::print, t);
                next();
                s->value = parse_tuple(true, {});
                expect_kind(tok::var_end, "end of print statement");
                body.push_back(std::move(s));
            } else if (t.kind == tok::block_begin) {
                next();
                for (auto e : end_tokens)
                    if (cur().is_name(e)) return body;
                body.push_back(parse_statement(end_tokens));
                expect_kind(tok::block_end, "end of statement block");
            } else {
                fail_here("unexpected " + describe(t));
            }
        }
    }

    stmt_ptr statement(skind kind, const token &at) {
        auto s = std::make_unique<stmt>();
        s->kind = kind;
        s->line = at.line;
        s->col = at.col;
        return s;
    }

    body_t parse_statements(std::initializer_list<std::string_view> end_tokens, bool drop_needle) {
        skip_op(":");
        expect_kind(tok::block_end, "end of statement block");
        body_t body = subparse(end_tokens);
        if (cur().kind == tok::eof) {
            std::string expected;
            for (auto e : end_tokens) expected += (expected.empty() ? "'" : " or '") + std::string(e) + "'";
            fail_here("unexpected end of template; jinja was looking for " + expected);
        }
        if (drop_needle) next();
        return body;
    }

    stmt_ptr parse_statement(std::initializer_list<std::string_view> end_tokens) {
        const token &t = cur();
        if (t.kind != tok::name) fail_here("tag name expected");
        depth_guard guard(*this);
        const std::string &n = t.text;
        if (n == "if") return parse_if();
        if (n == "for") return parse_for();
        if (n == "set") return parse_set();
        if (n == "macro") return parse_macro();
        if (n == "call") return parse_call_block();
        if (n == "filter") return parse_filter_block();
        if (n == "with") return parse_with();
        if (n == "generation") return parse_simple_block(skind::generation, "endgeneration");
        if (n == "break" || n == "continue") {
            if (loop_depth_ == 0) fail_here("'" + n + "' outside of a loop");
            auto s = statement(n == "break" ? skind::break_ : skind::continue_, t);
            next();
            return s;
        }
        for (const char *refused : {"include", "import", "from", "extends", "block"})
            if (n == refused)
                fail_here(fmt::format("'{}' is not supported: chat templates render without loading other templates", n));
        std::string message = "Encountered unknown tag '" + n + "'.";
        if (end_tokens.size()) {
            std::string expected;
            for (auto e : end_tokens) expected += (expected.empty() ? "'" : " or '") + std::string(e) + "'";
            message += " Jinja was looking for the following tags: " + expected + ".";
        }
        fail_here(message);
    }

    stmt_ptr parse_if() {
        auto s = statement(skind::if_, next());
        const bool was_soft = soft_;
        soft_ = true;
        while (true) {
            expr_ptr test = parse_tuple(false, {});
            body_t body = parse_statements({"elif", "else", "endif"}, false);
            s->branches.emplace_back(std::move(test), std::move(body));
            const token &end = next();
            if (end.is_name("elif")) continue;
            if (end.is_name("else")) s->else_body = parse_statements({"endif"}, true);
            break;
        }
        soft_ = was_soft;
        return s;
    }

    stmt_ptr parse_for() {
        auto s = statement(skind::for_, next());
        s->tgt = parse_assign_target(true, false, {"in"});
        if (!skip_name("in")) fail_here("expected token 'in', got " + describe(cur()));
        s->value = parse_tuple(false, {"recursive"});
        const bool was_soft = soft_;
        soft_ = false;
        if (skip_name("if")) s->cond = parse_expression(true);
        if (cur().is_name("recursive")) fail_here("recursive loops are not supported");
        ++loop_depth_;
        s->body = parse_statements({"endfor", "else"}, false);
        --loop_depth_;
        if (next().is_name("else")) s->else_body = parse_statements({"endfor"}, true);
        soft_ = was_soft;
        return s;
    }

    stmt_ptr parse_set() {
        const token &at = next();
        target tgt = parse_assign_target(true, true, {});
        if (skip_op("=")) {
            auto s = statement(skind::set, at);
            s->tgt = std::move(tgt);
            s->value = parse_tuple(true, {});
            return s;
        }
        auto s = statement(skind::set_block, at);
        s->tgt = std::move(tgt);
        if (cur().is_op("|")) s->value = parse_filter(nullptr, false);
        s->body = parse_statements({"endset"}, true);
        return s;
    }

    void parse_signature(stmt &s) {
        expect_op("(");
        bool defaults = false;
        while (!cur().is_op(")")) {
            if (!s.params.empty()) expect_op(",");
            const token &name = expect_name();
            macro_param p;
            p.name = name.text;
            p.id = prog_->symbols.intern(name.text);
            if (skip_op("=")) {
                p.default_value = parse_expression(true);
                defaults = true;
            } else if (defaults) {
                fail_at(name, "non-default argument follows default argument");
            }
            s.params.push_back(std::move(p));
        }
        expect_op(")");
    }

    // A macro or call block body: loop controls do not reach through it and `caller`, `varargs`
    // and `kwargs` references are recorded for it (and for every enclosing macro, as jinja2 does).
    body_t parse_callable_body(stmt &s, std::string_view end) {
        const int saved_loops = loop_depth_;
        const bool was_soft = soft_;
        loop_depth_ = 0;
        soft_ = false;
        macros_.push_back(&s);
        body_t body = parse_statements({end}, true);
        macros_.pop_back();
        loop_depth_ = saved_loops;
        soft_ = was_soft;
        return body;
    }

    stmt_ptr parse_macro() {
        auto s = statement(skind::macro, next());
        const token &name = expect_name();
        s->name = name.text;
        s->id = prog_->symbols.intern(name.text);
        parse_signature(*s);
        s->body = parse_callable_body(*s, "endmacro");
        return s;
    }

    stmt_ptr parse_call_block() {
        auto s = statement(skind::call_block, next());
        if (cur().is_op("(")) parse_signature(*s);
        s->name = "caller";
        s->value = parse_expression(true);
        if (s->value->kind != ekind::call) fail_at(toks_[pos_ - 1], "expected call");
        s->body = parse_callable_body(*s, "endcall");
        return s;
    }

    stmt_ptr parse_filter_block() {
        auto s = statement(skind::filter_block, next());
        s->value = parse_filter(nullptr, true);
        s->body = parse_statements({"endfilter"}, true);
        return s;
    }

    stmt_ptr parse_with() {
        auto s = statement(skind::with, next());
        while (cur().kind != tok::block_end) {
            if (!s->assigns.empty()) expect_op(",");
            target t = parse_assign_target(true, false, {});
            expect_op("=");
            s->assigns.emplace_back(std::move(t), parse_expression(true));
        }
        const bool was_soft = soft_;
        soft_ = false;
        s->body = parse_statements({"endwith"}, true);
        soft_ = was_soft;
        return s;
    }

    stmt_ptr parse_simple_block(skind kind, std::string_view end) {
        auto s = statement(kind, next());
        s->body = parse_statements({end}, true);
        return s;
    }

    target parse_assign_target(bool with_tuple, bool with_namespace, std::initializer_list<std::string_view> extra_end) {
        const token &t = cur();
        if (with_namespace && t.kind == tok::name && look().is_op(".")) {
            next();
            next();
            target tgt;
            tgt.kind = target::kind_t::ns_attr;
            tgt.id = prog_->symbols.intern(t.text);
            tgt.attr = expect_name().text;
            return tgt;
        }
        expr_ptr e = with_tuple ? parse_tuple_simplified(extra_end) : parse_primary();
        return to_target(*e, t);
    }

    target to_target(const expr &e, const token &at) {
        target tgt;
        if (e.kind == ekind::name) {
            if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" || e.name == "False" || e.name == "None")
                fail_at(at, "can't assign to '" + e.name + "'");
            tgt.id = e.id;
            return tgt;
        }
        if (e.kind == ekind::tuple) {
            tgt.kind = target::kind_t::tuple;
            for (const auto &item : e.args) tgt.items.push_back(to_target(*item, at));
            return tgt;
        }
        fail_at(at, "can't assign to this expression");
    }

    // ---- expressions ----
    bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
        const token &t = cur();
        if (t.kind == tok::var_end || t.kind == tok::block_end || t.kind == tok::eof || t.is_op(")")) return true;
        for (auto e : extra_end)
            if (t.is_name(e)) return true;
        return false;
    }

    expr_ptr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                         bool explicit_parens = false) {
        const token &at = cur();
        std::vector<expr_ptr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(parse_expression(with_condexpr));
            if (cur().is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) fail_here("Expected an expression, got " + describe(cur()));
        }
        auto e = node(ekind::tuple, at);
        e->args = std::move(items);
        return e;
    }

    expr_ptr parse_tuple_simplified(std::initializer_list<std::string_view> extra_end) {
        const token &at = cur();
        std::vector<expr_ptr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(parse_primary());
            if (cur().is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple && !items.empty()) return std::move(items[0]);
        if (!is_tuple) fail_here("Expected an expression, got " + describe(cur()));
        auto e = node(ekind::tuple, at);
        e->args = std::move(items);
        return e;
    }

    expr_ptr parse_expression(bool with_condexpr) {
        depth_guard guard(*this);
        return with_condexpr ? parse_condexpr() : parse_or();
    }

    expr_ptr parse_condexpr() {
        const token &at = cur();
        expr_ptr e = parse_or();
        while (skip_name("if")) {
            const bool was_soft = soft_;
            soft_ = true;
            auto c = node(ekind::cond, at);
            c->args.push_back(std::move(e));
            c->args.push_back(parse_or());
            c->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
            soft_ = was_soft;
            e = std::move(c);
        }
        return e;
    }

    expr_ptr binary_node(ekind kind, const token &at, expr_ptr l, expr_ptr r) {
        auto e = node(kind, at);
        e->args.push_back(std::move(l));
        e->args.push_back(std::move(r));
        return e;
    }

    expr_ptr parse_or() {
        expr_ptr e = parse_and();
        while (cur().is_name("or")) {
            const token &at = next();
            e = binary_node(ekind::or_, at, std::move(e), parse_and());
        }
        return e;
    }

    expr_ptr parse_and() {
        expr_ptr e = parse_not();
        while (cur().is_name("and")) {
            const token &at = next();
            e = binary_node(ekind::and_, at, std::move(e), parse_not());
        }
        return e;
    }

    expr_ptr parse_not() {
        if (cur().is_name("not")) {
            depth_guard guard(*this);
            auto e = node(ekind::not_, next());
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    expr_ptr parse_compare() {
        const token &at = cur();
        expr_ptr first = parse_math1();
        std::vector<cmpop> ops;
        std::vector<expr_ptr> rhs;
        static const std::pair<const char *, cmpop> table[] = {
            {"==", cmpop::eq}, {"!=", cmpop::ne}, {"<", cmpop::lt}, {"<=", cmpop::le}, {">", cmpop::gt}, {">=", cmpop::ge}};
        while (true) {
            bool matched = false;
            for (const auto &[o, op] : table)
                if (cur().is_op(o)) {
                    next();
                    ops.push_back(op);
                    matched = true;
                    break;
                }
            if (!matched) {
                if (skip_name("in")) {
                    ops.push_back(cmpop::in);
                } else if (cur().is_name("not") && look().is_name("in")) {
                    next();
                    next();
                    ops.push_back(cmpop::notin);
                } else {
                    break;
                }
            }
            rhs.push_back(parse_math1());
        }
        if (ops.empty()) return first;
        auto e = node(ekind::compare, at);
        e->args.push_back(std::move(first));
        for (auto &r : rhs) e->args.push_back(std::move(r));
        e->ops = std::move(ops);
        return e;
    }

    expr_ptr binop_node(const token &at, binop op, expr_ptr l, expr_ptr r) {
        auto e = binary_node(ekind::binary, at, std::move(l), std::move(r));
        e->op = op;
        return e;
    }

    expr_ptr parse_math1() {
        expr_ptr e = parse_concat();
        while (cur().is_op("+") || cur().is_op("-")) {
            const token &at = next();
            e = binop_node(at, at.text == "+" ? binop::add : binop::sub, std::move(e), parse_concat());
        }
        return e;
    }

    expr_ptr parse_concat() {
        const token &at = cur();
        expr_ptr first = parse_math2();
        if (!cur().is_op("~")) return first;
        auto e = node(ekind::concat, at);
        e->args.push_back(std::move(first));
        while (skip_op("~")) e->args.push_back(parse_math2());
        return e;
    }

    expr_ptr parse_math2() {
        expr_ptr e = parse_pow();
        while (true) {
            const token &t = cur();
            binop op;
            if (t.is_op("*")) op = binop::mul;
            else if (t.is_op("/")) op = binop::div;
            else if (t.is_op("//")) op = binop::floordiv;
            else if (t.is_op("%")) op = binop::mod;
            else break;
            const token &at = next();
            e = binop_node(at, op, std::move(e), parse_pow());
        }
        return e;
    }

    expr_ptr parse_pow() {
        expr_ptr e = parse_unary(true);
        while (cur().is_op("**")) {
            const token &at = next();
            e = binop_node(at, binop::pow, std::move(e), parse_unary(true));
        }
        return e;
    }

    expr_ptr parse_unary(bool with_filter) {
        depth_guard guard(*this);
        expr_ptr e;
        if (cur().is_op("-") || cur().is_op("+")) {
            const token &at = next();
            e = node(at.text == "-" ? ekind::neg : ekind::pos, at);
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    expr_ptr parse_primary() {
        depth_guard guard(*this);
        const token &t = cur();
        if (t.kind == tok::name) {
            next();
            auto e = node(ekind::constant, t);
            if (t.text == "true" || t.text == "True") e->constant = value::boolean(true);
            else if (t.text == "false" || t.text == "False") e->constant = value::boolean(false);
            else if (t.text == "none" || t.text == "None") e->constant = value::none();
            else {
                e->kind = ekind::name;
                e->name = t.text;
                e->id = prog_->symbols.intern(t.text);
                for (stmt *m : macros_) {
                    if (e->id == prog_->id_caller) m->uses_caller = true;
                    if (e->id == prog_->id_varargs) m->uses_varargs = true;
                    if (e->id == prog_->id_kwargs) m->uses_kwargs = true;
                }
            }
            return e;
        }
        if (t.kind == tok::string) {
            auto e = node(ekind::constant, t);
            std::string s;
            while (cur().kind == tok::string) s += next().text;
            e->constant = value::string(std::move(s));
            return e;
        }
        if (t.kind == tok::integer || t.kind == tok::floating) {
            next();
            auto e = node(ekind::constant, t);
            e->constant = t.kind == tok::integer ? value::integer(t.ival) : value::floating(t.fval);
            return e;
        }
        if (t.is_op("(")) {
            next();
            expr_ptr e = parse_tuple(true, {}, true);
            expect_op(")");
            return e;
        }
        if (t.is_op("[")) return parse_list();
        if (t.is_op("{")) return parse_dict();
        fail_here("unexpected " + describe(t));
    }

    expr_ptr parse_list() {
        auto e = node(ekind::list, next());
        while (!cur().is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (cur().is_op("]")) break;
            e->args.push_back(parse_expression(true));
        }
        expect_op("]");
        return e;
    }

    expr_ptr parse_dict() {
        auto e = node(ekind::dict, next());
        while (!cur().is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (cur().is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
        }
        expect_op("}");
        return e;
    }

    expr_ptr parse_postfix(expr_ptr e) {
        while (true) {
            if (cur().is_op(".") || cur().is_op("[")) e = parse_subscript(std::move(e));
            else if (cur().is_op("(")) e = parse_call(std::move(e));
            else return e;
        }
    }

    expr_ptr parse_filter_expr(expr_ptr e) {
        while (true) {
            if (cur().is_op("|")) e = parse_filter(std::move(e), false);
            else if (cur().is_name("is")) e = parse_test(std::move(e));
            else if (cur().is_op("(")) e = parse_call(std::move(e));
            else return e;
        }
    }

    expr_ptr parse_subscript(expr_ptr obj) {
        const token &at = next();
        if (at.is_op(".")) {
            const token &attr = cur();
            if (attr.kind == tok::name) {
                next();
                auto e = node(ekind::getattr, at);
                e->args.push_back(std::move(obj));
                e->name = attr.text;
                return e;
            }
            if (attr.kind != tok::integer) fail_here("expected name or number");
            next();
            auto e = node(ekind::getitem, at);
            e->args.push_back(std::move(obj));
            auto index = node(ekind::constant, attr);
            index->constant = value::integer(attr.ival);
            e->args.push_back(std::move(index));
            return e;
        }
        std::vector<expr_ptr> subs;
        while (!cur().is_op("]")) {
            if (!subs.empty()) expect_op(",");
            subs.push_back(parse_subscribed());
        }
        expect_op("]");
        if (subs.size() == 1 && subs[0]->kind == ekind::slice) {
            subs[0]->args[0] = std::move(obj);
            return std::move(subs[0]);
        }
        auto e = node(ekind::getitem, at);
        e->args.push_back(std::move(obj));
        if (subs.size() == 1) {
            e->args.push_back(std::move(subs[0]));
        } else {
            for (const auto &sub : subs)
                if (sub->kind == ekind::slice) fail_at(at, "a slice inside a subscript tuple is not supported");
            auto t = node(ekind::tuple, at);
            t->args = std::move(subs);
            e->args.push_back(std::move(t));
        }
        return e;
    }

    // `[a]`, or a slice `[a:b:c]` with any part omitted (returned as a slice node without its object).
    expr_ptr parse_subscribed() {
        const token &at = cur();
        expr_ptr start;
        if (!cur().is_op(":")) {
            start = parse_expression(true);
            if (!cur().is_op(":")) return start;
        }
        next();
        auto e = node(ekind::slice, at);
        e->args.resize(4);
        e->args[1] = std::move(start);
        if (!cur().is_op(":") && !cur().is_op("]") && !cur().is_op(",")) e->args[2] = parse_expression(true);
        if (skip_op(":") && !cur().is_op("]") && !cur().is_op(",")) e->args[3] = parse_expression(true);
        return e;
    }

    void parse_call_args(expr &e) {
        const token &open = expect_op("(");
        bool require_comma = false;
        while (!cur().is_op(")")) {
            if (require_comma) {
                expect_op(",");
                if (cur().is_op(")")) break;
            }
            if (cur().is_op("*")) {
                if (e.dyn_args || e.dyn_kwargs) fail_at(open, "invalid syntax for function call expression");
                next();
                e.dyn_args = parse_expression(true);
            } else if (cur().is_op("**")) {
                if (e.dyn_kwargs) fail_at(open, "invalid syntax for function call expression");
                next();
                e.dyn_kwargs = parse_expression(true);
            } else if (cur().kind == tok::name && look().is_op("=")) {
                if (e.dyn_kwargs) fail_at(open, "invalid syntax for function call expression");
                std::string key = next().text;
                next();
                e.kwargs.push_back({std::move(key), parse_expression(true)});
            } else {
                if (e.dyn_args || e.dyn_kwargs || !e.kwargs.empty())
                    fail_at(open, "invalid syntax for function call expression");
                e.args.push_back(parse_expression(true));
            }
            require_comma = true;
        }
        expect_op(")");
    }

    expr_ptr parse_call(expr_ptr callee) {
        auto e = node(ekind::call, cur());
        e->args.push_back(std::move(callee));
        parse_call_args(*e);
        return e;
    }

    expr_ptr parse_filter(expr_ptr operand, bool start_inline) {
        while (cur().is_op("|") || start_inline) {
            if (!start_inline) next();
            start_inline = false;
            const token &name = expect_name();
            auto e = node(ekind::filter, name);
            e->name = name.text;
            while (skip_op(".")) e->name += "." + expect_name().text;
            e->fn = filter_index(e->name);
            if (e->fn < 0 && !soft_) fail_at(name, "No filter named '" + e->name + "'.");
            e->args.push_back(operand ? std::move(operand) : node(ekind::block_input, name));
            if (cur().is_op("(")) parse_call_args(*e);
            operand = std::move(e);
        }
        return operand;
    }

    expr_ptr parse_test(expr_ptr operand) {
        const token &at = next();
        const bool negated = skip_name("not");
        const token &name = expect_name();
        auto e = node(ekind::test, at);
        e->name = name.text;
        while (skip_op(".")) e->name += "." + expect_name().text;
        e->fn = test_index(e->name);
        if (e->fn < 0 && !soft_) fail_at(name, "No test named '" + e->name + "'.");
        e->args.push_back(std::move(operand));
        const token &t = cur();
        if (t.is_op("(")) {
            parse_call_args(*e);
        } else if ((t.kind == tok::name || t.kind == tok::string || t.kind == tok::integer || t.kind == tok::floating ||
                    t.is_op("(") || t.is_op("[") || t.is_op("{")) &&
                   !t.is_name("else") && !t.is_name("or") && !t.is_name("and")) {
            if (t.is_name("is")) fail_here("You cannot chain multiple tests with is");
            e->args.push_back(parse_postfix(parse_primary()));
        }
        if (!negated) return e;
        auto n = node(ekind::not_, at);
        n->args.push_back(std::move(e));
        return n;
    }

    std::vector<token> toks_;
    size_t pos_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
    bool soft_ = false;  // inside an if or a conditional expression: unknown filters fail at run time
    std::vector<stmt *> macros_;
    std::unique_ptr<program> prog_;
};

}  // namespace

std::unique_ptr<program> parse_program(std::string_view source) { return parser(lex(source)).run(); }

}  // namespace tandem::jinja
