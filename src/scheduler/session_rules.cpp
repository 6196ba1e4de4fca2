// src/scheduler/session_rules.cpp - a session's logit rules: the adjustments from logit_bias and the
// penalties' window, the grammar's mask, and the steering that lets a constrained output end within
// its length limit.
#include "src/scheduler/session_rules.h"

#include "tandem/error.h"

#include <algorithm>

namespace tandem {

// Picks before a constrained output's length limit could first bind (left = distance + 1) from which
// every pick is checked to leave room to finish, at least: one token of a recursive grammar can
// open a structure tens of bytes long, so the margin also grows with the largest rise seen.
constexpr int64_t steer_margin = 64;

constraint_table::constraint_table(std::shared_ptr<const grammar_vocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(capacity, 1)) {
    TANDEM_ASSERT(vocab_ != nullptr);
}

std::shared_ptr<const grammar_constraint> constraint_table::bind(const grammar &g) {
    const std::string &key = g.gbnf();
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        if (it->first != key) continue;
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
    }
    lru_.emplace_front(key, std::make_shared<const grammar_constraint>(g, *vocab_));
    if (lru_.size() > capacity_) lru_.pop_back();  // sessions using it keep it alive
    return lru_.front().second;
}

bool session_rules::wanted(const sampling_params &params, bool constrained) {
    return constrained || params.has_penalties() || !params.logit_bias.empty();
}

session_rules::session_rules(const sampling_params &params, std::span<const int32_t> prompt, int32_t n_vocab, session_constraint c)
    : params_(params), n_vocab_(n_vocab), c_(std::move(c)) {
    TANDEM_ASSERT(n_vocab_ > 0);
    for (const auto &[id, bias] : params_.logit_bias)
        if (id < 0 || id >= n_vocab_)
            fail(error_kind::invalid_request, "logit_bias: token id {} is out of range (the vocabulary has {} tokens)", id, n_vocab_);
    if (params_.has_penalties()) {
        const size_t n = params_.repeat_last_n < 0 ? prompt.size() : std::min(prompt.size(), size_t(params_.repeat_last_n));
        for (int32_t id : prompt.subspan(prompt.size() - n)) window_push(id);
    }
    if (c_.constraint) {
        if (c_.constraint->vocab().n_vocab() > n_vocab_)
            fail(error_kind::internal, "the grammar vocabulary has {} tokens, the model's rows {}", c_.constraint->vocab().n_vocab(), n_vocab_);
        mask_.assign(size_t(n_vocab_ + 31) / 32, 0u);
        if (c_.after.empty()) matcher_ = std::make_unique<grammar_matcher>(*c_.constraint);
        else TANDEM_ASSERT(c_.token_bytes != nullptr, "a constraint after a text needs the tokens' bytes");
    }
}

void session_rules::window_push(int32_t id) {
    window_.push_back(id);
    ++counts_[id];
    if (params_.repeat_last_n < 0 || window_.size() <= size_t(params_.repeat_last_n)) return;
    const int32_t old = window_.front();
    window_.pop_front();
    if (--counts_[old] == 0) counts_.erase(old);
}

// Both lists are ascending: one merge gives each token's adjustment once, neutral ones left out.
void session_rules::build_adjust() {
    adjust_.clear();
    auto c = counts_.begin();
    auto b = params_.logit_bias.begin();
    while (c != counts_.end() || b != params_.logit_bias.end()) {
        const bool take_c = c != counts_.end() && (b == params_.logit_bias.end() || c->first <= b->first);
        const bool take_b = b != params_.logit_bias.end() && (c == counts_.end() || b->first <= c->first);
        token_adjust a;
        a.id = take_c ? c->first : b->first;
        if (take_b) a.bias = b->second;
        if (take_c) {
            a.repeat = params_.repeat_penalty;
            a.subtract = float(c->second) * params_.frequency_penalty + params_.presence_penalty;
        }
        if (a.bias != 0.0f || a.repeat != 1.0f || a.subtract != 0.0f) adjust_.push_back(a);
        if (take_c) ++c;
        if (take_b) ++b;
    }
}

// With `left` picks to go, a pick must leave room to finish: after it, left - 1 picks remain, the
// last an end token and each other at least one byte, so its output may be at most left - 2 bytes
// from complete (or the pick is the end token). Some token always qualifies while the output is no
// more than left - 1 bytes from complete (a byte on a shortest completion), which the rule keeps
// true once applied; it is applied from a margin of picks before it could first bind, since one
// token may take the output many bytes further. Each allowed token is tried (parsed and rolled
// back): the cost of the last few picks of a generation that would otherwise be cut off.
bool session_rules::steer(int64_t left) {
    const uint64_t distance = matcher_->bytes_to_complete();
    const int64_t margin = std::max<int64_t>(steer_margin, 2 * max_rise_);
    if (distance < uint64_t(INT64_MAX / 2) && left > int64_t(distance) + 1 + margin) return false;
    const int64_t room = left - 2;
    std::vector<uint32_t> fits(mask_.size(), 0u);
    bool any = false;
    for (size_t w = 0; w < mask_.size(); ++w) {
        for (uint32_t bits = mask_[w]; bits != 0; bits &= bits - 1) {
            const int32_t id = int32_t(w * 32 + size_t(__builtin_ctz(bits)));
            const grammar_snapshot at = matcher_->snapshot();
            const bool ok = matcher_->accept_token(id) &&
                            (matcher_->is_terminated() || (room >= 0 && matcher_->bytes_to_complete() <= uint64_t(room)));
            matcher_->restore(at);
            if (!ok) continue;
            fits[w] |= 1u << (id & 31);
            any = true;
        }
    }
    if (any) mask_.swap(fits);  // else it cannot end in time whatever it picks: the grammar's mask
    return any;
}

const row_rules *session_rules::next_row(int64_t left) {
    if (params_.has_penalties() || !params_.logit_bias.empty()) build_adjust();
    rules_ = row_rules{adjust_, {}};
    if (matcher_) {
        matcher_->fill_mask(mask_);
        if (std::all_of(mask_.begin(), mask_.end(), [](uint32_t w) { return w == 0; }))
            fail(error_kind::invalid_request, "the output's grammar allows no token of this model's vocabulary after {} tokens",
                 matcher_->n_tokens());
        steer(left);
        rules_.allowed = mask_;
    }
    return rules_.empty() ? nullptr : &rules_;
}

bool session_rules::accept(int32_t id) {
    if (params_.has_penalties()) window_push(id);
    if (matcher_) {
        const uint64_t before = matcher_->bytes_to_complete();
        if (!matcher_->accept_token(id)) return false;
        const uint64_t after = matcher_->bytes_to_complete();
        if (after > before && after - before < uint64_t(INT64_MAX / 4)) max_rise_ = std::max(max_rise_, int64_t(after - before));
        return true;
    }
    if (!c_.constraint) return true;
    // Not yet under the grammar: look for the text that starts it; the bytes after it are the
    // grammar's first.
    seen_ += c_.token_bytes(id);
    const size_t at = seen_.find(c_.after);
    if (at == std::string::npos) {
        if (seen_.size() >= c_.after.size()) seen_.erase(0, seen_.size() - (c_.after.size() - 1));
        return true;
    }
    const std::string rest = seen_.substr(at + c_.after.size());
    seen_.clear();
    matcher_ = std::make_unique<grammar_matcher>(*c_.constraint);
    return rest.empty() || matcher_->accept_bytes(rest);
}

}  // namespace tandem
