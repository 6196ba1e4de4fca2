// tests/server/test_draft.cpp - speculative decoding by prompt lookup: draft_lookup's proposals, the
// accepted-prefix rule, the adaptive length, and the scheduler with --draft giving exactly the output
// it gives without drafts (greedy and seeded sampling; max_tokens, end-of-generation, stop strings
// and a full context reached inside a step's drafts) in fewer steps.
#include "fake_engine.h"
#include "scheduler_test_util.h"

#include <catch2/catch.hpp>

using namespace tandem;
using namespace tandem::testing;

namespace {

std::vector<int32_t> propose(const std::vector<int32_t> &history, int32_t n, draft_options opt = {8, 2, 4}) {
    draft_lookup d(opt);
    d.append(history);
    return d.propose(n);
}

// What one request produced: its tokens, text and how it ended.
struct outcome {
    std::vector<int32_t> tokens;
    std::string text;
    finish_reason finish = finish_reason::none;
    int32_t n_generated = 0;
    bool operator==(const outcome &o) const {
        return tokens == o.tokens && text == o.text && finish == o.finish && n_generated == o.n_generated;
    }
};

struct run_result {
    std::vector<outcome> outcomes;
    scheduler_stats stats;
    size_t n_calls = 0;
    std::vector<std::vector<engine_row>> calls;
};

// Runs the requests together on a fake engine whose logits depend on the last `context` tokens,
// with the given options; the engine checks every row's position against its slot.
run_result run_requests(const std::vector<gen_request> &requests, const scheduler_options &options, size_t context,
                        int32_t eog_id = -1, int32_t n_ctx = 512, bool real_sampler = false) {
    fake_engine eng(8, n_ctx, n_vocab);
    eng.set_context(context);
    scheduler_hooks hooks = fake_hooks(eog_id);
    if (real_sampler) hooks.make_picker = make_sampler_picker;
    scheduler s(eng, options, hooks);
    std::vector<std::shared_ptr<collect_sink>> sinks;
    for (gen_request r : requests) {
        sinks.push_back(std::make_shared<collect_sink>());
        r.sink = sinks.back();
        s.submit(std::move(r));
    }
    run_until_done(s, sinks);
    run_result out;
    for (auto &k : sinks) {
        const gen_event done = k->last();
        out.outcomes.push_back({k->tokens(), k->text(), done.finish, done.n_generated});
    }
    out.stats = s.stats();
    out.calls = eng.calls();
    out.n_calls = out.calls.size();
    // Every slot's cache holds what the scheduler believes it holds (drafts past the kept ones gone).
    for (const slot_info &si : s.slots()) CHECK(si.n_cached == eng.slot_length(si.id));
    return out;
}

scheduler_options with_draft(int32_t n_max, int32_t step_rows = 16) {
    scheduler_options o;
    o.draft = {n_max, 2, 4};
    o.draft_step_rows = step_rows;
    return o;
}

}  // namespace

TEST_CASE("draft_lookup proposes what followed the latest earlier occurrence of the longest suffix", "[draft]") {
    // No earlier occurrence of any suffix of 2..4 tokens.
    CHECK(propose({1, 2, 3, 4, 5}, 4).empty());
    // The suffix (7, 8) occurred once: what followed it.
    CHECK(propose({7, 8, 9, 10, 11, 7, 8}, 3) == std::vector<int32_t>{9, 10, 11});
    // Two earlier occurrences of (7, 8): the latest one's continuation.
    CHECK(propose({7, 8, 1, 1, 7, 8, 2, 2, 7, 8}, 2) == std::vector<int32_t>{2, 2});
    // A longer matching suffix wins over a more recent shorter one: (5, 7, 8) occurred before the
    // latest (7, 8).
    CHECK(propose({5, 7, 8, 1, 9, 7, 8, 2, 3, 5, 7, 8}, 2) == std::vector<int32_t>{1, 9});
    // A single matching token is not enough with ngram_min 2, and is with 1.
    CHECK(propose({4, 6, 9, 4}, 2).empty());
    CHECK(propose({4, 6, 9, 4}, 2, {8, 1, 4}) == std::vector<int32_t>{6, 9});
    // The continuation reaching the history's end goes on as if the draft had been appended: a
    // period-3 pattern drafts its full length.
    CHECK(propose({1, 2, 3, 1, 2, 3, 1, 2}, 7) == std::vector<int32_t>{3, 1, 2, 3, 1, 2, 3});
    // A run of one token drafts that token.
    CHECK(propose({5, 5, 5}, 4) == std::vector<int32_t>{5, 5, 5, 5});
    // n <= 0 proposes nothing.
    CHECK(propose({7, 8, 9, 7, 8}, 0).empty());
    // Appending a token at a time indexes the same occurrences as appending them at once.
    draft_lookup one({8, 2, 4});
    for (int32_t t : {7, 8, 9, 10, 11, 7, 8}) one.append(t);
    CHECK(one.size() == 7);
    CHECK(one.propose(3) == std::vector<int32_t>{9, 10, 11});
}

TEST_CASE("draft options out of range are configuration errors", "[draft]") {
    CHECK_THROWS_WITH(draft_lookup(draft_options{-1, 2, 4}), Catch::Contains("--draft"));
    CHECK_THROWS_WITH(draft_lookup(draft_options{4, 3, 2}), Catch::Contains("n-gram"));
    CHECK_THROWS_WITH(draft_lookup(draft_options{4, 0, 2}), Catch::Contains("n-gram"));
    fake_engine eng(2, 64, n_vocab);
    CHECK_THROWS_WITH(scheduler(eng, with_draft(17), fake_hooks(-1)), Catch::Contains("--draft"));
    CHECK_THROWS_WITH(scheduler(eng, with_draft(4, 1), fake_hooks(-1)), Catch::Contains("--draft-step-rows"));
}

TEST_CASE("draft_accepted keeps the drafts each preceding draw confirms", "[draft]") {
    const std::vector<int32_t> d{4, 5, 6};
    CHECK(draft_accepted(d, std::vector<int32_t>{9, 0, 0, 0}) == 0);
    CHECK(draft_accepted(d, std::vector<int32_t>{4, 9, 0, 0}) == 1);
    CHECK(draft_accepted(d, std::vector<int32_t>{4, 5, 9, 0}) == 2);
    CHECK(draft_accepted(d, std::vector<int32_t>{4, 5, 6, 7}) == 3);
    // A later draw equal to its draft does not count after a miss.
    CHECK(draft_accepted(d, std::vector<int32_t>{9, 5, 6, 7}) == 0);
    CHECK(draft_accepted({}, std::vector<int32_t>{3}) == 0);
}

TEST_CASE("draft_length grows on full acceptance and halves on none", "[draft]") {
    draft_length len(4);
    CHECK(len.next() == 4);
    len.record(4, 0);
    CHECK(len.next() == 2);
    len.record(2, 0);
    CHECK(len.next() == 1);
    len.record(1, 0);
    CHECK(len.next() == 1);
    len.record(1, 1);
    CHECK(len.next() == 2);
    len.record(2, 1);  // partial: unchanged
    CHECK(len.next() == 2);
    len.record(2, 2);
    len.record(3, 3);
    len.record(4, 4);
    CHECK(len.next() == 4);
    len.record(0, 0);  // nothing proposed: unchanged
    CHECK(len.next() == 4);
}

TEST_CASE("greedy requests with drafts give the output without drafts in fewer steps", "[draft][scheduler]") {
    // Logits from the last token only: greedy output cycles, so lookups find it.
    std::vector<gen_request> reqs;
    for (uint32_t i = 0; i < 4; ++i) {
        reqs.push_back(make_request(make_prompt(300 + i, 6 + 5 * i), 40 + int32_t(i) * 7, nullptr));
    }
    const run_result plain = run_requests(reqs, {}, 1);
    for (const int32_t n_max : {1, 4, 8}) {
        INFO("--draft " << n_max);
        const run_result drafted = run_requests(reqs, with_draft(n_max), 1);
        REQUIRE(drafted.outcomes.size() == plain.outcomes.size());
        for (size_t i = 0; i < reqs.size(); ++i) {
            INFO("request " << i);
            CHECK(drafted.outcomes[i] == plain.outcomes[i]);
            CHECK(drafted.outcomes[i].tokens == fake_greedy_reference(n_vocab, reqs[i].prompt, reqs[i].max_tokens, -1, 1));
        }
        CHECK(drafted.stats.draft_tokens > 0);
        CHECK(drafted.stats.draft_accepted > 0);
        CHECK(drafted.stats.draft_accepted <= drafted.stats.draft_tokens);
        CHECK(drafted.n_calls < plain.n_calls);
        // Tokens from decode rows are counted once, however many a step kept.
        CHECK(drafted.stats.predicted_tokens == plain.stats.predicted_tokens);
    }
    // Without a repeating pattern (logits from the whole history) drafts rarely match; the output
    // is the same either way.
    const run_result plain_all = run_requests(reqs, {}, 0), drafted_all = run_requests(reqs, with_draft(4), 0);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(drafted_all.outcomes[i] == plain_all.outcomes[i]);
}

TEST_CASE("drafts stop where the request would: max_tokens, end of generation, stop strings, a full context", "[draft][scheduler]") {
    const std::vector<int32_t> prompt = make_prompt(411, 9);
    const std::vector<int32_t> cycle = fake_greedy_reference(n_vocab, prompt, 80, -1, 1);
    SECTION("max_tokens inside a step's drafts") {
        for (int32_t max_tokens = 20; max_tokens < 40; ++max_tokens) {
            INFO("max_tokens " << max_tokens);
            const std::vector<gen_request> reqs{make_request(prompt, max_tokens, nullptr)};
            const run_result plain = run_requests(reqs, {}, 1), drafted = run_requests(reqs, with_draft(8), 1);
            CHECK(drafted.outcomes[0] == plain.outcomes[0]);
            CHECK(drafted.outcomes[0].n_generated == max_tokens);
        }
    }
    SECTION("an end-of-generation token the drafts run past") {
        // The 30th greedy token ends generation; drafts proposed before it may extend beyond it.
        const int32_t eog = cycle[29];
        const std::vector<gen_request> reqs{make_request(prompt, 80, nullptr)};
        const run_result plain = run_requests(reqs, {}, 1, eog), drafted = run_requests(reqs, with_draft(8), 1, eog);
        CHECK(drafted.outcomes[0] == plain.outcomes[0]);
        CHECK(plain.outcomes[0].finish == finish_reason::stop);
    }
    SECTION("a stop string completed by a kept draft") {
        gen_request r = make_request(prompt, 80, nullptr);
        std::string text;
        for (size_t i = 30; i < 32; ++i) text += char('a' + cycle[i] % 26);
        r.stop = {text};
        const run_result plain = run_requests({r}, {}, 1), drafted = run_requests({r}, with_draft(8), 1);
        CHECK(drafted.outcomes[0] == plain.outcomes[0]);
        CHECK(plain.outcomes[0].finish == finish_reason::stop);
    }
    SECTION("the context fills inside a step's drafts") {
        for (int32_t n_ctx = 40; n_ctx < 56; ++n_ctx) {
            INFO("n_ctx " << n_ctx);
            const std::vector<gen_request> reqs{make_request(prompt, 200, nullptr)};
            const run_result plain = run_requests(reqs, {}, 1, -1, n_ctx), drafted = run_requests(reqs, with_draft(8), 1, -1, n_ctx);
            CHECK(drafted.outcomes[0] == plain.outcomes[0]);
            CHECK(plain.outcomes[0].finish == finish_reason::length);
        }
    }
}

TEST_CASE("seeded sampling with drafts draws the same tokens as without", "[draft][scheduler]") {
    std::vector<gen_request> reqs;
    for (uint32_t i = 0; i < 3; ++i) {
        gen_request r = make_request(make_prompt(500 + i, 8), 60, nullptr);
        r.sampling.temperature = 0.25f;
        r.sampling.seed = 77 + i;
        r.sampling.n_logprobs = 2;
        if (i == 1) r.sampling.top_k = 5;
        if (i == 2) r.sampling.top_p = 0.9f;
        reqs.push_back(r);
    }
    const run_result plain = run_requests(reqs, {}, 1, -1, 512, true), drafted = run_requests(reqs, with_draft(6), 1, -1, 512, true);
    for (size_t i = 0; i < reqs.size(); ++i) {
        INFO("request " << i);
        CHECK(drafted.outcomes[i] == plain.outcomes[i]);
    }
    CHECK(drafted.stats.draft_accepted > 0);
}

TEST_CASE("drafts stay within --draft-step-rows and leave room for every session's row", "[draft][scheduler]") {
    std::vector<gen_request> reqs;
    for (uint32_t i = 0; i < 6; ++i) reqs.push_back(make_request(make_prompt(600 + i, 7), 50, nullptr));
    const run_result run = run_requests(reqs, with_draft(8, 8), 1);
    size_t widest = 0;
    for (const auto &call : run.calls) {
        // Steps without prompt rows are decode steps: at most 8 rows, one per session at least.
        bool prompt = false;
        for (const auto &r : call) prompt = prompt || r.prompt;
        if (!prompt) widest = std::max(widest, call.size());
    }
    CHECK(widest <= 8);
    CHECK(widest > 6);  // some step carried drafts beside the six sessions' rows
    for (size_t i = 0; i < reqs.size(); ++i)
        CHECK(run.outcomes[i].tokens == fake_greedy_reference(n_vocab, reqs[i].prompt, 50, -1, 1));
}
