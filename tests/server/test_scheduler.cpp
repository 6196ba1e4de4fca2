// tests/server/test_scheduler.cpp - scheduler policy on the fake engine: FIFO admission, prefix
// reuse, decode priority, yielding prefill, batch invariance, stop conditions, cancellation.
#include "fake_engine.h"
#include "scheduler_test_util.h"
#include "src/scheduler/stop_matcher.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <map>
#include <set>
#include <thread>

using namespace tandem;
using namespace tandem::testing;

namespace {

std::set<int32_t> slots_in(const std::vector<engine_row> &call) {
    std::set<int32_t> s;
    for (auto &r : call) s.insert(r.slot);
    return s;
}

}  // namespace

TEST_CASE("a single greedy request matches the direct reference", "[scheduler]") {
    fake_engine eng(4, 256, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    auto sink = std::make_shared<collect_sink>();
    auto prompt = make_prompt(1, 20);
    s.submit(make_request(prompt, 12, sink));
    run_until_done(s, {sink});
    CHECK(sink->tokens() == fake_greedy_reference(n_vocab, prompt, 12));
    auto done = sink->last();
    CHECK(done.finish == finish_reason::length);
    CHECK(done.n_generated == 12);
    CHECK(done.n_prompt == 20);
    CHECK(done.timings.prompt_n == 20);
    CHECK(done.timings.cache_n == 0);
    CHECK(done.timings.predicted_n == 12);
    CHECK(s.stats().slots_in_use == 0);
}

TEST_CASE("16 concurrent greedy requests equal their runs alone, decoding in one call per step", "[scheduler]") {
    fake_engine eng(16, 512, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    std::vector<std::shared_ptr<collect_sink>> sinks;
    std::vector<std::vector<int32_t>> prompts;
    for (uint32_t i = 0; i < 16; ++i) {
        prompts.push_back(make_prompt(100 + i, 5 + i * 3));
        sinks.push_back(std::make_shared<collect_sink>());
        s.submit(make_request(prompts.back(), 24, sinks.back()));
    }
    run_until_done(s, sinks);
    for (size_t i = 0; i < 16; ++i) {
        INFO("request " << i);
        CHECK(sinks[i]->tokens() == fake_greedy_reference(n_vocab, prompts[i], 24));
    }
    size_t widest = 0;
    for (auto &call : eng.calls()) widest = std::max(widest, slots_in(call).size());
    CHECK(widest == 16);
    CHECK(s.stats().max_rows_per_decode == 16);
}

TEST_CASE("steps ask for row summaries unless a picker needs whole rows", "[scheduler]") {
    fake_engine eng(4, 256, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    auto a = std::make_shared<collect_sink>(), b = std::make_shared<collect_sink>();
    const auto pa = make_prompt(7, 9), pb = make_prompt(8, 4);
    s.submit(make_request(pa, 10, a));
    run_until_done(s, {a});
    CHECK(eng.logits_calls() == 0);  // no call of a greedy request asked for whole rows
    eng.clear_calls();
    // A temperature draw with a top_k over 64 needs whole rows: every call it has a row in asks for them.
    gen_request rb = make_request(pb, 10, b);
    rb.sampling.temperature = 0.7f;
    rb.sampling.top_k = 100;
    s.submit(std::move(rb));
    run_until_done(s, {b});
    CHECK_FALSE(eng.calls().empty());
    int64_t with_output = 0;
    for (const auto &call : eng.calls())
        with_output += std::any_of(call.begin(), call.end(), [](const engine_row &r) { return r.want != row_output::none; });
    CHECK(eng.logits_calls() == with_output);
    // Both paths pick the same greedy tokens (the fake picker is greedy either way).
    CHECK(a->tokens() == fake_greedy_reference(n_vocab, pa, 10));
    CHECK(b->tokens() == fake_greedy_reference(n_vocab, pb, 10));
}

TEST_CASE("greedy requests without logprobs ask for each row's best token alone", "[scheduler]") {
    // Real samplers: a greedy request reporting no logprobs needs only its rows' best tokens
    // (row_output::best); one with logprobs needs the summaries' normaliser and best tokens.
    // (Temperature requests: the next case.)
    fake_engine eng(4, 256, n_vocab);
    scheduler_hooks hooks = fake_hooks(-1);
    hooks.make_picker = make_sampler_picker;
    scheduler s(eng, {}, hooks);
    auto a = std::make_shared<collect_sink>(), b = std::make_shared<collect_sink>();
    const auto pa = make_prompt(11, 6), pb = make_prompt(12, 5);
    s.submit(make_request(pa, 9, a));
    run_until_done(s, {a});
    CHECK(eng.best_calls() == int64_t(eng.calls().size()));
    CHECK(a->tokens() == fake_greedy_reference(n_vocab, pa, 9));
    const int64_t best = eng.best_calls();
    gen_request rb = make_request(pb, 9, b);
    rb.sampling.n_logprobs = 2;
    s.submit(std::move(rb));
    run_until_done(s, {b});
    CHECK(eng.best_calls() == best);  // no call of the logprobs request took the best tokens alone
    CHECK(b->tokens() == fake_greedy_reference(n_vocab, pb, 9));
    for (const gen_event &e : b->events)
        for (const auto &t : e.tokens) {
            CHECK(std::isfinite(t.logprob));
            CHECK(t.top.size() == 2);
        }
}

TEST_CASE("temperature requests draw beside the row summaries: the sampler's own whole-row tokens", "[scheduler]") {
    // Real samplers. Requests with a temperature (maybe min_p, top_p) but no top_k ask the engine
    // for exact draws beside the summaries and never for whole rows; each gets exactly the
    // tokens its sampler draws from whole rows one at a time, alone or beside other sessions.
    fake_engine eng(4, 256, n_vocab);
    scheduler_hooks hooks = fake_hooks(-1);
    hooks.make_picker = make_sampler_picker;
    scheduler s(eng, {}, hooks);
    std::vector<std::shared_ptr<collect_sink>> sinks;
    std::vector<gen_request> reqs;
    for (uint32_t i = 0; i < 4; ++i) {
        sinks.push_back(std::make_shared<collect_sink>());
        gen_request r = make_request(make_prompt(200 + i, 3 + i), 12, sinks.back());
        r.sampling.temperature = i == 3 ? 0.0f : 0.6f + 0.4f * float(i);  // one greedy request beside them
        r.sampling.min_p = i == 1 ? 0.05f : 0.0f;
        r.sampling.top_p = i == 2 ? 0.7f : 1.0f;
        r.sampling.seed = 40 + i;
        reqs.push_back(r);
        s.submit(std::move(r));
    }
    run_until_done(s, sinks);
    CHECK(eng.draw_calls() > 0);
    CHECK(eng.logits_calls() == 0);  // no call took whole rows
    CHECK(eng.best_calls() == int64_t(eng.calls().size()));  // no logprobs, no top_k: best tokens and draws only
    for (size_t i = 0; i < reqs.size(); ++i) {
        fake_engine ref(1, 256, n_vocab);
        sampler direct(reqs[i].sampling);
        std::vector<int32_t> h = reqs[i].prompt, want;
        std::vector<float> logits(static_cast<size_t>(n_vocab));
        for (int32_t t = 0; t < reqs[i].max_tokens; ++t) {
            ref.logits_of(h, logits.data());
            want.push_back(direct.sample(logits).id);
            h.push_back(want.back());
        }
        INFO("request " << i);
        CHECK(sinks[i]->tokens() == want);
    }
}

TEST_CASE("prefill goes in chunks while nobody decodes", "[scheduler]") {
    fake_engine eng(2, 512, n_vocab);
    scheduler_options opt;
    opt.prefill_chunk = 32;
    scheduler s(eng, opt, fake_hooks(-1));
    auto sink = std::make_shared<collect_sink>();
    auto prompt = make_prompt(7, 100);
    s.submit(make_request(prompt, 2, sink));
    run_until_done(s, {sink});
    auto calls = eng.calls();
    REQUIRE(calls.size() >= 4);
    CHECK(calls[0].size() == 32);
    CHECK(calls[1].size() == 32);
    CHECK(calls[2].size() == 32);
    CHECK(calls[3].size() == 4);
    // Only the last prompt row asks for logits.
    int n_logits = 0;
    for (int c = 0; c < 4; ++c)
        for (auto &r : calls[static_cast<size_t>(c)]) n_logits += r.want != row_output::none;
    CHECK(n_logits == 1);
    CHECK(calls[3].back().want != row_output::none);
    CHECK(sink->tokens() == fake_greedy_reference(n_vocab, prompt, 2));
}

TEST_CASE("a long prompt arriving mid-generation yields to decode rows every step", "[scheduler]") {
    fake_engine eng(4, 4096, n_vocab);
    scheduler_options opt;
    opt.prefill_chunk = 512;
    opt.prefill_yield = 16;
    opt.itl_budget = 1e9;  // no step time comes near this: only the token cap is in play
    scheduler s(eng, opt, fake_hooks(-1));
    auto a = std::make_shared<collect_sink>();
    auto pa = make_prompt(11, 8);
    s.submit(make_request(pa, 200, a));
    for (int i = 0; i < 3; ++i) s.step();  // a is decoding now
    eng.clear_calls();
    auto b = std::make_shared<collect_sink>();
    auto pb = make_prompt(12, 1000);
    s.submit(make_request(pb, 4, b));
    run_until_done(s, {b});
    auto calls = eng.calls();
    // b's 1000 prompt tokens at <= 16 per step, each step also carrying a's decode row.
    REQUIRE(calls.size() >= 1000 / 16);
    int32_t b_slot = -1;
    for (auto &call : calls) {
        int n_a = 0, n_b = 0;
        for (auto &r : call) {
            if (r.slot == calls[0][0].slot) ++n_a;
            else { ++n_b; b_slot = r.slot; }
        }
        CHECK(n_a == 1);
        CHECK(n_b <= 16);
    }
    CHECK(b_slot >= 0);
    CHECK(s.stats().prefill_yields >= 1000 / 16 - 1);
    CHECK(b->tokens() == fake_greedy_reference(n_vocab, pb, 4));
    run_until_done(s, {a});
    CHECK(a->tokens() == fake_greedy_reference(n_vocab, pa, 200));
}

TEST_CASE("each step with decode rows carries at most the published prefill budget", "[scheduler]") {
    // The budget itself comes from measured step times (test_prefill_budget.cpp drives it with
    // synthetic ones); here only the contract between it, the rows and the gauge is checked.
    fake_engine eng(4, 2048, n_vocab);
    scheduler_options opt;
    opt.prefill_yield = 32;
    opt.itl_budget = 1.5;
    scheduler s(eng, opt, fake_hooks(-1));
    CHECK(s.stats().prefill_budget == 32);  // until steps are measured: --prefill-yield
    auto a = std::make_shared<collect_sink>();
    auto pa = make_prompt(31, 6);
    uint64_t ida = s.submit(make_request(pa, 1500, a));  // decodes for the whole test
    for (int i = 0; i < 3; ++i) s.step();
    const int32_t a_slot = eng.calls().at(0).at(0).slot;
    auto b = std::make_shared<collect_sink>();
    auto pb = make_prompt(32, 600);
    s.submit(make_request(pb, 2, b));
    int32_t prompt_done = 0;
    for (int i = 0; i < 2000 && !b->done(); ++i) {
        eng.clear_calls();
        s.step();
        int32_t budget = s.stats().prefill_budget;
        CHECK(budget >= 1);
        CHECK(budget <= 32);
        auto calls = eng.calls();
        REQUIRE(calls.size() == 1);
        int32_t n_b = 0;
        CHECK(calls[0][0].slot == a_slot);  // a's decode row comes first in every step
        for (auto &r : calls[0]) n_b += r.slot != a_slot && r.pos < 600;
        CHECK(n_b <= budget);
        prompt_done += n_b;
    }
    CHECK(prompt_done == 600);  // the prefill always advanced and finished
    CHECK(b->tokens() == fake_greedy_reference(n_vocab, pb, 2));
    s.cancel(ida);
    run_until_done(s, {a});
}

TEST_CASE("--itl-budget below 1 is a configuration error", "[scheduler]") {
    fake_engine eng(2, 256, n_vocab);
    scheduler_options opt;
    opt.itl_budget = 0.9;
    CHECK_THROWS_AS(scheduler(eng, opt, fake_hooks(-1)), error);
}

TEST_CASE("a request reuses the longest cached prefix and recomputes at least one token", "[scheduler]") {
    fake_engine eng(3, 512, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    auto shared = make_prompt(21, 40);
    auto other = make_prompt(22, 30);
    // Two slots get different histories.
    auto s1 = std::make_shared<collect_sink>(), s2 = std::make_shared<collect_sink>();
    s.submit(make_request(other, 3, s1));
    s.submit(make_request(shared, 3, s2));
    run_until_done(s, {s1, s2});
    int32_t shared_slot = s2->last().slot;

    SECTION("a prompt extending a cached one takes that slot and prefills only the suffix") {
        auto prompt = shared;
        auto extra = make_prompt(23, 10);
        prompt.insert(prompt.end(), extra.begin(), extra.end());
        eng.clear_calls();
        auto k = std::make_shared<collect_sink>();
        s.submit(make_request(prompt, 5, k));
        run_until_done(s, {k});
        CHECK(k->last().slot == shared_slot);
        CHECK(k->last().timings.cache_n == 40);
        CHECK(k->last().timings.prompt_n == 10);
        CHECK(eng.calls()[0].size() == 10);
        CHECK(eng.calls()[0][0].pos == 40);
        CHECK(k->tokens() == fake_greedy_reference(n_vocab, prompt, 5));
    }
    SECTION("the same prompt again recomputes exactly its last token") {
        eng.clear_calls();
        auto k = std::make_shared<collect_sink>();
        s.submit(make_request(shared, 3, k));
        run_until_done(s, {k});
        CHECK(k->last().slot == shared_slot);
        CHECK(k->last().timings.cache_n == 39);
        CHECK(eng.calls()[0].size() == 1);
        CHECK(k->tokens() == s2->tokens());
    }
    SECTION("a prompt diverging inside the cache truncates the slot to the shared part") {
        auto prompt = shared;
        prompt.resize(25);
        prompt.push_back((shared[25] + 1) % n_vocab);
        auto k = std::make_shared<collect_sink>();
        s.submit(make_request(prompt, 4, k));
        run_until_done(s, {k});
        CHECK(k->last().slot == shared_slot);
        CHECK(k->last().timings.cache_n == 25);
        CHECK(k->tokens() == fake_greedy_reference(n_vocab, prompt, 4));
    }
}

TEST_CASE("admission is FIFO and the queue is bounded", "[scheduler]") {
    fake_engine eng(1, 512, n_vocab);
    scheduler_options opt;
    opt.max_queue = 2;
    scheduler s(eng, opt, fake_hooks(-1));
    std::vector<std::shared_ptr<collect_sink>> sinks;
    for (uint32_t i = 0; i < 3; ++i) {
        sinks.push_back(std::make_shared<collect_sink>());
        s.submit(make_request(make_prompt(30 + i, 6), 3, sinks.back()));
        if (i == 0) s.step();  // the first one takes the only slot
    }
    CHECK(s.stats().queue_depth == 2);
    auto overflow = std::make_shared<collect_sink>();
    try {
        s.submit(make_request(make_prompt(40, 6), 3, overflow));
        FAIL("a full queue accepted a request");
    } catch (const error &e) {
        CHECK(e.kind() == error_kind::unavailable);
    }
    // Completion order follows submission order: record which finishes first.
    std::vector<int> order;
    for (int i = 0; i < 1000 && order.size() < 3; ++i) {
        s.step();
        for (int k = 0; k < 3; ++k)
            if (sinks[static_cast<size_t>(k)]->done() && std::find(order.begin(), order.end(), k) == order.end())
                order.push_back(k);
    }
    CHECK(order == std::vector<int>{0, 1, 2});
    CHECK(s.stats().requests_rejected == 1);
}

TEST_CASE("--max-queue 0 still fills the free slots before refusing", "[scheduler]") {
    fake_engine eng(2, 512, n_vocab);
    scheduler_options opt;
    opt.max_queue = 0;
    scheduler s(eng, opt, fake_hooks(-1));
    auto a = std::make_shared<collect_sink>(), b = std::make_shared<collect_sink>(), c = std::make_shared<collect_sink>();
    s.submit(make_request(make_prompt(1, 4), 50, a));
    s.submit(make_request(make_prompt(2, 4), 50, b));
    CHECK_THROWS_AS(s.submit(make_request(make_prompt(3, 4), 50, c)), error);
    s.step();
    CHECK(s.stats().slots_in_use == 2);
    CHECK_THROWS_AS(s.submit(make_request(make_prompt(3, 4), 50, c)), error);
    run_until_done(s, {a, b});
    s.submit(make_request(make_prompt(3, 4), 5, c));
    run_until_done(s, {c});
    CHECK(c->last().finish == finish_reason::length);
}

TEST_CASE("cancellation drops a queued request at once and frees an active slot", "[scheduler]") {
    fake_engine eng(1, 512, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    auto a = std::make_shared<collect_sink>(), b = std::make_shared<collect_sink>();
    uint64_t ida = s.submit(make_request(make_prompt(50, 6), 100, a));
    s.step();
    uint64_t idb = s.submit(make_request(make_prompt(51, 6), 100, b));
    s.cancel(idb);
    REQUIRE(b->done());  // without a step: it was only queued
    CHECK(b->last().finish == finish_reason::cancelled);
    CHECK(b->tokens().empty());
    CHECK(s.slots()[0].processing);
    s.cancel(ida);
    s.step();
    REQUIRE(a->done());
    CHECK(a->last().finish == finish_reason::cancelled);
    CHECK_FALSE(s.slots()[0].processing);
    CHECK(s.stats().slots_in_use == 0);
    CHECK(s.stats().requests_cancelled == 2);
    s.cancel(12345);  // unknown: ignored
    CHECK_FALSE(s.step());
}

TEST_CASE("stop strings end the output before the match and never leak a partial match", "[scheduler]") {
    fake_engine eng(2, 512, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    auto prompt = make_prompt(60, 10);
    auto plain = std::make_shared<collect_sink>();
    s.submit(make_request(prompt, 40, plain));
    run_until_done(s, {plain});
    std::string full = plain->text();
    REQUIRE(full.size() == 40);
    std::string stop = full.substr(17, 3);
    size_t first = full.find(stop);
    auto k = std::make_shared<collect_sink>();
    auto req = make_request(prompt, 40, k);
    req.stop = {"never-in-output-XYZ", stop};
    s.submit(std::move(req));
    run_until_done(s, {k});
    CHECK(k->text() == full.substr(0, first));
    CHECK(k->last().finish == finish_reason::stop);
    CHECK(k->last().stop_matched == stop);
}

TEST_CASE("stop_matcher holds back only what may still become a stop string", "[scheduler]") {
    stop_matcher m({"world", "wx"});
    CHECK(m.feed("hello w") == "hello ");
    CHECK(m.feed("o") == "");
    CHECK(m.feed("rk") == "work");
    CHECK(m.feed("s wor") == "s ");
    CHECK(m.feed("ld!") == "");
    CHECK(m.matched());
    CHECK(m.matched_stop() == "world");
    CHECK(m.feed("more") == "");
    stop_matcher n({"abc"});
    CHECK(n.feed("xab") == "x");
    CHECK(n.flush() == "ab");
    stop_matcher none({});
    CHECK(none.feed("abc") == "abc");
}

TEST_CASE("an end-of-generation token stops with reason stop and adds no text", "[scheduler]") {
    fake_engine eng(1, 512, n_vocab);
    auto prompt = make_prompt(70, 12);
    auto ref = fake_greedy_reference(n_vocab, prompt, 30);
    int32_t eog = ref[4];
    size_t first = static_cast<size_t>(std::find(ref.begin(), ref.end(), eog) - ref.begin());
    scheduler s(eng, {}, fake_hooks(eog));
    auto k = std::make_shared<collect_sink>();
    s.submit(make_request(prompt, 30, k));
    run_until_done(s, {k});
    CHECK(k->last().finish == finish_reason::stop);
    CHECK(k->last().n_generated == static_cast<int32_t>(first + 1));
    CHECK(k->text().size() == first);
    CHECK(k->tokens() == std::vector<int32_t>(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(first)));
}

TEST_CASE("generation stops with reason length when the context is full", "[scheduler]") {
    fake_engine eng(1, 16, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    auto k = std::make_shared<collect_sink>();
    s.submit(make_request(make_prompt(80, 10), 100, k));
    run_until_done(s, {k});
    CHECK(k->last().finish == finish_reason::length);
    // 10 prompt tokens leave positions 10..15 for 6 fed tokens; the first comes from the prompt.
    CHECK(k->last().n_generated == 7);
}

TEST_CASE("bad requests are refused with the right error kind", "[scheduler]") {
    fake_engine eng(1, 16, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    auto k = std::make_shared<collect_sink>();
    auto kind_of = [&](gen_request r) {
        try {
            s.submit(std::move(r));
        } catch (const error &e) {
            return e.kind();
        }
        return error_kind::internal;
    };
    CHECK(kind_of(make_request({}, 4, k)) == error_kind::invalid_request);
    CHECK(kind_of(make_request(make_prompt(1, 16), 4, k)) == error_kind::too_large);
    CHECK(kind_of(make_request(make_prompt(1, 4), 0, k)) == error_kind::invalid_request);
}

TEST_CASE("an engine failure fails the requests in the call and the next request works", "[scheduler]") {
    fake_engine eng(2, 128, n_vocab);
    scheduler s(eng, {}, fake_hooks(-1));
    auto k = std::make_shared<collect_sink>();
    s.submit(make_request(make_prompt(90, 6), 5, k));
    eng.fail_next();
    s.step();
    REQUIRE(k->done());
    CHECK(k->last().finish == finish_reason::error);
    auto ok = std::make_shared<collect_sink>();
    auto prompt = make_prompt(91, 6);
    s.submit(make_request(prompt, 5, ok));
    run_until_done(s, {ok});
    CHECK(ok->tokens() == fake_greedy_reference(n_vocab, prompt, 5));
}

TEST_CASE("a draw that fails (NaN logits) ends only its own request", "[scheduler]") {
    // Real samplers: whole rows (temperature, several sessions: the threaded draws) and row
    // summaries (greedy).
    for (const bool whole_rows : {true, false}) {
        CAPTURE(whole_rows);
        fake_engine eng(3, 128, n_vocab);
        scheduler_hooks hooks = fake_hooks(-1);
        hooks.make_picker = make_sampler_picker;
        scheduler s(eng, {}, hooks);
        std::vector<std::shared_ptr<collect_sink>> sinks;
        std::vector<std::vector<int32_t>> prompts;
        for (uint32_t i = 0; i < 3; ++i) {
            sinks.push_back(std::make_shared<collect_sink>());
            prompts.push_back(make_prompt(120 + i, 5));
            gen_request r = make_request(prompts.back(), 8, sinks.back());
            if (whole_rows) {
                r.sampling.temperature = 0.7f;
                r.sampling.seed = 7 + i;
            }
            s.submit(std::move(r));
        }
        s.step();  // admits all three to slots 0, 1, 2 and prefills them
        eng.set_nan(1, 7);  // slot 1 draws 3 tokens (rows at 5, 6, 7 held), then NaN
        run_until_done(s, sinks);
        CHECK(sinks[1]->last().finish == finish_reason::error);
        CHECK(sinks[1]->last().error.find("NaN") != std::string::npos);
        CHECK(sinks[1]->tokens().size() == 3);
        for (size_t i : {size_t(0), size_t(2)}) {
            CHECK(sinks[i]->last().finish == finish_reason::length);
            CHECK(sinks[i]->tokens().size() == 8);
        }
        // The scheduler goes on serving, and the failed slot's cache is what it says it holds.
        eng.set_nan(-1, 0);
        auto next = std::make_shared<collect_sink>();
        s.submit(make_request(prompts[1], 4, next));
        run_until_done(s, {next});
        CHECK(next->last().finish == finish_reason::length);
        if (!whole_rows) CHECK(next->tokens() == fake_greedy_reference(n_vocab, prompts[1], 4));
    }
}

TEST_CASE("the engine thread serves concurrent submitters and shuts down cleanly", "[scheduler]") {
    fake_engine eng(4, 256, n_vocab);
    scheduler_options opt;
    opt.max_queue = 64;
    scheduler s(eng, opt, fake_hooks(-1));
    s.start();
    std::vector<std::shared_ptr<collect_sink>> sinks(24);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = t; i < 24; i += 4) {
                sinks[static_cast<size_t>(i)] = std::make_shared<collect_sink>();
                s.submit(make_request(make_prompt(200 + static_cast<uint32_t>(i), 9), 8, sinks[static_cast<size_t>(i)]));
            }
        });
    }
    for (auto &t : threads) t.join();
    for (int i = 0; i < 24; ++i) {
        INFO("request " << i);
        REQUIRE(sinks[static_cast<size_t>(i)]->wait_done(std::chrono::seconds(30)));
        CHECK(sinks[static_cast<size_t>(i)]->tokens() == fake_greedy_reference(n_vocab, make_prompt(200 + static_cast<uint32_t>(i), 9), 8));
    }
    // A long request in flight when shutdown starts is cancelled after the grace period.
    eng.set_delay(std::chrono::milliseconds(1));  // >= 200 ms for the ~250 steps the context allows
    auto longer = std::make_shared<collect_sink>();
    s.submit(make_request(make_prompt(300, 9), 200000, longer));
    s.shutdown(std::chrono::milliseconds(50));
    REQUIRE(longer->done());
    CHECK(longer->last().finish == finish_reason::cancelled);
    auto late = std::make_shared<collect_sink>();
    CHECK_THROWS_AS(s.submit(make_request(make_prompt(301, 9), 4, late)), error);
}
