// tests/server/test_api_tools.cpp - tools, tool calls and tool results in the three APIs' requests:
// how they reach the chat template (OpenAI chat shape), the tool choice, and the 400s that name
// the field for malformed tools, unknown choices and results that answer no call.
#include "api_test_util.h"
#include "src/server/api_tools.h"

using namespace tandem;
using namespace tandem::server;
using namespace tandem::server::test;

namespace {

const char *weather_tool = R"({"type":"function","function":{"name":"get_weather","description":"Weather now",
    "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}})";

json chat_body(const std::string &extra) {
    return json::parse(R"({"messages":[{"role":"user","content":"hi"}],"tools":[)" + std::string(weather_tool) + "]" + extra + "}");
}

// The error message of an OpenAI chat body, Anthropic body or Responses body.
std::string openai_error(const std::string &text) { return message_of([&] { openai_parse_chat(json::parse(text)); }); }
std::string anthropic_error(const std::string &text) {
    return message_of([&] { anthropic_parse_messages(json::parse(text), false); });
}
std::string responses_error(const std::string &text) { return message_of([&] { responses_parse(json::parse(text)); }); }

bool has(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("OpenAI tools, tool calls and tool results reach the template", "[api][tools]") {
    const json body = json::parse(R"({"messages":[
        {"role":"user","content":"weather in Paris and Oslo?"},
        {"role":"assistant","content":null,"reasoning_content":"two calls","tool_calls":[
            {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
            {"id":"call_2","type":"function","function":{"name":"get_weather","arguments":{"city":"Oslo"}}}]},
        {"role":"tool","tool_call_id":"call_1","content":"sunny"},
        {"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"snow"}]}],
        "tools":[)" + std::string(weather_tool) + R"(],"tool_choice":"required","parallel_tool_calls":false,
        "chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"low"})");
    const api_request r = openai_parse_chat(body);
    const json &m = r.chat["messages"];
    REQUIRE(m.size() == 4);
    CHECK(m[1]["content"] == "");  // null beside tool calls: templates concatenate strings
    CHECK(m[1]["reasoning_content"] == "two calls");
    CHECK(m[1]["tool_calls"][0]["function"]["arguments"] == "{\"city\":\"Paris\"}");
    CHECK(m[1]["tool_calls"][1]["function"]["arguments"] == json({{"city", "Oslo"}}));
    CHECK(m[3]["content"] == "snow");
    CHECK(m[3]["tool_call_id"] == "call_2");
    CHECK(r.chat["tools"] == body["tools"]);
    CHECK(r.chat["chat_template_kwargs"] == json({{"enable_thinking", false}, {"reasoning_effort", "low"}}));
    CHECK(r.tools.choice == tool_choice::required);
    CHECK_FALSE(r.tools.parallel);
    REQUIRE(r.tools.defs.size() == 1);
    CHECK(r.tools.defs[0].name == "get_weather");
    CHECK(r.tools.defs[0].parameters["required"] == json::array({"city"}));

    // A named choice; none leaves the tools out of the prompt and the parser off.
    api_request named = openai_parse_chat(chat_body(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
    CHECK(named.tools.choice == tool_choice::named);
    CHECK(named.tools.named == "get_weather");
    api_request none = openai_parse_chat(chat_body(R"(,"tool_choice":"none")"));
    CHECK_FALSE(none.tools.offered());
    CHECK_FALSE(none.chat.contains("tools"));
}

TEST_CASE("malformed OpenAI tools and tool messages are 400s naming the field", "[api][tools]") {
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{}}]})"),
              "tools[0].function.name"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]})"),
              "must be a JSON Schema object"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"code","function":{"name":"f"}}]})"),
              "tools[0].type"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a b"}}]})"),
              "'a b'"));
    CHECK(has(openai_error(chat_body(R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})").dump()), "'nope'"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})"), "no tools"));
    CHECK(has(openai_error(chat_body(R"(,"tool_choice":"sometimes")").dump()), "tool_choice"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"}],"tools":[)" + std::string(weather_tool) + "," +
                           weather_tool + "]}"),
              "offered twice"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_9","content":"r"}]})"),
              "messages[1] answers tool call 'call_9'"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"},{"role":"tool","content":"r"}]})"), "tool_call_id"));
    CHECK(has(openai_error(R"({"messages":[{"role":"assistant","content":"","tool_calls":{"id":"a"}}]})"), "messages[0].tool_calls"));
    CHECK(has(openai_error(R"({"messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":5}}]}]})"),
              "messages[0].tool_calls[0].function.arguments"));
    CHECK(has(openai_error(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f"}}]}]})"),
              "messages[0].tool_calls[0] needs a non-empty id"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[]})"), "chat_template_kwargs"));
    CHECK(has(openai_error(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"max"})"), "reasoning_effort"));
}

TEST_CASE("Anthropic tool_use, tool_result and thinking blocks become chat messages", "[api][tools]") {
    const json body = json::parse(R"({"model":"m","max_tokens":2000,"system":"sys",
        "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
        "tool_choice":{"type":"any","disable_parallel_tool_use":true},"thinking":{"type":"disabled"},
        "messages":[{"role":"user","content":"weather?"},
          {"role":"assistant","content":[{"type":"thinking","thinking":"use the tool","signature":"s"},
             {"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Rome"}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"hot"}]},
             {"type":"text","text":"and tomorrow?","cache_control":{"type":"ephemeral"}}]},
          {"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"get_weather","input":{}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"failed","is_error":true}]}]})");
    const api_request r = anthropic_parse_messages(body, false);
    const json &m = r.chat["messages"];
    REQUIRE(m.size() == 7);
    CHECK(m[0] == json({{"role", "system"}, {"content", "sys"}}));
    CHECK(m[2]["content"] == "Checking.");
    CHECK(m[2]["reasoning_content"] == "use the tool");
    CHECK(m[2]["tool_calls"][0]["function"]["arguments"] == json({{"city", "Rome"}}));
    CHECK(m[3] == json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "hot"}}));
    CHECK(m[4] == json({{"role", "user"}, {"content", "and tomorrow?"}}));
    CHECK(m[6]["content"] == "Error: failed");
    CHECK(r.chat["tools"][0]["function"]["parameters"] == body["tools"][0]["input_schema"]);
    CHECK(r.tools.choice == tool_choice::required);
    CHECK_FALSE(r.tools.parallel);
    CHECK_FALSE(r.thinking_blocks);
    CHECK(r.chat["chat_template_kwargs"]["enable_thinking"] == false);

    const api_request named = anthropic_parse_messages(
        json::parse(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],
            "tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"}})"),
        false);
    CHECK(named.tools.choice == tool_choice::named);
    CHECK(named.thinking_blocks);
}

TEST_CASE("malformed Anthropic tools and blocks are 400s naming the field", "[api][tools]") {
    const std::string head = R"({"model":"m","max_tokens":2000,)";
    const std::string user = R"("messages":[{"role":"user","content":"x"}])";
    CHECK(has(anthropic_error(head + user + R"(,"tools":[{"name":"f"}]})"), "tools.0.input_schema"));
    CHECK(has(anthropic_error(head + user + R"(,"tools":[{"input_schema":{"type":"object"}}]})"), "tools.0.name"));
    CHECK(has(anthropic_error(head + user + R"(,"tools":[{"type":"web_search_20250305","name":"web_search"}]})"),
              "web_search_20250305"));
    CHECK(has(anthropic_error(head + user + R"(,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"g"}})"),
              "'g'"));
    CHECK(has(anthropic_error(head + R"("messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_x","content":"r"}]}]})"),
              "messages.0.content.0 answers tool call 'toolu_x'"));
    CHECK(has(anthropic_error(head + R"("messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})"), "messages.0.content.0"));
    CHECK(has(anthropic_error(head + user + R"(,"thinking":{"type":"enabled","budget_tokens":10}})"), "budget_tokens"));
    CHECK(has(anthropic_error(head + user + R"(,"thinking":{"type":"sometimes"}})"), "thinking.type"));
}

TEST_CASE("Responses input items become a chat conversation", "[api][responses]") {
    const json body = json::parse(R"({"model":"m","instructions":"be terse","input":[
        {"role":"user","content":[{"type":"input_text","text":"list files"}]},
        {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"use ls"}]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Running ls."}]},
        {"type":"function_call","call_id":"call_a","name":"shell","arguments":"{\"cmd\":\"ls\"}"},
        {"type":"function_call_output","call_id":"call_a","output":"a.txt"},
        {"role":"developer","content":"stay in /tmp"}],
        "tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}],
        "tool_choice":{"type":"function","name":"shell"},"max_output_tokens":64,"temperature":0.5,"store":false,
        "reasoning":{"effort":"high","summary":"auto"},"include":["reasoning.encrypted_content"],"prompt_cache_key":"k",
        "text":{"format":{"type":"text"}}})");
    const api_request r = responses_parse(body);
    const json &m = r.chat["messages"];
    REQUIRE(m.size() == 5);
    CHECK(m[0] == json({{"role", "system"}, {"content", "be terse"}}));
    CHECK(m[2]["content"] == "Running ls.");
    CHECK(m[2]["reasoning_content"] == "use ls");
    CHECK(m[2]["tool_calls"][0]["id"] == "call_a");
    CHECK(m[3] == json({{"role", "tool"}, {"tool_call_id", "call_a"}, {"content", "a.txt"}}));
    CHECK(m[4]["role"] == "system");
    CHECK(r.chat["tools"][0]["function"]["name"] == "shell");
    CHECK(r.chat["chat_template_kwargs"]["reasoning_effort"] == "high");
    CHECK(r.tools.choice == tool_choice::named);
    CHECK(r.max_tokens == 64);
    CHECK(r.overrides.temperature == 0.5f);
    CHECK(r.responses["echo"]["store"] == false);

    const api_request plain = responses_parse(json::parse(R"({"input":"hello"})"));
    CHECK(plain.chat["messages"] == json::array({{{"role", "user"}, {"content", "hello"}}}));
    CHECK(plain.constraint == nullptr);
    // text.format's schema constrains the output, as response_format does for chat.
    const std::string typed = R"({"input":"x","text":{"format":{"type":"json_schema","name":"a","schema":{"type":"object"}}}})";
    CHECK(responses_parse(json::parse(typed), typed).constraint != nullptr);
}

TEST_CASE("Responses requests with fields or items Tandem does not implement are 400s naming them", "[api][responses]") {
    CHECK(has(responses_error(R"({"input":"x","frequency_penalty":1})"), "'frequency_penalty'"));
    CHECK(has(responses_error(R"({"input":"x","tools":[{"type":"web_search"}]})"), "tools[0]"));
    CHECK(has(responses_error(R"({"input":"x","text":{"format":{"type":"json_schema","name":"a","schema":5}}})"), "text.format"));
    CHECK(has(responses_error(R"({"input":"x","text":{"format":{"type":"xml"}}})"), "text.format"));
    CHECK(has(responses_error(R"({"input":[{"type":"item_reference","id":"x"}]})"), "input[0]"));
    CHECK(has(responses_error(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})"), "input[0].content"));
    CHECK(has(responses_error(R"({"input":[{"type":"function_call_output","call_id":"c","output":"o"}]})"),
              "input[0] answers tool call 'c'"));
    CHECK(has(responses_error(R"({"input":"x","include":["file_search_call.results"]})"), "include"));
    CHECK(has(responses_error(R"({"input":"x","truncation":"auto"})"), "truncation"));
    CHECK(has(responses_error(R"({})"), "'input'"));
}

TEST_CASE("previous_response_id continues a stored conversation", "[api][responses]") {
    response_store store(4, 1 << 20);
    store.put("resp_1", json::parse(R"([{"role":"user","content":"run ls"},
        {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{}"}}]}])"));
    api_request r = responses_parse(json::parse(R"({"previous_response_id":"resp_1","instructions":"sys",
        "input":[{"type":"function_call_output","call_id":"call_1","output":"a.txt"}]})"));
    responses_resolve(r, store);
    const json &m = r.chat["messages"];
    REQUIRE(m.size() == 4);
    CHECK(m[0]["content"] == "sys");
    CHECK(m[1]["content"] == "run ls");
    CHECK(m[3]["tool_call_id"] == "call_1");

    api_request unknown = responses_parse(json::parse(R"({"previous_response_id":"resp_9","input":"x"})"));
    CHECK(has(message_of([&] { responses_resolve(unknown, store); }), "resp_9"));
    api_request wrong = responses_parse(json::parse(R"({"previous_response_id":"resp_1",
        "input":[{"type":"function_call_output","call_id":"call_7","output":"o"}]})"));
    CHECK(has(message_of([&] { responses_resolve(wrong, store); }), "input[0] answers tool call 'call_7'"));

    // The store keeps the newest entries within its bounds.
    for (int i = 2; i <= 6; ++i) store.put("resp_" + std::to_string(i), json::array());
    CHECK(store.size() == 4);
    CHECK_FALSE(store.get("resp_1"));
    CHECK(store.get("resp_6"));
}

TEST_CASE("a forced choice gets a grammar in the model's call syntax", "[api][tools]") {
    api_request auto_choice = openai_parse_chat(chat_body(""));
    CHECK(tool_forced_grammar(auto_choice.tools, tool_format::hermes) == nullptr);
    api_request required = openai_parse_chat(chat_body(R"(,"tool_choice":"required")"));
    const auto g = tool_forced_grammar(required.tools, tool_format::hermes);
    REQUIRE(g != nullptr);
    CHECK(has(g->gbnf(), "<tool_call>"));
    CHECK(has(g->gbnf(), "get_weather"));
    CHECK(tool_call_id("call_").size() == 29);
    CHECK(tool_call_id("call_") != tool_call_id("call_"));
}
