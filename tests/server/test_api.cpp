// tests/server/test_api.cpp - JSON -> request mapping, errors in each API's shape, the response
// and streaming formats (OpenAI chunks, Anthropic's event sequence), and the memory plan.
#include "api_test_util.h"
#include "src/server/api_controls.h"
#include "src/server/memory_plan.h"

using namespace tandem;
using namespace tandem::server;
using namespace tandem::server::test;

TEST_CASE("OpenAI chat requests map fields and defaults", "[api]") {
    json body = json::parse(R"({"model":"tiny","messages":[{"role":"system","content":"be brief"},
        {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
        "max_completion_tokens":12,"temperature":0,"top_p":0.5,"top_k":4,"seed":9,"stop":"END",
        "stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":3})");
    api_request r = openai_parse_chat(body);
    const json &m = r.chat["messages"];
    REQUIRE(m.size() == 2);
    CHECK(m[0]["role"] == "system");
    CHECK(m[1]["content"] == "hi there");
    CHECK(r.max_tokens == 12);
    const sampling_params sp = sampling_resolve(sampling_defaults{}, r);
    CHECK(sp.temperature == 0.0f);
    CHECK(sp.top_p == 0.5f);
    CHECK(sp.top_k == 4);
    CHECK(sp.seed == 9);
    CHECK(r.stop == std::vector<std::string>{"END"});
    CHECK(r.stream);
    CHECK(r.include_usage);
    CHECK(r.sampling.n_logprobs == 3);

    api_request d = openai_parse_chat(json::parse(R"({"messages":[{"role":"developer","content":"x"},{"role":"user","content":"y"}]})"));
    CHECK(d.chat["messages"][0]["role"] == "system");
    CHECK_FALSE(d.max_tokens.has_value());
    CHECK_FALSE(d.overrides.temperature.has_value());  // the server's default (sampling_defaults)
    CHECK_FALSE(d.stream);
    // max_tokens is the older name of the same limit.
    CHECK(openai_parse_chat(json::parse(R"({"messages":[{"role":"user","content":"y"}],"max_tokens":5})")).max_tokens == 5);
}

TEST_CASE("OpenAI requests with wrong types or values are 400s", "[api]") {
    auto bad = [](const char *text) { return kind_of([&] { openai_parse_chat(json::parse(text)); }); };
    CHECK(bad(R"({})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[]})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":"hi"})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"tool","content":"x"}]})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":5}]})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"10"})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2.5})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":"x"}],"temperature":3})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":"x"}],"n":2})") == error_kind::invalid_request);
    CHECK(bad(R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})") == error_kind::invalid_request);
    CHECK(kind_of([] { json_parse_body("{not json"); }) == error_kind::invalid_request);
    CHECK(kind_of([] { json_parse_body("[1,2]"); }) == error_kind::invalid_request);
    CHECK(kind_of([] { openai_parse_completion(json::parse(R"({"prompt":7})")); }) == error_kind::invalid_request);
    CHECK(openai_parse_completion(json::parse(R"({"prompt":"abc"})")).max_tokens == 16);
}

TEST_CASE("error bodies follow each API's shape", "[api]") {
    json o = openai_error_body(404, "model 'x' not found");
    CHECK(o["error"]["message"] == "model 'x' not found");
    CHECK(o["error"]["type"] == "not_found_error");
    json a = anthropic_error_body(401, "invalid key");
    CHECK(a["type"] == "error");
    CHECK(a["error"]["type"] == "authentication_error");
    CHECK(anthropic_error_body(413, "big")["error"]["type"] == "request_too_large");
    CHECK(anthropic_error_body(503, "busy")["error"]["type"] == "overloaded_error");
}

TEST_CASE("OpenAI non-streaming chat body carries text, finish reason, usage, logprobs and timings", "[api]") {
    api_request r = openai_parse_chat(json::parse(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2})"));
    auto job = openai_make_job(r, test_context());
    CHECK(job->on_event(delta("ab", {1, 2})).empty());
    CHECK(job->on_event(delta("c", {3})).empty());
    CHECK(job->on_event(done_event(finish_reason::length)).empty());
    REQUIRE(job->final_status() == 200);
    json b = job->final_body();
    CHECK(b["object"] == "chat.completion");
    CHECK(b["choices"][0]["message"]["content"] == "abc");
    CHECK(b["choices"][0]["finish_reason"] == "length");
    CHECK(b["usage"]["prompt_tokens"] == 7);
    CHECK(b["usage"]["completion_tokens"] == 3);
    CHECK(b["usage"]["total_tokens"] == 10);
    auto lp = b["choices"][0]["logprobs"]["content"];
    REQUIRE(lp.size() == 3);
    CHECK(lp[0]["token"] == "<1>");
    CHECK(lp[0]["top_logprobs"].size() == 2);
    CHECK(lp[0]["bytes"].size() == 3);
    CHECK(b["timings"]["prompt_n"] == 7);
    CHECK(b["timings"]["predicted_per_second"].get<double>() == Approx(500.0));
}

TEST_CASE("OpenAI streaming: role chunk, content chunks, finish chunk, usage chunk, [DONE]", "[api]") {
    api_request r = openai_parse_chat(json::parse(R"({"messages":[{"role":"user","content":"x"}],"stream":true,
        "stream_options":{"include_usage":true}})"));
    auto job = openai_make_job(r, test_context());
    // One statement each: the events must reach the job in order.
    std::string text = job->stream_begin();
    text += job->on_event(delta("he", {1}));
    text += job->on_event(delta("y", {2}));
    text += job->on_event(done_event(finish_reason::stop));
    auto events = sse_events(text);
    REQUIRE(events.size() == 6);
    CHECK(json::parse(events[0].second)["choices"][0]["delta"]["role"] == "assistant");
    CHECK(json::parse(events[1].second)["choices"][0]["delta"]["content"] == "he");
    CHECK(json::parse(events[2].second)["choices"][0]["delta"]["content"] == "y");
    json fin = json::parse(events[3].second);
    CHECK(fin["choices"][0]["finish_reason"] == "stop");
    CHECK(fin["object"] == "chat.completion.chunk");
    json usage = json::parse(events[4].second);
    CHECK(usage["choices"].empty());
    CHECK(usage["usage"]["completion_tokens"] == 3);
    CHECK(events[5].second == "[DONE]");
}

TEST_CASE("a cancelled generation is reported as an error, not as output", "[api]") {
    api_request r = openai_parse_chat(json::parse(R"({"messages":[{"role":"user","content":"x"}]})"));
    auto job = openai_make_job(r, test_context());
    job->on_event(done_event(finish_reason::cancelled));
    CHECK(job->final_status() == 503);
    CHECK(job->final_body()["error"]["message"] == "the server is shutting down");
}

TEST_CASE("Anthropic requests map system, messages and stop sequences", "[api]") {
    json body = json::parse(R"({"model":"tiny","max_tokens":20,"system":[{"type":"text","text":"sys"}],
        "messages":[{"role":"user","content":"hello"},{"role":"assistant","content":[{"type":"text","text":"hi"}]},
        {"role":"user","content":"more"}],"stop_sequences":["###"],"temperature":0.0,"stream":true})");
    api_request r = anthropic_parse_messages(body, false);
    const json &m = r.chat["messages"];
    REQUIRE(m.size() == 4);
    CHECK(m[0]["role"] == "system");
    CHECK(m[0]["content"] == "sys");
    CHECK(m[2]["content"] == "hi");
    CHECK(r.max_tokens == 20);
    CHECK(r.stop == std::vector<std::string>{"###"});
    CHECK(r.stream);
    auto bad = [](const char *text, bool count = false) { return kind_of([&] { anthropic_parse_messages(json::parse(text), count); }); };
    CHECK(bad(R"({"model":"t","messages":[{"role":"user","content":"x"}]})") == error_kind::invalid_request);  // no max_tokens
    CHECK(bad(R"({"model":"t","max_tokens":5,"messages":[{"role":"system","content":"x"}]})") == error_kind::invalid_request);
    CHECK(bad(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}]})") == error_kind::invalid_request);
    CHECK(bad(R"({"model":"t","max_tokens":5,"messages":[{"role":"user","content":"x"}],"temperature":1.5})") ==
          error_kind::invalid_request);
    CHECK(bad(R"({"model":"t","messages":[{"role":"user","content":"x"}]})", true) == error_kind::internal);  // fine for count_tokens
}

TEST_CASE("Anthropic streaming follows the documented event sequence", "[api]") {
    api_request r = anthropic_parse_messages(
        json::parse(R"({"model":"tiny","max_tokens":20,"messages":[{"role":"user","content":"x"}],"stream":true})"), false);
    auto job = anthropic_make_job(r, test_context());
    std::string text = job->stream_begin();
    text += job->on_event(delta("a", {1}));
    text += job->on_event(delta("b", {2}));
    text += job->on_event(done_event(finish_reason::stop, "###"));
    auto events = sse_events(text);
    std::vector<std::string> names;
    for (auto &[name, data] : events) {
        names.push_back(name);
        CHECK(json::parse(data)["type"] == name);  // every data object names its event
    }
    CHECK(names == std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                            "content_block_delta", "content_block_stop", "message_delta", "message_stop"});
    CHECK(json::parse(events[0].second)["message"]["usage"]["input_tokens"] == 7);
    CHECK(json::parse(events[3].second)["delta"]["text"] == "a");
    json md = json::parse(events[6].second);
    CHECK(md["delta"]["stop_reason"] == "stop_sequence");
    CHECK(md["delta"]["stop_sequence"] == "###");
    CHECK(md["usage"]["output_tokens"] == 3);
}

TEST_CASE("Anthropic non-streaming message and stop reasons", "[api]") {
    api_request r = anthropic_parse_messages(
        json::parse(R"({"model":"tiny","max_tokens":20,"messages":[{"role":"user","content":"x"}]})"), false);
    auto job = anthropic_make_job(r, test_context());
    job->on_event(delta("xyz", {4}));
    job->on_event(done_event(finish_reason::length));
    json b = job->final_body();
    CHECK(b["type"] == "message");
    CHECK(b["role"] == "assistant");
    CHECK(b["content"][0]["type"] == "text");
    CHECK(b["content"][0]["text"] == "xyz");
    CHECK(b["stop_reason"] == "max_tokens");
    CHECK(b["stop_sequence"].is_null());
    CHECK(b["usage"]["input_tokens"] == 7);
    auto job2 = anthropic_make_job(r, test_context());
    job2->on_event(done_event(finish_reason::stop));
    CHECK(job2->final_body()["stop_reason"] == "end_turn");
}

TEST_CASE("json_dump replaces invalid UTF-8 instead of throwing", "[api]") {
    json j = {{"t", std::string("a\xE4")}};
    CHECK_NOTHROW(json_dump(j));
    CHECK(json_dump(j).find("\xEF\xBF\xBD") != std::string::npos);  // U+FFFD in UTF-8
}

TEST_CASE("the memory plan adds weights, KV and scratch and names the shortfall", "[api]") {
    model_hparams hp;
    hp.d_model = 64;
    hp.n_head = 4;
    hp.d_head = 16;
    hp.n_expert_used = 2;
    hp.d_ff_expert = 32;
    hp.n_vocab = 100;
    model_bytes b;
    b.embedding = 1000;
    b.head = 2000;
    b.layer_replicated = {100, 100};
    b.layer_experts = {500, 500};
    b.kv_per_token = 256;
    memory_plan p = memory_plan_compute(b, hp, 4, 1024, 128, 1ull << 40);
    CHECK(p.weights == 4200);
    CHECK(p.kv == 4ull * 1024 * 256);
    CHECK(p.total() == p.weights + p.kv + p.scratch);
    CHECK(p.fits());
    CHECK(p.shortfall().empty());
    memory_plan tight = memory_plan_compute(b, hp, 4, 1024, 128, p.total() - 1);
    CHECK_FALSE(tight.fits());
    CHECK(tight.shortfall().find("short") != std::string::npos);
    CHECK(tight.shortfall().find("at most 3 slots fit") != std::string::npos);
}
