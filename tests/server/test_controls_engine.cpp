// tests/server/test_controls_engine.cpp - the generation controls through the scheduler and the real
// CPU engine on the tiny synth model (random weights, its own byte-level BPE vocabulary): the
// penalties change exactly the seen tokens' logits, logit_bias +100 / -100 decides every one of
// 1,000 draws, and batch invariance holds with constraints and penalties on (a constrained session
// among 15 others gives its tokens alone; the others, some with penalties or logit_bias, keep their
// tokens and logprobs bitwise).
#include "../model/model_test_util.h"
#include "scheduler_test_util.h"
#include "src/server/api_controls.h"
#include "src/server/service.h"

#include "tandem/tokenizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace tandem;
using namespace tandem::test;
using tandem::testing::collect_sink;

namespace {

struct tiny_model {
    std::string path = synth_gguf("tiny", ggml_type::q4_k, 2);
    std::shared_ptr<const gguf_file> file = gguf_file::open(path);
    tokenizer tok = tokenizer::from_gguf(*file);
};

const tiny_model &model() {
    static const tiny_model m;
    return m;
}

// One engine thread: the steps of one or a few rows are too small to share (the test's time goes
// to OpenMP's barriers otherwise).
std::unique_ptr<engine> open_tiny(int32_t n_slots, int32_t n_ctx) {
    engine_options opt;
    opt.n_slots = n_slots;
    opt.n_ctx = n_ctx;
    opt.n_threads = 1;
    return engine_open(model().file, opt);
}

std::shared_ptr<const grammar> schema_file(const std::string &name) {
    std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/tests/unit/grammar/schemas/" + name);
    std::stringstream text;
    text << in.rdbuf();
    REQUIRE(!text.str().empty());
    return std::make_shared<const grammar>(grammar::from_json_schema_text(text.str()));
}

struct run_result {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;  // each token's, then its alternatives', in order
    std::string text;
    finish_reason finish = finish_reason::none;
};

run_result result_of(collect_sink &s) {
    run_result r;
    std::lock_guard lock(s.mutex);
    for (const gen_event &e : s.events) {
        r.text += e.text;
        for (const gen_token &t : e.tokens) {
            r.ids.push_back(t.id);
            r.logprobs.push_back(t.logprob);
            for (const token_logprob &alt : t.top) r.logprobs.push_back(alt.logprob);
        }
        if (e.type == gen_event::kind::done) r.finish = e.finish;
    }
    return r;
}

// Runs the requests together in one scheduler (16 slots) until all are done.
std::vector<run_result> run(engine &eng, std::vector<gen_request> requests) {
    scheduler s(eng, scheduler_options{}, server::make_scheduler_hooks(model().tok));
    std::vector<std::shared_ptr<collect_sink>> sinks;
    for (gen_request &r : requests) {
        sinks.push_back(std::make_shared<collect_sink>());
        r.sink = sinks.back();
        s.submit(std::move(r));
    }
    tandem::testing::run_until_done(s, sinks);
    std::vector<run_result> out;
    for (auto &k : sinks) out.push_back(result_of(*k));
    return out;
}

gen_request request(const std::string &prompt, int32_t max_tokens, uint64_t seed) {
    gen_request r;
    r.prompt = model().tok.encode(prompt, false);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    return r;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("presence_penalty 1.5 lowers exactly the window's tokens by 1.5; no other logit changes", "[controls][engine]") {
    auto eng = open_tiny(2, 256);
    const std::vector<int32_t> prompt = model().tok.encode("the cat sat on the mat, and the cat sat again", false);
    sampling_params p;
    p.presence_penalty = 1.5f;
    session_rules rules(p, prompt, eng->hparams().n_vocab);
    const row_rules *r = rules.next_row(16);
    REQUIRE(r);
    std::vector<engine_row> plain, ruled;
    for (size_t i = 0; i < prompt.size(); ++i) {
        const row_output want = i + 1 == prompt.size() ? row_output::logits : row_output::none;
        plain.push_back({0, int32_t(i), prompt[i], want, true});
        ruled.push_back({1, int32_t(i), prompt[i], want, true});
    }
    ruled.back().rules = r;
    std::vector<float> base, with;
    engine_forward_logits(*eng, plain, base);
    engine_forward_logits(*eng, ruled, with);
    REQUIRE(base.size() == with.size());
    const std::set<int32_t> seen(prompt.begin(), prompt.end());
    size_t n_lowered = 0;
    for (size_t id = 0; id < base.size(); ++id) {
        INFO("token " << id << ": " << base[id] << " -> " << with[id]);
        const float want = seen.count(int32_t(id)) ? base[id] - 1.5f : base[id];
        CHECK(std::memcmp(&with[id], &want, sizeof(float)) == 0);
        n_lowered += with[id] != base[id];
    }
    CHECK(n_lowered == seen.size());
}

TEST_CASE("logit_bias +100 makes a token the only one drawn, -100 never draws it, over 1,000 draws", "[controls][engine]") {
    auto eng = open_tiny(1, 1100);
    // The end tokens are biased away in every run, so each draws all 1,000 tokens.
    std::vector<std::pair<int32_t, float>> no_end;
    for (int32_t id : model().tok.eog_ids()) no_end.emplace_back(id, -100.0f);
    std::sort(no_end.begin(), no_end.end());
    auto with_bias = [&](int32_t id, float bias) {
        gen_request r = request("Once upon a time", 1000, 42);
        r.sampling.logit_bias = no_end;
        if (id >= 0) r.sampling.logit_bias.emplace_back(id, bias);
        std::sort(r.sampling.logit_bias.begin(), r.sampling.logit_bias.end());
        return run(*eng, {r})[0];
    };
    const run_result free = with_bias(-1, 0.0f);
    REQUIRE(free.ids.size() == 1000);
    std::map<int32_t, int> counts;
    for (int32_t id : free.ids) ++counts[id];
    const auto most = std::max_element(counts.begin(), counts.end(), [](auto &a, auto &b) { return a.second < b.second; });
    INFO("token " << most->first << " was drawn " << most->second << " times of 1,000 without a bias");
    REQUIRE(most->second >= 5);
    const run_result banned = with_bias(most->first, -100.0f);
    REQUIRE(banned.ids.size() == 1000);
    CHECK(std::count(banned.ids.begin(), banned.ids.end(), most->first) == 0);

    // A token that was never drawn without a bias.
    int32_t rare = 0;
    while (counts.count(rare) || model().tok.is_eog(rare)) ++rare;
    const run_result forced = with_bias(rare, 100.0f);
    REQUIRE(forced.ids.size() == 1000);
    CHECK(std::count(forced.ids.begin(), forced.ids.end(), rare) == 1000);
}

TEST_CASE("a constrained session among 15 others gives its tokens alone; the others keep theirs bitwise", "[controls][engine]") {
    auto eng = open_tiny(16, 512);
    std::vector<gen_request> all;
    for (int i = 0; i < 16; ++i) {
        gen_request r = request("Request number " + std::to_string(i) + " says:", 160, 1000 + uint64_t(i));
        r.sampling.n_logprobs = 3;
        if (i == 5) r.constraint = schema_file("nested_objects.json");
        if (i % 4 == 1) r.sampling.presence_penalty = 1.5f;  // ruled without a grammar
        if (i % 4 == 2) r.sampling.logit_bias = {{7, 5.0f}, {300, -100.0f}};
        if (i % 4 == 3) r.sampling.temperature = 0.0f;
        all.push_back(r);
    }
    // The constrained session alone; the other 15 together without it; all 16 together.
    const run_result alone = run(*eng, {all[5]})[0];
    std::vector<gen_request> others = all;
    others.erase(others.begin() + 5);
    std::vector<run_result> without = run(*eng, others);
    without.insert(without.begin() + 5, alone);
    const std::vector<run_result> together = run(*eng, all);
    for (size_t i = 0; i < all.size(); ++i) {
        INFO("session " << i << (i == 5 ? " (constrained) alone: " : " without the constrained one: ") << without[i].ids.size()
                        << " tokens, all together: " << together[i].ids.size());
        CHECK(together[i].ids == without[i].ids);
        CHECK(same_bits(together[i].logprobs, without[i].logprobs));
        CHECK(together[i].finish == without[i].finish);
    }
    // The constrained one completed its JSON within max_tokens (steered near the limit).
    INFO(alone.text);
    CHECK(alone.finish == finish_reason::stop);
    CHECK(nlohmann::json::accept(alone.text));
    CHECK(std::count(together[2].ids.begin(), together[2].ids.end(), 300) == 0);
}

TEST_CASE("the tokenizer's grammar vocabulary never allows control tokens inside a constraint", "[controls][engine]") {
    const tokenizer &tok = model().tok;
    const grammar_vocab vocab = server::grammar_vocab_of(tok);
    CHECK(vocab.n_vocab() == tok.n_vocab());
    const grammar_constraint c(grammar::from_gbnf(R"(root ::= [^x]*)"), vocab);
    grammar_matcher m(c);
    std::vector<uint32_t> mask(size_t(vocab.n_mask_words()));
    m.fill_mask(mask);
    size_t n_allowed = 0;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        const bool allowed = token_allowed(mask.data(), id);
        n_allowed += allowed;
        if (tok.type(id) == token_type::control && !tok.is_eog(id)) CHECK_FALSE(allowed);
        if (tok.is_eog(id)) CHECK(allowed);  // the empty output is complete
        if (!tok.is_eog(id) && tok.token_bytes(id).find('x') != std::string::npos) CHECK_FALSE(allowed);
    }
    CHECK(n_allowed > size_t(tok.n_vocab()) / 4);
}
