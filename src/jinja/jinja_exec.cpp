// src/jinja/jinja_exec.cpp - statements: output, if, for (jinja2's LoopContext), set, macros and
// call blocks with jinja2's argument rules, filter blocks, with, loop controls.
#include "jinja_eval.h"

namespace tandem::jinja {

namespace {

struct depth_guard {
    budget &bud;
    explicit depth_guard(budget &b) : bud(b) {
        if (++bud.call_depth > bud.limits.max_call_depth)
            failf(jinja_error_kind::limit, "macro calls nested deeper than {} (max_call_depth)", bud.limits.max_call_depth);
    }
    ~depth_guard() { --bud.call_depth; }
};

void bind(scope &s, int id, value v) { s.vars.emplace_back(id, std::move(v)); }

}  // namespace

scope_ptr interp::new_scope(const scope_ptr &parent) {
    auto s = std::make_shared<scope>();
    s->parent = parent;
    scopes.add(s);
    return s;
}

interp::~interp() {
    for (auto &w : scopes.items)
        if (auto s = w.lock()) {
            s->vars.clear();
            s->parent.reset();
        }
    for (auto &w : namespaces.items)
        if (auto n = w.lock()) n->attrs.clear();
    for (auto &w : macros.items)
        if (auto m = w.lock()) m->closure.reset();
    root_vals.clear();
}

// ---- loops ----

std::string loop_obj::repr() const { return fmt::format("<LoopContext {}/{}>", index0 + 1, source.size()); }

bool interp::loop_accepts(loop_obj &loop, const value &item) {
    const scope_ptr s = new_scope(loop.outer);
    assign(loop.def->tgt, item, s);
    return truthy(eval(*loop.def->cond, s));
}

bool loop_obj::peek() {
    while (ahead.empty()) {
        if (source_pos >= source.size()) return false;
        const value &candidate = source[source_pos++];
        if (!def->cond || in->loop_accepts(*this, candidate)) ahead.push_back(candidate);
    }
    return true;
}

bool loop_obj::pull(value &out) {
    if (!peek()) return false;
    before = current;
    current = std::move(ahead.front());
    ahead.pop_front();
    ++index0;
    out = current;
    return true;
}

int64_t loop_obj::length() {
    while (source_pos < source.size()) {
        const value &candidate = source[source_pos++];
        if (!def->cond || in->loop_accepts(*this, candidate)) ahead.push_back(candidate);
    }
    return index0 + 1 + static_cast<int64_t>(ahead.size());
}

value interp::loop_attr(const value &self, std::string_view name) {
    loop_obj &loop = static_cast<loop_obj &>(self.object());
    if (name == "index0") return value::integer(loop.index0);
    if (name == "index") return value::integer(loop.index0 + 1);
    if (name == "first") return value::boolean(loop.index0 == 0);
    if (name == "last") return value::boolean(!loop.peek());
    if (name == "length") return value::integer(loop.length());
    if (name == "revindex") return value::integer(loop.length() - loop.index0);
    if (name == "revindex0") return value::integer(loop.length() - loop.index0 - 1);
    if (name == "previtem") return loop.index0 == 0 ? value::undefined("there is no previous item") : loop.before;
    if (name == "nextitem") return loop.peek() ? loop.ahead.front() : value::undefined("there is no next item");
    if (name == "depth") return value::integer(1);
    if (name == "depth0") return value::integer(0);
    if (name == "cycle" || name == "changed") return value::object(std::make_shared<method_obj>(self, std::string(name)));
    return value::undefined(fmt::format("'jinja2.runtime.LoopContext object' has no attribute '{}'", name));
}

flow interp::exec_for(const stmt &s, const scope_ptr &sc, mstring &out) {
    const value src = eval(*s.value, sc);
    auto loop = std::make_shared<loop_obj>();
    loop->in = this;
    loop->def = &s;
    loop->outer = sc;
    loop->source = iterate(src);
    const value loop_value = value::object(loop);
    bool any = false;
    value item;
    while (loop->pull(item)) {
        any = true;
        const scope_ptr it = new_scope(sc);
        assign(s.tgt, item, it);
        bind(*it, prog.id_loop, loop_value);
        if (exec(s.body, it, out) == flow::break_) break;
    }
    if (!any && !s.else_body.empty()) return exec(s.else_body, new_scope(sc), out);
    return flow::normal;
}

// ---- macros ----

value interp::call_macro(const macro_obj &m, call_args args) {
    const stmt &d = *m.def;
    depth_guard guard(bud);
    const scope_ptr sc = new_scope(m.closure);
    const size_t n_params = d.params.size();
    const size_t n_pos = std::min(args.pos.size(), n_params);
    std::vector<std::optional<value>> vals(n_params);
    for (size_t i = 0; i < n_pos; ++i) vals[i] = args.pos[i];
    // Keyword arguments fill only the parameters after the positional ones, as jinja2's Macro does.
    std::vector<std::pair<std::string, value>> rest;
    for (auto &[k, v] : args.kw) {
        bool taken = false;
        for (size_t i = n_pos; i < n_params; ++i)
            if (d.params[i].name == k && !vals[i]) {
                vals[i] = v;
                taken = true;
                break;
            }
        if (!taken) rest.emplace_back(k, v);
    }
    value caller = value::undefined("No caller defined");
    if (d.uses_caller) {
        for (auto it = rest.begin(); it != rest.end(); ++it)
            if (it->first == "caller") {
                caller = it->second;
                rest.erase(it);
                break;
            }
    }
    const std::string &mname = d.kind == skind::macro ? d.name : std::string("caller");
    if (!d.uses_kwargs && !rest.empty()) {
        if (rest.front().first == "caller")
            failf(jinja_error_kind::runtime, "macro '{}' was invoked with two values for the special caller argument", mname);
        failf(jinja_error_kind::runtime, "macro '{}' takes no keyword argument '{}'", mname, rest.front().first);
    }
    if (!d.uses_varargs && args.pos.size() > n_params)
        failf(jinja_error_kind::runtime, "macro '{}' takes not more than {} argument(s)", mname, n_params);
    for (size_t i = 0; i < n_params; ++i) {
        const macro_param &p = d.params[i];
        value v;
        if (vals[i]) v = *vals[i];
        else if (p.default_value) v = eval(*p.default_value, sc);
        else v = value::undefined("parameter '" + p.name + "' was not provided");
        bind(*sc, p.id, std::move(v));
    }
    if (d.uses_caller) bind(*sc, prog.id_caller, caller);
    if (d.uses_varargs) {
        std::vector<value> extra;
        for (size_t i = n_params; i < args.pos.size(); ++i) extra.push_back(args.pos[i]);
        bind(*sc, prog.id_varargs, value::tuple(std::move(extra)));
    }
    if (d.uses_kwargs) {
        auto kw = std::make_shared<dict_data>();
        for (auto &[k, v] : rest) kw->items.emplace_back(value::string(k), v);
        bind(*sc, prog.id_kwargs, value::dict(std::move(kw)));
    }
    return render_body(d.body, sc);
}

value interp::render_body(const body_t &body, const scope_ptr &sc) {
    mstring out(&bud);
    exec(body, sc, out);
    return value::string(std::move(out));
}

// ---- statements ----

void interp::exec_stmt_set(const stmt &s, const scope_ptr &sc) {
    if (s.kind == skind::set) {
        assign(s.tgt, eval(*s.value, sc), sc);
        return;
    }
    value text = render_body(s.body, sc);
    if (s.value) {
        filter_inputs.push_back(std::move(text));
        text = eval(*s.value, sc);
        filter_inputs.pop_back();
    }
    assign(s.tgt, text, sc);
}

flow interp::exec(const body_t &body, const scope_ptr &sc, mstring &out) {
    for (const auto &sp : body) {
        const stmt &s = *sp;
        bud.step();
        try {
            switch (s.kind) {
            case skind::data: out.add(s.text); break;
            case skind::print: py_str(eval(*s.value, sc), out); break;
            case skind::if_: {
                const body_t *chosen = &s.else_body;
                for (const auto &[test, branch] : s.branches)
                    if (truthy(eval(*test, sc))) {
                        chosen = &branch;
                        break;
                    }
                const flow f = exec(*chosen, sc, out);
                if (f != flow::normal) return f;
                break;
            }
            case skind::for_: {
                // A break or continue in the loop's else block belongs to an enclosing loop.
                const flow f = exec_for(s, sc, out);
                if (f != flow::normal) return f;
                break;
            }
            case skind::set: case skind::set_block: exec_stmt_set(s, sc); break;
            case skind::macro: {
                auto m = std::make_shared<macro_obj>();
                m->def = &s;
                m->closure = sc;
                macros.add(m);
                target name;
                name.id = s.id;
                assign(name, value::object(std::move(m)), sc);
                break;
            }
            case skind::call_block: {
                auto caller = std::make_shared<macro_obj>();
                caller->def = &s;
                caller->closure = sc;
                macros.add(caller);
                const expr &call_expr = *s.value;
                const expr &callee = *call_expr.args[0];
                const value target_obj = callee.kind == ekind::getattr ? eval(*callee.args[0], sc) : eval(callee, sc);
                call_args a = eval_args(call_expr, 1, sc);
                a.kw.emplace_back("caller", value::object(std::move(caller)));
                py_str(callee.kind == ekind::getattr ? call_attr(target_obj, callee.name, std::move(a))
                                                     : call(target_obj, std::move(a)),
                       out);
                break;
            }
            case skind::filter_block: {
                filter_inputs.push_back(render_body(s.body, sc));
                const value v = eval(*s.value, sc);
                filter_inputs.pop_back();
                py_str(v, out);
                break;
            }
            case skind::with: {
                std::vector<value> vals;
                for (const auto &[t, e] : s.assigns) vals.push_back(eval(*e, sc));
                const scope_ptr inner = new_scope(sc);
                for (size_t i = 0; i < vals.size(); ++i) assign(s.assigns[i].first, vals[i], inner);
                const flow f = exec(s.body, inner, out);
                if (f != flow::normal) return f;
                break;
            }
            case skind::generation: out.add(render_body(s.body, new_scope(sc)).str()); break;
            case skind::break_: return flow::break_;
            case skind::continue_: return flow::continue_;
            }
        } catch (const jinja_error &err) {
            if (err.line() != 0) throw;
            throw jinja_error(err.jinja_kind(), static_cast<int>(s.line), static_cast<int>(s.col), err.message());
        }
    }
    return flow::normal;
}

jinja_output interp::run(const std::vector<std::pair<std::string, value>> &vars) {
    for (const auto &[name, v] : vars) {
        const int id = prog.symbols.find(name);
        if (id < 0) continue;
        root_vals[static_cast<size_t>(id)] = v;
        root_set[static_cast<size_t>(id)] = 1;
    }
    mstring out(&bud, true);
    out.text.reserve(64u << 10);  // a typical prompt's size; spares the first reallocations
    exec(prog.body, root, out);
    return jinja_output{std::move(out.text), std::move(out.marks)};
}

}  // namespace tandem::jinja
