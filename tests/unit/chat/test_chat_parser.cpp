// tests/unit/chat/test_chat_parser.cpp - each family's output syntax read whole: reasoning, text
// before and after calls, call names and arguments, malformed and cut-off calls, and the
// templates' markers that choose the syntax.
#include "chat_test_util.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

using namespace tandem;
using namespace tandem::test;

namespace {

using calls = std::vector<std::pair<std::string, std::string>>;

std::string read_template(const std::string &name) {
    std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/templates/" + name, std::ios::binary);
    REQUIRE(in);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("the syntax is chosen from the markers the template writes", "[chat]") {
    struct row {
        const char *file;
        tool_format format;
        bool think;
    };
    for (const row &r : {row{"Qwen-Qwen3-0.6B.jinja", tool_format::hermes, true},
                         row{"Qwen-QwQ-32B.jinja", tool_format::hermes, true},
                         row{"Qwen3-Coder.jinja", tool_format::qwen3_coder, false},
                         row{"deepseek-ai-DeepSeek-V3.1.jinja", tool_format::deepseek_v31, true},
                         row{"GLM-4.6.jinja", tool_format::glm45, true},
                         row{"Kimi-K2-Instruct.jinja", tool_format::kimi_k2, false},
                         row{"moonshotai-Kimi-K2-Thinking.jinja", tool_format::kimi_k2, true},
                         row{"openai-gpt-oss-120b.jinja", tool_format::harmony, false}}) {
        INFO(r.file);
        const chat_syntax s = chat_syntax_detect(read_template(r.file));
        CHECK(s.tools == r.format);
        CHECK(s.think_tags == r.think);
    }
    CHECK(chat_syntax_detect("{{ messages }}").tools == tool_format::hermes);
    CHECK(std::string(tool_format_name(tool_format::qwen3_coder)) == "qwen3-coder");
}

TEST_CASE("reasoning blocks", "[chat]") {
    auto o = options_for(tool_format::hermes, true, false);
    auto v = view_of(parse_whole(o, "<think>\nThe user greets.\n</think>\n\nHello!"));
    CHECK(v.reasoning == "The user greets.");
    CHECK(v.content == "Hello!");

    // Text that is not a reasoning block stays as written, leading whitespace included.
    v = view_of(parse_whole(o, "  Hello <think> there"));
    CHECK(v.reasoning.empty());
    CHECK(v.content == "  Hello <think> there");

    // The template opened the block: the reply starts inside it.
    o.think_open = true;
    v = view_of(parse_whole(o, "step 1\nstep 2</think>The answer is 4."));
    CHECK(v.reasoning == "step 1\nstep 2");
    CHECK(v.content == "The answer is 4.");

    // Cut off while reasoning: everything so far is reasoning.
    v = view_of(parse_whole(o, "still thinking </thi"));
    CHECK(v.reasoning == "still thinking </thi");
    CHECK(v.content.empty());

    // --reasoning-format none: the text as written.
    o.reasoning = false;
    v = view_of(parse_whole(o, "a</think>b"));
    CHECK(v.content == "a</think>b");
    CHECK(v.reasoning.empty());
}

TEST_CASE("hermes calls", "[chat]") {
    const auto o = options_for(tool_format::hermes, true);
    auto v = view_of(parse_whole(o, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                                    "</tool_call>"));
    CHECK(v.content == "Let me check.");
    CHECK(v.calls == calls{{"get_weather", "{\"city\": \"Paris\"}"}});

    // Two calls, text after them, a reasoning block before.
    v = view_of(parse_whole(o, "<think>two cities</think>\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"A\"}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": {\"nested\": [1, 2]}}}\n</tool_call>\nDone."));
    CHECK(v.reasoning == "two cities");
    CHECK(v.calls == calls{{"w", "{\"c\": \"A\"}"}, {"w", "{\"c\": {\"nested\": [1, 2]}}"}});
    CHECK(v.content == "Done.");

    // Only the first call when parallel calls are off.
    auto one = o;
    one.parallel = false;
    v = view_of(parse_whole(one, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>"));
    CHECK(v.calls == calls{{"a", "{}"}});

    // Another key order is read whole; an escaped name is unescaped.
    v = view_of(parse_whole(o, "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>"));
    CHECK(v.calls == calls{{"f", "{\"x\":1}"}});
    v = view_of(parse_whole(o, "<tool_call>{\"name\": \"a\\u0062c\", \"arguments\": {}}</tool_call>"));
    CHECK(v.calls == calls{{"abc", "{}"}});

    // Not JSON: the text stands.
    v = view_of(parse_whole(o, "x <tool_call>not json</tool_call> y"));
    CHECK(v.calls.empty());
    CHECK(v.content == "x <tool_call>not json</tool_call> y");

    // A call inside the reasoning is reasoning.
    v = view_of(parse_whole(o, "<think>maybe <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call></think>no call"));
    CHECK(v.calls.empty());
    CHECK(v.reasoning == "maybe <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
    CHECK(v.content == "no call");

    // Tools not offered: call syntax is text.
    v = view_of(parse_whole(options_for(tool_format::hermes, false, false), "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"));
    CHECK(v.calls.empty());
    CHECK(v.content == "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");

    // Cut off (max_tokens): the call ends with the output; a complete object loses its brace only
    // when what is left is still JSON.
    v = view_of(parse_whole(o, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}"));
    CHECK(v.calls == calls{{"f", "{\"a\": 1}"}});
    v = view_of(parse_whole(o, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": 1}"));
    CHECK(v.calls == calls{{"f", "{\"a\": {\"b\": 1}"}});
}

TEST_CASE("qwen3-coder calls take the types of the tool's schema", "[chat]") {
    auto o = options_for(tool_format::qwen3_coder, false);
    o.signatures.push_back({"write_file", nlohmann::ordered_json::parse(
                                              R"({"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"},)"
                                              R"("mode":{"type":"integer"},"opts":{"type":"object"},"force":{"type":"boolean"}}})")});
    const std::string text =
        "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.txt\n</parameter>\n"
        "<parameter=content>\nline 1\nline 2\n</parameter>\n<parameter=mode>\n420\n</parameter>\n"
        "<parameter=opts>\n{\"a\": [1]}\n</parameter>\n<parameter=force>\nTrue\n</parameter>\n</function>\n</tool_call>";
    auto v = view_of(parse_whole(o, text));
    CHECK(v.content == "I'll write it.");
    REQUIRE(v.calls.size() == 1);
    CHECK(v.calls[0].first == "write_file");
    CHECK(nlohmann::json::parse(v.calls[0].second) ==
          nlohmann::json::parse(R"({"path":"/tmp/a.txt","content":"line 1\nline 2","mode":420,"opts":{"a":[1]},"force":true})"));

    // A string parameter that looks like a number stays a string; unknown ones are JSON when they parse.
    v = view_of(parse_whole(o, "<tool_call>\n<function=write_file>\n<parameter=path>\n42\n</parameter>\n<parameter=extra>\n[1]\n"
                               "</parameter>\n</function>\n</tool_call>"));
    CHECK(v.calls[0].second == "{\"path\": \"42\", \"extra\": [1]}");

    // No parameters; a bare <function=...> block without <tool_call>; a missing </parameter>.
    v = view_of(parse_whole(o, "<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
    CHECK(v.calls == calls{{"ping", "{}"}});
    v = view_of(parse_whole(o, "<function=write_file>\n<parameter=path>\nx\n<parameter=mode>\n1\n</parameter>\n</function>"));
    CHECK(v.calls == calls{{"write_file", "{\"path\": \"x\", \"mode\": 1}"}});
}

TEST_CASE("deepseek v3.1 calls", "[chat]") {
    auto o = options_for(tool_format::deepseek_v31, true);
    o.think_open = true;
    const std::string text =
        "The user wants weather.</think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        "{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    const auto v = view_of(parse_whole(o, text));
    CHECK(v.reasoning == "The user wants weather.");
    CHECK(v.content == "Checking.");
    CHECK(v.calls == calls{{"get_weather", "{\"city\": \"Oslo\"}"}, {"get_time", "{}"}});
}

TEST_CASE("glm-4.5 calls", "[chat]") {
    auto o = options_for(tool_format::glm45, true);
    o.signatures.push_back({"search", nlohmann::ordered_json::parse(
                                          R"({"type":"object","properties":{"q":{"type":"string"},"n":{"type":"integer"}}})")});
    const std::string text =
        "\n<think>Search first.</think>\nOK.\n<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>tandem 12</arg_value>\n"
        "<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";
    const auto v = view_of(parse_whole(o, text));
    CHECK(v.reasoning == "Search first.");
    CHECK(v.content == "OK.");
    CHECK(v.calls == calls{{"search", "{\"q\": \"tandem 12\", \"n\": 3}"}});
}

TEST_CASE("kimi k2 calls keep the model's ids", "[chat]") {
    const auto o = options_for(tool_format::kimi_k2, true);
    const std::string text =
        "<think>two</think>Calling.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        "<|tool_call_argument_begin|>{\"city\": \"Rome\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1"
        "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
    const auto v = view_of(parse_whole(o, text));
    CHECK(v.reasoning == "two");
    CHECK(v.content == "Calling.");
    CHECK(v.calls == calls{{"get_weather", "{\"city\": \"Rome\"}"}, {"get_time", "{}"}});
    CHECK(v.ids == std::vector<std::string>{"functions.get_weather:0", "functions.get_time:1"});
}

TEST_CASE("gpt-oss harmony channels", "[chat]") {
    const auto o = options_for(tool_format::harmony, false);
    auto v = view_of(parse_whole(o, "<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final"
                                    "<|message|>Hello there!<|return|>"));
    CHECK(v.reasoning == "User says hi.");
    CHECK(v.content == "Hello there!");
    CHECK(v.calls.empty());

    v = view_of(parse_whole(o, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather"
                               "<|channel|>commentary <|constrain|>json<|message|>{\"city\":\"Lima\"}<|call|>"));
    CHECK(v.reasoning == "Need weather.");
    CHECK(v.calls == calls{{"get_weather", "{\"city\":\"Lima\"}"}});

    // The recipient may follow the channel; without <|call|> (an end-of-generation token the
    // detokenizer leaves out) the output's end ends the call.
    v = view_of(parse_whole(o, "<|channel|>commentary to=functions.f json<|message|>{\"a\": 1} "));
    CHECK(v.calls == calls{{"f", "{\"a\": 1}"}});

    // Without tools a message to a function is text; output that is not harmony is text.
    v = view_of(parse_whole(options_for(tool_format::harmony, false, false),
                            "<|channel|>commentary to=functions.f<|message|>{}<|call|>"));
    CHECK(v.calls.empty());
    CHECK(v.content == "{}");
    v = view_of(parse_whole(o, "plain words"));
    CHECK(v.content == "plain words");

    // --reasoning-format none: analysis is text.
    auto raw = o;
    raw.reasoning = false;
    v = view_of(parse_whole(raw, "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>ok"));
    CHECK(v.content == "hmmok");
}
