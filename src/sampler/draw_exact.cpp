// src/sampler/draw_exact.cpp - the host twin of the device's exact draw (tandem/draw_exact.h): the
// same integer weights, the nucleus by selection, the pick in id order.
#include "tandem/sampler.h"

#include "tandem/error.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <array>
#include <atomic>
#include <thread>
#include <vector>

namespace tandem {

int32_t draw_exact(std::span<const float> logits, float max_logit, const row_draw &d) {
    const size_t n = logits.size();
    TANDEM_ASSERT(n > 0 && d.temperature > 0.0f);
    const float cutoff = draw_cutoff(max_logit, d);
    thread_local std::vector<uint64_t> weight;
    weight.resize(n);
    // top_k: the k-th best key among the tokens that pass the cutoff (a selection); tokens below it
    // are no candidates.
    uint64_t kth = 0;
    if (d.top_k > 0) {
        thread_local std::vector<uint64_t> keys;
        keys.clear();
        for (size_t i = 0; i < n; ++i)
            if (draw_passes(logits[i], max_logit, cutoff)) keys.push_back(draw_key(logits[i], int32_t(i)));
        if (size_t(d.top_k) < keys.size()) {
            std::nth_element(keys.begin(), keys.begin() + (d.top_k - 1), keys.end(), std::greater<uint64_t>());
            kth = keys[size_t(d.top_k - 1)];
        }
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
        weight[i] = kth > 0 && draw_key(logits[i], int32_t(i)) < kth ? 0 : draw_weight(logits[i], max_logit, cutoff, d);
        total += weight[i];
    }
    TANDEM_ASSERT(total > 0, "a row without a token of positive weight (its best weighs 2^40)");
    // The nucleus: the smallest best-first prefix whose mass reaches `need`, found by selection
    // (exact integer masses: any order of the rounds finds the same one). [lo, hi) holds the
    // undecided candidates; those before lo are in, with mass acc.
    const uint64_t need = draw_nucleus_need(total, d.top_p);
    uint64_t boundary = 0, mass = total;  // the nucleus: every candidate with key >= boundary
    if (need < total) {
        struct cand {
            uint64_t key, weight;
        };
        thread_local std::vector<cand> c;
        c.clear();
        for (size_t i = 0; i < n; ++i)
            if (weight[i] > 0) c.push_back({draw_key(logits[i], int32_t(i)), weight[i]});
        size_t lo = 0, hi = c.size();
        uint64_t acc = 0;
        for (;;) {
            TANDEM_ASSERT(lo < hi, "the nucleus search ran out of candidates");
            std::swap(c[lo + (hi - lo) / 2], c[hi - 1]);
            const cand pivot = c[hi - 1];
            const auto mid = std::partition(c.begin() + std::ptrdiff_t(lo), c.begin() + std::ptrdiff_t(hi - 1),
                                            [&](const cand &x) { return x.key > pivot.key; });
            const size_t n_better = size_t(mid - c.begin()) - lo;
            uint64_t better = 0;
            for (size_t i = lo; i < lo + n_better; ++i) better += c[i].weight;
            if (acc + better >= need) {
                hi = lo + n_better;  // the boundary is among the better ones
                continue;
            }
            acc += better + pivot.weight;
            if (acc >= need) {
                boundary = pivot.key;
                mass = acc;
                break;
            }
            std::iter_swap(mid, c.begin() + std::ptrdiff_t(hi - 1));
            lo += n_better + 1;
        }
    }
    // The pick: the running sum of the nucleus's weights in id order.
    const uint64_t r = draw_pick_threshold(d.u, mass);
    uint64_t run = 0;
    for (size_t i = 0; i < n; ++i) {
        if (weight[i] == 0 || (boundary > 0 && draw_key(logits[i], int32_t(i)) < boundary)) continue;
        run += weight[i];
        if (run > r) return int32_t(i);
    }
    TANDEM_ASSERT(false, "the pick ran past the nucleus");
    return 0;
}

std::optional<token_logit> draw_exact_top(const logits_top &t, const row_draw &d) {
    TANDEM_ASSERT(!t.top.empty() && d.temperature > 0.0f);
    const float max_logit = t.top[0].logit, cutoff = draw_cutoff(max_logit, d);
    // The candidates are a best-first prefix of the row; the summary's tokens are the row's best.
    size_t n_pass = 0;
    while (n_pass < t.top.size() && draw_passes(t.top[n_pass].logit, max_logit, cutoff)) ++n_pass;
    const bool whole_row = int32_t(t.top.size()) == t.n_vocab;
    size_t n_cand = n_pass;
    if (d.top_k > 0 && size_t(d.top_k) < n_cand) n_cand = size_t(d.top_k);
    const bool decided = whole_row || n_pass < t.top.size() || (d.top_k > 0 && size_t(d.top_k) <= t.top.size());
    if (!decided) return std::nullopt;
    std::array<uint64_t, logits_top_max> weight{};
    TANDEM_ASSERT(n_cand <= weight.size(), "a summary of {} tokens", t.top.size());
    uint64_t total = 0;
    for (size_t i = 0; i < n_cand; ++i) total += weight[i] = draw_weight(t.top[i].logit, max_logit, cutoff, d);
    // The nucleus: the shortest prefix of positive weights reaching need (the summary is in order).
    const uint64_t need = draw_nucleus_need(total, d.top_p);
    uint64_t mass = 0;
    size_t n_in = 0;
    while (n_in < n_cand && mass < need) mass += weight[n_in++];
    // The pick in id order.
    std::array<size_t, logits_top_max> order{};
    for (size_t i = 0; i < n_in; ++i) order[i] = i;
    std::sort(order.begin(), order.begin() + std::ptrdiff_t(n_in), [&](size_t a, size_t b) { return t.top[a].id < t.top[b].id; });
    const uint64_t r = draw_pick_threshold(d.u, mass);
    uint64_t run = 0;
    for (size_t j = 0; j < n_in; ++j) {
        run += weight[order[j]];
        if (run > r) return t.top[order[j]];
    }
    TANDEM_ASSERT(false, "the pick ran past the nucleus");
    return std::nullopt;
}

bool draws_any(std::span<const row_draw> draws) {
    return std::any_of(draws.begin(), draws.end(), [](const row_draw &d) { return d.temperature > 0.0f; });
}

void draw_rows_exact(std::span<const float> logits, std::span<const row_draw> draws, std::vector<logits_top> &top) {
    TANDEM_ASSERT(draws.size() == top.size(), "{} draw requests for {} logits rows", draws.size(), top.size());
    if (top.empty()) return;
    const size_t vocab = logits.size() / top.size();
    TANDEM_ASSERT(vocab > 0 && logits.size() == vocab * top.size());
    std::vector<size_t> todo;
    for (size_t j = 0; j < draws.size(); ++j)
        if (draws[j].temperature > 0.0f) todo.push_back(j);
    auto draw = [&](size_t j) {
        logits_top &t = top[j];
        if (t.has_nan) return;  // the sampler refuses the row
        const std::span<const float> row = logits.subspan(j * vocab, vocab);
        t.drawn = draw_exact(row, t.top[0].logit, draws[j]);
        t.drawn_logit = row[size_t(t.drawn)];
        t.drawn_u = draws[j].u;
    };
    // Threads only where a row's draw outweighs starting one (~0.8 ms at 152k ids, 5 us at 1k).
    const size_t n_threads = vocab >= 16384 ? std::min<size_t>(todo.size(), 8) : 1;
    if (n_threads <= 1) {
        for (size_t j : todo) draw(j);
        return;
    }
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (size_t w = 0; w < n_threads; ++w)
        threads.emplace_back([&] {
            for (size_t k; (k = next.fetch_add(1)) < todo.size();) draw(todo[k]);
        });
    for (auto &t : threads) t.join();
}

}  // namespace tandem
