// tests/unit/grammar/grammar_walk.h - random generations under a grammar: each step draws a token
// uniformly from the matcher's mask; past a length cap (or on a "progress" draw) it takes a
// token that brings the output closer to complete, so every walk ends.
#pragma once

#include "tandem/grammar.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace grammar_test {

struct walk_options {
    size_t cap_tokens = 48;     // after this many tokens, only steps towards completion
    unsigned progress_pct = 0;  // before the cap, this share of steps also steps towards completion
    size_t max_tokens = 100000; // a walk longer than this is a bug (distance must fall past the cap)
};

inline std::vector<int32_t> mask_ids(std::span<const uint32_t> mask, int32_t n_vocab) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < n_vocab; ++i) {
        if ((mask[size_t(i) >> 5] >> (i & 31)) & 1) ids.push_back(i);
    }
    return ids;
}

// A token that lowers bytes_to_complete (or an allowed end-of-generation token when complete):
// random candidates first, then every allowed token, shortest first.
inline int32_t progress_token(tandem::grammar_matcher &m, const std::vector<int32_t> &allowed,
                              const std::vector<std::string> &tokens, const std::vector<int32_t> &eog_ids,
                              std::mt19937_64 &rng) {
    if (m.is_complete()) {
        for (int32_t id : eog_ids) {
            if (std::find(allowed.begin(), allowed.end(), id) != allowed.end()) return id;
        }
        throw std::runtime_error("complete, but no end-of-generation token is allowed");
    }
    const uint64_t now = m.bytes_to_complete();
    const auto lowers = [&](int32_t id) {
        const tandem::grammar_snapshot s = m.snapshot();
        const bool ok = m.accept_token(id) && (m.is_terminated() || m.bytes_to_complete() < now);
        m.restore(s);
        return ok;
    };
    for (int tries = 0; tries < 32; ++tries) {
        const int32_t id = allowed[size_t(rng() % allowed.size())];
        if (lowers(id)) return id;
    }
    // One byte on a shortest completion always lowers the distance: single-byte tokens first.
    for (int32_t id : allowed) {
        if (tokens[size_t(id)].size() == 1 && lowers(id)) return id;
    }
    for (int32_t id : allowed) {
        if (lowers(id)) return id;
    }
    throw std::runtime_error("no allowed token brings the output closer to complete");
}

// Returns the bytes generated (end-of-generation token excluded); the matcher ends terminated.
inline std::string random_walk(tandem::grammar_matcher &m, const tandem::grammar_vocab &vocab,
                               const std::vector<std::string> &tokens, const std::vector<int32_t> &eog_ids,
                               std::mt19937_64 &rng, const walk_options &opt = {}) {
    std::vector<uint32_t> mask(size_t(vocab.n_mask_words()));
    std::string out;
    for (size_t step = 0; !m.is_terminated(); ++step) {
        if (step > opt.max_tokens) throw std::runtime_error("walk did not end");
        m.fill_mask(mask);
        const std::vector<int32_t> allowed = mask_ids(mask, vocab.n_vocab());
        if (allowed.empty()) throw std::runtime_error("empty mask before the end: " + out);
        const bool progress = step >= opt.cap_tokens || rng() % 100 < opt.progress_pct;
        const int32_t id = progress ? progress_token(m, allowed, tokens, eog_ids, rng) : allowed[size_t(rng() % allowed.size())];
        if (!m.accept_token(id)) throw std::runtime_error("a token from the mask was refused");
        if (std::find(eog_ids.begin(), eog_ids.end(), id) == eog_ids.end()) out += tokens[size_t(id)];
    }
    return out;
}

}  // namespace grammar_test
