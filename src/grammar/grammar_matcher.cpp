// src/grammar/grammar_matcher.cpp - token masks. A configuration's stacks are grouped by what lies
// below their tops; each group's tops, with nothing assumed below, decide most tokens on their
// own (cached per grammar in constraint_cache). Only where the group's rule can end inside a
// token is the subtree walked again with the real stack. Whole masks are also cached per
// configuration, since JSON outputs revisit the same states.
#include "token_index.h"

#include "tandem/error.h"
#include "tandem/grammar.h"

#include <algorithm>
#include <cstring>

namespace tandem {

using namespace grammar_detail;

namespace grammar_detail {

namespace {

// Bounds on the shared rule-local walks (reset when full) and on one generation's parse: a
// generation of 32k tokens makes a few nodes and configurations per byte at most, and a
// configuration costs ~60 bytes plus 4 per byte class (<= 256) for its transitions.
constexpr uint32_t local_max_nodes = 1u << 21, local_max_configs = 1u << 17;
constexpr uint32_t matcher_max_nodes = 1u << 20, matcher_max_configs = 1u << 17;
constexpr size_t mask_cache_slots = 32;

void set_bit(std::span<uint32_t> words, int32_t id) { words[size_t(id) >> 5] |= uint32_t(1) << (id & 31); }

}  // namespace

constraint_cache::constraint_cache(std::shared_ptr<const compiled_grammar> g, std::shared_ptr<const vocab_index> v)
    : grammar(std::move(g)), vocab(std::move(v)),
      local_(std::make_unique<grammar_pda>(grammar, local_max_nodes, local_max_configs)) {
    depth_config_.assign(vocab->max_depth + 1, grammar_pda::dead);
    // Copies further than the longest token from a repetition's end behave alike: map each to
    // the copy max_depth from the end. Runs inside a copy are mapped first, within that copy.
    canonical_.resize(grammar->states.size());
    for (uint32_t s = 0; s < canonical_.size(); ++s) canonical_[s] = s;
    const uint32_t horizon = vocab->max_depth;
    for (const repeat_run &run : grammar->repeat_runs) {
        for (uint32_t k = horizon + 1; k < run.n_copies; ++k) {
            for (uint32_t i = 0; i < run.copy_states; ++i) {
                uint32_t &c = canonical_[run.begin + k * run.copy_states + i];
                c -= (k - horizon) * run.copy_states;
            }
        }
    }
}

size_t constraint_cache::n_entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
}

std::shared_ptr<const local_entry> constraint_cache::entry(std::span<const uint32_t> states) {
    std::lock_guard<std::mutex> lock(mu_);
    try {
        return lookup_or_compute(states);
    } catch (const error &) {
        // The shared walk state is full: start over (entries already handed out stay valid).
        local_ = std::make_unique<grammar_pda>(grammar, local_max_nodes, local_max_configs);
        entries_.clear();
        return lookup_or_compute(states);
    }
}

std::shared_ptr<const local_entry> constraint_cache::lookup_or_compute(std::span<const uint32_t> states) {
    top_nodes_.clear();
    for (uint32_t s : states) top_nodes_.push_back(local_->node(canonical_[s], grammar_pda::bottom));
    const int32_t config = local_->config_of_tops(top_nodes_);
    const auto it = entries_.find(config);
    if (it != entries_.end()) return it->second;
    auto e = std::make_shared<local_entry>();
    compute(config, *e);
    entries_.emplace(config, e);
    return e;
}

void constraint_cache::compute(int32_t config, local_entry &e) {
    const vocab_index &v = *vocab;
    grammar_pda &pda = *local_;
    bits_.assign(v.n_words, 0);
    size_t n_accepted = 0;
    depth_config_[0] = config;
    uint32_t escape_end = 0;  // inside [.., escape_end) an outer escape already covers the subtree
    const uint32_t n_nodes = uint32_t(v.nodes.size());
    for (uint32_t j = 1; j < n_nodes;) {
        const trie_node nd = v.nodes[j];
        const int32_t c = pda.advance(depth_config_[nd.depth - 1u], nd.byte);
        if (c == grammar_pda::dead) {
            j = nd.end;
            continue;
        }
        for (uint32_t t = v.token_begin[j]; t < v.token_begin[j + 1]; ++t) {
            set_bit(bits_, v.token_ids[t]);
            ++n_accepted;
        }
        if (pda.is_end(c) && nd.end > j + 1 && j >= escape_end) {
            e.escapes.push_back(j);
            escape_end = nd.end;
        }
        if (!pda.has_tops(c)) {
            j = nd.end;
            continue;
        }
        depth_config_[nd.depth] = c;
        ++j;
    }
    // An id list is smaller than the bitset up to n_vocab / 32 ids.
    if (n_accepted > size_t(v.n_words)) {
        e.bits = bits_;
        return;
    }
    for (uint32_t w = 0; w < v.n_words; ++w) {
        for (uint32_t word = bits_[w]; word != 0; word &= word - 1) e.ids.push_back(int32_t(w * 32 + uint32_t(__builtin_ctz(word))));
    }
}

}  // namespace grammar_detail

grammar_constraint::grammar_constraint(const grammar &g, const grammar_vocab &vocab)
    : vocab_(vocab), cache_(std::make_shared<constraint_cache>(g.impl_, vocab.impl_)) {}

size_t grammar_constraint::n_cached_states() const { return cache_->n_entries(); }

struct grammar_matcher::state {
    std::shared_ptr<constraint_cache> cache;
    const vocab_index &vocab;
    grammar_pda pda;
    int32_t config = grammar_pda::dead;
    bool terminated = false;
    std::vector<int32_t> history;  // the configuration before each accepted token

    std::vector<int32_t> depth_config;
    std::vector<std::pair<int32_t, uint32_t>> groups;  // (parent, top node)
    std::vector<uint32_t> group_states, group_nodes;
    std::string path;

    std::vector<int32_t> slot_config;  // [mask_cache_slots]
    std::vector<uint32_t> slot_words;  // [mask_cache_slots][n_words]
    size_t next_slot = 0;

    explicit state(std::shared_ptr<constraint_cache> c)
        : cache(std::move(c)), vocab(*cache->vocab), pda(cache->grammar, matcher_max_nodes, matcher_max_configs) {
        config = pda.start_config();
        depth_config.assign(vocab.max_depth + 1, grammar_pda::dead);
        slot_config.assign(mask_cache_slots, grammar_pda::dead);
        slot_words.assign(mask_cache_slots * vocab.n_words, 0);
    }

    int32_t advance(int32_t c, std::string_view bytes) {
        for (char b : bytes) {
            c = pda.advance(c, uint8_t(b));
            if (c == grammar_pda::dead) break;
        }
        return c;
    }

    // Tokens below trie node k (exclusive) that the stacks of `config` accept; the text of k
    // itself is the group's rule ending, already decided by the local entry.
    void walk_escape(int32_t group_config, uint32_t k, std::span<uint32_t> words) {
        path.clear();
        for (uint32_t j = k; j != 0; j = vocab.parent[j]) path.push_back(char(vocab.nodes[j].byte));
        std::reverse(path.begin(), path.end());
        const int32_t c = advance(group_config, path);
        if (c == grammar_pda::dead || pda.tops(c).empty()) return;
        depth_config[vocab.nodes[k].depth] = c;
        const uint32_t end = vocab.nodes[k].end;
        for (uint32_t j = k + 1; j < end;) {
            const trie_node nd = vocab.nodes[j];
            const int32_t next = pda.advance(depth_config[nd.depth - 1u], nd.byte);
            if (next == grammar_pda::dead) {
                j = nd.end;
                continue;
            }
            for (int32_t id : vocab.tokens_at(j)) set_bit(words, id);
            if (!pda.has_tops(next)) {
                j = nd.end;
                continue;
            }
            depth_config[nd.depth] = next;
            ++j;
        }
    }

    void compute_mask(std::span<uint32_t> words) {
        groups.clear();
        for (uint32_t t : pda.tops(config)) groups.push_back({pda.node_parent(t), t});
        std::sort(groups.begin(), groups.end());
        for (size_t i = 0; i < groups.size();) {
            size_t j = i;
            group_states.clear(), group_nodes.clear();
            for (; j < groups.size() && groups[j].first == groups[i].first; ++j) {
                group_nodes.push_back(groups[j].second);
                group_states.push_back(pda.node_state(groups[j].second));
            }
            std::sort(group_states.begin(), group_states.end());
            group_states.erase(std::unique(group_states.begin(), group_states.end()), group_states.end());
            const std::shared_ptr<const local_entry> e = cache->entry(group_states);
            for (int32_t id : e->ids) set_bit(words, id);
            if (!e->bits.empty()) {
                for (size_t w = 0; w < words.size(); ++w) words[w] |= e->bits[w];
            }
            if (!e->escapes.empty()) {
                const int32_t group_config = pda.config_of_tops(group_nodes);
                for (uint32_t k : e->escapes) walk_escape(group_config, k, words);
            }
            i = j;
        }
        if (pda.is_end(config)) {
            for (int32_t id : vocab.eog_ids) set_bit(words, id);
        }
    }
};

grammar_matcher::grammar_matcher(const grammar_constraint &constraint)
    : s_(std::make_unique<state>(constraint.cache_)) {}
grammar_matcher::~grammar_matcher() = default;
grammar_matcher::grammar_matcher(grammar_matcher &&) noexcept = default;
grammar_matcher &grammar_matcher::operator=(grammar_matcher &&) noexcept = default;

bool grammar_matcher::accept_token(int32_t id) {
    state &s = *s_;
    if (s.terminated || id < 0 || id >= s.vocab.n_vocab) return false;
    switch (s.vocab.kind[size_t(id)]) {
    case token_kind::never: return false;
    case token_kind::eog:
        if (!s.pda.is_end(s.config)) return false;
        s.history.push_back(s.config);
        s.terminated = true;
        return true;
    case token_kind::text: break;
    }
    return accept_bytes(s.vocab.bytes[size_t(id)]);
}

bool grammar_matcher::accept_bytes(std::string_view bytes) {
    state &s = *s_;
    if (s.terminated) return false;
    const int32_t c = s.advance(s.config, bytes);
    if (c == grammar_pda::dead) return false;
    s.history.push_back(s.config);
    s.config = c;
    return true;
}

bool grammar_matcher::is_complete() const { return s_->pda.is_end(s_->config); }
bool grammar_matcher::can_continue() const { return !s_->terminated && !s_->pda.tops(s_->config).empty(); }
bool grammar_matcher::is_terminated() const { return s_->terminated; }
uint64_t grammar_matcher::bytes_to_complete() const { return s_->pda.distance(s_->config); }

void grammar_matcher::fill_mask(std::span<uint32_t> words) {
    state &s = *s_;
    const size_t n_words = s.vocab.n_words;
    TANDEM_ASSERT(words.size() >= n_words, "mask of {} words for a vocabulary needing {}", words.size(), n_words);
    std::fill(words.begin(), words.end(), 0u);
    if (s.terminated) return;
    for (size_t slot = 0; slot < mask_cache_slots; ++slot) {
        if (s.slot_config[slot] == s.config) {
            std::memcpy(words.data(), s.slot_words.data() + slot * n_words, n_words * sizeof(uint32_t));
            return;
        }
    }
    s.compute_mask(words.first(n_words));
    const size_t slot = s.next_slot;
    s.next_slot = (slot + 1) % mask_cache_slots;
    s.slot_config[slot] = s.config;
    std::memcpy(s.slot_words.data() + slot * n_words, words.data(), n_words * sizeof(uint32_t));
}

grammar_snapshot grammar_matcher::snapshot() const {
    return {s_->config, int32_t(s_->history.size()), s_->terminated};
}

void grammar_matcher::restore(const grammar_snapshot &snap) {
    state &s = *s_;
    TANDEM_ASSERT(snap.config >= 0 && size_t(snap.config) < s.pda.n_configs(), "snapshot of another matcher");
    TANDEM_ASSERT(snap.n_tokens >= 0 && size_t(snap.n_tokens) <= s.history.size(),
                  "snapshot at {} tokens, matcher at {}", snap.n_tokens, s.history.size());
    s.history.resize(size_t(snap.n_tokens));
    s.config = snap.config;
    s.terminated = snap.terminated;
}

void grammar_matcher::rollback(int32_t n_tokens) {
    state &s = *s_;
    TANDEM_ASSERT(n_tokens >= 0 && size_t(n_tokens) <= s.history.size(), "rollback of {} tokens, {} accepted", n_tokens,
                  s.history.size());
    if (n_tokens == 0) return;
    s.config = s.history[s.history.size() - size_t(n_tokens)];
    s.history.resize(s.history.size() - size_t(n_tokens));
    s.terminated = false;
}

int32_t grammar_matcher::n_tokens() const { return int32_t(s_->history.size()); }

}  // namespace tandem
