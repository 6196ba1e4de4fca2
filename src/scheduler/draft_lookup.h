// src/scheduler/draft_lookup.h - prompt-lookup drafts for speculative decoding: the tokens that
// followed the most recent earlier occurrence of a session's last n tokens (n from ngram_max down to
// ngram_min), proposed as the next ones. No model: a draft is only a guess the next step checks.
// The scheduler feeds a session's drafts as extra decode rows and keeps those its own sampler
// draws (draft_accept), so the output is exactly the output without drafts, token for token.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tandem {

struct draft_options {
    int32_t n_max = 0;      // most drafted tokens a step per session (0: no drafting)
    int32_t ngram_min = 2;  // shortest suffix that may be looked up
    int32_t ngram_max = 4;  // longest (tried first)
};

// One session's history (prompt, then every accepted token) and an index of its n-grams.
class draft_lookup {
public:
    explicit draft_lookup(const draft_options &options);

    // Appends tokens to the history (the prompt, then accepted tokens).
    void append(std::span<const int32_t> tokens);
    void append(int32_t token) { append(std::span<const int32_t>(&token, 1)); }
    size_t size() const { return tokens_.size(); }

    // Up to n tokens that followed the most recent earlier occurrence of the history's longest
    // matching suffix (ngram_max .. ngram_min tokens); empty when none occurs or n <= 0. Where the
    // continuation reaches the end of the history, it goes on as if the draft had been appended
    // (a repeating pattern drafts its full length).
    std::vector<int32_t> propose(int32_t n) const;

private:
    uint64_t key(size_t end, int32_t n) const;  // hash of tokens_[end - n, end)

    draft_options options_;
    std::vector<int32_t> tokens_;
    // Per n-gram length (index n - ngram_min): hash of the n tokens ending at e (exclusive) -> the
    // latest such e, for every e < tokens_.size() (the current suffix itself is never indexed).
    std::vector<std::unordered_map<uint64_t, uint32_t>> index_;
};

// How many of the drafted tokens a step keeps: `sampled[i]` is the token drawn from row i of the
// session's rows (row 0 fed the last accepted token, row i + 1 draft[i]); row i + 1's draw stands
// only while every earlier draw equalled the draft fed after it. Returns the number of leading
// drafts equal to their preceding draw (0 .. draft.size()); sampled must hold at least that + 1.
size_t draft_accepted(std::span<const int32_t> draft, std::span<const int32_t> sampled);

// An adaptive draft length: grows by one after a step that kept every draft, halves after one that
// kept none, between 1 and options.n_max.
class draft_length {
public:
    explicit draft_length(int32_t n_max) : n_max_(n_max), n_(n_max) {}
    int32_t next() const { return n_; }
    void record(size_t proposed, size_t accepted);

private:
    int32_t n_max_, n_;
};

}  // namespace tandem
