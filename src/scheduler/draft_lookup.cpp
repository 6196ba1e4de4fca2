// src/scheduler/draft_lookup.cpp - prompt-lookup drafts: an n-gram index per session, proposals by
// the longest matching suffix, the accepted-prefix rule and the adaptive draft length.
#include "src/scheduler/draft_lookup.h"

#include "tandem/error.h"

#include <algorithm>

namespace tandem {

draft_lookup::draft_lookup(const draft_options &options) : options_(options) {
    if (options_.n_max < 0) fail(error_kind::config, "--draft must be >= 0, got {}", options_.n_max);
    if (options_.ngram_min < 1 || options_.ngram_max < options_.ngram_min)
        fail(error_kind::config, "draft n-gram lengths must satisfy 1 <= min <= max, got {} and {}", options_.ngram_min,
             options_.ngram_max);
    index_.resize(size_t(options_.ngram_max - options_.ngram_min + 1));
}

uint64_t draft_lookup::key(size_t end, int32_t n) const {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ uint64_t(n);
    for (size_t i = end - size_t(n); i < end; ++i) {
        h ^= uint64_t(uint32_t(tokens_[i]));
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    return h;
}

void draft_lookup::append(std::span<const int32_t> tokens) {
    // Every end the history had before this call, up to the new last one, becomes an earlier
    // occurrence (the suffix ending at the new size() is looked up, never indexed).
    const size_t first_end = tokens_.size();
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    for (size_t e = std::max<size_t>(first_end, 1); e < tokens_.size(); ++e)
        for (int32_t n = options_.ngram_min; n <= options_.ngram_max; ++n)
            if (e >= size_t(n)) index_[size_t(n - options_.ngram_min)][key(e, n)] = uint32_t(e);
}

std::vector<int32_t> draft_lookup::propose(int32_t n) const {
    std::vector<int32_t> out;
    const size_t size = tokens_.size();
    if (n <= 0) return out;
    for (int32_t len = options_.ngram_max; len >= options_.ngram_min; --len) {
        if (size <= size_t(len)) continue;  // an earlier occurrence needs at least one more token
        const auto &index = index_[size_t(len - options_.ngram_min)];
        const auto it = index.find(key(size, len));
        if (it == index.end()) continue;
        const size_t e = it->second;
        // A hash collision is no match.
        if (!std::equal(tokens_.begin() + std::ptrdiff_t(e) - len, tokens_.begin() + std::ptrdiff_t(e),
                        tokens_.end() - len))
            continue;
        // The continuation after e, reading the draft itself once it passes the history's end.
        for (size_t i = 0; i < size_t(n); ++i) {
            const size_t at = e + i;
            out.push_back(at < size ? tokens_[at] : out[at - size]);
        }
        return out;
    }
    return out;
}

size_t draft_accepted(std::span<const int32_t> draft, std::span<const int32_t> sampled) {
    size_t k = 0;
    while (k < draft.size() && k < sampled.size() && sampled[k] == draft[k]) ++k;
    TANDEM_ASSERT(sampled.size() > k, "draft_accepted: {} draws for {} kept drafts", sampled.size(), k);
    return k;
}

void draft_length::record(size_t proposed, size_t accepted) {
    if (proposed == 0) return;
    if (accepted == proposed)
        n_ = std::min(n_max_, n_ + 1);
    else if (accepted == 0)
        n_ = std::max(1, n_ / 2);
}

}  // namespace tandem
