// tests/server/test_api_replies.cpp - a model's reply with reasoning and tool calls in each API's
// shape: OpenAI's message and delta chunks, Anthropic's blocks and event sequence, Responses'
// output items and typed events; streamed and whole replies carry the same calls.
#include "api_test_util.h"

#include <map>

using namespace tandem;
using namespace tandem::server;
using namespace tandem::server::test;

namespace {

// A Qwen3-style reply: reasoning, text, then two calls; fed in pieces that split the markers.
const std::vector<std::string> reply_pieces = {
    "<think>\nNeed the", " weather.\n</th", "ink>\n\nChecking both.\n<tool", "_call>\n{\"name\": \"get_weather\", \"argu",
    "ments\": {\"city\": \"Par", "is\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}",
    "\n</tool_call>"};

chat_parse_options qwen_options() {
    chat_parse_options o;
    o.syntax = {tool_format::hermes, true};
    o.tools = true;
    return o;
}

std::string run(generation_job &job, bool stream, finish_reason finish = finish_reason::stop) {
    std::string out = stream ? job.stream_begin() : std::string();
    int32_t id = 1;
    for (const auto &p : reply_pieces) out += job.on_event(delta(p, {id++}));
    return out + job.on_event(done_event(finish));
}

const char *chat_request = R"({"messages":[{"role":"user","content":"weather?"}],
    "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]})";

}  // namespace

TEST_CASE("OpenAI chat: reasoning_content, content and tool_calls, finish_reason tool_calls", "[api][replies]") {
    api_request r = openai_parse_chat(json::parse(chat_request));
    auto job = openai_make_job(r, test_context(qwen_options()));
    CHECK(run(*job, false).empty());
    const json b = job->final_body();
    const json &m = b["choices"][0]["message"];
    CHECK(m["reasoning_content"] == "Need the weather.");
    CHECK(m["content"] == "Checking both.");
    REQUIRE(m["tool_calls"].size() == 2);
    CHECK(m["tool_calls"][0]["type"] == "function");
    CHECK(m["tool_calls"][0]["id"].get<std::string>().starts_with("call_"));
    CHECK(m["tool_calls"][0]["id"] != m["tool_calls"][1]["id"]);
    CHECK(m["tool_calls"][0]["function"]["name"] == "get_weather");
    CHECK(json::parse(m["tool_calls"][1]["function"]["arguments"].get<std::string>()) == json({{"city", "Oslo"}}));
    CHECK(b["choices"][0]["finish_reason"] == "tool_calls");

    // Cut off by max_tokens: the finish reason says so.
    auto cut = openai_make_job(r, test_context(qwen_options()));
    run(*cut, false, finish_reason::length);
    CHECK(cut->final_body()["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("OpenAI chat streaming: delta.reasoning_content, delta.content, delta.tool_calls fragments", "[api][replies]") {
    api_request r = openai_parse_chat(json::parse(chat_request));
    r.stream = true;
    auto job = openai_make_job(r, test_context(qwen_options()));
    const auto events = sse_events(run(*job, true));
    REQUIRE(events.back().second == "[DONE]");
    std::string reasoning, content;
    std::vector<json> calls(2, json{{"id", ""}, {"name", ""}, {"arguments", ""}});
    std::string finish;
    int n_argument_chunks = 0;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json c = json::parse(events[i].second);
        const json &choice = c["choices"][0];
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
        const json &d = choice["delta"];
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        if (d.contains("content")) content += d["content"].get<std::string>();
        if (!d.contains("tool_calls")) continue;
        const json &t = d["tool_calls"][0];
        json &call = calls.at(t["index"].get<size_t>());
        if (t.contains("id")) {
            CHECK(call["id"] == "");  // the id and name come once, in the call's first chunk
            call["id"] = t["id"];
            call["name"] = t["function"]["name"];
        }
        if (t["function"].contains("arguments") && !t["function"]["arguments"].get<std::string>().empty()) {
            call["arguments"] = call["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
            ++n_argument_chunks;
        }
    }
    CHECK(reasoning == "Need the weather.");
    CHECK(content == "Checking both.");
    CHECK(calls[0]["name"] == "get_weather");
    CHECK(json::parse(calls[0]["arguments"].get<std::string>()) == json({{"city", "Paris"}}));
    CHECK(json::parse(calls[1]["arguments"].get<std::string>()) == json({{"city", "Oslo"}}));
    CHECK(n_argument_chunks >= 3);  // Paris's arguments arrived in two pieces
    CHECK(finish == "tool_calls");
}

TEST_CASE("Anthropic: thinking, text and tool_use blocks, stop_reason tool_use", "[api][replies]") {
    const json body = json::parse(R"({"model":"m","max_tokens":100,"messages":[{"role":"user","content":"weather?"}],
        "tools":[{"name":"get_weather","input_schema":{"type":"object"}}]})");
    api_request r = anthropic_parse_messages(body, false);
    auto job = anthropic_make_job(r, test_context(qwen_options()));
    run(*job, false);
    const json b = job->final_body();
    REQUIRE(b["content"].size() == 4);
    CHECK(b["content"][0] == json({{"type", "thinking"}, {"thinking", "Need the weather."}, {"signature", ""}}));
    CHECK(b["content"][1] == json({{"type", "text"}, {"text", "Checking both."}}));
    CHECK(b["content"][2]["type"] == "tool_use");
    CHECK(b["content"][2]["id"].get<std::string>().starts_with("toolu_"));
    CHECK(b["content"][2]["input"] == json({{"city", "Paris"}}));
    CHECK(b["stop_reason"] == "tool_use");

    // thinking disabled: no thinking block even if the model reasons.
    r.thinking_blocks = false;
    auto quiet = anthropic_make_job(r, test_context(qwen_options()));
    run(*quiet, false);
    CHECK(quiet->final_body()["content"][0]["type"] == "text");
}

TEST_CASE("Anthropic streaming: a block per kind of output, input_json_delta for arguments", "[api][replies]") {
    const json body = json::parse(R"({"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"weather?"}],
        "tools":[{"name":"get_weather","input_schema":{"type":"object"}}]})");
    api_request r = anthropic_parse_messages(body, false);
    auto job = anthropic_make_job(r, test_context(qwen_options()));
    const auto events = sse_events(run(*job, true));
    std::vector<std::string> starts;
    std::map<int, std::string> partial_json;
    std::string thinking, text, stop_reason;
    int open = -1;
    for (const auto &[name, data] : events) {
        const json e = json::parse(data);
        CHECK(e["type"] == name);
        if (name == "content_block_start") {
            CHECK(open == -1);  // blocks do not overlap
            open = e["index"];
            CHECK(open == static_cast<int>(starts.size()));
            starts.push_back(e["content_block"]["type"]);
        } else if (name == "content_block_stop") {
            CHECK(e["index"] == open);
            open = -1;
        } else if (name == "content_block_delta") {
            CHECK(e["index"] == open);
            const json &d = e["delta"];
            if (d["type"] == "thinking_delta") thinking += d["thinking"].get<std::string>();
            if (d["type"] == "text_delta") text += d["text"].get<std::string>();
            if (d["type"] == "input_json_delta") partial_json[open] += d["partial_json"].get<std::string>();
        } else if (name == "message_delta") {
            stop_reason = e["delta"]["stop_reason"];
        }
    }
    CHECK(events.front().first == "message_start");
    CHECK(events.back().first == "message_stop");
    CHECK(starts == std::vector<std::string>{"thinking", "text", "tool_use", "tool_use"});
    CHECK(thinking == "Need the weather.");
    CHECK(text == "Checking both.");
    CHECK(json::parse(partial_json[2]) == json({{"city", "Paris"}}));
    CHECK(json::parse(partial_json[3]) == json({{"city", "Oslo"}}));
    CHECK(stop_reason == "tool_use");
}

TEST_CASE("Responses: reasoning, message and function_call items; streamed as typed events", "[api][replies]") {
    const json body = json::parse(R"({"input":"weather?","stream":true,"tools":[{"type":"function","name":"get_weather",
        "parameters":{"type":"object"}}],"metadata":{"k":"v"}})");
    api_request r = responses_parse(body);
    response_store store(8, 1 << 20);
    auto job = responses_make_job(r, test_context(qwen_options()), &store);
    const auto events = sse_events(run(*job, true));
    std::vector<std::string> names;
    int64_t sequence = 0;
    json final;
    std::map<std::string, std::string> arguments;  // item id -> streamed arguments
    for (const auto &[name, data] : events) {
        const json e = json::parse(data);
        CHECK(e["type"] == name);
        CHECK(e["sequence_number"] == sequence++);
        if (names.empty() || names.back() != name) names.push_back(name);
        if (name == "response.function_call_arguments.delta") arguments[e["item_id"]] += e["delta"].get<std::string>();
        if (name == "response.completed") final = e["response"];
    }
    const std::vector<std::string> want = {
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
    CHECK(names == want);
    REQUIRE(final["output"].size() == 4);
    CHECK(final["status"] == "completed");
    CHECK(final["metadata"] == json({{"k", "v"}}));
    CHECK(final["output"][0]["type"] == "reasoning");
    CHECK(final["output"][0]["content"][0]["text"] == "Need the weather.");
    CHECK(final["output"][1]["content"][0] == json({{"type", "output_text"}, {"text", "Checking both."}, {"annotations", json::array()}}));
    const json &call = final["output"][2];
    CHECK(call["type"] == "function_call");
    CHECK(call["status"] == "completed");
    CHECK(call["call_id"].get<std::string>().starts_with("call_"));
    CHECK(json::parse(call["arguments"].get<std::string>()) == json({{"city", "Paris"}}));
    CHECK(arguments[call["id"]] == call["arguments"]);
    CHECK(final["usage"]["output_tokens"] == 3);

    // Stored (store defaults to true): the conversation with this reply's calls.
    const auto kept = store.get("id-1");
    REQUIRE(kept);
    CHECK(kept->back()["tool_calls"][1]["id"] == final["output"][3]["call_id"]);
    CHECK(kept->back()["reasoning_content"] == "Need the weather.");
}

TEST_CASE("Responses: a reply cut off by max_output_tokens is incomplete", "[api][replies]") {
    api_request r = responses_parse(json::parse(R"({"input":"hi","max_output_tokens":3,"store":false})"));
    response_store store(8, 1 << 20);
    auto job = responses_make_job(r, test_context(), &store);
    job->on_event(delta("abc", {1}));
    job->on_event(done_event(finish_reason::length));
    const json b = job->final_body();
    CHECK(b["status"] == "incomplete");
    CHECK(b["incomplete_details"]["reason"] == "max_output_tokens");
    CHECK(b["output"][0]["content"][0]["text"] == "abc");
    CHECK(b["max_output_tokens"] == 3);
    CHECK(store.size() == 0);  // store: false
}

TEST_CASE("usage reports prompt tokens read from the cache in each API's field", "[api][replies]") {
    gen_event done = done_event(finish_reason::stop);
    done.timings.cache_n = 5;  // of the 7 prompt tokens
    auto chat = openai_make_job(openai_parse_chat(json::parse(R"({"messages":[{"role":"user","content":"x"}]})")), test_context());
    chat->on_event(delta("a", {1}));
    chat->on_event(done);
    const json c = chat->final_body()["usage"];
    CHECK(c["prompt_tokens"] == 7);
    CHECK(c["prompt_tokens_details"]["cached_tokens"] == 5);

    response_store store(8, 1 << 20);
    auto resp = responses_make_job(responses_parse(json::parse(R"({"input":"hi","store":false})")), test_context(), &store);
    resp->on_event(delta("a", {1}));
    resp->on_event(done);
    const json r = resp->final_body()["usage"];
    CHECK(r["input_tokens"] == 7);
    CHECK(r["input_tokens_details"]["cached_tokens"] == 5);

    // Anthropic counts cache reads apart from input_tokens; streaming says so in message_delta.
    for (bool stream : {false, true}) {
        json body = json::parse(R"({"model":"tiny","max_tokens":20,"messages":[{"role":"user","content":"x"}]})");
        body["stream"] = stream;
        auto msg = anthropic_make_job(anthropic_parse_messages(body, false), test_context());
        std::string text = stream ? msg->stream_begin() : std::string();
        text += msg->on_event(delta("a", {1}));
        text += msg->on_event(done);
        json u;
        if (!stream) u = msg->final_body()["usage"];
        for (const auto &[name, data] : sse_events(text))
            if (name == "message_delta") u = json::parse(data)["usage"];
        INFO("stream " << stream);
        CHECK(u["input_tokens"] == 2);
        CHECK(u["cache_read_input_tokens"] == 5);
        CHECK(u["output_tokens"] == 3);
    }
}
