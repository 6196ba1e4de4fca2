// tests/unit/engine/test_step_split.cpp - the partition of an engine call's rows into device
// steps (src/engine/step_split.h): decode rows before prompt rows when every slot's order allows
// it, runs in call order when not, the row limits, and where each step's logits go.
#include "src/engine/step_split.h"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace tandem;

namespace {

engine_row decode(int32_t slot, int32_t pos) { return {slot, pos, 1, row_output::logits, false}; }
engine_row prompt(int32_t slot, int32_t pos, bool want = false) { return {slot, pos, 1, want ? row_output::logits : row_output::none, true}; }

const step_limits wide{512, 2048, 512};

// Every row runs exactly once, each slot's rows in call order, and the logits outputs are a
// permutation of 0..wanted-1 matching the rows that want them.
void check_covering(const std::vector<engine_row> &rows, const std::vector<engine_step> &steps) {
    std::vector<int> seen(rows.size(), 0);
    std::vector<size_t> outs;
    std::vector<int64_t> last_pos(16, -1);
    for (const engine_step &s : steps) {
        size_t wanted = 0;
        for (size_t i : s.rows) {
            REQUIRE(i < rows.size());
            ++seen[i];
            CHECK(rows[i].prompt == s.prompt);
            CHECK(rows[i].pos > last_pos[size_t(rows[i].slot)]);
            last_pos[size_t(rows[i].slot)] = rows[i].pos;
            if ((rows[i].want != row_output::none)) {
                size_t before = 0;  // the row's place among the call's wanted rows
                for (size_t j = 0; j < i; ++j) before += rows[j].want != row_output::none ? 1 : 0;
                REQUIRE(wanted < s.out.size());
                CHECK(s.out[wanted] == before);
                ++wanted;
            }
        }
        CHECK(wanted == s.out.size());
        outs.insert(outs.end(), s.out.begin(), s.out.end());
    }
    for (int n : seen) CHECK(n == 1);
    std::sort(outs.begin(), outs.end());
    for (size_t j = 0; j < outs.size(); ++j) CHECK(outs[j] == j);
}

}  // namespace

TEST_CASE("one kind of rows is one step in call order", "[unit][engine]") {
    const std::vector<engine_row> rows = {decode(2, 5), decode(0, 9), decode(1, 3)};
    const auto steps = engine_steps_split(rows, 4, wide);
    REQUIRE(steps.size() == 1);
    CHECK_FALSE(steps[0].prompt);
    CHECK(steps[0].rows == std::vector<size_t>{0, 1, 2});
    CHECK(steps[0].out == std::vector<size_t>{0, 1, 2});
    check_covering(rows, steps);
    CHECK(engine_steps_split({}, 4, wide).empty());
}

TEST_CASE("decode rows run before prompt rows, logits keep their output places", "[unit][engine]") {
    // A prompt chunk of slot 3 listed between two decoding sessions.
    const std::vector<engine_row> rows = {decode(0, 10), prompt(3, 0), prompt(3, 1), prompt(3, 2, true), decode(1, 4)};
    const auto steps = engine_steps_split(rows, 4, wide);
    REQUIRE(steps.size() == 2);
    CHECK_FALSE(steps[0].prompt);
    CHECK(steps[0].rows == std::vector<size_t>{0, 4});
    CHECK(steps[0].out == std::vector<size_t>{0, 2});  // the caller scatters: not consecutive
    CHECK(steps[1].prompt);
    CHECK(steps[1].rows == std::vector<size_t>{1, 2, 3});
    CHECK(steps[1].out == std::vector<size_t>{1});
    check_covering(rows, steps);
}

TEST_CASE("a slot whose prompt row comes before its own decode row keeps call order", "[unit][engine]") {
    const std::vector<engine_row> rows = {prompt(0, 0), prompt(0, 1, true), decode(0, 2), decode(1, 7), prompt(2, 0)};
    const auto steps = engine_steps_split(rows, 4, wide);
    REQUIRE(steps.size() == 3);
    CHECK(steps[0].prompt);
    CHECK(steps[0].rows == std::vector<size_t>{0, 1});
    CHECK_FALSE(steps[1].prompt);
    CHECK(steps[1].rows == std::vector<size_t>{2, 3});
    CHECK(steps[2].prompt);
    CHECK(steps[2].rows == std::vector<size_t>{4});
    check_covering(rows, steps);
}

TEST_CASE("steps respect the row limits and the logits-row limit", "[unit][engine]") {
    // 10 decode rows (limit 4), a 23-row prompt (limit 8) whose rows all want logits (limit 5).
    std::vector<engine_row> rows;
    for (int32_t s = 0; s < 10; ++s) rows.push_back(decode(s, 3));
    for (int32_t i = 0; i < 23; ++i) rows.push_back(prompt(10, i, true));
    const step_limits tight{4, 8, 5};
    const auto steps = engine_steps_split(rows, 11, tight);
    size_t decode_steps = 0, prompt_steps = 0;
    for (const engine_step &s : steps) {
        CHECK(s.rows.size() <= (s.prompt ? tight.prompt_rows : tight.decode_rows));
        CHECK(s.out.size() <= tight.logit_rows);
        (s.prompt ? prompt_steps : decode_steps) += 1;
    }
    CHECK(decode_steps == 3);  // 4 + 4 + 2
    CHECK(prompt_steps == 5);  // 5 wanted rows per step: 5 + 5 + 5 + 5 + 3
    check_covering(rows, steps);
    // Rows without logits fill a step up to its row limit.
    std::vector<engine_row> quiet;
    for (int32_t i = 0; i < 20; ++i) quiet.push_back(prompt(0, i, i == 19));
    const auto q = engine_steps_split(quiet, 1, tight);
    REQUIRE(q.size() == 3);
    CHECK(q[0].rows.size() == 8);
    CHECK(q[2].out == std::vector<size_t>{0});
    check_covering(quiet, q);
}
