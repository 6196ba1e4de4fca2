// src/grammar/grammar_pda.h - the pushdown recognizer: stacks of NFA states interned as shared
// nodes, parser configurations (sets of stack tops) interned as ids, and byte transitions
// between configurations cached per byte class. Ids never change once made, so a configuration
// id is a complete snapshot of the parse.
#pragma once

#include "grammar_ir.h"

#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem::grammar_detail {

class grammar_pda {
public:
    static constexpr int32_t dead = -1;     // no stack survives
    static constexpr int32_t bottom = -1;   // parent of the outermost node

    // max_nodes, max_configs bound memory (~40 bytes a node, ~40 + 4 * n_classes a configuration).
    grammar_pda(std::shared_ptr<const compiled_grammar> g, uint32_t max_nodes, uint32_t max_configs);

    // The configuration before any input: root's first terminals.
    int32_t start_config();
    // A configuration whose stacks are exactly these top nodes (terminal states); not expanded.
    int32_t config_of_tops(std::span<const uint32_t> tops);
    // The node (state, parent), made once and shared by every stack that has it.
    uint32_t node(uint32_t state, int32_t parent);

    int32_t advance(int32_t config, uint8_t byte) {
        const int32_t t = trans_[size_t(config) * n_classes_ + g_->byte_class[byte]];
        return t != unknown ? t : advance_slow(config, byte);
    }

    std::span<const uint32_t> tops(int32_t config) const {
        const config_rec &c = configs_[size_t(config)];
        return {tops_pool_.data() + c.tops_begin, c.n_tops};
    }
    // A stack ran off its bottom: in a matcher, the root rule is complete; in a rule-local walk,
    // the rule may end here and the text continues in whatever called it.
    bool is_end(int32_t config) const { return configs_[size_t(config)].end; }
    bool has_tops(int32_t config) const { return configs_[size_t(config)].n_tops != 0; }
    uint64_t distance(int32_t config) const { return configs_[size_t(config)].dist; }
    uint32_t node_state(uint32_t n) const { return nodes_[n].state; }
    int32_t node_parent(uint32_t n) const { return nodes_[n].parent; }

    const compiled_grammar &compiled() const { return *g_; }
    size_t n_nodes() const { return nodes_.size(); }
    size_t n_configs() const { return configs_.size(); }

private:
    static constexpr int32_t unknown = -2;

    struct node_rec {
        uint32_t state;
        int32_t parent;
        uint64_t dist;  // fewest bytes until this stack is empty
    };
    struct config_rec {
        uint32_t tops_begin, n_tops;
        bool end;
        uint64_t dist;
    };

    std::shared_ptr<const compiled_grammar> g_;
    uint32_t n_classes_;
    uint32_t max_nodes_, max_configs_;
    std::vector<node_rec> nodes_;
    std::unordered_map<uint64_t, uint32_t> node_ids_;
    std::vector<config_rec> configs_;
    std::vector<uint32_t> tops_pool_;
    std::unordered_map<std::string, int32_t> config_ids_;
    std::vector<int32_t> trans_;  // [n_configs][n_classes]

    // Working buffers for expansions.
    std::vector<std::pair<uint32_t, int32_t>> work_;
    std::vector<uint32_t> new_tops_;
    std::vector<uint64_t> seen_keys_;
    std::vector<uint32_t> seen_stamp_;
    uint32_t stamp_ = 0;
    size_t seen_count_ = 0;

    int32_t advance_slow(int32_t config, uint8_t byte);
    // Expands work_ (pairs of state, parent) to terminal tops in new_tops_; true when a stack
    // empties.
    bool expand();
    bool first_visit(uint64_t key);
    void grow_seen();
    int32_t intern_config(std::vector<uint32_t> &tops, bool end);
};

}  // namespace tandem::grammar_detail
