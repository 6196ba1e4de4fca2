// src/grammar/grammar_ir.h - the compiled grammar: one byte-level NFA per rule, rules calling
// rules; plus the limits every grammar front end checks.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tandem::grammar_detail {

// Limits on what a request may ask for: each bounds memory or compile time.
constexpr size_t max_gbnf_bytes = size_t(1) << 20;      // grammar text
constexpr uint32_t max_repeat = 10000;                   // m and n of {m,n}, minItems, maxLength ...
constexpr uint32_t max_nesting = 100;                    // parentheses, schema nesting (recursion depth)
constexpr uint32_t max_rules = 20000;
constexpr uint32_t max_states = uint32_t(1) << 21;       // automaton states after inlining (~40 MB)

constexpr uint64_t unreachable = std::numeric_limits<uint64_t>::max();

struct byte_set {
    std::array<uint64_t, 4> w{};
    bool test(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
    void set(uint8_t b) { w[b >> 6] |= uint64_t(1) << (b & 63); }
    void set_range(uint8_t lo, uint8_t hi) {
        for (unsigned b = lo; b <= hi; ++b) set(uint8_t(b));
    }
    bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
    bool operator==(const byte_set &) const = default;
};

enum class state_kind : uint8_t {
    terminal,  // one byte of `set` -> next
    call,      // derive rule `arg`, then continue at next
    split,     // epsilon to each of split_targets[arg .. arg + next)
    accept,    // end of the rule: return to the caller
};

struct nfa_state {
    state_kind kind = state_kind::accept;
    uint32_t arg = 0;   // terminal: index into sets; call: rule; split: offset into split_targets
    uint32_t next = 0;  // terminal, call: the following state; split: number of targets
};

// Copies of one item made by a counted repetition, back to back, the copy nearest the
// repetition's end first. Each copy takes at least one byte, so no token of L bytes can tell
// copy k from copy L when k > L: their states share token sets (constraint_cache maps them).
struct repeat_run {
    uint32_t begin = 0;        // first state of copy 0
    uint32_t copy_states = 0;  // states per copy
    uint32_t n_copies = 0;
};

struct compiled_grammar {
    std::vector<nfa_state> states;
    std::vector<uint32_t> split_targets;
    std::vector<byte_set> sets;
    std::vector<uint32_t> rule_start;    // [n_rules] first state of each rule's NFA
    std::vector<std::string> rule_names; // [n_rules]
    uint32_t root = 0;                   // rule index of `root`
    // [n_states] fewest bytes from the state to its rule's accept (unreachable: dead state).
    std::vector<uint64_t> dist;
    // Bytes no terminal tells apart share a class: transition tables are indexed by class.
    std::array<uint8_t, 256> byte_class{};
    uint32_t n_classes = 1;
    std::vector<repeat_run> repeat_runs;  // runs nested in a copy come before the run itself
    std::string source;  // the GBNF text
};

}  // namespace tandem::grammar_detail
