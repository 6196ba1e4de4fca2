// tests/server/fake_engine.h - a deterministic stand-in for tandem::engine in scheduler tests:
// each row's logits are a pure function of its slot's token history up to that row (or of its last
// few tokens: set_context), so batch invariance, prefix reuse and truncation are checkable without a
// model. Records every call.
#pragma once

#include "src/scheduler/scheduler.h"
#include "tandem/error.h"

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::testing {

class fake_engine : public engine {
public:
    fake_engine(int32_t n_slots, int32_t n_ctx, int32_t n_vocab) : n_ctx_(n_ctx), history_(static_cast<size_t>(n_slots)) {
        hp_.n_vocab = n_vocab;
        hp_.arch_name = "fake";
    }

    const model_hparams &hparams() const override { return hp_; }
    int32_t n_slots() const override { return static_cast<int32_t>(history_.size()); }
    int32_t n_ctx() const override { return n_ctx_; }

    // Whole rows for the output rows, then their summaries and draws on the host, as a backend
    // without device reductions makes them; counts what the call's rows asked for.
    void forward(std::span<const engine_row> rows, engine_outputs &out) override {
        forward_logits(rows, out.logits);
        engine_outputs_from_logits(rows, hp_.n_vocab, false, out);
        bool logits = false, best = true, draw = false;
        for (const engine_row &r : rows) {
            if (r.want == row_output::none) continue;
            logits = logits || r.want == row_output::logits;
            best = best && r.want == row_output::best;
            draw = draw || r.draw.temperature > 0.0f;
        }
        std::lock_guard lock(mutex_);
        logits_calls_ += logits ? 1 : 0;
        best_calls_ += best ? 1 : 0;
        draw_calls_ += draw ? 1 : 0;
    }
    // Calls in which some row wanted whole logits; whose output rows all wanted their best token
    // alone (calls without output rows count); with at least one draw request.
    int64_t logits_calls() const {
        std::lock_guard lock(mutex_);
        return logits_calls_;
    }
    int64_t best_calls() const {
        std::lock_guard lock(mutex_);
        return best_calls_;
    }
    int64_t draw_calls() const {
        std::lock_guard lock(mutex_);
        return draw_calls_;
    }

    int32_t slot_length(int32_t slot) const override {
        std::lock_guard lock(mutex_);
        return static_cast<int32_t>(history_.at(static_cast<size_t>(slot)).size());
    }
    void slot_truncate(int32_t slot, int32_t n_keep) override {
        std::lock_guard lock(mutex_);
        auto &h = history_.at(static_cast<size_t>(slot));
        TANDEM_ASSERT(n_keep >= 0 && static_cast<size_t>(n_keep) <= h.size());
        h.resize(static_cast<size_t>(n_keep));
    }
    std::string layout() const override { return "fake: 1 device"; }

    // K/V moves for the prompt cache and slot files (off unless asked): a slot's "KV" is its token
    // history, so a blob token is the int32 id the slot saw at that position.
    void enable_kv_moves() { kv_moves_ = true; }
    // Host memory handed out as host_pinned's (off unless asked); exports counted by where they land.
    void enable_host_pinned() { pinned_ = true; }
    std::shared_ptr<uint8_t> host_pinned(size_t bytes) override {
        if (!pinned_) return nullptr;
        std::lock_guard lock(mutex_);
        region_.reset(new uint8_t[bytes], std::default_delete<uint8_t[]>());
        region_bytes_ = bytes;
        return region_;
    }
    int64_t exports_into_region() const {
        std::lock_guard lock(mutex_);
        return exports_in_region_;
    }
    int64_t exports_elsewhere() const {
        std::lock_guard lock(mutex_);
        return exports_elsewhere_;
    }
    uint64_t kv_token_bytes() const override { return kv_moves_ ? sizeof(int32_t) : 0; }
    void slot_export(int32_t slot, int32_t n_tokens, std::span<uint8_t> out) override {
        std::lock_guard lock(mutex_);
        const auto &h = history_.at(static_cast<size_t>(slot));
        TANDEM_ASSERT(kv_moves_ && n_tokens >= 0 && static_cast<size_t>(n_tokens) <= h.size() &&
                      out.size() == static_cast<size_t>(n_tokens) * sizeof(int32_t));
        std::memcpy(out.data(), h.data(), out.size());
        const bool in_region = region_ && out.data() >= region_.get() && out.data() < region_.get() + region_bytes_;
        (in_region ? exports_in_region_ : exports_elsewhere_) += 1;
    }
    void slot_import(int32_t slot, std::span<const uint8_t> in) override {
        std::lock_guard lock(mutex_);
        TANDEM_ASSERT(kv_moves_ && in.size() % sizeof(int32_t) == 0 && in.size() / sizeof(int32_t) <= size_t(n_ctx_));
        auto &h = history_.at(static_cast<size_t>(slot));
        h.resize(in.size() / sizeof(int32_t));
        std::memcpy(h.data(), in.data(), in.size());
    }
    void slot_copy(int32_t src, int32_t dst, int32_t n_tokens) override {
        std::lock_guard lock(mutex_);
        const auto &from = history_.at(static_cast<size_t>(src));
        TANDEM_ASSERT(kv_moves_ && n_tokens >= 0 && static_cast<size_t>(n_tokens) <= from.size());
        history_.at(static_cast<size_t>(dst)).assign(from.begin(), from.begin() + n_tokens);
    }

    // Logits from the last n tokens of a history only (0: all of it). With n = 1 greedy output
    // falls into a cycle within n_vocab tokens, which prompt-lookup drafts then predict.
    void set_context(size_t n) { context_ = n; }

    // Logits for a history: hashed into a seed, expanded by splitmix64 into values in [-4, 4).
    void logits_of(const std::vector<int32_t> &h, float *out) const {
        uint64_t x = 1469598103934665603ull;
        const size_t from = context_ > 0 && h.size() > context_ ? h.size() - context_ : 0;
        for (size_t i = from; i < h.size(); ++i) x = (x ^ static_cast<uint64_t>(h[i])) * 1099511628211ull;
        for (int32_t v = 0; v < hp_.n_vocab; ++v) {
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            out[v] = static_cast<float>(static_cast<double>(z >> 11) / 9007199254740992.0 * 8.0 - 4.0);
        }
    }

    std::vector<std::vector<engine_row>> calls() const {
        std::lock_guard lock(mutex_);
        return calls_;
    }
    void clear_calls() {
        std::lock_guard lock(mutex_);
        calls_.clear();
    }
    void set_delay(std::chrono::milliseconds d) { delay_ = d; }
    // Rows of `slot` get a NaN logit once the slot holds more than `after` tokens (a broken model).
    void set_nan(int32_t slot, size_t after) {
        std::lock_guard lock(mutex_);
        nan_slot_ = slot;
        nan_after_ = after;
    }
    void fail_next() {
        std::lock_guard lock(mutex_);
        fail_next_ = true;
    }

private:
    void forward_logits(std::span<const engine_row> rows, std::vector<float> &logits) {
        if (delay_.count() > 0) std::this_thread::sleep_for(delay_);  // lets shutdown tests see work in flight
        std::lock_guard lock(mutex_);
        if (fail_next_) {
            fail_next_ = false;
            fail(error_kind::internal, "fake engine failure (requested by the test)");
        }
        // Check the contract before touching any state.
        std::vector<size_t> len(history_.size());
        for (size_t s = 0; s < history_.size(); ++s) len[s] = history_[s].size();
        for (const auto &r : rows) {
            if (r.slot < 0 || r.slot >= n_slots()) fail(error_kind::internal, "row slot {} out of range", r.slot);
            if (r.pos != static_cast<int32_t>(len[static_cast<size_t>(r.slot)]))
                fail(error_kind::internal, "slot {}: row pos {} but the slot holds {}", r.slot, r.pos, len[static_cast<size_t>(r.slot)]);
            if (r.pos >= n_ctx_) fail(error_kind::internal, "slot {}: pos {} beyond the context {}", r.slot, r.pos, n_ctx_);
            if (r.token < 0 || r.token >= hp_.n_vocab) fail(error_kind::internal, "token {} out of range", r.token);
            ++len[static_cast<size_t>(r.slot)];
        }
        logits.clear();
        for (const auto &r : rows) {
            auto &h = history_[static_cast<size_t>(r.slot)];
            h.push_back(r.token);
            if (r.want != row_output::none) {
                size_t at = logits.size();
                logits.resize(at + static_cast<size_t>(hp_.n_vocab));
                logits_of(h, logits.data() + at);
                if (r.slot == nan_slot_ && h.size() > nan_after_) logits[at + 1] = std::numeric_limits<float>::quiet_NaN();
            }
        }
        calls_.emplace_back(rows.begin(), rows.end());
    }

    model_hparams hp_;
    int32_t n_ctx_;
    mutable std::mutex mutex_;
    std::vector<std::vector<int32_t>> history_;
    std::vector<std::vector<engine_row>> calls_;
    bool fail_next_ = false;
    int64_t logits_calls_ = 0, draw_calls_ = 0, best_calls_ = 0;
    size_t context_ = 0;
    int32_t nan_slot_ = -1;
    size_t nan_after_ = 0;
    std::chrono::milliseconds delay_{0};
    bool kv_moves_ = false, pinned_ = false;
    std::shared_ptr<uint8_t> region_;
    size_t region_bytes_ = 0;
    int64_t exports_in_region_ = 0, exports_elsewhere_ = 0;
};

// Greedy argmax with log-softmax logprobs (lowest id wins ties, like tandem::argmax). It takes
// whole rows for temperature requests with a top_k over logits_top_max (fake_hooks), so both of
// the scheduler's paths run; its picks are greedy either way.
class fake_greedy_picker : public token_picker {
public:
    explicit fake_greedy_picker(int32_t n_top, bool from_top = true) : n_top_(n_top), from_top_(from_top) {}
    sample_result pick(std::span<const float> logits, const logits_top * = nullptr) override {
        int32_t best = 0;
        for (size_t i = 1; i < logits.size(); ++i)
            if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
        double sum = 0.0;
        for (float v : logits) sum += std::exp(static_cast<double>(v - logits[static_cast<size_t>(best)]));
        double lse = logits[static_cast<size_t>(best)] + std::log(sum);
        sample_result r;
        r.id = best;
        r.logprob = static_cast<float>(logits[static_cast<size_t>(best)] - lse);
        if (n_top_ > 0) r.top.push_back({best, r.logprob});
        return r;
    }
    bool picks_from_top() const override { return from_top_; }
    sample_result pick_top(const logits_top &top) override {
        sample_result r;
        r.id = top.top[0].id;
        r.logprob = static_cast<float>(double(top.top[0].logit) - top.log_norm);
        if (n_top_ > 0) r.top.push_back({r.id, r.logprob});
        return r;
    }

private:
    int32_t n_top_;
    bool from_top_;
};

// Token id -> one letter: 'a' + id % 26.
class fake_text_stream : public text_stream {
public:
    std::string push(int32_t id) override { return std::string(1, static_cast<char>('a' + id % 26)); }
    std::string flush() override { return {}; }
};

inline scheduler_hooks fake_hooks(int32_t eog_id) {
    scheduler_hooks h;
    h.is_eog = [eog_id](int32_t id) { return id == eog_id; };
    h.make_text_stream = [] { return std::make_unique<fake_text_stream>(); };
    h.make_picker = [](const sampling_params &p) {
        const bool needs_row = p.temperature > 0.0f && p.top_k > logits_top_max;
        return std::make_unique<fake_greedy_picker>(p.n_logprobs, !needs_row);
    };
    return h;
}

// The greedy continuation computed directly on a private one-slot fake engine, one token at a
// time: the reference the scheduler's output must match.
inline std::vector<int32_t> fake_greedy_reference(int32_t n_vocab, const std::vector<int32_t> &prompt, int32_t n,
                                                  int32_t eog_id = -1, size_t context = 0) {
    fake_engine e(1, 1 << 20, n_vocab);
    e.set_context(context);
    std::vector<int32_t> h = prompt, out;
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    fake_greedy_picker picker(0);
    for (int32_t i = 0; i < n; ++i) {
        e.logits_of(h, logits.data());
        int32_t t = picker.pick(logits).id;
        out.push_back(t);
        if (t == eog_id) break;
        h.push_back(t);
    }
    return out;
}

}  // namespace tandem::testing
