// tests/unit/chat/test_chat_stream.cpp - streamed parsing equals whole-text parsing: every family's
// outputs (calls, reasoning, malformed and cut-off ones) fed a byte at a time, split at every
// single position, and split at random places (seeded; the seed is printed on failure).
#include "chat_test_util.h"

#include <catch2/catch.hpp>

#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

struct sample {
    chat_parse_options options;
    std::string text;
};

std::vector<sample> samples() {
    std::vector<sample> out;
    auto add = [&](chat_parse_options o, std::string t) { out.push_back({std::move(o), std::move(t)}); };
    const auto hermes = options_for(tool_format::hermes, true);
    add(hermes, "<think>\nplan\n\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                "{\"city\": \"Paris }\", \"n\": {\"x\": [1, {}]}}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
                "</tool_call>\nAfter the calls.  \n");
    add(hermes, "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call> and <tool_call>broken</tool_call> tail");
    add(hermes, "text with < and <tool and <tool_call and }} braces");
    add(hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": 1}");
    add(hermes, "  \n <think> x </think> y <think> z");
    add(options_for(tool_format::hermes, true, false), "<think>r</think> plain <tool_call>{}</tool_call>  ");
    auto open = hermes;
    open.think_open = true;
    add(open, "reasoning </think without end </th</think>\n\n answer");
    auto coder = options_for(tool_format::qwen3_coder, false);
    coder.signatures.push_back({"w", nlohmann::ordered_json::parse(R"({"type":"object","properties":{"n":{"type":"integer"}}})")});
    add(coder, "Writing.\n<tool_call>\n<function=w>\n<parameter=p>\na <b> c\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
               "</function>\n</tool_call>\n<function=w>\n<parameter=p>\nunclosed\n</function> end");
    add(coder, "<tool_call> <oops> <function=w>\n<parameter=n>\n1");
    auto deepseek = options_for(tool_format::deepseek_v31, true);
    deepseek.think_open = true;
    add(deepseek, "think</think>ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": \"<｜\"}<｜tool▁call▁end｜>"
                  "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{}  <｜tool▁calls▁end｜> after");
    add(options_for(tool_format::glm45, true), "<think>r</think>\nx\n<tool_call>find\n<arg_key>q</arg_key>\n<arg_value>a b"
                                               "</arg_value>\n<arg_key>n</arg_key><arg_value>2</arg_value>\n</tool_call>");
    add(options_for(tool_format::kimi_k2, true), "<think>a</think>b<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                                                 "<|tool_call_argument_begin|>{\"x\": \"<|\"}<|tool_call_end|><|tool_calls_section_end|>c");
    add(options_for(tool_format::harmony, false), "<|channel|>analysis<|message|>think <|en<|end|><|start|>assistant to=functions.f"
                                                  "<|channel|>commentary json<|message|>{\"a\": 1}  <|call|>");
    add(options_for(tool_format::harmony, false), "<|channel|>final<|message|>hello <|return|");
    add(options_for(tool_format::harmony, false), "not harmony at all");
    auto single = hermes;
    single.parallel = false;
    add(single, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>");
    return out;
}

}  // namespace

TEST_CASE("streaming a byte at a time and at every split gives the whole-text result", "[chat]") {
    for (const sample &s : samples()) {
        INFO(s.text);
        const auto whole = parse_whole(s.options, s.text);
        REQUIRE(!whole.empty());
        std::vector<size_t> every;
        for (size_t i = 1; i < s.text.size(); ++i) every.push_back(i);
        CHECK(parse_split(s.options, s.text, every) == whole);
        for (size_t i = 1; i < s.text.size(); ++i) {
            INFO("split at " << i);
            CHECK(parse_split(s.options, s.text, {i}) == whole);
        }
    }
}

TEST_CASE("streaming in random pieces gives the whole-text result", "[chat]") {
    const uint64_t seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (const sample &s : samples()) {
        INFO(s.text);
        const auto whole = parse_whole(s.options, s.text);
        for (int round = 0; round < 200; ++round) {
            std::vector<size_t> cuts;
            for (size_t at = 1 + rng() % 6; at < s.text.size(); at += 1 + rng() % 6) cuts.push_back(at);
            CHECK(parse_split(s.options, s.text, cuts) == whole);
        }
    }
}
