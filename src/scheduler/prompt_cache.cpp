// src/scheduler/prompt_cache.cpp - the host prompt cache's lookups and LRU bound.
#include "src/scheduler/prompt_cache.h"

#include <algorithm>

namespace tandem {

namespace {
size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    const size_t n = std::min(a.size(), b.size());
    return size_t(std::mismatch(a.begin(), a.begin() + ptrdiff_t(n), b.begin()).first - a.begin());
}
}  // namespace

prompt_cache::match prompt_cache::longest_prefix(std::span<const int32_t> prompt) {
    auto best = entries_.end();
    size_t best_common = 0;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        const size_t common = common_prefix(it->tokens, prompt);
        if (common > best_common) {
            best = it;
            best_common = common;
        }
    }
    if (best == entries_.end()) return {};
    entries_.splice(entries_.begin(), entries_, best);
    return {&entries_.front(), best_common};
}

size_t prompt_cache::longest_common(std::span<const int32_t> prompt) const {
    size_t best = 0;
    for (const entry &e : entries_) best = std::max(best, common_prefix(e.tokens, prompt));
    return best;
}

bool prompt_cache::covers(std::span<const int32_t> tokens) const {
    return std::any_of(entries_.begin(), entries_.end(),
                       [&](const entry &e) { return common_prefix(e.tokens, tokens) == tokens.size(); });
}

bool prompt_cache::insert(entry e, std::vector<entry> *evicted) {
    if (e.tokens.empty() || e.bytes() > capacity_ || covers(e.tokens)) return false;
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (common_prefix(it->tokens, e.tokens) == it->tokens.size()) {
            bytes_ -= it->bytes();
            it = entries_.erase(it);
        } else {
            ++it;
        }
    }
    while (bytes_ + e.bytes() > capacity_) {
        bytes_ -= entries_.back().bytes();
        if (evicted) evicted->push_back(std::move(entries_.back()));
        entries_.pop_back();
    }
    bytes_ += e.bytes();
    entries_.push_front(std::move(e));
    return true;
}

}  // namespace tandem
