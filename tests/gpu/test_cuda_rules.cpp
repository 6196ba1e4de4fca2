// tests/gpu/test_cuda_rules.cpp - logit rules on the CUDA engine's device path
// (cuda/logits_rules.h inside forward): a ruled row's summary, best token and draw equal the host
// twin's on the same device logits (the whole-rows path), bitwise, on graph and direct steps;
// unruled rows beside ruled ones keep their bits; greedy decoding under a grammar and penalties
// gives the CPU engine's tokens; through the scheduler, a constrained session among 15 others
// gives its tokens alone and the others keep theirs bitwise.
#include "gpu_test_util.h"
#include "model_test_util.h"
#include "scheduler_test_util.h"
#include "src/scheduler/session_rules.h"
#include "src/server/service.h"

#include "tandem/sampler.h"
#include "tandem/tokenizer.h"

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

using namespace tandem;
using namespace tandem::test;

namespace {

std::unique_ptr<engine> open_cuda(const std::string &path, int32_t n_slots, int32_t n_ctx, bool device_draws) {
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.device_draws = device_draws;
    opt.n_slots = n_slots;
    opt.n_ctx = n_ctx;
    opt.kv = kv_type::f32;
    return engine_open(gguf_file::open(path), opt);
}

struct held_rules {
    std::vector<token_adjust> adjust;
    std::vector<uint32_t> allowed;
    row_rules rules;
};

// Row j's rules: none (j % 3 == 0), a penalty-like adjustment list, or adjustments and a mask of
// about a quarter of the vocabulary that always holds token j.
held_rules make_rules(std::mt19937 &rng, int32_t n_vocab, size_t j) {
    held_rules h;
    if (j % 3 == 0) return h;
    for (int32_t id = int32_t(rng() % 7); id < n_vocab; id += 1 + int32_t(rng() % 40))
        h.adjust.push_back({id, rng() % 5 == 0 ? 100.0f : 0.0f, 1.3f, 1.5f});
    if (j % 3 == 2) {
        h.allowed.assign(size_t(n_vocab + 31) / 32, 0u);
        for (int32_t id = 0; id < n_vocab; ++id)
            if (rng() % 4 == 0 || id == int32_t(j)) h.allowed[size_t(id) / 32] |= 1u << (id % 32);
    }
    h.rules = row_rules{h.adjust, h.allowed};
    return h;
}

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("CUDA ruled rows: device summaries, best tokens and draws equal the host twin's on the same logits", "[gpu][engine][rules]") {
    if (!gpu_present()) return;
    for (const char *preset : {"tiny", "tiny-moe64"}) {
        const std::string model = synth_gguf(preset, ggml_type::q4_k, 2);
        auto whole = open_cuda(model, 5, 160, false), summaries = open_cuda(model, 5, 160, true), best = open_cuda(model, 5, 160, true);
        const int32_t nv = whole->hparams().n_vocab;
        std::mt19937 rng(4040);
        std::uniform_real_distribution<double> uniform(0.0, 1.0);
        std::vector<engine_row> rows;
        const int lengths[5] = {6, 1, 80, 3, 11};  // slot 2: every prompt row an output (a direct step)
        for (int32_t s = 0; s < 5; ++s)
            for (int32_t i = 0; i < lengths[s]; ++i)
                rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(s == 2 || i + 1 == lengths[s]), true});
        int64_t ruled_rows = 0;
        for (int step = 0; step < 8; ++step) {
            std::vector<held_rules> held;
            std::vector<row_draw> draws;
            for (engine_row &r : rows) {
                if (r.want == row_output::none) continue;
                held.push_back(make_rules(rng, nv, held.size() + size_t(step)));
                row_draw d;
                if (held.size() % 4 != 0) {
                    d.temperature = held.size() % 2 ? 0.7f : 1.2f;
                    d.inv_temp = float(1.0 / double(d.temperature));
                    d.top_p = held.size() % 3 == 1 ? 0.9f : 1.0f;
                    d.u = uniform(rng);
                }
                draws.push_back(d);
            }
            size_t j = 0;
            for (engine_row &r : rows) {
                if (r.want == row_output::none) continue;
                r.rules = held[j].rules.empty() ? nullptr : &held[j].rules;
                ++j;
            }
            std::vector<float> ref;
            engine_forward_logits(*whole, rows, ref);  // rules applied on the host to the device's rows
            const std::vector<logits_top> tops = forward_as(*summaries, rows, row_output::summary, draws).top;
            const std::vector<logits_top> bests = forward_as(*best, rows, row_output::best, draws).top;
            REQUIRE(tops.size() == held.size());
            for (size_t k = 0; k < held.size(); ++k) {
                INFO(preset << " step " << step << " output row " << k << (held[k].rules.empty() ? " (no rules)" : " (ruled)")
                            << (held[k].allowed.empty() ? "" : " with a mask"));
                const std::span<const float> row(ref.data() + k * size_t(nv), size_t(nv));
                const logits_top want = logits_top_of(row);
                REQUIRE(tops[k].top.size() == want.top.size());
                for (size_t t = 0; t < want.top.size(); ++t) {
                    INFO("summary entry " << t);
                    REQUIRE(tops[k].top[t].id == want.top[t].id);
                    REQUIRE(same_float(tops[k].top[t].logit, want.top[t].logit));
                }
                REQUIRE(bests[k].top[0].id == want.top[0].id);
                if (!held[k].allowed.empty()) REQUIRE(token_allowed(held[k].allowed.data(), tops[k].top[0].id));
                if (draws[k].temperature > 0.0f) {
                    const int32_t drawn = draw_exact(row, want.top[0].logit, draws[k]);
                    REQUIRE(tops[k].drawn == drawn);
                    REQUIRE(bests[k].drawn == drawn);
                    if (!held[k].allowed.empty()) REQUIRE(token_allowed(held[k].allowed.data(), drawn));
                }
                ruled_rows += held[k].rules.empty() ? 0 : 1;
            }
            // Decode steps of 3 and 5 slots (graph buckets 4 and 8).
            const int32_t n_slots = step % 2 ? 5 : 3;
            std::vector<engine_row> next;
            for (int32_t s = 0; s < n_slots; ++s) {
                const size_t k = std::min<size_t>(size_t(s), tops.size() - 1);
                next.push_back({s, whole->slot_length(s), tops[k].top[0].id, row_output::logits});
            }
            rows = next;
        }
        CHECK(ruled_rows > 20);
    }
}

TEST_CASE("CUDA rows without rules keep their bits beside ruled rows", "[gpu][invariance][rules]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto plain = open_cuda(model, 8, 128, true), mixed = open_cuda(model, 8, 128, true);
    const int32_t nv = plain->hparams().n_vocab;
    std::mt19937 rng(99);
    std::vector<int32_t> next(8);
    for (int32_t s = 0; s < 8; ++s) {
        std::vector<engine_row> rows;
        for (int32_t i = 0; i < 5; ++i) rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(i == 4), true});
        next[size_t(s)] = forward_as(*plain, rows, row_output::summary).top[0].top[0].id;
        forward_as(*mixed, rows, row_output::summary);
    }
    for (int step = 0; step < 12; ++step) {
        std::vector<held_rules> held(8);
        std::vector<engine_row> rows;
        for (int32_t s = 0; s < 8; ++s) {
            rows.push_back({s, plain->slot_length(s), next[size_t(s)], row_output::summary});
            if (s % 2 == 1) held[size_t(s)] = make_rules(rng, nv, size_t(s) + 1);  // odd slots: rules
        }
        std::vector<engine_row> ruled = rows;
        for (int32_t s = 1; s < 8; s += 2) ruled[size_t(s)].rules = &held[size_t(s)].rules;
        const std::vector<logits_top> a = forward_as(*plain, rows, row_output::summary).top;
        const std::vector<logits_top> b = forward_as(*mixed, ruled, row_output::summary).top;
        for (int32_t s = 0; s < 8; s += 2) {
            INFO("step " << step << " slot " << s << " (no rules, beside 4 ruled rows)");
            REQUIRE(a[size_t(s)].top.size() == b[size_t(s)].top.size());
            for (size_t t = 0; t < a[size_t(s)].top.size(); ++t) {
                REQUIRE(a[size_t(s)].top[t].id == b[size_t(s)].top[t].id);
                REQUIRE(same_float(a[size_t(s)].top[t].logit, b[size_t(s)].top[t].logit));
            }
            REQUIRE(a[size_t(s)].log_norm == b[size_t(s)].log_norm);
        }
        for (int32_t s = 0; s < 8; ++s) next[size_t(s)] = a[size_t(s)].top[0].id;  // both engines take the same tokens
    }
}

TEST_CASE("CUDA greedy decoding under a grammar and penalties gives the CPU engine's tokens", "[gpu][model][rules]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    const auto file = gguf_file::open(model);
    const tokenizer tok = tokenizer::from_gguf(*file);
    auto vocab = std::make_shared<const grammar_vocab>(server::grammar_vocab_of(tok));
    constraint_table table(vocab);
    const grammar g = grammar::from_json_schema_text(R"({"type":"object","properties":{"name":{"type":"string"},
        "tags":{"type":"array","items":{"enum":["a","b","c"]}}},"required":["name","tags"],"additionalProperties":false})");
    auto cpu = open_cpu(model, 1, 256);
    auto gpu = open_cuda(model, 1, 256, true);
    sampling_params p;
    p.presence_penalty = 0.75f;
    p.repeat_penalty = 1.2f;
    const std::vector<int32_t> prompt = tok.encode("Describe the item as JSON:", false);
    session_constraint c;
    c.constraint = table.bind(g);
    session_rules cpu_rules(p, prompt, cpu->hparams().n_vocab, c), gpu_rules(p, prompt, gpu->hparams().n_vocab, c);
    std::vector<engine_row> rows;
    for (size_t i = 0; i < prompt.size(); ++i) rows.push_back({0, int32_t(i), prompt[i], logits_if(i + 1 == prompt.size()), true});
    std::vector<int32_t> cpu_tokens, gpu_tokens;
    for (int step = 0; step < 48; ++step) {
        std::vector<engine_row> c = rows, q = rows;
        c.back().rules = cpu_rules.next_row(48 - step);
        q.back().rules = gpu_rules.next_row(48 - step);
        const int32_t tc = forward_as(*cpu, c, row_output::best).top[0].top[0].id;
        const int32_t tg = forward_as(*gpu, q, row_output::best).top[0].top[0].id;
        cpu_tokens.push_back(tc);
        gpu_tokens.push_back(tg);
        INFO("first divergent token at step " << step << ": CPU " << tc << ", CUDA " << tg);
        REQUIRE(tc == tg);
        REQUIRE(cpu_rules.accept(tc));
        REQUIRE(gpu_rules.accept(tg));
        if (tok.is_eog(tc)) break;
        rows = {{0, cpu->slot_length(0), tc, row_output::best}};
    }
    CHECK(cpu_rules.complete());
}

TEST_CASE("CUDA: a constrained session among 15 others gives its tokens alone; the others keep theirs bitwise", "[gpu][invariance][rules]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    const auto file = gguf_file::open(model);
    const tokenizer tok = tokenizer::from_gguf(*file);
    std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/tests/unit/grammar/schemas/nested_objects.json");
    std::stringstream schema;
    schema << in.rdbuf();
    auto constraint = std::make_shared<const grammar>(grammar::from_json_schema_text(schema.str()));
    auto eng = open_cuda(model, 16, 512, true);
    auto run = [&](std::vector<gen_request> requests) {
        scheduler s(*eng, scheduler_options{}, server::make_scheduler_hooks(tok));
        std::vector<std::shared_ptr<tandem::testing::collect_sink>> sinks;
        for (gen_request &r : requests) {
            sinks.push_back(std::make_shared<tandem::testing::collect_sink>());
            r.sink = sinks.back();
            s.submit(std::move(r));
        }
        tandem::testing::run_until_done(s, sinks);
        std::vector<std::pair<std::vector<int32_t>, std::vector<float>>> out;
        for (auto &k : sinks) {
            std::vector<float> lp;
            for (const gen_event &e : k->events)
                for (const gen_token &t : e.tokens) {
                    lp.push_back(t.logprob);
                    for (const token_logprob &alt : t.top) lp.push_back(alt.logprob);
                }
            out.emplace_back(k->tokens(), lp);
        }
        return out;
    };
    std::vector<gen_request> all;
    for (int i = 0; i < 16; ++i) {
        gen_request r;
        r.prompt = tok.encode("Request number " + std::to_string(i) + " says:", false);
        r.max_tokens = 160;
        r.sampling.temperature = i % 4 == 3 ? 0.0f : 1.0f;
        r.sampling.seed = 2000 + uint64_t(i);
        r.sampling.n_logprobs = 2;
        if (i == 6) r.constraint = constraint;
        if (i % 4 == 1) r.sampling.presence_penalty = 1.5f;
        if (i % 4 == 2) r.sampling.logit_bias = {{7, 5.0f}, {300, -100.0f}};
        all.push_back(r);
    }
    std::vector<std::pair<std::vector<int32_t>, std::vector<float>>> alone;
    for (const gen_request &r : all) alone.push_back(run({r})[0]);
    const auto together = run(all);
    for (size_t i = 0; i < all.size(); ++i) {
        INFO("session " << i << ": " << alone[i].first.size() << " tokens alone, " << together[i].first.size() << " together");
        CHECK(together[i].first == alone[i].first);
        CHECK((together[i].second.size() == alone[i].second.size() &&
               std::memcmp(together[i].second.data(), alone[i].second.data(), alone[i].second.size() * sizeof(float)) == 0));
    }
    std::string text;
    for (int32_t id : alone[6].first) text += tok.token_bytes(id);
    INFO(text);
    CHECK(nlohmann::json::accept(text));
}
