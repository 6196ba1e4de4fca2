// src/scheduler/prefill_budget.cpp - the step-time curves (a moving average per row count,
// piecewise linear between them; decode-only calls and calls with prompt rows apart) and the
// largest prompt share that fits the latency budget.
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
// When even the smallest prompt share costs more than the budget allows (a prompt pass whose fixed
// cost alone exceeds it: small models on a GPU, where a decode step is as cheap as a prompt
// step's launches), every step that carries prompt rows is over the budget anyway. A share of a
// few tokens would then only multiply the slow steps (an 8,000-token prompt at 11 tokens a step:
// 700 slow steps instead of 63), so the share may grow while a step costs at most this factor
// times the cheapest step that carries prompt rows.
static constexpr double over_budget_growth = 1.25;
// In that regime a share can stick at a size whose neighbours look dear: noise between two
// nearby sizes, a prompt-only call (timed whole) just above it, or a step in the cost such as a
// CUDA graph bucket just above it. Whatever the curve predicts above it is then never timed. So
// for every this many calls of the planned size, one call probes twice that size: such a step
// costs little more (the fixed cost dominates), and the curve learns where the bound really is.
static constexpr int32_t probe_every = 16;

void step_time_curve::record(int32_t n_rows, double seconds) {
    if (n_rows < 1 || !(seconds >= 0.0) || !std::isfinite(seconds)) return;
    auto [it, inserted] = seconds_.try_emplace(n_rows, seconds);
    const int32_t seen = ++samples_[n_rows];
    ++calls_[n_rows];
    // The first call of a size can include one-off work (a CUDA graph captured for its bucket:
    // tens of ms across GPUs), so the second sample replaces it instead of averaging with it.
    if (seen == 2) it->second = seconds;
    else if (!inserted) it->second += ema_weight * (seconds - it->second);
}

void step_time_curve::set(int32_t n_rows, double seconds) {
    seconds_[n_rows] = seconds;
    samples_[n_rows] = 2;  // a later record() averages with it
}

double step_time_curve::predict(int32_t n_rows, bool below_slope) const {
    if (seconds_.empty()) return -1.0;
    auto hi = seconds_.lower_bound(n_rows);
    if (hi != seconds_.end() && hi->first == n_rows) return hi->second;
    if (hi == seconds_.begin()) {  // below the smallest measured
        auto next = std::next(hi);
        if (!below_slope || next == seconds_.end()) return hi->second;
        const double slope = std::max(0.0, (next->second - hi->second) / static_cast<double>(next->first - hi->first));
        return std::max(0.0, hi->second - slope * static_cast<double>(hi->first - n_rows));
    }
    auto lo = std::prev(hi);
    if (hi == seconds_.end()) {
        // Above the largest measured: continue the last segment, never downwards.
        if (lo == seconds_.begin()) return lo->second;
        auto before = std::prev(lo);
        double slope = std::max(0.0, (lo->second - before->second) / static_cast<double>(lo->first - before->first));
        return lo->second + slope * static_cast<double>(n_rows - lo->first);
    }
    double f = static_cast<double>(n_rows - lo->first) / static_cast<double>(hi->first - lo->first);
    return lo->second + f * (hi->second - lo->second);
}

int64_t step_time_curve::largest_within(int64_t lo, int64_t hi, double limit, bool below_slope) const {
    if (seconds_.empty()) return 0;
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
    const auto first = seconds_.begin();
    const auto last = std::prev(seconds_.end());
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
    double first_slope = 0.0;
    if (below_slope && last != first) {
        auto next = std::next(first);
        first_slope = std::max(0.0, (next->second - first->second) / static_cast<double>(next->first - first->first));
    }
    return best_on(lo, first->first, first->first, first->second, first_slope);
}

prefill_budget::prefill_budget(int32_t prefill_yield, double itl_budget)
    : prefill_yield_(prefill_yield), itl_budget_(itl_budget) {
    if (prefill_yield_ < 1) fail(error_kind::config, "--prefill-yield must be >= 1, got {}", prefill_yield_);
    if (!(itl_budget_ >= 1.0)) fail(error_kind::config, "--itl-budget must be >= 1.0, got {}", itl_budget_);
}

void prefill_budget::record(int32_t n_decode, int32_t n_prompt, double seconds) {
    if (n_decode < 0 || n_prompt < 0 || n_decode + n_prompt < 1 || !(seconds >= 0.0) || !std::isfinite(seconds)) return;
    if (n_prompt == 0) {
        decode_.record(n_decode, seconds);
        return;
    }
    // What the prompt rows added: the call's time less the decode rows' predicted time (a call
    // without decode rows, or before any decode-only call was timed, counts whole).
    const double decode_part = n_decode > 0 ? decode_.predict(n_decode) : 0.0;
    prompt_extra_.record(n_prompt, std::max(0.0, seconds - std::max(0.0, decode_part)));
}

// The curve of the time prompt rows add to a step, as planned with: the timed sizes alone once
// there are two (below_slope: fewer prompt rows than timed follow the first segment down); with
// one, that size joined to (0 rows, 0 s).
static step_time_curve plan_with(const step_time_curve &extra, bool &below_slope) {
    below_slope = extra.sizes() >= 2;
    step_time_curve c = extra;
    if (!below_slope) c.set(0, 0.0);
    return c;
}

double prefill_budget::predict_with_prompt(int32_t n_decode, int32_t n_rows) const {
    if (prompt_extra_.sizes() == 0 || decode_.sizes() == 0 || n_rows <= n_decode) return -1.0;
    bool below = false;
    return decode_.predict(n_decode) + plan_with(prompt_extra_, below).predict(n_rows - n_decode, below);
}

int32_t prefill_budget::tokens(int32_t n_decode, int32_t n_waiting) const {
    TANDEM_ASSERT(n_decode >= 1);
    const double share = std::max(1.0, static_cast<double>(n_waiting) / static_cast<double>(n_decode));
    // Nothing to go by yet: probe with as many prompt rows as decode rows (about twice the decode
    // step's work), not the cap: a cost curve with a cliff (CUDA graphs up to a row count) would
    // make a first step at the cap the slowest of the prefill.
    if (decode_.sizes() == 0 || prompt_extra_.sizes() == 0)
        return static_cast<int32_t>(std::clamp<int64_t>(std::llround(n_decode * share), min_tokens, prefill_yield_));
    bool below = false;
    const step_time_curve extra = plan_with(prompt_extra_, below);
    const double t_decode = decode_.predict(n_decode);
    const double plain = itl_budget_ * share * t_decode;
    const double thinnest = over_budget_growth * (t_decode + extra.predict(min_tokens, below));
    const double limit = std::max(plain, thinnest) * (1.0 + limit_slack);
    const int64_t n = extra.largest_within(min_tokens, prefill_yield_, limit - t_decode, below);
    int32_t k = n == 0 ? min_tokens : static_cast<int32_t>(std::clamp<int64_t>(n, min_tokens, prefill_yield_));
    // Over the plain bound anyway: probe twice the share once for every probe_every calls of it.
    const int32_t probe = std::min(prefill_yield_, 2 * k);
    if (thinnest > plain && probe > k && (prompt_extra_.calls(probe) + 1) * probe_every <= prompt_extra_.calls(k)) return probe;
    // The curve needs two sizes for a slope: while one is timed, a plan that would time the same
    // size again steps one token aside (a jump at the first prompt row, joined to zero, would
    // otherwise hold the share at that size for good).
    if (prompt_extra_.sizes() == 1 && prompt_extra_.timed(k)) k = k < prefill_yield_ ? k + 1 : std::max(min_tokens, k - 1);
    return k;
}

}  // namespace tandem
