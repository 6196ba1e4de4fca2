// tests/unit/chat/test_tool_grammar.cpp - forced tool-call grammars: for every family, a call in
// the family's syntax with schema-valid arguments is a complete sentence of the grammar and parses
// back to those arguments; wrong names, wrong types, missing required parameters and extra text
// are refused.
#include "chat_test_util.h"
#include "src/chat/tool_grammar.h"
#include "tandem/error.h"
#include "tandem/grammar.h"

#include <catch2/catch.hpp>

using namespace tandem;
using namespace tandem::test;
using ojson = nlohmann::ordered_json;

namespace {

// A vocabulary of the 256 single bytes and one end-of-generation token.
const grammar_vocab &byte_vocab() {
    static const grammar_vocab v = [] {
        std::vector<std::string> bytes;
        for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
        bytes.push_back("");
        const std::vector<int32_t> eog = {256};
        return grammar_vocab(bytes, {}, eog);
    }();
    return v;
}

bool accepts(const std::string &gbnf, const std::string &text) {
    const grammar g = grammar::from_gbnf(gbnf);
    grammar_constraint c(g, byte_vocab());
    grammar_matcher m(c);
    return m.accept_bytes(text) && m.is_complete();
}

std::vector<tool_signature> tools() {
    return {{"write_file", ojson::parse(R"({"type":"object","properties":{"path":{"type":"string"},"mode":{"type":"integer"},)"
                                        R"("tags":{"type":"array","items":{"type":"string"}}},"required":["path","mode"]})")},
            {"ping", ojson::parse(R"({"type":"object","properties":{}})")}};
}

struct family_case {
    tool_format format;
    std::string good;      // a call to write_file(path "a.txt", mode 7, tags ["x"])
    std::string bad_type;  // mode as a string
    std::string missing;   // no mode
};

std::vector<family_case> cases() {
    return {
        {tool_format::hermes,
         "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\", \"mode\": 7, \"tags\": [\"x\"]}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\", \"mode\": \"7\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>"},
        {tool_format::deepseek_v31,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{\"path\": \"a.txt\", \"mode\": 7, \"tags\": [\"x\"]}"
         "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{\"path\": \"a.txt\", \"mode\": true}<｜tool▁call▁end｜>"
         "<｜tool▁calls▁end｜>",
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{\"mode\": 7}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
        {tool_format::kimi_k2,
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>{\"path\": \"a.txt\", "
         "\"mode\": 7, \"tags\": [\"x\"]}<|tool_call_end|><|tool_calls_section_end|>",
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>{\"path\": 1, \"mode\": 7}"
         "<|tool_call_end|><|tool_calls_section_end|>",
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
         "<|tool_calls_section_end|>"},
        {tool_format::harmony,
         "<|channel|>analysis<|message|>write it<|end|><|start|>assistant<|channel|>commentary to=functions.write_file "
         "<|constrain|>json<|message|>{\"path\": \"a.txt\", \"mode\": 7, \"tags\": [\"x\"]}",
         "<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>{\"path\": \"a.txt\", \"mode\": 7.5}",
         "<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>{\"path\": \"a.txt\"}"},
        {tool_format::qwen3_coder,
         "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n<parameter=mode>\n7\n</parameter>\n"
         "<parameter=tags>\n[\"x\"]\n</parameter>\n</function>\n</tool_call>",
         "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n<parameter=mode>\nseven\n</parameter>\n"
         "</function>\n</tool_call>",
         "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n</function>\n</tool_call>"},
        {tool_format::glm45,
         "<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>a.txt</arg_value>\n<arg_key>mode</arg_key>\n<arg_value>7"
         "</arg_value>\n<arg_key>tags</arg_key>\n<arg_value>[\"x\"]</arg_value>\n</tool_call>",
         "<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>a.txt</arg_value>\n<arg_key>mode</arg_key>\n<arg_value>x"
         "</arg_value>\n</tool_call>",
         "<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>a.txt</arg_value>\n</tool_call>"},
    };
}

}  // namespace

TEST_CASE("forced-call grammars accept schema-valid calls that parse back", "[chat][grammar]") {
    const auto offered = tools();
    for (const family_case &c : cases()) {
        INFO(tool_format_name(c.format));
        const std::string gbnf = tool_call_gbnf(offered, {c.format, false});
        CHECK(accepts(gbnf, c.good));
        CHECK_FALSE(accepts(gbnf, c.bad_type));
        CHECK_FALSE(accepts(gbnf, c.missing));
        CHECK_FALSE(accepts(gbnf, "Sure! " + c.good));  // nothing before the call
        auto o = options_for(c.format, false);
        o.signatures = offered;
        const auto v = view_of(parse_whole(o, c.good));
        REQUIRE(v.calls.size() == 1);
        CHECK(v.calls[0].first == "write_file");
        CHECK(ojson::parse(v.calls[0].second) == ojson::parse(R"({"path": "a.txt", "mode": 7, "tags": ["x"]})"));
    }
}

TEST_CASE("a named choice allows only that tool; parallel choices allow several calls", "[chat][grammar]") {
    const auto offered = tools();
    const std::vector<tool_signature> ping_only = {offered[1]};
    const std::string named = tool_call_gbnf(ping_only, {tool_format::hermes, false});
    CHECK(accepts(named, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
    CHECK_FALSE(accepts(named, "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a\", \"mode\": 1}}\n</tool_call>"));
    const std::string two = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
    CHECK_FALSE(accepts(named, two));
    CHECK(accepts(tool_call_gbnf(ping_only, {tool_format::hermes, true}), two));
}

TEST_CASE("a schema the grammar engine refuses names its tool", "[chat][grammar]") {
    const std::vector<tool_signature> t = {{"odd", ojson::parse(R"({"type":"object","not":{}})")}};
    try {
        (void)tool_call_gbnf(t, {tool_format::hermes, false});
        FAIL("expected an error");
    } catch (const error &e) {
        CHECK(e.kind() == error_kind::invalid_request);
        CHECK(std::string(e.what()).find("odd") != std::string::npos);
    }
    CHECK(gbnf_quote("a\"b\\c\nd") == "\"a\\\"b\\\\c\\nd\"");
}
