// src/scheduler/prefill_budget.h - how many prompt tokens a step may carry while sessions decode,
// sized by measured step time so that a long prefill keeps the decoders' inter-token latency
// within --itl-budget times that of a decode-only step (DESIGN.md section 7).
// Pure policy: it sees (rows in the call, seconds) pairs and never reads a clock, so tests drive
// it with synthetic timings.
#pragma once

#include <cstdint>
#include <map>

namespace tandem {

class prefill_budget {
public:
    // The prefill always advances: a step with decode rows carries at least this many prompt
    // tokens. 1, not more: with 15 sessions decoding, one prompt row keeps a call at 16 rows (the
    // CUDA engine's largest graph bucket), a second one leaves the graph path and costs ~5x.
    static constexpr int32_t min_tokens = 1;

    // prefill_yield >= 1: the most prompt tokens per step while anyone decodes.
    // itl_budget >= 1.0: a step with prompt rows may take this many times a decode-only step.
    prefill_budget(int32_t prefill_yield, double itl_budget);

    // One engine call's wall time. Steps are keyed by their total row count: what a call costs
    // depends on how many rows it has (the CUDA engine picks a graph bucket or the direct path by
    // it), not on whether they are decode or prompt rows.
    void record(int32_t n_rows, double seconds);

    // Prompt tokens for a step with n_decode >= 1 decode rows: the most, up to prefill_yield,
    // whose predicted step time stays within itl_budget x waiting_share x the predicted time of
    // n_decode rows; never below min_tokens. waiting_share = max(1, sessions waiting in prefill /
    // n_decode): a burst of newcomers behind few decoders is admitted in few steps (their
    // time-to-first-token outweighs a few slow steps of the few), while one long prompt among many
    // decoders keeps the plain bound. Until two row counts have been measured: a probe of
    // n_decode x waiting_share tokens, capped.
    int32_t tokens(int32_t n_decode, int32_t n_waiting = 1) const;

    // Predicted seconds for a call of n_rows rows; < 0 when nothing has been measured.
    // Between measured row counts: linear interpolation. Above the largest: the last segment's
    // slope (never negative). Below the smallest: the smallest's time.
    double predict(int32_t n_rows) const;

    int32_t prefill_yield() const { return prefill_yield_; }
    double itl_budget() const { return itl_budget_; }

private:
    // Largest n in [lo, hi] with predict(n) <= limit; 0 when there is none.
    int64_t largest_within(int64_t lo, int64_t hi, double limit) const;

    int32_t prefill_yield_;
    double itl_budget_;
    // Exponential moving average of the seconds per call, by rows in the call. Only row counts
    // that occurred are held: a handful in practice (decode counts, decode + chosen prompt rows).
    std::map<int32_t, double> step_seconds_;
    std::map<int32_t, int32_t> samples_;  // calls timed per row count
};

}  // namespace tandem
