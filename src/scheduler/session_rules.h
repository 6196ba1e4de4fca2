// src/scheduler/session_rules.h - one session's logit rules (tandem/logit_rules.h), made afresh for
// each of its output rows: logit_bias, llama.cpp's penalties over the window of its last tokens, and
// the allowed-token mask of its grammar (constrained decoding), steered towards a complete output
// when the length limit comes near. Also the table that binds grammars to the tokenizer's vocabulary
// once, so that sessions under the same grammar share its cached token sets.
#pragma once

#include "tandem/grammar.h"
#include "tandem/logit_rules.h"
#include "tandem/sampler.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

// The raw bytes of a token id (tokenizer::token_bytes).
using token_bytes_fn = std::function<const std::string &(int32_t)>;

// Grammars bound to one vocabulary, shared by the sessions that use them. Engine thread only.
class constraint_table {
public:
    explicit constraint_table(std::shared_ptr<const grammar_vocab> vocab, size_t capacity = 64);
    // The grammar's constraint, by its GBNF text: the same object for every session under the
    // same grammar while it stays among the `capacity` most recently used.
    std::shared_ptr<const grammar_constraint> bind(const grammar &g);
    const grammar_vocab &vocab() const { return *vocab_; }

private:
    std::shared_ptr<const grammar_vocab> vocab_;
    size_t capacity_;
    std::list<std::pair<std::string, std::shared_ptr<const grammar_constraint>>> lru_;  // most recent first
};

// The grammar a session's output must match, and what its rules need to know of the vocabulary.
struct session_constraint {
    std::shared_ptr<const grammar_constraint> constraint;  // null: none
    std::string after;                  // the constraint applies once the output holds this (empty: at once)
    token_bytes_fn token_bytes;         // needed with `after`
};

class session_rules {
public:
    // prompt: the session's prompt, whose last tokens start the penalties' window. n_vocab: the
    // engine's (its logits rows' width, at least the grammar vocabulary's).
    session_rules(const sampling_params &params, std::span<const int32_t> prompt, int32_t n_vocab, session_constraint c = {});

    // Whether the session's rows carry rules (else it needs no session_rules at all).
    static bool wanted(const sampling_params &params, bool constrained);

    // The rules of the session's next output row, valid until the next call; `left`: the picks the
    // session may still make, this one included (its length limit). Near the limit a constrained
    // session may only take tokens after which its output can still be completed and ended within
    // the picks left. Null when the row needs none. Throws error(invalid_request) when the grammar
    // allows no token of the vocabulary.
    const row_rules *next_row(int64_t left);
    // The token picked from that row: into the window and through the grammar. False when the
    // grammar refuses it (only a token the mask did not allow can be refused).
    bool accept(int32_t id);

    bool constrained() const { return c_.constraint != nullptr; }
    bool constraint_active() const { return matcher_ != nullptr; }
    bool complete() const { return matcher_ && matcher_->is_complete(); }

private:
    void window_push(int32_t id);
    void build_adjust();
    bool steer(int64_t left);

    sampling_params params_;
    int32_t n_vocab_ = 0;
    std::deque<int32_t> window_;       // the last repeat_last_n tokens (all of them for -1)
    std::map<int32_t, int32_t> counts_;  // occurrences in the window, by id
    session_constraint c_;
    std::unique_ptr<grammar_matcher> matcher_;  // from the point the constraint applies
    std::string seen_;                 // output bytes looked at for c_.after so far
    int64_t max_rise_ = 0;             // the most one accepted token added to the bytes still needed
    std::vector<token_adjust> adjust_;
    std::vector<uint32_t> mask_;       // [(n_vocab + 31) / 32]
    row_rules rules_;
};

}  // namespace tandem
