// src/jinja/jinja_parser.cpp - statements: if, for, set, macro, call, filter, with, generation,
// loop controls; file-system statements (include, import, extends, block) are refused.
#include "jinja_parser.h"

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

body_t parser::subparse(std::initializer_list<std::string_view> end_tokens) {
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

stmt_ptr parser::statement(skind kind, const token &at) {
    auto s = std::make_unique<stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
}

body_t parser::parse_statements(std::initializer_list<std::string_view> end_tokens, bool drop_needle) {
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

stmt_ptr parser::parse_statement(std::initializer_list<std::string_view> end_tokens) {
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
    if (n == "generation") return parse_generation();
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

stmt_ptr parser::parse_if() {
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

stmt_ptr parser::parse_for() {
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

stmt_ptr parser::parse_set() {
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

void parser::parse_signature(stmt &s) {
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
body_t parser::parse_callable_body(stmt &s, std::string_view end) {
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

stmt_ptr parser::parse_macro() {
    auto s = statement(skind::macro, next());
    const token &name = expect_name();
    s->name = name.text;
    s->id = prog_->symbols.intern(name.text);
    parse_signature(*s);
    s->body = parse_callable_body(*s, "endmacro");
    return s;
}

stmt_ptr parser::parse_call_block() {
    auto s = statement(skind::call_block, next());
    if (cur().is_op("(")) parse_signature(*s);
    s->name = "caller";
    s->value = parse_expression(true);
    if (s->value->kind != ekind::call) fail_at(toks_[pos_ - 1], "expected call");
    s->body = parse_callable_body(*s, "endcall");
    return s;
}

stmt_ptr parser::parse_filter_block() {
    auto s = statement(skind::filter_block, next());
    s->value = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
}

stmt_ptr parser::parse_with() {
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

// transformers renders {% generation %} as a call block: its body is a scope of its own that
// loop controls do not reach through.
stmt_ptr parser::parse_generation() {
    auto s = statement(skind::generation, next());
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endgeneration"}, true);
    loop_depth_ = saved_loops;
    return s;
}

target parser::parse_assign_target(bool with_tuple, bool with_namespace, std::initializer_list<std::string_view> extra_end) {
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

target parser::to_target(const expr &e, const token &at) {
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

std::unique_ptr<program> parse_program(std::string_view source) { return parser(lex(source)).run(); }

}  // namespace tandem::jinja
