// src/grammar/grammar_compile.cpp - GBNF expression trees to byte-level NFAs. Non-recursive rules
// that stay small are inlined into their callers, so a parser state's context (what may follow
// inside the same rule) is as large as possible: that is what makes per-state token sets reusable.
#include "gbnf_ast.h"
#include "utf8_ranges.h"

#include "tandem/error.h"

#include <algorithm>
#include <map>

namespace tandem::grammar_detail {

namespace {

// A rule is inlined when its expansion is at most this many states (JSON's whitespace, string and
// number rules), or at most inline_once_max and it is used once (whole JSON objects).
constexpr uint64_t inline_small_max = 256;
constexpr uint64_t inline_once_max = 50000;
// A character class of at least this many code points is "wide" (see has_wide_loop).
constexpr uint64_t wide_class_min = 1024;
// Inlining nests at most this deep (compile recursion stays shallow on any thread's stack).
constexpr uint32_t inline_depth_max = 16;

uint64_t sat_add(uint64_t a, uint64_t b) { return a > unreachable - b ? unreachable : a + b; }
uint64_t sat_mul(uint64_t a, uint64_t b) { return (b != 0 && a > unreachable / b) ? unreachable : a * b; }

class grammar_compiler {
public:
    grammar_compiler(const ast_grammar &ast, std::string source) : ast_(ast), out_(std::make_shared<compiled_grammar>()) {
        out_->source = std::move(source);
    }

    std::shared_ptr<compiled_grammar> run() {
        const size_t n = ast_.rules.size();
        reachable_.assign(n, 0);
        mark_reachable();
        order_rules();
        check_productive();
        decide_inlining();
        ir_rule_.assign(n, -1);
        ir_rule(uint32_t(ast_.root));
        while (!pending_.empty()) {
            const uint32_t r = pending_.back();
            pending_.pop_back();
            current_rule_ = uint32_t(ir_rule_[r]);
            const uint32_t accept = new_state(state_kind::accept, 0, 0);
            out_->rule_start[current_rule_] = compile(uint32_t(ast_.rules[r].body), accept);
        }
        out_->root = 0;
        grammar_analyze(*out_, rule_lines_);
        return out_;
    }

private:
    const ast_grammar &ast_;
    std::shared_ptr<compiled_grammar> out_;
    std::vector<uint8_t> reachable_, recursive_, inline_, productive_, nullable_, wide_;
    std::vector<std::vector<uint32_t>> sccs_;  // callees' components before callers'
    std::vector<uint64_t> est_, uses_;
    std::vector<int32_t> ir_rule_;
    std::vector<uint32_t> pending_, rule_lines_;
    std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
    uint32_t current_rule_ = 0, inline_depth_ = 0;

    template <class... Args>
    [[noreturn]] void fail_rule(uint32_t r, fmt::format_string<Args...> format, Args &&...args) const {
        const ast_rule &rule = ast_.rules[r];
        throw error(error_kind::invalid_request, fmt::format("grammar: line {}, column {}: {}", rule.line, rule.column,
                                                             fmt::format(format, std::forward<Args>(args)...)));
    }

    template <class F>
    void for_each_ref(uint32_t node, F &&f) const {
        const ast_node &n = ast_.nodes[node];
        if (n.kind == ast_kind::rule_ref) f(uint32_t(n.rule));
        for (uint32_t c : n.children) for_each_ref(c, f);
    }

    void mark_reachable() {
        std::vector<uint32_t> work{uint32_t(ast_.root)};
        reachable_[size_t(ast_.root)] = 1;
        while (!work.empty()) {
            const uint32_t r = work.back();
            work.pop_back();
            for_each_ref(uint32_t(ast_.rules[r].body), [&](uint32_t q) {
                if (!reachable_[q]) reachable_[q] = 1, work.push_back(q);
            });
        }
    }

    // Tarjan's strongly connected components over reachable rules, iteratively (no deep
    // recursion on long rule chains); components come out callees first.
    void order_rules() {
        const size_t n = ast_.rules.size();
        std::vector<std::vector<uint32_t>> refs(n);
        for (size_t r = 0; r < n; ++r) {
            if (reachable_[r]) for_each_ref(uint32_t(ast_.rules[r].body), [&](uint32_t q) { refs[r].push_back(q); });
        }
        recursive_.assign(n, 0);
        std::vector<int32_t> index(n, -1), low(n, 0);
        std::vector<uint8_t> on_stack(n, 0);
        std::vector<uint32_t> stack;
        std::vector<std::pair<uint32_t, size_t>> frames;
        int32_t counter = 0;
        for (size_t start = 0; start < n; ++start) {
            if (!reachable_[start] || index[start] >= 0) continue;
            frames.push_back({uint32_t(start), 0});
            while (!frames.empty()) {
                auto &[v, edge] = frames.back();
                if (edge == 0 && index[v] < 0) {
                    index[v] = low[v] = counter++;
                    stack.push_back(v), on_stack[v] = 1;
                }
                if (edge < refs[v].size()) {
                    const uint32_t w = refs[v][edge++];
                    if (w == v) recursive_[v] = 1;
                    if (index[w] < 0) {
                        frames.push_back({w, 0});
                    } else if (on_stack[w]) {
                        low[v] = std::min(low[v], index[w]);
                    }
                    continue;
                }
                const uint32_t done = v;
                frames.pop_back();
                if (!frames.empty()) low[frames.back().first] = std::min(low[frames.back().first], low[done]);
                if (low[done] != index[done]) continue;
                std::vector<uint32_t> component;
                uint32_t w;
                do {
                    w = stack.back();
                    stack.pop_back(), on_stack[w] = 0;
                    component.push_back(w);
                } while (w != done);
                if (component.size() > 1) for (uint32_t c : component) recursive_[c] = 1;
                sccs_.push_back(std::move(component));
            }
        }
    }

    bool node_productive(uint32_t node) const {
        const ast_node &n = ast_.nodes[node];
        switch (n.kind) {
        case ast_kind::literal: return true;
        case ast_kind::char_class: return !n.ranges.empty();
        case ast_kind::rule_ref: return productive_[size_t(n.rule)];
        case ast_kind::repeat: return n.min == 0 || node_productive(n.children[0]);
        case ast_kind::choice:
            return std::any_of(n.children.begin(), n.children.end(), [&](uint32_t c) { return node_productive(c); });
        case ast_kind::sequence:
            return std::all_of(n.children.begin(), n.children.end(), [&](uint32_t c) { return node_productive(c); });
        }
        return false;
    }

    void check_productive() {
        productive_.assign(ast_.rules.size(), 0);
        nullable_.assign(ast_.rules.size(), 0);
        for (const std::vector<uint32_t> &component : sccs_) {
            for (bool changed = true; changed;) {
                changed = false;
                for (uint32_t r : component) {
                    const uint32_t body = uint32_t(ast_.rules[r].body);
                    if (!productive_[r] && node_productive(body)) productive_[r] = 1, changed = true;
                    if (!nullable_[r] && node_nullable(body)) nullable_[r] = 1, changed = true;
                }
            }
        }
        // Callees first: the message names the rule at the bottom of the problem.
        for (const std::vector<uint32_t> &component : sccs_) {
            for (uint32_t r : component) {
                if (productive_[r]) continue;
                fail_rule(r, "rule '{}' can never complete (every alternative needs the rule itself again, or an empty class)",
                          ast_.rules[r].name);
            }
        }
    }

    uint64_t estimate(uint32_t node) const {
        const ast_node &n = ast_.nodes[node];
        switch (n.kind) {
        case ast_kind::literal: return n.bytes.size();
        case ast_kind::char_class: {
            std::vector<utf8_sequence> sequences;
            for (const cp_range &r : n.ranges) utf8_sequences(r.lo, r.hi, sequences);
            uint64_t states = 2;
            for (const utf8_sequence &q : sequences) states += q.n > 1 ? q.n : 0;
            return states;
        }
        case ast_kind::rule_ref: return inline_[size_t(n.rule)] ? est_[size_t(n.rule)] : 1;
        case ast_kind::repeat: {
            const uint64_t copies = n.max == repeat_unbounded ? std::max<uint64_t>(n.min, 1) : n.max;
            return sat_add(sat_mul(estimate(n.children[0]), copies), copies + 1);
        }
        case ast_kind::choice:
        case ast_kind::sequence: {
            uint64_t sum = 1;
            for (uint32_t c : n.children) sum = sat_add(sum, estimate(c));
            return sum;
        }
        }
        return 1;
    }

    void count_uses(uint32_t node, uint64_t weight) {
        const ast_node &n = ast_.nodes[node];
        if (n.kind == ast_kind::rule_ref) uses_[size_t(n.rule)] = sat_add(uses_[size_t(n.rule)], weight);
        const uint64_t inner = n.kind == ast_kind::repeat ? sat_mul(weight, n.max == repeat_unbounded ? 2 : n.max) : weight;
        for (uint32_t c : n.children) count_uses(c, inner);
    }

    void decide_inlining() {
        const size_t n = ast_.rules.size();
        inline_.assign(n, 0);
        est_.assign(n, 1);
        uses_.assign(n, 0);
        for (size_t r = 0; r < n; ++r) {
            if (reachable_[r]) count_uses(uint32_t(ast_.rules[r].body), 1);
        }
        wide_.assign(n, 0);
        for (const std::vector<uint32_t> &component : sccs_) {
            for (uint32_t r : component) {
                const uint32_t body = uint32_t(ast_.rules[r].body);
                est_[r] = estimate(body);
                wide_[r] = !recursive_[r] && is_wide(body);
                inline_[r] = !recursive_[r] && int32_t(r) != ast_.root && !(uses_[r] > 1 && has_wide_loop(body)) &&
                             (est_[r] <= inline_small_max || (uses_[r] <= 1 && est_[r] <= inline_once_max));
            }
        }
    }

    // Matches single characters from a large set (a string's character, `.`).
    bool is_wide(uint32_t node) const {
        const ast_node &n = ast_.nodes[node];
        switch (n.kind) {
        case ast_kind::char_class: {
            uint64_t size = 0;
            for (const cp_range &r : n.ranges) size += r.hi - r.lo + 1;
            return size >= wide_class_min;
        }
        case ast_kind::rule_ref: return wide_[size_t(n.rule)];
        case ast_kind::choice:
        case ast_kind::sequence:
            return std::any_of(n.children.begin(), n.children.end(), [&](uint32_t c) { return is_wide(c); });
        case ast_kind::repeat: return is_wide(n.children[0]);
        default: return false;
        }
    }

    // A rule used in several places that loops over wide characters (a string rule) stays a
    // call: its states are then the same wherever it is used, so the token set of "inside a
    // string" is computed once per grammar; only tokens that close the string are checked against
    // the caller. (bench_grammar on schemas/nested_objects.json: one 151,936-token walk of ~6 ms
    // instead of one per string property.) Such a rule should end with its closing delimiter.
    bool has_wide_loop(uint32_t node) const {
        const ast_node &n = ast_.nodes[node];
        if (n.kind == ast_kind::repeat && n.max == repeat_unbounded && is_wide(n.children[0])) return true;
        if (n.kind == ast_kind::rule_ref) return false;
        return std::any_of(n.children.begin(), n.children.end(), [&](uint32_t c) { return has_wide_loop(c); });
    }

    uint32_t ir_rule(uint32_t r) {
        if (ir_rule_[r] < 0) {
            ir_rule_[r] = int32_t(out_->rule_start.size());
            out_->rule_start.push_back(0);
            out_->rule_names.push_back(ast_.rules[r].name);
            rule_lines_.push_back(ast_.rules[r].line);
            pending_.push_back(r);
        }
        return uint32_t(ir_rule_[r]);
    }

    uint32_t new_state(state_kind kind, uint32_t arg, uint32_t next) {
        if (out_->states.size() >= max_states) {
            throw error(error_kind::invalid_request,
                        fmt::format("grammar: more than {} automaton states after expanding repetitions (use fewer or "
                                    "smaller bounded repetitions)", max_states));
        }
        out_->states.push_back({kind, arg, next});
        return uint32_t(out_->states.size() - 1);
    }

    uint32_t new_split(std::initializer_list<uint32_t> targets) {
        const uint32_t s = new_state(state_kind::split, 0, 0);
        set_split(s, targets);
        return s;
    }

    void set_split(uint32_t s, std::initializer_list<uint32_t> targets) {
        out_->states[s].arg = uint32_t(out_->split_targets.size());
        out_->states[s].next = uint32_t(targets.size());
        out_->split_targets.insert(out_->split_targets.end(), targets);
    }

    uint32_t terminal(const byte_set &set, uint32_t next) {
        const auto [it, inserted] = set_ids_.try_emplace(set.w, uint32_t(out_->sets.size()));
        if (inserted) out_->sets.push_back(set);
        return new_state(state_kind::terminal, it->second, next);
    }

    uint32_t compile_class(const std::vector<cp_range> &ranges, uint32_t next) {
        std::vector<utf8_sequence> sequences;
        for (const cp_range &r : ranges) utf8_sequences(r.lo, r.hi, sequences);
        byte_set single;
        std::vector<uint32_t> targets;
        for (const utf8_sequence &s : sequences) {
            if (s.n == 1) {
                single.set_range(s.lo[0], s.hi[0]);
                continue;
            }
            uint32_t cur = next;
            for (int i = s.n - 1; i >= 0; --i) {
                byte_set b;
                b.set_range(s.lo[i], s.hi[i]);
                cur = terminal(b, cur);
            }
            targets.push_back(cur);
        }
        if (!single.empty() || targets.empty()) targets.push_back(terminal(single, next));
        if (targets.size() == 1) return targets[0];
        const uint32_t s = new_state(state_kind::split, uint32_t(out_->split_targets.size()), uint32_t(targets.size()));
        out_->split_targets.insert(out_->split_targets.end(), targets.begin(), targets.end());
        return s;
    }

    uint32_t compile_repeat(const ast_node &n, uint32_t next) {
        const uint32_t child = n.children[0];
        uint32_t cur = next, copies = n.min;
        if (n.max == repeat_unbounded) {
            // x{m,} = x^(m-1) x+, and x+ is one copy of x looping back through a split.
            const uint32_t loop = new_state(state_kind::split, 0, 0);
            const uint32_t body = compile(child, loop);
            set_split(loop, {body, next});
            if (n.min == 0) return loop;
            cur = body;
            copies = n.min - 1;
        } else {
            const size_t begin = out_->states.size();
            for (uint32_t i = n.min; i < n.max; ++i) cur = new_split({compile(child, cur), next});
            add_run(begin, n.max - n.min, child);
        }
        const size_t begin = out_->states.size();
        for (uint32_t i = 0; i < copies; ++i) cur = compile(child, cur);
        add_run(begin, copies, child);
        return cur;
    }

    void add_run(size_t begin, uint32_t n_copies, uint32_t child) {
        const size_t total = out_->states.size() - begin;
        if (n_copies < 2 || node_nullable(child) || total % n_copies != 0) return;
        out_->repeat_runs.push_back({uint32_t(begin), uint32_t(total / n_copies), n_copies});
    }

    bool node_nullable(uint32_t node) const {
        const ast_node &n = ast_.nodes[node];
        switch (n.kind) {
        case ast_kind::literal: return n.bytes.empty();
        case ast_kind::char_class: return false;
        case ast_kind::rule_ref: return nullable_[size_t(n.rule)];
        case ast_kind::repeat: return n.min == 0 || node_nullable(n.children[0]);
        case ast_kind::choice:
            return std::any_of(n.children.begin(), n.children.end(), [&](uint32_t c) { return node_nullable(c); });
        case ast_kind::sequence:
            return std::all_of(n.children.begin(), n.children.end(), [&](uint32_t c) { return node_nullable(c); });
        }
        return false;
    }

    // The NFA for `node` followed by the state `next`; returns its first state.
    uint32_t compile(uint32_t node, uint32_t next) {
        const ast_node &n = ast_.nodes[node];
        switch (n.kind) {
        case ast_kind::literal:
            for (size_t i = n.bytes.size(); i-- > 0;) {
                byte_set b;
                b.set(uint8_t(n.bytes[i]));
                next = terminal(b, next);
            }
            return next;
        case ast_kind::char_class: return compile_class(n.ranges, next);
        case ast_kind::sequence:
            for (size_t i = n.children.size(); i-- > 0;) next = compile(n.children[i], next);
            return next;
        case ast_kind::choice: {
            std::vector<uint32_t> targets;
            for (uint32_t c : n.children) targets.push_back(compile(c, next));
            const uint32_t s = new_state(state_kind::split, uint32_t(out_->split_targets.size()), uint32_t(targets.size()));
            out_->split_targets.insert(out_->split_targets.end(), targets.begin(), targets.end());
            return s;
        }
        case ast_kind::repeat: return compile_repeat(n, next);
        case ast_kind::rule_ref: {
            const uint32_t r = uint32_t(n.rule);
            if (inline_[r] && inline_depth_ < inline_depth_max) {
                ++inline_depth_;
                const uint32_t s = compile(uint32_t(ast_.rules[r].body), next);
                --inline_depth_;
                return s;
            }
            return new_state(state_kind::call, ir_rule(r), next);
        }
        }
        return next;
    }
};

}  // namespace

std::shared_ptr<compiled_grammar> grammar_compile(const ast_grammar &ast, std::string source) {
    return grammar_compiler(ast, std::move(source)).run();
}

}  // namespace tandem::grammar_detail
