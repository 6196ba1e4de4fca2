// src/jinja/jinja_parser_expr.cpp - expressions, with jinja2's precedence from conditional
// expressions down to primaries, postfix subscripts and calls, filters and tests.
#include "jinja_parser.h"

namespace tandem::jinja {

bool parser::is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const token &t = cur();
    if (t.kind == tok::var_end || t.kind == tok::block_end || t.kind == tok::eof || t.is_op(")")) return true;
    for (auto e : extra_end)
        if (t.is_name(e)) return true;
    return false;
}

expr_ptr parser::parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end, bool explicit_parens) {
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

expr_ptr parser::parse_tuple_simplified(std::initializer_list<std::string_view> extra_end) {
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

expr_ptr parser::parse_expression(bool with_condexpr) {
    depth_guard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
}

expr_ptr parser::parse_condexpr() {
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

expr_ptr parser::binary_node(ekind kind, const token &at, expr_ptr l, expr_ptr r) {
    auto e = node(kind, at);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
}

expr_ptr parser::parse_or() {
    expr_ptr e = parse_and();
    while (cur().is_name("or")) {
        const token &at = next();
        e = binary_node(ekind::or_, at, std::move(e), parse_and());
    }
    return e;
}

expr_ptr parser::parse_and() {
    expr_ptr e = parse_not();
    while (cur().is_name("and")) {
        const token &at = next();
        e = binary_node(ekind::and_, at, std::move(e), parse_not());
    }
    return e;
}

expr_ptr parser::parse_not() {
    if (cur().is_name("not")) {
        depth_guard guard(*this);
        auto e = node(ekind::not_, next());
        e->args.push_back(parse_not());
        return e;
    }
    return parse_compare();
}

expr_ptr parser::parse_compare() {
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

expr_ptr parser::binop_node(const token &at, binop op, expr_ptr l, expr_ptr r) {
    auto e = binary_node(ekind::binary, at, std::move(l), std::move(r));
    e->op = op;
    return e;
}

expr_ptr parser::parse_math1() {
    expr_ptr e = parse_concat();
    while (cur().is_op("+") || cur().is_op("-")) {
        const token &at = next();
        e = binop_node(at, at.text == "+" ? binop::add : binop::sub, std::move(e), parse_concat());
    }
    return e;
}

expr_ptr parser::parse_concat() {
    const token &at = cur();
    expr_ptr first = parse_math2();
    if (!cur().is_op("~")) return first;
    auto e = node(ekind::concat, at);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
}

expr_ptr parser::parse_math2() {
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

expr_ptr parser::parse_pow() {
    expr_ptr e = parse_unary(true);
    while (cur().is_op("**")) {
        const token &at = next();
        e = binop_node(at, binop::pow, std::move(e), parse_unary(true));
    }
    return e;
}

expr_ptr parser::parse_unary(bool with_filter) {
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

expr_ptr parser::parse_primary() {
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

expr_ptr parser::parse_list() {
    auto e = node(ekind::list, next());
    while (!cur().is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (cur().is_op("]")) break;
        e->args.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
}

expr_ptr parser::parse_dict() {
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

expr_ptr parser::parse_postfix(expr_ptr e) {
    while (true) {
        if (cur().is_op(".") || cur().is_op("[")) e = parse_subscript(std::move(e));
        else if (cur().is_op("(")) e = parse_call(std::move(e));
        else return e;
    }
}

expr_ptr parser::parse_filter_expr(expr_ptr e) {
    while (true) {
        if (cur().is_op("|")) e = parse_filter(std::move(e), false);
        else if (cur().is_name("is")) e = parse_test(std::move(e));
        else if (cur().is_op("(")) e = parse_call(std::move(e));
        else return e;
    }
}

expr_ptr parser::parse_subscript(expr_ptr obj) {
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
expr_ptr parser::parse_subscribed() {
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

void parser::parse_call_args(expr &e) {
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

expr_ptr parser::parse_call(expr_ptr callee) {
    auto e = node(ekind::call, cur());
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
}

expr_ptr parser::parse_filter(expr_ptr operand, bool start_inline) {
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

expr_ptr parser::parse_test(expr_ptr operand) {
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

}  // namespace tandem::jinja
