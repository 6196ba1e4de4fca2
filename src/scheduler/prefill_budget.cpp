// src/scheduler/prefill_budget.cpp - the step-time model (a moving average per row count,
// piecewise linear between them) and the largest prompt share that fits the latency budget.
#include "src/scheduler/prefill_budget.h"

#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace tandem {

// Weight of a new sample: about four samples of memory, so the estimate follows slow drift (KV
// lengths grow) and a one-off spike (a CUDA graph captured on first use of a bucket) fades after
// a dozen calls of that size.
static constexpr double ema_weight = 0.25;
// Relative slack when comparing a prediction with the limit, so that a budget that divides
// exactly (1 ms + 10 x 0.1 ms = 2 ms) is not lost to rounding.
static constexpr double limit_slack = 1e-9;

prefill_budget::prefill_budget(int32_t prefill_yield, double itl_budget)
    : prefill_yield_(prefill_yield), itl_budget_(itl_budget) {
    if (prefill_yield_ < 1) fail(error_kind::config, "--prefill-yield must be >= 1, got {}", prefill_yield_);
    if (!(itl_budget_ >= 1.0)) fail(error_kind::config, "--itl-budget must be >= 1.0, got {}", itl_budget_);
}

void prefill_budget::record(int32_t n_rows, double seconds) {
    if (n_rows < 1 || !(seconds >= 0.0) || !std::isfinite(seconds)) return;
    auto [it, inserted] = step_seconds_.try_emplace(n_rows, seconds);
    const int32_t seen = ++samples_[n_rows];
    // The first call of a size can include one-off work (a CUDA graph captured for its bucket:
    // tens of ms across GPUs), so the second sample replaces it instead of averaging with it.
    if (seen == 2) it->second = seconds;
    else if (!inserted) it->second += ema_weight * (seconds - it->second);
}

double prefill_budget::predict(int32_t n_rows) const {
    if (step_seconds_.empty()) return -1.0;
    auto hi = step_seconds_.lower_bound(n_rows);
    if (hi != step_seconds_.end() && hi->first == n_rows) return hi->second;
    if (hi == step_seconds_.begin()) return hi->second;  // below the smallest measured
    auto lo = std::prev(hi);
    if (hi == step_seconds_.end()) {
        // Above the largest measured: continue the last segment, never downwards.
        if (lo == step_seconds_.begin()) return lo->second;
        auto before = std::prev(lo);
        double slope = std::max(0.0, (lo->second - before->second) / static_cast<double>(lo->first - before->first));
        return lo->second + slope * static_cast<double>(n_rows - lo->first);
    }
    double f = static_cast<double>(n_rows - lo->first) / static_cast<double>(hi->first - lo->first);
    return lo->second + f * (hi->second - lo->second);
}

int64_t prefill_budget::largest_within(int64_t lo, int64_t hi, double limit) const {
    // The prediction is linear on each region between measured row counts; regions are visited
    // from the top, so the first n found is the largest.
    auto best_on = [&](int64_t a, int64_t b, int64_t n0, double t0, double slope) -> int64_t {
        a = std::max(a, lo);
        b = std::min(b, hi);
        if (a > b) return 0;
        auto at = [&](int64_t n) { return t0 + slope * static_cast<double>(n - n0); };
        if (at(b) <= limit) return b;
        if (slope <= 0.0) return 0;  // non-increasing and over the limit at b: over it everywhere
        // Rows past n0 that fit; at(b) > limit bounds it by b - n0 (the min guards the cast).
        double reach = std::min(std::floor((limit - t0) / slope), static_cast<double>(b - n0));
        if (reach < static_cast<double>(a - n0)) return 0;
        int64_t n = std::min(b, n0 + static_cast<int64_t>(reach));
        while (n >= a && at(n) > limit) --n;  // rounding in the division
        return n >= a ? n : 0;
    };
    const auto first = step_seconds_.begin();
    const auto last = std::prev(step_seconds_.end());
    double top_slope = 0.0;
    if (last != first) {
        auto before = std::prev(last);
        top_slope = std::max(0.0, (last->second - before->second) / static_cast<double>(last->first - before->first));
    }
    if (int64_t n = best_on(last->first, hi, last->first, last->second, top_slope)) return n;
    for (auto it = last; it != first; --it) {
        auto below = std::prev(it);
        double slope = (it->second - below->second) / static_cast<double>(it->first - below->first);
        if (int64_t n = best_on(below->first, it->first, below->first, below->second, slope)) return n;
    }
    return best_on(lo, first->first, first->first, first->second, 0.0);
}

int32_t prefill_budget::tokens(int32_t n_decode, int32_t n_waiting) const {
    TANDEM_ASSERT(n_decode >= 1);
    const double share = std::max(1.0, static_cast<double>(n_waiting) / static_cast<double>(n_decode));
    // No slope known yet: probe with as many prompt rows as decode rows (about twice the decode
    // step's work), not the cap: a cost curve with a cliff (CUDA graphs up to a row count) would
    // make a first step at the cap the slowest of the prefill.
    if (step_seconds_.size() < 2)
        return static_cast<int32_t>(std::clamp<int64_t>(std::llround(n_decode * share), min_tokens, prefill_yield_));
    double limit = itl_budget_ * share * predict(n_decode) * (1.0 + limit_slack);
    int64_t n = largest_within(static_cast<int64_t>(n_decode) + min_tokens,
                               static_cast<int64_t>(n_decode) + prefill_yield_, limit);
    if (n == 0) return min_tokens;
    return static_cast<int32_t>(std::clamp<int64_t>(n - n_decode, min_tokens, prefill_yield_));
}

}  // namespace tandem
