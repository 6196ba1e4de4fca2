// src/grammar/grammar_pda.cpp - expansion of parser stacks to their terminal tops, interning of
// nodes and configurations, and cached byte transitions.
#include "grammar_pda.h"

#include "tandem/error.h"

#include <algorithm>
#include <cstring>

namespace tandem::grammar_detail {

namespace {

uint64_t sat_add(uint64_t a, uint64_t b) { return a > unreachable - b ? unreachable : a + b; }

uint64_t pair_key(uint32_t state, int32_t parent) { return (uint64_t(state) << 32) | uint32_t(parent + 1); }

uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

}  // namespace

grammar_pda::grammar_pda(std::shared_ptr<const compiled_grammar> g, uint32_t max_nodes, uint32_t max_configs)
    : g_(std::move(g)), n_classes_(g_->n_classes), max_nodes_(max_nodes), max_configs_(max_configs) {
    seen_keys_.assign(64, 0);
    seen_stamp_.assign(64, 0);
}

uint32_t grammar_pda::node(uint32_t state, int32_t parent) {
    const auto [it, inserted] = node_ids_.try_emplace(pair_key(state, parent), uint32_t(nodes_.size()));
    if (inserted) {
        if (nodes_.size() >= max_nodes_) {
            node_ids_.erase(it);
            throw error(error_kind::invalid_request,
                        fmt::format("grammar: the parse needs more than {} stack nodes (output nested too deeply)", max_nodes_));
        }
        const uint64_t below = parent == bottom ? 0 : nodes_[size_t(parent)].dist;
        nodes_.push_back({state, parent, sat_add(g_->dist[state], below)});
    }
    return it->second;
}

// Open addressing over (state, parent) pairs, cleared by bumping a stamp: expansions are small
// and frequent, so clearing must not cost the table's size.
bool grammar_pda::first_visit(uint64_t key) {
    if ((seen_count_ + 1) * 2 > seen_keys_.size()) grow_seen();
    const size_t mask = seen_keys_.size() - 1;
    for (size_t h = mix(key) & mask;; h = (h + 1) & mask) {
        if (seen_stamp_[h] != stamp_) {
            seen_stamp_[h] = stamp_, seen_keys_[h] = key, ++seen_count_;
            return true;
        }
        if (seen_keys_[h] == key) return false;
    }
}

void grammar_pda::grow_seen() {
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < seen_keys_.size(); ++i) {
        if (seen_stamp_[i] == stamp_) keys.push_back(seen_keys_[i]);
    }
    seen_keys_.assign(seen_keys_.size() * 2, 0);
    seen_stamp_.assign(seen_stamp_.size() * 2, 0);
    const size_t mask = seen_keys_.size() - 1;
    for (uint64_t k : keys) {
        size_t h = mix(k) & mask;
        while (seen_stamp_[h] == stamp_) h = (h + 1) & mask;
        seen_stamp_[h] = stamp_, seen_keys_[h] = k;
    }
}

bool grammar_pda::expand() {
    if (++stamp_ == 0) {
        std::fill(seen_stamp_.begin(), seen_stamp_.end(), 0);
        stamp_ = 1;
    }
    seen_count_ = 0;
    bool end = false;
    while (!work_.empty()) {
        auto [state, parent] = work_.back();
        work_.pop_back();
        if (g_->dist[state] == unreachable || !first_visit(pair_key(state, parent))) continue;
        const nfa_state &st = g_->states[state];
        switch (st.kind) {
        case state_kind::terminal: new_tops_.push_back(node(state, parent)); break;
        case state_kind::split:
            for (uint32_t i = 0; i < st.next; ++i) work_.push_back({g_->split_targets[st.arg + i], parent});
            break;
        case state_kind::call: {
            // A call in tail position returns straight to our caller: right recursion and
            // repetition loops then never deepen the stack.
            const bool tail = g_->states[st.next].kind == state_kind::accept;
            const int32_t ret = tail ? parent : int32_t(node(st.next, parent));
            work_.push_back({g_->rule_start[st.arg], ret});
            break;
        }
        case state_kind::accept:
            if (parent == bottom) {
                end = true;
            } else {
                work_.push_back({nodes_[size_t(parent)].state, nodes_[size_t(parent)].parent});
            }
            break;
        }
    }
    return end;
}

int32_t grammar_pda::intern_config(std::vector<uint32_t> &tops, bool end) {
    std::sort(tops.begin(), tops.end());
    tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
    std::string key(1 + tops.size() * sizeof(uint32_t), '\0');
    key[0] = end ? 1 : 0;
    if (!tops.empty()) std::memcpy(key.data() + 1, tops.data(), tops.size() * sizeof(uint32_t));
    const auto [it, inserted] = config_ids_.try_emplace(std::move(key), int32_t(configs_.size()));
    if (!inserted) return it->second;
    if (configs_.size() >= max_configs_) {
        config_ids_.erase(it);
        throw error(error_kind::invalid_request,
                    fmt::format("grammar: the parse needs more than {} parser states (the grammar is too ambiguous)", max_configs_));
    }
    uint64_t dist = end ? 0 : unreachable;
    for (uint32_t t : tops) dist = std::min(dist, nodes_[t].dist);
    configs_.push_back({uint32_t(tops_pool_.size()), uint32_t(tops.size()), end, dist});
    tops_pool_.insert(tops_pool_.end(), tops.begin(), tops.end());
    trans_.resize(trans_.size() + n_classes_, unknown);
    return int32_t(configs_.size() - 1);
}

int32_t grammar_pda::start_config() {
    new_tops_.clear();
    work_.assign(1, {g_->rule_start[g_->root], bottom});
    const bool end = expand();
    if (new_tops_.empty() && !end) return dead;
    return intern_config(new_tops_, end);
}

int32_t grammar_pda::config_of_tops(std::span<const uint32_t> tops) {
    new_tops_.assign(tops.begin(), tops.end());
    return intern_config(new_tops_, false);
}

int32_t grammar_pda::advance_slow(int32_t config, uint8_t byte) {
    new_tops_.clear();
    work_.clear();
    for (uint32_t t : tops(config)) {
        const nfa_state &st = g_->states[nodes_[t].state];
        if (g_->sets[st.arg].test(byte)) work_.push_back({st.next, nodes_[t].parent});
    }
    int32_t result = dead;
    if (!work_.empty()) {
        const bool end = expand();
        if (!new_tops_.empty() || end) result = intern_config(new_tops_, end);
    }
    trans_[size_t(config) * n_classes_ + g_->byte_class[byte]] = result;
    return result;
}

}  // namespace tandem::grammar_detail
