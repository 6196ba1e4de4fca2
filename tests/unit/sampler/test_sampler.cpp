// tests/unit/sampler/test_sampler.cpp - tandem::sampler on whole rows and on logits_top: the
// reduction is exact (ties to the lower id, -0 == +0, NaN flagged), and a draw from the top is the
// whole-row draw (same id, same logprobs, same random stream) whenever the top decides it.
#include "tandem/error.h"
#include "tandem/sampler.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <random>
#include <vector>

using namespace tandem;

namespace {

// Logits with many exact ties: values on a coarse grid.
std::vector<float> grid_logits(std::mt19937_64 &rng, size_t n, float scale, int levels) {
    std::uniform_int_distribution<int> level(0, levels - 1);
    std::vector<float> v(n);
    for (float &x : v) x = scale * float(level(rng)) / float(levels);
    return v;
}

std::vector<float> normal_logits(std::mt19937_64 &rng, size_t n, float scale) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float &x : v) x = d(rng);
    return v;
}

// Reference: the n best (logit, id) by logit descending then id ascending, by a full sort.
std::vector<token_logit> sorted_best(const std::vector<float> &v, size_t n) {
    std::vector<int32_t> ids(v.size());
    for (size_t i = 0; i < v.size(); ++i) ids[i] = int32_t(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)]; });
    std::vector<token_logit> out;
    for (size_t i = 0; i < std::min(n, ids.size()); ++i) out.push_back({ids[i], v[size_t(ids[i])]});
    return out;
}

}  // namespace

TEST_CASE("logits_top_of keeps the best tokens in the sampler's order", "[sampler]") {
    std::mt19937_64 rng(11);
    for (size_t n : {1u, 2u, 63u, 64u, 65u, 1000u, 151936u}) {
        for (int trial = 0; trial < 3; ++trial) {
            const std::vector<float> v = trial == 0 ? grid_logits(rng, n, 8.0f, 5) : normal_logits(rng, n, 3.0f);
            const logits_top t = logits_top_of(v);
            INFO("n " << n << " trial " << trial);
            REQUIRE(t.n_vocab == int32_t(n));
            REQUIRE_FALSE(t.has_nan);
            const std::vector<token_logit> ref = sorted_best(v, size_t(logits_top_max));
            REQUIRE(t.top.size() == ref.size());
            for (size_t i = 0; i < ref.size(); ++i) {
                REQUIRE(t.top[i].id == ref[i].id);
                REQUIRE(std::memcmp(&t.top[i].logit, &ref[i].logit, sizeof(float)) == 0);
            }
            double sum = 0.0;
            for (float x : v) sum += std::exp(double(x) - double(ref[0].logit));
            REQUIRE(t.log_norm == Approx(double(ref[0].logit) + std::log(sum)).epsilon(1e-12));
        }
    }
    SECTION("-0 and +0 are one value: the lower id wins") {
        const std::vector<float> v = {-1.0f, 0.0f, -0.0f, -2.0f};
        const std::vector<float> w = {-1.0f, -0.0f, 0.0f, -2.0f};
        REQUIRE(logits_top_of(v).top[0].id == 1);
        REQUIRE(logits_top_of(v).top[1].id == 2);
        REQUIRE(logits_top_of(w).top[0].id == 1);
    }
    SECTION("NaN is flagged, left out, and refused by the sampler") {
        std::vector<float> v = {1.0f, NAN, 3.0f};
        const logits_top t = logits_top_of(v);
        REQUIRE(t.has_nan);
        REQUIRE(t.top.size() == 2);
        REQUIRE(t.top[0].id == 2);
        sampler s(sampling_params{});
        REQUIRE_THROWS_AS(s.sample_top(t), error);
        REQUIRE_THROWS_AS(s.sample(v), error);
    }
}

TEST_CASE("sampling from the top is the whole-row draw", "[sampler]") {
    std::mt19937_64 rng(12);
    struct shape {
        size_t n;
        float scale;  // logit spread: a wide one puts the temperature cutoff inside the top
        bool ties;
    };
    const std::vector<shape> shapes = {{1, 1.0f, false}, {50, 2.0f, true}, {64, 1.0f, false},
                                       {5000, 1.0f, false}, {5000, 40.0f, false}, {5000, 30.0f, true}};
    std::vector<sampling_params> params;
    for (float temp : {0.0f, 0.3f, 1.0f, 2.5f})
        for (int32_t top_k : {0, 1, 7, 64, 65})
            for (float top_p : {1.0f, 0.9f, 0.3f})
                for (float min_p : {0.0f, 0.05f}) {
                    sampling_params p;
                    p.temperature = temp;
                    p.top_k = top_k;
                    p.top_p = top_p;
                    p.min_p = min_p;
                    p.n_logprobs = top_k % 2 == 0 ? 5 : 20;
                    p.seed = uint64_t(top_k) * 131 + uint64_t(temp * 10);
                    params.push_back(p);
                }
    int decided = 0, undecided = 0;
    for (const shape &sh : shapes)
        for (const sampling_params &p : params) {
            sampler whole(p), from_top(p);
            // The engine is asked to draw unless the request is greedy or its top_k is within the summary.
            const bool requests = p.temperature > 0.0f && !(p.top_k > 0 && p.top_k <= logits_top_max);
            REQUIRE((from_top.draw_request().temperature > 0.0f) == requests);
            for (int draw = 0; draw < 4; ++draw) {
                const std::vector<float> v = sh.ties ? grid_logits(rng, sh.n, sh.scale, 7) : normal_logits(rng, sh.n, sh.scale);
                sampler with_summary(whole);  // the same random state, given the row's summary
                const sample_result ref = whole.sample(v);
                const logits_top summary = logits_top_of(v);
                const sample_result ref2 = with_summary.sample(v, &summary);
                REQUIRE(ref2.id == ref.id);
                REQUIRE(ref2.logprob == ref.logprob);
                REQUIRE(ref2.top.size() == ref.top.size());
                for (size_t i = 0; i < ref.top.size(); ++i) {
                    REQUIRE(ref2.top[i].id == ref.top[i].id);
                    REQUIRE(ref2.top[i].logprob == ref.top[i].logprob);
                }
                INFO("n " << sh.n << " scale " << sh.scale << " temp " << p.temperature << " top_k " << p.top_k
                          << " top_p " << p.top_p << " min_p " << p.min_p << " draw " << draw);
                std::optional<sample_result> got = from_top.sample_top(summary);
                if (!got) {
                    // Only where the engine is asked to draw; the stream did not move, and the
                    // summary with the engine's draw (the engine's host twin) decides it.
                    REQUIRE(requests);
                    ++undecided;
                    const row_draw d = from_top.draw_request();
                    std::vector<logits_top> one = {summary};
                    draw_rows_exact(v, std::span<const row_draw>(&d, 1), one);
                    REQUIRE(one[0].drawn >= 0);
                    REQUIRE(one[0].drawn_u == d.u);
                    got = from_top.sample_top(one[0]);
                    REQUIRE(got);
                } else {
                    ++decided;
                }
                REQUIRE(got->id == ref.id);
                REQUIRE(got->logprob == ref.logprob);
                REQUIRE(got->top.size() == ref.top.size());
                for (size_t i = 0; i < ref.top.size(); ++i) {
                    REQUIRE(got->top[i].id == ref.top[i].id);
                    REQUIRE(got->top[i].logprob == ref.top[i].logprob);
                }
            }
        }
    // Both outcomes occurred, so both branches above were exercised.
    REQUIRE(decided > 0);
    REQUIRE(undecided > 0);
}

TEST_CASE("draw_exp is e^x within 3 ulp on the draw's range", "[sampler][draw]") {
    double worst = 0.0;
    for (int i = 0; i <= 870000; ++i) {
        const float x = -87.0f * float(i) / 870000.0f;
        const double want = std::exp(double(x));
        worst = std::max(worst, std::abs(double(draw_exp(x)) - want) / want);
    }
    INFO("worst relative error " << worst);
    REQUIRE(worst < 3.0 * 5.96e-8);
    REQUIRE(draw_exp(0.0f) == 1.0f);
    REQUIRE(draw_exp(-88.0f) == 0.0f);
    REQUIRE(draw_exp(std::numeric_limits<float>::quiet_NaN()) == 0.0f);
}

namespace {

// The exact draw written plainly: integer weights, the candidates sorted best first for the
// nucleus, a running sum in id order for the pick.
int32_t plain_exact_draw(const std::vector<float> &v, const row_draw &d) {
    const float max_logit = *std::max_element(v.begin(), v.end());
    const float cutoff = draw_cutoff(max_logit, d);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < v.size(); ++i)
        if (draw_passes(v[i], max_logit, cutoff)) ids.push_back(int32_t(i));
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return draw_key(v[size_t(a)], a) > draw_key(v[size_t(b)], b); });
    if (d.top_k > 0 && size_t(d.top_k) < ids.size()) ids.resize(size_t(d.top_k));
    auto w = [&](int32_t id) { return draw_weight(v[size_t(id)], max_logit, cutoff, d); };
    std::erase_if(ids, [&](int32_t id) { return w(id) == 0; });
    uint64_t total = 0;
    for (int32_t id : ids) total += w(id);
    const uint64_t need = draw_nucleus_need(total, d.top_p);
    uint64_t mass = 0;
    size_t keep = 0;
    while (keep < ids.size() && mass < need) mass += w(ids[keep++]);
    ids.resize(keep);
    std::sort(ids.begin(), ids.end());
    const uint64_t r = draw_pick_threshold(d.u, mass);
    uint64_t run = 0;
    for (int32_t id : ids) {
        run += w(id);
        if (run > r) return id;
    }
    return -1;
}

}  // namespace

TEST_CASE("the exact draw is its definition: nucleus by selection, pick in id order", "[sampler][draw]") {
    // Rows with ties (a coarse grid, and the best logit twice), flat and peaked ones; top_k off,
    // within and beyond the summary's 64; top_p from the best token alone to all; u across [0, 1)
    // and at its ends. The selection must find the sorted prefix's nucleus and the pick its token,
    // exactly (integer sums); so must the draw from the row's summary where it decides.
    std::mt19937_64 rng(31);
    int64_t checked = 0, from_top = 0;
    for (const size_t n : {size_t(1), size_t(7), size_t(300), size_t(20001), size_t(151936)})
        for (const float temp : {0.4f, 1.0f})
            for (const float min_p : {0.0f, 0.02f})
                for (const float top_p : {1.0f, 0.95f, 0.5f, 0.01f})
                    for (const int32_t top_k : {0, 5, 100}) {
                    std::vector<float> v = n % 2 ? normal_logits(rng, n, n > 1000 ? 3.0f : 1.0f) : grid_logits(rng, n, 4.0f, 9);
                    if (n > 1000) v[n - 1] = *std::max_element(v.begin(), v.end());  // the best twice
                    const float max_logit = *std::max_element(v.begin(), v.end());
                    row_draw d;
                    d.temperature = temp;
                    d.inv_temp = float(1.0 / double(temp));
                    d.min_p = min_p;
                    d.top_p = top_p;
                    d.top_k = top_k;
                    const logits_top summary = logits_top_of(v);
                    const int n_u = n > 100000 ? 4 : 30;
                    int32_t last = -1;
                    for (int k = 0; k < n_u; ++k) {
                        d.u = k + 1 < n_u ? double(k) / (n_u - 1) : std::nextafter(1.0, 0.0);
                        const int32_t id = draw_exact(v, max_logit, d);
                        INFO("n " << n << " temp " << temp << " min_p " << min_p << " top_p " << top_p << " top_k " << top_k
                                  << " u " << d.u);
                        REQUIRE(id == plain_exact_draw(v, d));
                        REQUIRE(id >= last);  // u up, id up (the pick is monotone)
                        last = id;
                        ++checked;
                        // From the row's 64 best, where they decide it (a top_k of 5, or a short row).
                        const std::optional<token_logit> top = draw_exact_top(summary, d);
                        if (top_k == 5 || n <= size_t(logits_top_max)) REQUIRE(top);
                        if (top) {
                            REQUIRE(top->id == id);
                            ++from_top;
                        }
                    }
                }
    REQUIRE(checked > 2000);
    REQUIRE(from_top > 500);
}

TEST_CASE("draw requests look ahead without moving the random stream", "[sampler][draw]") {
    sampling_params p;
    p.temperature = 0.8f;
    p.seed = 17;
    sampler s(p), t(p);
    REQUIRE(s.draw_request().temperature == 0.8f);
    const row_draw r0 = s.draw_request(0), r1 = s.draw_request(1), r2 = s.draw_request(2);
    REQUIRE(s.draw_request(0).u == r0.u);  // asking again changes nothing
    REQUIRE(r0.u != r1.u);
    REQUIRE(r0.inv_temp == float(1.0 / 0.8));
    std::mt19937_64 rng(3);
    const std::vector<float> v = normal_logits(rng, 1000, 2.0f);
    const float max_logit = *std::max_element(v.begin(), v.end());
    // Each draw uses the uniform number the request before it announced, one a draw.
    for (const row_draw &want : {r0, r1, r2}) {
        REQUIRE(s.draw_request(0).u == want.u);
        REQUIRE(s.sample(v).id == draw_exact(v, max_logit, want));
    }
    // A summary drawn with another number is a caller's mistake, refused.
    logits_top top = logits_top_of(v);
    std::vector<logits_top> rows = {top};
    draw_rows_exact(v, std::span<const row_draw>(&r1, 1), rows);
    REQUIRE_THROWS(t.sample_top(rows[0]));
    // top_p and a top_k over the summary's tokens ride in the request; a top_k within them needs none.
    sampling_params q = p;
    q.top_p = 0.9f;
    REQUIRE(sampler(q).draw_request().top_p == 0.9f);
    q = p;
    q.top_k = 100;
    REQUIRE(sampler(q).draw_request().top_k == 100);
    q.top_k = 40;
    REQUIRE(sampler(q).draw_request().temperature == 0.0f);
}

TEST_CASE("sampler basics: greedy, top_k 1, bad parameters", "[sampler]") {
    const std::vector<float> v = {0.5f, 2.0f, 2.0f, -1.0f};
    sampler greedy(sampling_params{});
    REQUIRE(greedy.sample(v).id == 1);  // a tie goes to the lower id
    sampling_params k1;
    k1.temperature = 5.0f;
    k1.top_k = 1;
    sampler s(k1);
    for (int i = 0; i < 10; ++i) REQUIRE(s.sample(v).id == 1);
    sampling_params bad;
    bad.top_p = 0.0f;
    REQUIRE_THROWS_AS(sampler(bad), error);
    bad = {};
    bad.top_k = -1;
    REQUIRE_THROWS_AS(sampler(bad), error);
    bad = {};
    bad.n_logprobs = 21;
    REQUIRE_THROWS_AS(sampler(bad), error);
}

TEST_CASE("samplers without logprobs need only the best token and the engine's draw", "[sampler]") {
    sampling_params p;
    REQUIRE(sampler(p).needs_best_only());
    p.n_logprobs = 1;
    REQUIRE_FALSE(sampler(p).needs_best_only());
    p = {};
    p.temperature = 0.7f;
    REQUIRE(sampler(p).needs_best_only());  // the engine draws it
    p.top_k = 100;
    REQUIRE(sampler(p).needs_best_only());  // beyond the summary: the engine draws it
    p.top_k = 1;
    REQUIRE_FALSE(sampler(p).needs_best_only());  // decided from the summary's tokens
    REQUIRE(sampler(p).draw_request(0).temperature == 0.0f);
    p.top_k = 0;
    p.n_logprobs = 3;
    REQUIRE_FALSE(sampler(p).needs_best_only());
    // A summary holding only the best token (row_output::best: no normaliser) gives the
    // whole row's greedy token; a NaN in the row is refused as from the whole row.
    const std::vector<float> v = {0.5f, 2.0f, 2.0f, -1.0f};
    logits_top best;
    best.n_vocab = 4;
    best.log_norm = std::numeric_limits<double>::quiet_NaN();
    best.top.push_back({1, 2.0f});
    sampler greedy(sampling_params{});
    const std::optional<sample_result> r = greedy.sample_top(best);
    REQUIRE(r);
    REQUIRE(r->id == sampler(sampling_params{}).sample(v).id);
    REQUIRE(r->top.empty());
    best.has_nan = true;
    REQUIRE_THROWS_AS(greedy.sample_top(best), error);
}

namespace {

// What a draw's distribution should be, written plainly: the candidates best first, top_k, then
// min_p (against the best's weight), then the smallest best-first prefix reaching top_p.
std::vector<double> expected_distribution(const std::vector<float> &v, const sampling_params &p) {
    const float max_logit = *std::max_element(v.begin(), v.end());
    std::vector<int32_t> ids;
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] >= max_logit - 30.0f * p.temperature) ids.push_back(int32_t(i));
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)]; });
    if (p.top_k > 0 && size_t(p.top_k) < ids.size()) ids.resize(size_t(p.top_k));
    auto w = [&](int32_t id) { return std::exp((double(v[size_t(id)]) - max_logit) / p.temperature); };
    std::vector<int32_t> kept;
    for (int32_t id : ids)
        if (kept.empty() || w(id) >= p.min_p) kept.push_back(id);
    double total = 0.0;
    for (int32_t id : kept) total += w(id);
    if (p.top_p < 1.0f) {
        double cum = 0.0;
        size_t n = 0;
        while (n < kept.size()) {
            cum += w(kept[n++]) / total;
            if (cum >= p.top_p) break;
        }
        kept.resize(n);
    }
    std::vector<double> out(v.size(), 0.0);
    total = 0.0;
    for (int32_t id : kept) total += w(id);
    for (int32_t id : kept) out[size_t(id)] = w(id) / total;
    return out;
}

}  // namespace

TEST_CASE("temperature draws follow the filtered softmax", "[sampler]") {
    // Ties (ids 1 and 4), a token far below the rest, and one inside every filter's edge.
    const std::vector<float> small = {0.2f, 1.5f, -0.7f, 0.9f, 1.5f, -40.0f, 0.0f};
    struct case_t {
        float temp;
        int32_t top_k;
        float top_p, min_p;
    };
    const std::vector<case_t> cases = {{1.0f, 0, 1.0f, 0.0f}, {0.5f, 0, 1.0f, 0.0f}, {2.0f, 3, 1.0f, 0.0f},
                                       {1.0f, 0, 0.6f, 0.0f}, {1.0f, 0, 1.0f, 0.3f}, {1.5f, 5, 0.8f, 0.1f}};
    const int n_draws = 200000;
    // 300 tokens: the nucleus is found by selection rounds, not only by the final sort.
    std::mt19937_64 rng(5);
    std::vector<float> wide = normal_logits(rng, 300, 1.0f);
    wide[42] = wide[7];  // a tie
    std::vector<std::pair<std::vector<float>, case_t>> all;
    for (const case_t &c : cases) all.push_back({small, c});
    for (const case_t c : {case_t{1.0f, 0, 0.5f, 0.0f}, case_t{0.7f, 0, 0.9f, 0.0f}, case_t{1.0f, 100, 0.7f, 0.0f}})
        all.push_back({wide, c});
    for (const auto &[v, c] : all) {
        sampling_params p;
        p.temperature = c.temp;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.seed = 99;
        const std::vector<double> want = expected_distribution(v, p);
        sampler s(p);
        std::vector<int> count(v.size(), 0);
        for (int i = 0; i < n_draws; ++i) ++count[size_t(s.sample(v).id)];
        for (size_t id = 0; id < v.size(); ++id) {
            INFO("temp " << c.temp << " top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p << " id " << id);
            const double f = double(count[id]) / n_draws;
            // Five standard deviations of a binomial frequency (a fixed seed: the same counts every run).
            const double sigma = std::sqrt(want[id] * (1.0 - want[id]) / n_draws);
            CHECK(std::abs(f - want[id]) <= 5.0 * sigma + 1e-12);
            if (want[id] == 0.0) CHECK(count[id] == 0);
        }
    }
}
