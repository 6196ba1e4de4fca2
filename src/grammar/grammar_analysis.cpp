// src/grammar/grammar_analysis.cpp - facts about a compiled grammar the matcher relies on: the
// fewest bytes from each state to its rule's end (dead states have none), no left recursion (so
// expanding a parser state always terminates), and the byte classes of its terminals.
#include "gbnf_ast.h"

#include "tandem/error.h"

#include <algorithm>

namespace tandem::grammar_detail {

namespace {

uint64_t sat_add(uint64_t a, uint64_t b) { return a > unreachable - b ? unreachable : a + b; }

// Bellman-Ford style relaxation. States are created after their successors except on loops, so
// increasing index order settles most of them in one pass.
void compute_distances(compiled_grammar &g) {
    const size_t n = g.states.size();
    g.dist.assign(n, unreachable);
    std::vector<uint64_t> rule_min(g.rule_start.size(), unreachable);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t s = 0; s < n; ++s) {
            const nfa_state &st = g.states[s];
            uint64_t d = unreachable;
            switch (st.kind) {
            case state_kind::accept: d = 0; break;
            case state_kind::terminal: d = g.sets[st.arg].empty() ? unreachable : sat_add(1, g.dist[st.next]); break;
            case state_kind::call: d = sat_add(rule_min[st.arg], g.dist[st.next]); break;
            case state_kind::split:
                for (uint32_t i = 0; i < st.next; ++i) d = std::min(d, g.dist[g.split_targets[st.arg + i]]);
                break;
            }
            if (d < g.dist[s]) g.dist[s] = d, changed = true;
        }
        for (size_t r = 0; r < g.rule_start.size(); ++r) {
            const uint64_t d = g.dist[g.rule_start[r]];
            if (d < rule_min[r]) rule_min[r] = d, changed = true;
        }
    }
}

// Rule r calls q before consuming any byte (through splits and nullable calls): an edge r -> q.
std::vector<std::vector<uint32_t>> leading_calls(const compiled_grammar &g) {
    std::vector<std::vector<uint32_t>> edges(g.rule_start.size());
    std::vector<uint32_t> seen(g.states.size(), UINT32_MAX), work;
    for (uint32_t r = 0; r < g.rule_start.size(); ++r) {
        work.assign(1, g.rule_start[r]);
        while (!work.empty()) {
            const uint32_t s = work.back();
            work.pop_back();
            if (seen[s] == r || g.dist[s] == unreachable) continue;
            seen[s] = r;
            const nfa_state &st = g.states[s];
            if (st.kind == state_kind::split) {
                for (uint32_t i = 0; i < st.next; ++i) work.push_back(g.split_targets[st.arg + i]);
            } else if (st.kind == state_kind::call) {
                edges[r].push_back(st.arg);
                if (g.dist[g.rule_start[st.arg]] == 0) work.push_back(st.next);
            }
        }
        std::sort(edges[r].begin(), edges[r].end());
        edges[r].erase(std::unique(edges[r].begin(), edges[r].end()), edges[r].end());
    }
    return edges;
}

void check_left_recursion(const compiled_grammar &g, const std::vector<uint32_t> &rule_lines) {
    const std::vector<std::vector<uint32_t>> edges = leading_calls(g);
    const size_t n = edges.size();
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t start = 0; start < n; ++start) {
        if (color[start]) continue;
        path.push_back({start, 0});
        color[start] = 1;
        while (!path.empty()) {
            auto &[r, edge] = path.back();
            if (edge == edges[r].size()) {
                color[r] = 2;
                path.pop_back();
                continue;
            }
            const uint32_t q = edges[r][edge++];
            if (color[q] == 0) {
                color[q] = 1;
                path.push_back({q, 0});
            } else if (color[q] == 1) {
                std::string cycle;
                bool in = false;
                for (const auto &frame : path) {
                    in = in || frame.first == q;
                    if (in) cycle += "'" + g.rule_names[frame.first] + "' -> ";
                }
                cycle += "'" + g.rule_names[q] + "'";
                throw error(error_kind::invalid_request,
                            fmt::format("grammar: line {}: rule '{}' is left-recursive ({} without consuming any text); "
                                        "rewrite it with repetition, e.g. `a ::= b (\"op\" b)*`",
                                        rule_lines[q], g.rule_names[q], cycle));
            }
        }
    }
}

void compute_byte_classes(compiled_grammar &g) {
    std::array<uint8_t, 256> cls{};
    uint32_t n_classes = 1;
    for (const byte_set &set : g.sets) {
        std::array<int16_t, 512> remap;
        remap.fill(-1);
        uint32_t next = 0;
        for (unsigned b = 0; b < 256; ++b) {
            int16_t &slot = remap[size_t(cls[b]) * 2 + (set.test(uint8_t(b)) ? 1 : 0)];
            if (slot < 0) slot = int16_t(next++);
            cls[b] = uint8_t(slot);
        }
        n_classes = next;
    }
    g.byte_class = cls;
    g.n_classes = n_classes;
}

}  // namespace

void grammar_analyze(compiled_grammar &g, const std::vector<uint32_t> &rule_lines) {
    compute_distances(g);
    check_left_recursion(g, rule_lines);
    compute_byte_classes(g);
}

}  // namespace tandem::grammar_detail
