// src/sampler/draw_chunks.cpp - the host twin of the device's draw by chunks (tandem/draw_chunks.h):
// the same weights, sums and walk, one lane at a time.
#include "tandem/sampler.h"

#include "tandem/error.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>
#include <vector>

namespace tandem {

int32_t draw_by_chunks(std::span<const float> logits, float max_logit, const row_draw &d) {
    const int32_t n = static_cast<int32_t>(logits.size());
    TANDEM_ASSERT(n > 0 && d.temperature > 0.0f);
    const int32_t n_chunks = (n + draw_chunk - 1) / draw_chunk;
    const int32_t n_groups = (n_chunks + draw_group_chunks - 1) / draw_group_chunks;
    const float cutoff = draw_cutoff(max_logit, d);
    auto weight = [&](int32_t id) { return id < n ? draw_weight(logits[size_t(id)], max_logit, cutoff, d) : 0.0f; };

    // Chunk sums as a warp makes them: lanes in id order, then the butterfly.
    std::vector<double> chunk(static_cast<size_t>(n_chunks));
    for (int32_t c = 0; c < n_chunks; ++c) {
        std::array<double, 32> lane{}, next{};
        for (int32_t k = 0; k < draw_lane_ids; ++k)
            for (int32_t l = 0; l < 32; ++l) lane[size_t(l)] += double(weight(c * draw_chunk + 32 * k + l));
        for (int32_t o = 16; o >= 1; o >>= 1) {
            for (int32_t l = 0; l < 32; ++l) next[size_t(l)] = lane[size_t(l)] + lane[size_t(l ^ o)];
            lane = next;
        }
        chunk[size_t(c)] = lane[0];
    }
    std::vector<double> group(size_t(n_groups), 0.0);
    for (int32_t g = 0; g < n_groups; ++g)
        for (int32_t c = g * draw_group_chunks; c < std::min(n_chunks, (g + 1) * draw_group_chunks); ++c) group[size_t(g)] += chunk[size_t(c)];
    double total = 0.0;
    for (double s : group) total += s;
    const double r = d.u * total;

    // The last id of positive weight in [begin, end): the walk's fallback.
    auto last_positive = [&](int32_t begin, int32_t end) {
        for (int32_t i = std::min(end, n) - 1; i >= begin; --i)
            if (weight(i) > 0.0f) return i;
        return begin;  // unreachable: a walk enters only ranges of positive sum, and the best weighs 1
    };
    double acc = 0.0;
    int32_t g = 0;
    while (g < n_groups && !(acc + group[size_t(g)] > r)) acc += group[size_t(g++)];
    if (g == n_groups) return last_positive(0, n);
    const int32_t c_end = std::min(n_chunks, (g + 1) * draw_group_chunks);
    int32_t c = g * draw_group_chunks;
    while (c < c_end && !(acc + chunk[size_t(c)] > r)) acc += chunk[size_t(c++)];
    if (c == c_end) return last_positive(g * draw_group_chunks * draw_chunk, c_end * draw_chunk);
    for (int32_t i = c * draw_chunk; i < std::min(n, (c + 1) * draw_chunk); ++i) {
        acc += double(weight(i));
        if (acc > r) return i;
    }
    return last_positive(c * draw_chunk, (c + 1) * draw_chunk);
}

bool draws_any(std::span<const row_draw> draws) {
    return std::any_of(draws.begin(), draws.end(), [](const row_draw &d) { return d.temperature > 0.0f; });
}

void draw_rows_by_chunks(std::span<const float> logits, std::span<const row_draw> draws, std::vector<logits_top> &top) {
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
        t.drawn = draw_by_chunks(row, t.top[0].logit, draws[j]);
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
