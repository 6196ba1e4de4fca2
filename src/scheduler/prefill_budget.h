// src/scheduler/prefill_budget.h - how many prompt tokens a step may carry while sessions decode,
// sized by measured step time so that a long prefill keeps the decoders' inter-token latency
// within --itl-budget times that of a decode-only step (DESIGN.md section 7).
// Pure policy: it sees (rows in the call, seconds) pairs and never reads a clock, so tests drive
// it with synthetic timings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace tandem {

// Seconds per engine call as a function of its row count: a moving average per row count that
// occurred, piecewise linear between them.
class step_time_curve {
public:
    void record(int32_t n_rows, double seconds);
    void set(int32_t n_rows, double seconds);  // a point as is (n_rows >= 0), no averaging
    // < 0 when nothing has been measured. Between measured row counts: linear interpolation.
    // Above the largest: the last segment's slope (never negative). Below the smallest: the first
    // segment's slope when below_slope (never negative, never under 0 s), else the smallest's time.
    double predict(int32_t n_rows, bool below_slope = false) const;
    // Largest n in [lo, hi] with predict(n, below_slope) <= limit; 0 when there is none.
    int64_t largest_within(int64_t lo, int64_t hi, double limit, bool below_slope) const;
    std::size_t sizes() const { return seconds_.size(); }
    bool timed(int32_t n_rows) const { return seconds_.count(n_rows) > 0; }
    // Calls recorded at n_rows (set() adds none).
    int32_t calls(int32_t n_rows) const {
        auto it = calls_.find(n_rows);
        return it == calls_.end() ? 0 : it->second;
    }

private:
    std::map<int32_t, double> seconds_;
    std::map<int32_t, int32_t> samples_;  // calls timed per row count (set() counts as two)
    std::map<int32_t, int32_t> calls_;    // calls recorded per row count
};

class prefill_budget {
public:
    // The prefill always advances: a step with decode rows carries at least this many prompt
    // tokens. 1, not more: the floor only guarantees progress; how many more a step can carry is
    // what the measured times decide (on CUDA the first prompt row already costs a pass of its own).
    static constexpr int32_t min_tokens = 1;

    // prefill_yield >= 1: the most prompt tokens per step while anyone decodes.
    // itl_budget >= 1.0: a step with prompt rows may take this many times a decode-only step.
    prefill_budget(int32_t prefill_yield, double itl_budget);

    // One engine call's wall time, by its decode rows and prompt rows. A step is modelled as the
    // decode rows' time (a curve over decode-only calls, by rows) plus what its prompt rows add
    // (a curve by prompt rows: a call's time less its decode rows' predicted time; a call
    // without decode rows counts whole). The CUDA engine runs prompt rows as a pass of their own
    // after the decode rows (their own kernels), so one prompt row can add more than the next
    // hundred do; a single curve over all calls by their total rows hid that jump between
    // n_decode and n_decode + 1 rows.
    void record(int32_t n_decode, int32_t n_prompt, double seconds);

    // Prompt tokens for a step with n_decode >= 1 decode rows: the most, up to prefill_yield,
    // whose predicted step time stays within itl_budget x waiting_share x the predicted time of
    // n_decode rows, or within 1.25 x the predicted time of the step with min_tokens prompt rows
    // when that is larger (prompt steps whose fixed cost alone breaks the bound: then fewer, fuller
    // slow steps beat many thin ones); never below min_tokens. waiting_share = max(1, sessions
    // waiting in prefill / n_decode): a burst of newcomers behind few decoders is admitted in few
    // steps (their time-to-first-token outweighs a few slow steps of the few), while one long
    // prompt among many decoders keeps the plain bound. Until a decode-only call and a call with
    // prompt rows have been timed: a probe of n_decode x waiting_share tokens, capped. With one
    // prompt size timed, what prompt rows add is taken as proportional to their number, and a plan
    // for that same size takes one token more (or less) to time a second. Under the 1.25 x rule,
    // once for every 16 calls recorded at the planned share k, the plan is min(2 k, yield) instead
    // (a probe), so a share held down by a dear-looking neighbour is found out.
    int32_t tokens(int32_t n_decode, int32_t n_waiting = 1) const;

    // Predicted seconds of a call of n_rows decode rows (predict), or of n_decode decode rows and
    // n_rows - n_decode > 0 prompt rows (predict_with_prompt); < 0 when nothing has been measured.
    double predict(int32_t n_rows) const { return decode_.predict(n_rows); }
    double predict_with_prompt(int32_t n_decode, int32_t n_rows) const;

    int32_t prefill_yield() const { return prefill_yield_; }
    double itl_budget() const { return itl_budget_; }

private:
    int32_t prefill_yield_;
    double itl_budget_;
    step_time_curve decode_;        // calls of decode rows only, by rows
    step_time_curve prompt_extra_;  // what prompt rows add to a call, by prompt rows
};

}  // namespace tandem
