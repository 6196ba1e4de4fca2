// tests/model/test_logit_rules.cpp - logit rules (tandem/logit_rules.h) on the CPU engine: the
// formula against its definition, rows with rules against the same rows without them, batch
// invariance, and what the summaries and draws of a ruled row see.
#include "model_test_util.h"

#include "tandem/logit_rules.h"
#include "tandem/sampler.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

// The prompt rows of one slot, its last row wanting `want` with `rules`.
std::vector<engine_row> prompt_rows(int32_t slot, const std::vector<int32_t> &ids, row_output want, const row_rules *rules) {
    std::vector<engine_row> rows;
    for (size_t i = 0; i < ids.size(); ++i) rows.push_back({slot, int32_t(i), ids[i], i + 1 == ids.size() ? want : row_output::none, true});
    rows.back().rules = rules;
    return rows;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("a token adjustment adds the bias, applies the repeat penalty by sign, then subtracts", "[rules]") {
    const token_adjust a{7, 0.5f, 1.25f, 0.75f};
    CHECK(token_adjust_apply(a, 2.0f) == (2.0f + 0.5f) / 1.25f - 0.75f);
    CHECK(token_adjust_apply(a, -3.0f) == (-3.0f + 0.5f) * 1.25f - 0.75f);
    const token_adjust presence{3, 0.0f, 1.0f, 1.5f};
    CHECK(token_adjust_apply(presence, 0.25f) == 0.25f - 1.5f);
    CHECK(std::isnan(token_adjust_apply(presence, std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("every NaN an adjustment produces has one bit pattern, the device twin's", "[rules]") {
    const float canonical = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    const token_adjust up{1, 100.0f, 1.5f, 0.5f}, down{2, -inf, 1.0f, 0.0f};
    CHECK(same_bits(token_adjust_apply(up, -std::numeric_limits<float>::quiet_NaN()), canonical));
    CHECK(same_bits(token_adjust_apply(up, std::numeric_limits<float>::signaling_NaN()), canonical));
    CHECK(same_bits(token_adjust_apply(down, inf), canonical));  // infinity minus infinity
    CHECK(same_bits(token_adjust_apply(down, 1.0f), -inf));
}

TEST_CASE("a row's rules change only its adjusted and masked tokens, the same bits alone or in a batch", "[rules][engine]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto plain = open_cpu(model, 3, 64), ruled = open_cpu(model, 3, 64), batch = open_cpu(model, 3, 64);
    const int32_t nv = plain->hparams().n_vocab;
    std::mt19937 rng(4242);
    std::vector<int32_t> ids(9);
    for (auto &t : ids) t = int32_t(rng() % uint32_t(nv));

    std::vector<token_adjust> adjust = {{2, 100.0f, 1.0f, 0.0f}, {5, 0.0f, 1.0f, 1.5f}, {11, -3.0f, 1.3f, 0.25f}};
    std::vector<uint32_t> allowed(size_t(nv + 31) / 32, 0);
    for (int32_t id : {2, 5, 11, 17, nv - 1}) allowed[size_t(id) / 32] |= 1u << (id % 32);
    const row_rules rules{adjust, allowed};

    std::vector<float> base, with;
    engine_forward_logits(*plain, prompt_rows(0, ids, row_output::logits, nullptr), base);
    engine_forward_logits(*ruled, prompt_rows(0, ids, row_output::logits, &rules), with);
    REQUIRE(base.size() == size_t(nv));
    REQUIRE(with.size() == size_t(nv));
    for (int32_t i = 0; i < nv; ++i) {
        INFO("token " << i);
        if (!token_allowed(allowed.data(), i)) {
            CHECK(with[size_t(i)] == -std::numeric_limits<float>::infinity());
            continue;
        }
        float want = base[size_t(i)];
        for (const token_adjust &a : adjust)
            if (a.id == i) want = token_adjust_apply(a, want);
        CHECK(same_bits(with[size_t(i)], want));
    }

    // The summary and a draw of the ruled row see only allowed tokens; the +100 bias wins.
    const engine_outputs summary = forward_as(*batch, prompt_rows(0, ids, row_output::logits, &rules), row_output::summary);
    REQUIRE(summary.top.size() == 1);
    CHECK(summary.top[0].top[0].id == 2);
    for (const token_logit &t : summary.top[0].top)
        if (std::isfinite(t.logit)) CHECK(token_allowed(allowed.data(), t.id));

    // Beside a row without rules (another slot), in either order: both keep their bits.
    std::vector<engine_row> rows = prompt_rows(1, ids, row_output::logits, nullptr);
    std::vector<engine_row> second = prompt_rows(2, ids, row_output::logits, &rules);
    rows.insert(rows.end(), second.begin(), second.end());
    std::vector<float> both;
    engine_forward_logits(*batch, rows, both);
    REQUIRE(both.size() == 2 * size_t(nv));
    CHECK(std::memcmp(both.data(), base.data(), size_t(nv) * sizeof(float)) == 0);
    CHECK(std::memcmp(both.data() + nv, with.data(), size_t(nv) * sizeof(float)) == 0);
}

TEST_CASE("a -100 bias never draws the token; a +100 bias always does", "[rules][engine]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 2);
    auto eng = open_cpu(model, 1, 64);
    const int32_t nv = eng->hparams().n_vocab;
    const std::vector<int32_t> ids = {3, 1, 4, 1, 5};
    std::vector<float> row;
    engine_forward_logits(*eng, prompt_rows(0, ids, row_output::logits, nullptr), row);
    const int32_t best = argmax(row);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (const float bias : {-100.0f, 100.0f}) {
        const int32_t target = bias < 0 ? best : (best + 1) % nv;
        std::vector<token_adjust> adjust = {{target, bias, 1.0f, 0.0f}};
        const row_rules rules{adjust, {}};
        int hits = 0;
        for (int i = 0; i < 200; ++i) {
            eng->slot_truncate(0, 0);
            std::vector<engine_row> rows = prompt_rows(0, ids, row_output::summary, &rules);
            rows.back().draw.temperature = 1.0f;
            rows.back().draw.inv_temp = 1.0f;
            rows.back().draw.u = uniform(rng);
            engine_outputs out;
            eng->forward(rows, out);
            REQUIRE(out.top.size() == 1);
            hits += out.top[0].drawn == target ? 1 : 0;
        }
        INFO("bias " << bias);
        CHECK(hits == (bias < 0 ? 0 : 200));
    }
}
