// src/grammar/token_index.h - a vocabulary as a preorder trie, and the per-grammar cache of the
// tokens each rule-local parser state accepts on its own.
#pragma once

#include "grammar_pda.h"

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem::grammar_detail {

struct trie_node {
    uint32_t end;    // one past the last node of this subtree (preorder)
    uint16_t depth;  // bytes from the root
    uint8_t byte;    // the byte on the edge from the parent
};

enum class token_kind : uint8_t { never, text, eog };

struct vocab_index {
    int32_t n_vocab = 0;
    uint32_t n_words = 0;
    // Node 0 is the root (no byte). Subtree of j: [j, nodes[j].end); in lexicographic order.
    std::vector<trie_node> nodes;
    std::vector<uint32_t> parent;       // [n_nodes]
    std::vector<uint32_t> token_begin;  // [n_nodes + 1] offsets into token_ids: tokens ending at a node
    std::vector<int32_t> token_ids;
    uint32_t max_depth = 0;
    std::vector<std::string> bytes;     // [n_vocab]
    std::vector<token_kind> kind;       // [n_vocab]
    std::vector<int32_t> eog_ids;

    std::span<const int32_t> tokens_at(uint32_t j) const {
        return {token_ids.data() + token_begin[j], token_begin[j + 1] - token_begin[j]};
    }
};

// What a set of top states with nothing known below them accepts: tokens accepted whatever the
// context (ids when few, else a bitset), and the trie nodes where the rule may end inside a
// token, whose subtrees must be walked again with the real stack.
struct local_entry {
    std::vector<int32_t> ids;
    std::vector<uint32_t> bits;  // [n_words] or empty
    std::vector<uint32_t> escapes;
};

class constraint_cache {
public:
    constraint_cache(std::shared_ptr<const compiled_grammar> g, std::shared_ptr<const vocab_index> v);

    // states: sorted, unique terminal states sharing one parent. Thread-safe; computed on first use.
    std::shared_ptr<const local_entry> entry(std::span<const uint32_t> states);
    size_t n_entries() const;

    const std::shared_ptr<const compiled_grammar> grammar;
    const std::shared_ptr<const vocab_index> vocab;

private:
    mutable std::mutex mu_;
    std::unique_ptr<grammar_pda> local_;
    std::unordered_map<int32_t, std::shared_ptr<const local_entry>> entries_;
    std::vector<uint32_t> canonical_;  // [n_states] a state with the same token sets (repeat_run)
    std::vector<int32_t> depth_config_;
    std::vector<uint32_t> top_nodes_, bits_;

    std::shared_ptr<const local_entry> lookup_or_compute(std::span<const uint32_t> states);
    void compute(int32_t config, local_entry &e);
};

}  // namespace tandem::grammar_detail
