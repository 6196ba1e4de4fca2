// src/grammar/gbnf_ast.h - GBNF parsed into expression trees over Unicode code points.
#pragma once

#include "grammar_ir.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::grammar_detail {

struct cp_range {
    uint32_t lo = 0, hi = 0;  // inclusive code points
};

enum class ast_kind : uint8_t { sequence, choice, literal, char_class, rule_ref, repeat };

constexpr uint32_t repeat_unbounded = UINT32_MAX;

struct ast_node {
    ast_kind kind = ast_kind::sequence;
    std::string bytes;               // literal: UTF-8
    std::vector<cp_range> ranges;    // char_class: sorted, disjoint, no surrogates (`.` is all)
    std::vector<uint32_t> children;  // sequence, choice: items; repeat: the one repeated node
    uint32_t min = 0, max = 0;       // repeat bounds (max may be repeat_unbounded)
    int32_t rule = -1;               // rule_ref: index into ast_grammar::rules
};

struct ast_rule {
    std::string name;
    int32_t body = -1;  // node index; -1 while only referenced
    uint32_t line = 0, column = 0;  // definition, else first reference
};

struct ast_grammar {
    std::vector<ast_node> nodes;
    std::vector<ast_rule> rules;
    int32_t root = -1;
};

// Throws error(invalid_request) "grammar: line L, column C: ...".
ast_grammar gbnf_parse(std::string_view text);

// Sorts and merges ranges, complements them over all code points when negated, and removes the
// surrogates (U+D800-U+DFFF have no UTF-8 form).
std::vector<cp_range> cp_ranges_normalize(std::vector<cp_range> ranges, bool negated);

// Expression trees to byte-level NFAs: small and non-recursive rules are inlined into their
// callers; rejects rules that can never complete, left recursion and grammars over the limits.
std::shared_ptr<compiled_grammar> grammar_compile(const ast_grammar &ast, std::string source);

// Fewest bytes per state, left-recursion check, byte classes. rule_lines: [n_rules] definition
// line of each rule, for errors.
void grammar_analyze(compiled_grammar &g, const std::vector<uint32_t> &rule_lines);

}  // namespace tandem::grammar_detail
