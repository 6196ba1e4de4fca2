// tests/server/test_prefill_budget.cpp - the time-sized prefill budget on synthetic step timings:
// the latency bound, the floor, the --prefill-yield cap, adaptation, a CUDA-graph-like cost
// step, and the closed-form search against a brute-force scan. No real clock is read.
#include "src/scheduler/prefill_budget.h"
#include "tandem/error.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <set>

using namespace tandem;

namespace {

constexpr double ms = 1e-3;

// Runs the policy the way the scheduler does: each step carries n_decode rows plus the prompt
// tokens the policy allows, and the step's time comes from `cost` (rows -> seconds).
int32_t settle(prefill_budget &b, int32_t n_decode, const std::function<double(int32_t)> &cost, int steps = 200) {
    int32_t k = 0;
    for (int i = 0; i < steps; ++i) {
        k = b.tokens(n_decode);
        b.record(n_decode, k, cost(n_decode + k));
    }
    return b.tokens(n_decode);
}

// Largest k in [1, yield] with the predicted step within the limit, by trying every k.
int32_t brute_force(const prefill_budget &b, int32_t n_decode) {
    const double limit = std::max(b.itl_budget() * b.predict(n_decode),
                                  1.25 * b.predict_with_prompt(n_decode, n_decode + prefill_budget::min_tokens)) *
                         (1.0 + 1e-9);
    for (int32_t k = b.prefill_yield(); k >= 1; --k)
        if (b.predict_with_prompt(n_decode, n_decode + k) <= limit) return k;
    return prefill_budget::min_tokens;
}

}  // namespace

TEST_CASE("prefill budget: a probe of as many prompt rows as decode rows until step times are known", "[prefill_budget]") {
    prefill_budget b(128, 2.0);
    CHECK(b.tokens(8) == 8);
    CHECK(b.predict(8) < 0.0);
    b.record(8, 0, 1.0 * ms);  // a decode-only time, no step with prompt rows yet
    CHECK(b.tokens(8) == 8);
    CHECK(b.predict_with_prompt(8, 16) < 0.0);
    CHECK(b.tokens(500) == 128);  // never above --prefill-yield
    prefill_budget small(4, 2.0);
    CHECK(small.tokens(8) == 4);
}

TEST_CASE("prefill budget: 1 ms decode steps and 0.1 ms per prompt row, budget 2.0 gives 10 rows", "[prefill_budget]") {
    auto cost = [](int32_t rows) { return 1.0 * ms + 0.1 * ms * (rows - 4); };
    prefill_budget b(128, 2.0);
    b.record(4, 0, cost(4));
    b.record(4, 128, cost(4 + 128));  // the first mixed step, at the token cap
    CHECK(b.tokens(4) == 10);
    CHECK(settle(b, 4, cost) == 10);
    // A looser budget allows proportionally more.
    prefill_budget loose(128, 3.0);
    loose.record(4, 0, cost(4));
    loose.record(4, 128, cost(132));
    CHECK(loose.tokens(4) == 20);
}

TEST_CASE("prefill budget: never below the floor, never above --prefill-yield", "[prefill_budget]") {
    SECTION("prompt rows far dearer than the budget allows") {
        prefill_budget b(128, 1.0);
        auto cost = [](int32_t rows) { return 1.0 * ms + 50.0 * ms * (rows - 8); };
        b.record(8, 0, cost(8));
        b.record(8, 128, cost(136));
        CHECK(b.tokens(8) == prefill_budget::min_tokens);
        CHECK(settle(b, 8, cost) == prefill_budget::min_tokens);
    }
    SECTION("prompt rows almost free") {
        prefill_budget b(64, 2.0);
        auto cost = [](int32_t rows) { return 1.0 * ms + 1e-6 * ms * rows; };
        b.record(8, 0, cost(8));
        b.record(8, 64, cost(72));
        CHECK(b.tokens(8) == 63);  // one size with prompt rows timed: the next plan times a second
        b.record(8, 63, cost(71));
        CHECK(b.tokens(8) == 64);
        CHECK(settle(b, 8, cost) == 64);
    }
    SECTION("time that falls with rows (noise) extrapolates flat, capped by the yield") {
        prefill_budget b(32, 2.0);
        b.record(2, 0, 1.0 * ms);
        b.record(2, 4, 2.0 * ms);
        b.record(2, 6, 1.0 * ms);
        CHECK(b.tokens(2) == 32);
        CHECK(b.tokens(1) == 32);
    }
    SECTION("--itl-budget below 1 and --prefill-yield below 1 are configuration errors") {
        CHECK_THROWS_AS(prefill_budget(128, 0.5), error);
        CHECK_THROWS_AS(prefill_budget(0, 2.0), error);
    }
}

TEST_CASE("prefill budget: adapts when the costs change", "[prefill_budget]") {
    prefill_budget b(128, 2.0);
    double per_row = 0.1 * ms;
    auto cost = [&](int32_t rows) { return 1.0 * ms + per_row * (rows - 4); };
    b.record(4, 0, cost(4));
    CHECK(settle(b, 4, cost) == 10);
    per_row = 0.05 * ms;  // prompt rows got cheaper: the budget grows
    int32_t cheaper = settle(b, 4, cost, 400);
    CHECK(cheaper > 10);
    CHECK(cheaper <= 20);
    CHECK(cost(4 + cheaper) <= 2.0 * cost(4) * (1 + 1e-9));
    per_row = 0.25 * ms;  // dearer: it shrinks back within the bound
    int32_t dearer = settle(b, 4, cost, 400);
    CHECK(dearer <= 4);
    CHECK(dearer >= 3);
    CHECK(cost(4 + dearer) <= 2.0 * cost(4) * (1 + 1e-9));
}

TEST_CASE("prefill budget: a cost step at 16 rows (CUDA graphs) keeps calls within the graph", "[prefill_budget]") {
    // Measured on an H200: up to 16 rows replay a graph (0.39 ms); more
    // rows take the direct path (about 1.5 ms + 0.004 ms per row, 2.08 ms at 136 rows).
    auto cost = [](int32_t rows) { return rows <= 16 ? 0.39 * ms : 1.5 * ms + 0.0043 * ms * rows; };
    prefill_budget b(128, 2.0);
    for (int32_t d = 1; d <= 8; ++d) b.record(d, 0, cost(d));  // sessions join one by one
    int32_t slow_steps = 0, steps = 0;
    double worst = 0.0;
    for (int i = 0; i < 400; ++i) {
        int32_t k = b.tokens(8);
        double t = cost(8 + k);
        worst = std::max(worst, t);
        slow_steps += t > 2.0 * cost(8);
        ++steps;
        b.record(8, k, t);
    }
    INFO("steps over the budget: " << slow_steps << " of " << steps);
    // A handful of exploring steps land past the graph; then every step stays within it.
    CHECK(slow_steps <= 8);
    int32_t k = b.tokens(8);
    CHECK(k >= 1);
    CHECK(8 + k <= 16);
    CHECK(worst <= cost(136) * 1.001);
}

TEST_CASE("prefill budget: predictions interpolate between measured row counts", "[prefill_budget]") {
    prefill_budget b(128, 2.0);
    b.record(10, 0, 1.0 * ms);
    b.record(20, 0, 3.0 * ms);
    CHECK(b.predict(5) == Approx(1.0 * ms));   // below the smallest: flat
    CHECK(b.predict(15) == Approx(2.0 * ms));  // between: linear
    CHECK(b.predict(30) == Approx(5.0 * ms));  // above: the last slope
    // The second sample of a row count replaces the first (which may include a graph capture);
    // later ones are a moving average, not the last sample.
    b.record(10, 0, 2.0 * ms);
    CHECK(b.predict(10) == Approx(2.0 * ms));
    b.record(10, 0, 1.0 * ms);
    CHECK(b.predict(10) > 1.0 * ms);
    CHECK(b.predict(10) < 2.0 * ms);
    // What prompt rows add is a curve of its own, by prompt rows (a call's time less its decode
    // rows' predicted time). With one size timed it is proportional to the prompt rows; from two
    // it stands alone, and fewer prompt rows than timed follow its first segment down (not flat:
    // a jump at the first prompt row is what this curve measures).
    b.record(10, 6, 4.0 * ms);
    const double at10 = b.predict(10);
    CHECK(b.predict_with_prompt(10, 13) == Approx(at10 + (4.0 * ms - at10) / 2));
    b.record(10, 10, 5.0 * ms);
    CHECK(b.predict_with_prompt(10, 18) == Approx(4.5 * ms));
    CHECK(b.predict_with_prompt(10, 11) == Approx(2.75 * ms));
    CHECK(b.predict_with_prompt(10, 24) == Approx(6.0 * ms));
    CHECK(b.predict(16) == Approx(at10 + (3.0 * ms - at10) * 0.6));  // the decode-only curve did not move
}

TEST_CASE("prefill budget: the closed-form search equals trying every token count", "[prefill_budget]") {
    const uint32_t seed = 20261129;
    std::mt19937 rng(seed);
    INFO("seed " << seed);
    for (int trial = 0; trial < 300; ++trial) {
        std::uniform_int_distribution<int32_t> yield_d(1, 96), rows_d(1, 160), n_d(1, 8), dec_d(1, 20);
        std::uniform_real_distribution<double> t_d(0.2, 4.0);
        prefill_budget b(yield_d(rng), 1.0 + (trial % 5) * 0.5);
        std::set<int32_t> decode_counts, prompt_counts;
        for (int32_t p = n_d(rng); p > 0; --p) {
            const int32_t rows = rows_d(rng);
            if (rows % 3 == 0 || rows == 1) {  // decode rows only
                decode_counts.insert(rows);
                b.record(rows, 0, t_d(rng) * ms);
            } else {
                prompt_counts.insert(rows);
                b.record(rows / 2, rows - rows / 2, t_d(rng) * ms);
            }
        }
        int32_t n_decode = dec_d(rng);
        INFO("trial " << trial << " yield " << b.prefill_yield() << " decode rows " << n_decode << " decode sizes "
                      << decode_counts.size() << " prompt sizes " << prompt_counts.size());
        const bool probe = decode_counts.empty() || prompt_counts.empty();
        int32_t want = probe ? std::clamp(n_decode, 1, b.prefill_yield()) : brute_force(b, n_decode);
        CHECK(b.tokens(n_decode) == want);
    }
}

TEST_CASE("prefill budget: a slow first call of a size (a graph capture) does not linger", "[prefill_budget]") {
    prefill_budget b(128, 2.0);
    b.record(15, 0, 0.100);  // first 15-row call: captures a graph
    for (int i = 0; i < 3; ++i) b.record(15, 0, 0.0005);
    b.record(15, 128, 0.0025);
    b.record(15, 128, 0.0025);
    CHECK(b.predict(15) == Approx(0.0005));
    // 2x of 0.5 ms leaves room for few rows at 14 us per row past 15.
    CHECK(b.tokens(15) < 128);
    CHECK(b.tokens(15) <= 40);
}

TEST_CASE("prefill budget: many sessions waiting behind few decoders widen the share", "[prefill_budget]") {
    auto cost = [](int32_t rows) { return 1.0 * ms + 0.1 * ms * (rows - 1); };
    prefill_budget b(128, 2.0);
    CHECK(b.tokens(1, 15) == 15);  // the probe: decode rows x waiting share
    CHECK(b.tokens(4, 2) == 4);    // fewer waiting than decoding: the plain probe
    b.record(1, 0, cost(1));
    b.record(1, 15, cost(16));
    CHECK(b.tokens(1) == 10);       // 2 x 1 ms at 0.1 ms per row
    CHECK(b.tokens(1, 1) == 10);
    CHECK(b.tokens(1, 15) == 128);  // 15 waiting: 30 ms allowed, capped by --prefill-yield
    CHECK(b.tokens(1, 3) == 50);    // 3 waiting: 6 ms
    CHECK(b.tokens(15, 1) == b.tokens(15));  // one long prompt among many decoders: the plain bound
}

TEST_CASE("prefill budget: prompt steps whose fixed cost alone breaks the bound take full shares", "[prefill_budget]") {
    // The tiny model on an H200: 15 sessions decode in 0.4 ms a step; a step
    // that carries prompt rows costs 0.9 ms plus 1 us a prompt row. No share fits 2 x 0.4 ms, so
    // the bound becomes 1.25 x the one-token step (1.126 ms): the whole --prefill-yield fits.
    auto flat = [](int32_t rows) { return rows <= 15 ? 0.4 * ms : 0.9 * ms + 0.001 * ms * (rows - 15); };
    prefill_budget b(128, 2.0);
    b.record(15, 0, flat(15));
    b.record(15, 1, flat(16));
    CHECK(b.tokens(15) == 2);  // proportional to one timed size, one token fits; a second size is timed
    b.record(15, 2, flat(17));
    CHECK(b.tokens(15) == 128);
    CHECK(settle(b, 15, flat) == 128);
    // Dearer prompt rows (10 us each): the share stops where a step reaches 1.25 x the one-token step.
    auto steep = [](int32_t rows) { return rows <= 15 ? 0.4 * ms : 0.9 * ms + 0.01 * ms * (rows - 15); };
    prefill_budget c(128, 2.0);
    c.record(15, 0, steep(15));
    c.record(15, 1, steep(16));
    const int32_t k = settle(c, 15, steep);
    CHECK(k >= 20);
    CHECK(k <= 23);  // 0.91 ms x 1.25 = 1.1375 ms: 0.9 + 0.01 k <= 1.1375
    CHECK(steep(15 + k) <= 1.25 * steep(16) * (1 + 1e-9));
    // Where a small share does fit the bound, the bound is unchanged (10 rows, as above).
    auto fits = [](int32_t rows) { return 1.0 * ms + 0.1 * ms * (rows - 4); };
    prefill_budget d(128, 2.0);
    d.record(4, 0, fits(4));
    d.record(4, 128, fits(132));
    CHECK(settle(d, 4, fits) == 10);
}

TEST_CASE("prefill budget: calls without decode rows teach what prompt rows add", "[prefill_budget]") {
    // A burst after single requests: the prompt-only calls (a request alone) already give the
    // cost of prompt rows, so the first burst step plans with it instead of probing.
    auto cost = [](int32_t rows) { return 1.0 * ms + 0.1 * ms * rows; };
    prefill_budget b(128, 2.0);
    b.record(0, 20, cost(20));
    b.record(0, 700, cost(700));
    b.record(4, 0, cost(4));
    // 4 decoding, 12 waiting: 2 x 3 x 1.4 ms = 8.4 ms; prompt rows add 1 ms + 0.1 ms each as the
    // prompt-only calls count them (their fixed 1 ms too: cautious), so 1.4 + 1 + 0.1 k <= 8.4.
    const int32_t k = b.tokens(4, 12);
    CHECK(k == 60);
    CHECK(b.predict_with_prompt(4, 4 + k) <= 2.0 * 3.0 * cost(4) * (1 + 1e-9));
    // A decode call's own rows are not counted twice: a mixed call of 4 + 10 rows adds 1 ms.
    b.record(4, 10, cost(14));
    CHECK(b.predict_with_prompt(4, 14) == Approx(cost(14)));
}

TEST_CASE("prefill budget: over the bound anyway, a share stuck below a dear neighbour is probed upward", "[prefill_budget]") {
    // The 30b synth beside one decoding session on an H200: a
    // decode pass of 3.3 ms, a prompt pass of ~20 ms plus 0.25 ms a row, its rows padded to CUDA
    // graph buckets (powers of two up to 64). A prompt-only call of 6 tokens was timed at 28 ms
    // (a graph capture), so every share above 5 looks dear and, planned from the curve alone,
    // the share stays at 5: 800 steps for a 4,000-token prompt. Probes at twice the share find 16.
    auto bucket = [](int32_t n) {
        int32_t b = 1;
        while (b < n) b *= 2;
        return n <= 64 ? b : n;
    };
    auto cost = [&](int32_t n_decode, int32_t n_prompt) {
        return (n_decode > 0 ? 3.3 * ms : 0.0) + (n_prompt > 0 ? (20.0 + 0.25 * bucket(n_prompt)) * ms : 0.0);
    };
    prefill_budget b(128, 2.0);
    b.record(0, 6, 28.0 * ms);
    b.record(1, 0, cost(1, 0));
    b.record(1, 0, cost(1, 0));
    b.record(1, 1, cost(1, 1));
    b.record(1, 5, cost(1, 5));
    const double limit = 1.25 * cost(1, 1) * (1 + 1e-9);  // the one-token step's growth bound
    std::vector<int32_t> shares;
    int over = 0;
    for (int i = 0; i < 200; ++i) {
        const int32_t k = b.tokens(1);
        shares.push_back(k);
        over += cost(1, k) > limit ? 1 : 0;
        b.record(1, k, cost(1, k));
    }
    // Planned from the curve, 5 for the first calls; then a probe (10) and the share settles at 16.
    for (int i = 0; i < 10; ++i) CHECK(shares[size_t(i)] == 5);
    CHECK(std::count(shares.begin(), shares.end(), 10) >= 1);
    CHECK(b.tokens(1) == 16);
    CHECK(std::count(shares.begin() + 100, shares.end(), 16) >= 90);
    // Probes over the bound are rare: about one call in 17, plus the first look above.
    CHECK(over <= 20);
}
