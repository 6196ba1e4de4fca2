// tests/server/scheduler_test_util.h - what the scheduler tests share: a sink that collects a
// request's events, prompts and requests made from a seed, and a bounded step loop.
#pragma once

#include "src/scheduler/scheduler.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

namespace tandem::testing {

constexpr int32_t n_vocab = 32;

struct collect_sink : gen_sink {
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<gen_event> events;
    void on_event(gen_event &&ev) override {
        std::lock_guard lock(mutex);
        events.push_back(std::move(ev));
        cv.notify_all();
    }
    bool done() {
        std::lock_guard lock(mutex);
        return !events.empty() && events.back().type == gen_event::kind::done;
    }
    bool wait_done(std::chrono::seconds limit) {
        std::unique_lock lock(mutex);
        return cv.wait_for(lock, limit, [&] { return !events.empty() && events.back().type == gen_event::kind::done; });
    }
    std::vector<int32_t> tokens() {
        std::lock_guard lock(mutex);
        std::vector<int32_t> out;
        for (auto &e : events)
            for (auto &t : e.tokens) out.push_back(t.id);
        return out;
    }
    std::string text() {
        std::lock_guard lock(mutex);
        std::string out;
        for (auto &e : events) out += e.text;
        return out;
    }
    gen_event last() {
        std::lock_guard lock(mutex);
        return events.back();
    }
};

inline std::vector<int32_t> make_prompt(uint32_t seed, size_t n) {
    std::vector<int32_t> p(n);
    uint32_t x = seed * 2654435761u + 12345u;
    for (auto &t : p) {
        x = x * 1664525u + 1013904223u;
        t = static_cast<int32_t>((x >> 16) % n_vocab);
    }
    return p;
}

inline gen_request make_request(std::vector<int32_t> prompt, int32_t max_tokens, std::shared_ptr<collect_sink> sink) {
    gen_request r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sink = std::move(sink);
    return r;
}

// Steps until every sink is done; bounded so a bug cannot hang the test.
inline void run_until_done(scheduler &s, const std::vector<std::shared_ptr<collect_sink>> &sinks, int max_steps = 100000) {
    for (int i = 0; i < max_steps; ++i) {
        bool all = std::all_of(sinks.begin(), sinks.end(), [](auto &k) { return k->done(); });
        if (all) return;
        s.step();
    }
    FAIL("requests did not finish within " << max_steps << " steps");
}

}  // namespace tandem::testing
