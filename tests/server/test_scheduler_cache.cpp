// tests/server/test_scheduler_cache.cpp - the scheduler's prompt cache and slot files on the fake
// engine (whose "KV" is each slot's token history): a conversation back from the host cache, a
// shared prefix computed once, slots saved, erased and restored, a conversation back from the disk
// tier (read beside the decoding sessions); each output equal to its run alone.
#include "fake_engine.h"
#include "scheduler_test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>
#include <mutex>
#include <condition_variable>
#include <atomic>
#include <functional>
#include <optional>
#include <span>

using namespace tandem;
using namespace tandem::testing;

namespace {

scheduler_options cache_options(bool on) {
    scheduler_options o;
    o.prompt_cache_bytes = on ? 1 << 20 : 0;
    return o;
}

std::vector<int32_t> joined(std::vector<int32_t> a, const std::vector<int32_t> &b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

error_kind kind_of_error(const std::function<void()> &f) {
    try {
        f();
    } catch (const error &e) {
        return e.kind();
    }
    return error_kind::internal;  // "did not throw"
}

size_t prompt_rows(const fake_engine &eng, int32_t below_pos) {
    size_t n = 0;
    for (const auto &call : eng.calls())
        for (const engine_row &r : call) n += r.prompt && r.pos < below_pos;
    return n;
}

}  // namespace

TEST_CASE("a conversation whose slot went to others comes back from the host cache, token for token",
          "[scheduler][prompt_cache]") {
    for (bool cache : {true, false}) {
        INFO("prompt cache " << (cache ? "on" : "off"));
        fake_engine eng(2, 512, n_vocab);
        eng.enable_kv_moves();
        scheduler s(eng, cache_options(cache), fake_hooks(-1));
        auto run = [&](const std::vector<int32_t> &prompt) {
            auto sink = std::make_shared<collect_sink>();
            s.submit(make_request(prompt, 8, sink));
            run_until_done(s, {sink});
            return sink;
        };
        const auto a = make_prompt(1, 60);
        const auto first = run(a);
        run(make_prompt(2, 60));
        run(make_prompt(3, 60));  // takes A's slot, the least recently used
        const auto a2 = joined(joined(a, first->tokens()), make_prompt(4, 5));
        eng.clear_calls();
        const auto back = run(a2);
        CHECK(back->tokens() == fake_greedy_reference(n_vocab, a2, 8));
        const int32_t n_cached = back->last().timings.cache_n;
        CHECK(prompt_rows(eng, 1 << 20) == a2.size() - size_t(n_cached));
        const scheduler_stats st = s.stats();
        if (cache) {
            CHECK(n_cached == int32_t(a.size()) + 7);  // the prompt and every fed output token
            CHECK(st.prompt_cache_hits == 1);
            CHECK(st.prompt_cache_misses == 3);
            CHECK(st.prompt_cache_restored == uint64_t(n_cached));
            CHECK(st.prompt_cache_bytes > 0);
        } else {
            CHECK(n_cached < int32_t(a.size()));
            CHECK(st.prompt_cache_hits == 0);
        }
    }
}

TEST_CASE("the host cache keeps its conversations in the engine's page-locked memory", "[scheduler][prompt_cache]") {
    fake_engine eng(1, 512, n_vocab);
    eng.enable_kv_moves();
    eng.enable_host_pinned();
    scheduler_options o = cache_options(true);
    o.prompt_cache_bytes = 100 * 2 * sizeof(int32_t);  // one conversation of up to 100 tokens (KV and ids)
    scheduler s(eng, o, fake_hooks(-1));
    auto run = [&](const std::vector<int32_t> &prompt) {
        auto sink = std::make_shared<collect_sink>();
        s.submit(make_request(prompt, 8, sink));
        run_until_done(s, {sink});
        return sink;
    };
    // One slot: each conversation moves the last one to the cache, which keeps only it.
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::shared_ptr<collect_sink>> firsts;
    for (int32_t c = 0; c < 4; ++c) {
        prompts.push_back(make_prompt(10 + c, 60));
        firsts.push_back(run(prompts.back()));
    }
    // The third conversation is the cache's; the first was pushed out long ago.
    for (int32_t c : {2, 0}) {
        const auto again = joined(joined(prompts[size_t(c)], firsts[size_t(c)]->tokens()), make_prompt(20 + c, 4));
        const auto back = run(again);
        CHECK(back->tokens() == fake_greedy_reference(n_vocab, again, 8));
        INFO("conversation " << c);
        if (c == 2) CHECK(back->last().timings.cache_n == int32_t(prompts[2].size()) + 7);
        else CHECK(back->last().timings.cache_n == 0);
    }
    // Every conversation that left its slot was copied into the region, none to the heap.
    CHECK(eng.exports_into_region() == 5);
    CHECK(eng.exports_elsewhere() == 0);
    s.shutdown(std::chrono::milliseconds(100));
}

TEST_CASE("eight prompts arriving together with one long prefix compute it once", "[scheduler][prompt_cache]") {
    const auto shared = make_prompt(9, 300);
    for (bool cache : {true, false}) {
        INFO("prompt cache " << (cache ? "on" : "off"));
        fake_engine eng(2, 1024, n_vocab);
        eng.enable_kv_moves();
        scheduler s(eng, cache_options(cache), fake_hooks(-1));
        std::vector<std::shared_ptr<collect_sink>> sinks;
        std::vector<std::vector<int32_t>> prompts;
        for (uint32_t i = 0; i < 8; ++i) {
            prompts.push_back(joined(shared, make_prompt(20 + i, 6)));
            sinks.push_back(std::make_shared<collect_sink>());
            s.submit(make_request(prompts.back(), 4, sinks.back()));
        }
        run_until_done(s, sinks);
        int32_t n_taken = 0;
        for (size_t i = 0; i < sinks.size(); ++i) {
            INFO("request " << i);
            CHECK(sinks[i]->tokens() == fake_greedy_reference(n_vocab, prompts[i], 4));
            n_taken += sinks[i]->last().timings.cache_n >= int32_t(shared.size());
        }
        if (cache) {
            CHECK(prompt_rows(eng, int32_t(shared.size())) == shared.size());
            CHECK(n_taken == 7);
            CHECK(s.stats().prefix_tokens_copied >= shared.size());
        } else {
            // Both slots computed it: what the cache saves.
            CHECK(prompt_rows(eng, int32_t(shared.size())) >= 2 * shared.size());
        }
    }
}

TEST_CASE("a slot saved, erased and restored into another slot continues as if it never moved", "[scheduler][slot_files]") {
    fake_engine eng(2, 256, n_vocab);
    eng.enable_kv_moves();
    scheduler s(eng, {}, fake_hooks(-1));
    s.start();
    const auto d = make_prompt(30, 40);
    auto first = std::make_shared<collect_sink>();
    s.submit(make_request(d, 8, first));
    REQUIRE(first->wait_done(std::chrono::seconds(30)));
    slot_snapshot snap = s.slot_save(0);
    std::vector<int32_t> fed = first->tokens();
    fed.pop_back();  // the last output token was never fed
    CHECK(snap.tokens == joined(d, fed));
    CHECK(snap.kv.size() == snap.tokens.size() * sizeof(int32_t));
    s.slot_erase(0);
    CHECK(eng.slot_length(0) == 0);
    CHECK(s.slots()[0].n_cached == 0);

    // Refused: out of range, longer than a slot, KV of the wrong size, tokens outside the vocabulary.
    CHECK(kind_of_error([&] { s.slot_save(2); }) == error_kind::not_found);
    slot_snapshot big{std::vector<int32_t>(256, 1), kv_bytes(256 * sizeof(int32_t))};
    CHECK(kind_of_error([&] { s.slot_restore(1, big); }) == error_kind::invalid_request);
    slot_snapshot short_kv = snap;
    short_kv.kv.pop_back();
    CHECK(kind_of_error([&] { s.slot_restore(1, short_kv); }) == error_kind::invalid_request);
    slot_snapshot foreign = snap;
    foreign.tokens[3] = n_vocab;
    CHECK(kind_of_error([&] { s.slot_restore(1, foreign); }) == error_kind::invalid_request);

    s.slot_restore(1, snap);
    CHECK(eng.slot_length(1) == int32_t(snap.tokens.size()));
    const auto d2 = joined(joined(d, first->tokens()), make_prompt(31, 3));
    auto next = std::make_shared<collect_sink>();
    s.submit(make_request(d2, 8, next));
    REQUIRE(next->wait_done(std::chrono::seconds(30)));
    CHECK(next->tokens() == fake_greedy_reference(n_vocab, d2, 8));
    CHECK(next->last().timings.cache_n == int32_t(snap.tokens.size()));
    CHECK(next->last().slot == 1);
    s.shutdown(std::chrono::milliseconds(100));
}

namespace {

// The disk tier's contract in memory: what the host cache evicts, found by its longest prefix.
class memory_spill final : public prompt_spill {
public:
    uint64_t capacity() const override { return 1 << 20; }
    uint64_t bytes() const override {
        uint64_t n = 0;
        for (const auto &e : entries) n += e.bytes();
        return n;
    }
    void store(prompt_cache::entry e) override { entries.push_back(std::move(e)); }
    size_t longest_common(std::span<const int32_t> prompt) const override {
        size_t best = 0;
        for (const auto &e : entries) best = std::max(best, common(e, prompt));
        return best;
    }
    std::optional<prompt_cache::entry> load(std::span<const int32_t> prompt) override {
        ++n_loads;
        const prompt_cache::entry *best = nullptr;
        for (const auto &e : entries)
            if (!best || common(e, prompt) > common(*best, prompt)) best = &e;
        if (!best || fail_loads) return std::nullopt;
        return *best;
    }
    static size_t common(const prompt_cache::entry &e, std::span<const int32_t> p) {
        size_t n = 0;
        while (n < e.tokens.size() && n < p.size() && e.tokens[n] == p[n]) ++n;
        return n;
    }
    std::vector<prompt_cache::entry> entries;
    int n_loads = 0;
    bool fail_loads = false;
};

}  // namespace

TEST_CASE("a conversation the host cache evicted comes back from the disk tier, token for token",
          "[scheduler][prompt_cache]") {
    for (bool unreadable : {false, true}) {
        INFO((unreadable ? "the disk tier cannot read it back" : "the disk tier reads it back"));
        fake_engine eng(1, 512, n_vocab);
        eng.enable_kv_moves();
        scheduler_options o;
        o.prompt_cache_bytes = 70 * 8;  // one conversation of ~60 tokens (4 KV bytes a token here)
        auto disk = std::make_shared<memory_spill>();
        disk->fail_loads = unreadable;
        scheduler_hooks hooks = fake_hooks(-1);
        hooks.disk = disk;
        scheduler s(eng, o, std::move(hooks));
        auto run = [&](const std::vector<int32_t> &prompt) {
            auto sink = std::make_shared<collect_sink>();
            s.submit(make_request(prompt, 8, sink));
            run_until_done(s, {sink});
            return sink;
        };
        const auto a = make_prompt(1, 60);
        const auto first = run(a);
        run(make_prompt(2, 60));  // A to the host cache
        run(make_prompt(3, 60));  // B to the host cache, A evicted to the disk tier
        REQUIRE(disk->entries.size() == 1);
        CHECK(disk->entries[0].tokens.size() == a.size() + 7);
        const auto a2 = joined(joined(a, first->tokens()), make_prompt(4, 5));
        eng.clear_calls();
        const auto back = run(a2);
        CHECK(back->tokens() == fake_greedy_reference(n_vocab, a2, 8));
        const int32_t n_cached = back->last().timings.cache_n;
        CHECK(prompt_rows(eng, 1 << 20) == a2.size() - size_t(n_cached));
        CHECK(disk->n_loads == 1);
        const scheduler_stats st = s.stats();
        CHECK(st.prompt_cache_hits == 0);
        if (unreadable) {
            CHECK(n_cached == 0);
            CHECK(st.prompt_cache_disk_hits == 0);
            CHECK(st.prompt_cache_misses == 4);
        } else {
            CHECK(n_cached == int32_t(a.size()) + 7);
            CHECK(st.prompt_cache_disk_hits == 1);
            CHECK(st.prompt_cache_disk_restored == uint64_t(n_cached));
            CHECK(st.prompt_cache_misses == 3);
            CHECK(st.prompt_cache_disk_bytes == disk->bytes());
        }
    }
}

TEST_CASE("a conversation larger than the host cache goes to the disk tier directly", "[scheduler][prompt_cache]") {
    fake_engine eng(1, 512, n_vocab);
    eng.enable_kv_moves();
    scheduler_options o;
    o.prompt_cache_bytes = 40 * 8;  // less than one conversation
    auto disk = std::make_shared<memory_spill>();
    scheduler_hooks hooks = fake_hooks(-1);
    hooks.disk = disk;
    scheduler s(eng, o, std::move(hooks));
    auto run = [&](const std::vector<int32_t> &prompt) {
        auto sink = std::make_shared<collect_sink>();
        s.submit(make_request(prompt, 4, sink));
        run_until_done(s, {sink});
        return sink;
    };
    const auto a = make_prompt(1, 60);
    run(a);
    run(make_prompt(2, 60));
    REQUIRE(disk->entries.size() == 1);
    CHECK(disk->entries[0].tokens.size() == a.size() + 3);
    CHECK(s.stats().prompt_cache_bytes == 0);
    CHECK(run(a)->last().timings.cache_n == int32_t(a.size()) - 1);
}

namespace {

// A disk tier whose reads wait until the test releases them: a slow disk.
class slow_spill final : public prompt_spill {
public:
    uint64_t capacity() const override { return 1 << 20; }
    uint64_t bytes() const override { return 0; }
    void store(prompt_cache::entry e) override { stored.push_back(std::move(e)); }
    size_t longest_common(std::span<const int32_t> prompt) const override {
        size_t n = 0;
        while (n < held.tokens.size() && n < prompt.size() && held.tokens[n] == prompt[n]) ++n;
        return n;
    }
    std::optional<prompt_cache::entry> load(std::span<const int32_t>) override {
        ++n_loads;
        std::unique_lock lock(mutex);
        // Bounded: a scheduler that reads on its own thread fails the test instead of hanging it.
        cv.wait_for(lock, std::chrono::seconds(5), [&] { return released; });
        return held;
    }
    void release() {
        std::lock_guard lock(mutex);
        released = true;
        cv.notify_all();
    }
    prompt_cache::entry held;
    std::vector<prompt_cache::entry> stored;
    std::atomic<int> n_loads{0};
    std::mutex mutex;
    std::condition_variable cv;
    bool released = false;
};

}  // namespace

TEST_CASE("a read from the disk tier runs beside the decoding sessions, and its request waits for it",
          "[scheduler][prompt_cache]") {
    fake_engine eng(2, 512, n_vocab);
    eng.enable_kv_moves();
    scheduler_options o;
    o.prompt_cache_bytes = 1 << 20;
    auto disk = std::make_shared<slow_spill>();
    const auto a = make_prompt(1, 60);
    disk->held.tokens = a;
    disk->held.kv.resize(a.size() * eng.kv_token_bytes());
    {
        // The fake engine's "KV" is the slot's tokens: write A's through a slot and export them.
        fake_engine donor(1, 512, n_vocab);
        donor.enable_kv_moves();
        std::vector<engine_row> rows;
        for (size_t i = 0; i < a.size(); ++i) rows.push_back({0, int32_t(i), a[i], row_output::none, true});
        std::vector<float> ignored;
        engine_forward_logits(donor, rows, ignored);
        donor.slot_export(0, int32_t(a.size()), disk->held.kv);
    }
    scheduler_hooks hooks = fake_hooks(-1);
    hooks.disk = disk;
    scheduler s(eng, o, std::move(hooks));
    auto busy = std::make_shared<collect_sink>();
    s.submit(make_request(make_prompt(2, 10), 400, busy));
    for (int i = 0; i < 3; ++i) s.step();
    const auto back = joined(a, make_prompt(3, 4));
    auto waiting = std::make_shared<collect_sink>();
    s.submit(make_request(back, 6, waiting));
    // While the read is blocked the other session keeps decoding and the request stays queued.
    const size_t before = busy->tokens().size();
    for (int i = 0; i < 20; ++i) s.step();
    CHECK(busy->tokens().size() >= before + 20);
    CHECK(waiting->events.empty());
    CHECK(s.stats().queue_depth == 1);
    for (int i = 0; i < 500 && disk->n_loads == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(disk->n_loads == 1);  // the read started on its own thread (bounded wait for that thread)
    disk->release();
    run_until_done(s, {waiting});
    CHECK(waiting->tokens() == fake_greedy_reference(n_vocab, back, 6));
    CHECK(waiting->last().timings.cache_n == int32_t(a.size()));
    CHECK(s.stats().prompt_cache_disk_hits == 1);
    CHECK(disk->n_loads == 1);
    s.shutdown(std::chrono::milliseconds(100));
}
