// tests/server/test_controls_api.cpp - the generation controls' mapping (src/server/api_controls.h):
// the fields each route accepts, sampling and penalty ranges, logit_bias, response formats and
// grammars through the service's request parser (schemas in their own property order), errors
// that name the problem, and the sampling defaults from flags and the model file.
#include "src/server/api_controls.h"
#include "src/server/service.h"

#include "tandem/gguf.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

using namespace tandem;
using namespace tandem::server;

namespace {

api_request parse(route_id route, const std::string &body) { return api_parse_request(route, body, json_limits{}); }

// The message of the error the request's parsing throws ("" when it does not throw).
std::string refusal(route_id route, const std::string &body) {
    try {
        parse(route, body);
    } catch (const error &e) {
        CHECK(e.kind() == error_kind::invalid_request);
        return e.what();
    }
    return "";
}

std::string chat(const std::string &extra) { return R"({"messages":[{"role":"user","content":"x"}])" + extra + "}"; }
std::string messages(const std::string &extra) {
    return R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}])" + extra + "}";
}

// Whether the whole text is a sentence of the grammar (a vocabulary of single bytes).
bool matches(const grammar &g, const std::string &text) {
    static const grammar_vocab vocab = [] {
        std::vector<std::string> bytes;
        for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
        return grammar_vocab(bytes, std::vector<int32_t>{}, std::vector<int32_t>{});
    }();
    const grammar_constraint c(g, vocab);
    grammar_matcher m(c);
    return m.accept_bytes(text) && m.is_complete();
}

}  // namespace

TEST_CASE("each route refuses the fields it does not implement, naming them", "[api][controls]") {
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"web_search_options":{})")), Catch::Contains("'web_search_options' is not supported"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"service_tier":"auto")")), Catch::Contains("'service_tier'"));
    CHECK_THAT(refusal(route_id::completion, R"({"prompt":"x","suffix":"y"})"), Catch::Contains("'suffix'"));
    CHECK_THAT(refusal(route_id::messages, messages(R"(,"mcp_servers":[])")), Catch::Contains("'mcp_servers'"));
    CHECK_THAT(refusal(route_id::messages, messages(R"(,"thinking":{"type":"enabled"})")), Catch::Contains("'thinking.budget_tokens'"));
    // Anthropic has no penalties; OpenAI's chat no output_config.
    CHECK_THAT(refusal(route_id::messages, messages(R"(,"presence_penalty":1)")), Catch::Contains("'presence_penalty'"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"output_config":{})")), Catch::Contains("'output_config'"));
    // Fields with no effect by nature, and null values, pass.
    CHECK(refusal(route_id::chat, chat(R"(,"user":"u1","metadata":{"k":"v"},"tools":null)")).empty());
    CHECK(refusal(route_id::messages, messages(R"(,"metadata":{"user_id":"u"})")).empty());
    CHECK(refusal(route_id::count_tokens, R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5})") != "");
    for (route_kind r : {route_kind::chat, route_kind::completion, route_kind::messages, route_kind::count_tokens})
        CHECK(std::find(route_fields(r).begin(), route_fields(r).end(), "model") != route_fields(r).end());
}

TEST_CASE("sampling and penalty fields are checked against each API's ranges", "[api][controls]") {
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"temperature":2.5)")), Catch::Contains("'temperature' must be in [0, 2]"));
    CHECK_THAT(refusal(route_id::messages, messages(R"(,"temperature":1.5)")), Catch::Contains("'temperature' must be in [0, 1]"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"presence_penalty":2.5)")), Catch::Contains("'presence_penalty'"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"frequency_penalty":-3)")), Catch::Contains("'frequency_penalty'"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"repetition_penalty":0)")), Catch::Contains("'repetition_penalty' must be in (0, 10]"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"repetition_penalty":1.1,"repeat_penalty":1.2)")), Catch::Contains("give one of them"));
    CHECK_THAT(refusal(route_id::completion, R"({"prompt":"x","repeat_last_n":-2})"), Catch::Contains("'repeat_last_n'"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"top_p":0)")), Catch::Contains("'top_p' must be in (0, 1]"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"min_p":"0.1")")), Catch::Contains("'min_p' must be a number"));

    const api_request r = parse(route_id::chat, chat(R"(,"presence_penalty":1.5,"frequency_penalty":-0.5,"repeat_penalty":1.25,
        "repeat_last_n":-1,"top_k":3,"seed":7)"));
    sampling_defaults d;
    d.temperature = 0.6f;
    d.top_k = 20;
    d.repeat_last_n = 32;
    const sampling_params p = sampling_resolve(d, r);
    CHECK(p.temperature == 0.6f);  // not set: the default
    CHECK(p.top_k == 3);           // set: the request's
    CHECK(p.top_p == d.top_p);
    CHECK(p.presence_penalty == 1.5f);
    CHECK(p.frequency_penalty == -0.5f);
    CHECK(p.repeat_penalty == 1.25f);
    CHECK(p.repeat_last_n == -1);
    CHECK(p.seed == 7);
    CHECK(sampling_resolve(d, parse(route_id::chat, chat(R"(,"repetition_penalty":1.5)"))).repeat_penalty == 1.5f);
}

TEST_CASE("logit_bias takes token ids as string keys and biases in [-100, 100]", "[api][controls]") {
    const api_request r = parse(route_id::chat, chat(R"(,"logit_bias":{"50":-100,"7":100,"1000":0.5})"));
    CHECK(r.sampling.logit_bias == std::vector<std::pair<int32_t, float>>{{7, 100.0f}, {50, -100.0f}, {1000, 0.5f}});
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"logit_bias":{"7":101})")), Catch::Contains("[-100, 100]"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"logit_bias":{"hello":1})")), Catch::Contains("key 'hello' is not a token id"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"logit_bias":{"-3":1})")), Catch::Contains("not a token id"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"logit_bias":{"99999999999":1})")), Catch::Contains("not a token id"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"logit_bias":[1,2])")), Catch::Contains("must be an object"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"logit_bias":{"3":"x"})")), Catch::Contains("must be a number"));
}

TEST_CASE("response_format json_schema constrains to the schema, in the schema's property order", "[api][controls]") {
    const api_request r = parse(route_id::chat, chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p",
        "strict":true,"schema":{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}},
        "required":["zeta","alpha"],"additionalProperties":false}}})"));
    REQUIRE(r.constraint);
    CHECK(matches(*r.constraint, R"({"zeta": 1, "alpha": "a"})"));
    CHECK_FALSE(matches(*r.constraint, R"({"alpha": "a", "zeta": 1})"));
    CHECK_FALSE(matches(*r.constraint, R"({"zeta": "1", "alpha": "a"})"));

    const api_request o = parse(route_id::completion, R"({"prompt":"x","response_format":{"type":"json_object"}})");
    REQUIRE(o.constraint);
    CHECK(matches(*o.constraint, R"({"any": [1, true]})"));
    CHECK_FALSE(matches(*o.constraint, "[1]"));
    CHECK_FALSE(parse(route_id::chat, chat(R"(,"response_format":{"type":"text"})")).constraint);

    // The same schema text twice: one compiled grammar.
    const std::string again = chat(R"(,"response_format":{"type":"json_object"})");
    CHECK(parse(route_id::chat, again).constraint == parse(route_id::chat, again).constraint);
}

TEST_CASE("invalid response formats, schemas and grammars are 400s naming the problem", "[api][controls]") {
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":
        {"type":"object","properties":{"a":{"type":"strnig"}}}}})")),
               Catch::Contains("response_format.json_schema.schema") && Catch::Contains("#/properties/a"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"not":{}}}})")),
               Catch::Contains("#/not: 'not' is not supported"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"response_format":{"type":"yaml"})")), Catch::Contains("'response_format.type' must be"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{},"extra":1}})")),
               Catch::Contains("'response_format.json_schema.extra' is not supported"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"response_format":{"json_schema":{}})")), Catch::Contains("'response_format.type' is required"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"response_format":"json")")), Catch::Contains("must be an object"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"grammar":"root ::= \"a")")), Catch::Contains("grammar: line 1"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"grammar":"rot ::= \"a\"")")), Catch::Contains("grammar"));
    CHECK_THAT(refusal(route_id::chat, chat(R"(,"grammar":"root ::= \"a\"","response_format":{"type":"json_object"})")),
               Catch::Contains("give one of them"));
    const api_request g = parse(route_id::completion, R"({"prompt":"x","grammar":"root ::= [0-9]+"})");
    REQUIRE(g.constraint);
    CHECK(matches(*g.constraint, "2024"));
    CHECK_FALSE(matches(*g.constraint, "20x"));
}

TEST_CASE("Anthropic's output_config.format and output_format constrain messages", "[api][controls]") {
    const std::string schema = R"({"type":"json_schema","schema":{"type":"object","properties":{"ok":{"type":"boolean"}},
        "required":["ok"],"additionalProperties":false}})";
    for (const std::string &field : {R"(,"output_config":{"format":)" + schema + "}", R"(,"output_format":)" + schema}) {
        const api_request r = parse(route_id::messages, messages(field));
        REQUIRE(r.constraint);
        CHECK(matches(*r.constraint, R"({"ok": true})"));
        CHECK_FALSE(matches(*r.constraint, R"({"ok": 1})"));
        CHECK(parse(route_id::count_tokens, R"({"model":"m","messages":[{"role":"user","content":"x"}])" + field + "}").constraint);
    }
    CHECK_THAT(refusal(route_id::messages, messages(R"(,"output_config":{"effort":"high"})")),
               Catch::Contains("'output_config.effort' is not supported"));
    CHECK_THAT(refusal(route_id::messages, messages(R"(,"output_format":{"type":"json_object"})")),
               Catch::Contains("'output_format.type' must be 'json_schema'"));
    CHECK_THAT(refusal(route_id::messages, messages(R"(,"output_format":)" + schema + R"(,"output_config":{"format":)" + schema + "}")),
               Catch::Contains("give one of them"));
}

TEST_CASE("the Responses API's text.format shape is read the same way", "[api][controls]") {
    const nlohmann::ordered_json format = nlohmann::ordered_json::parse(R"({"type":"json_schema","name":"n","strict":true,
        "schema":{"type":"object","properties":{"b":{"type":"null"},"a":{"type":"null"}},"required":["b","a"],
        "additionalProperties":false}})");
    const auto g = grammar_from_response_format(format, "text.format");
    REQUIRE(g);
    CHECK(matches(*g, R"({"b": null, "a": null})"));
    CHECK_FALSE(matches(*g, R"({"a": null, "b": null})"));
    CHECK_THROWS_WITH(grammar_from_response_format(json::parse(R"({"type":"json_schema","schema":5})"), "text.format"),
                      Catch::Contains("'text.format.schema' must be a JSON Schema"));
}

TEST_CASE("sampling defaults: flags over the model file over llama-server's", "[api][controls]") {
    const std::string path = (std::filesystem::temp_directory_path() / "tandem-sampling-defaults.gguf").string();
    gguf_writer w;
    w.set_string("general.architecture", "test");
    w.set_f32("general.sampling.temp", 0.6f);
    w.set_i32("general.sampling.top_k", 20);
    w.set_f32("general.sampling.top_p", 0.95f);
    w.set_i32("general.sampling.penalty_last_n", 128);
    w.set_f32("general.sampling.penalty_repeat", 1.05f);
    w.write(path, 1);
    const auto file = gguf_file::open(path);

    sampling_flags flags;
    flags.top_k = 50;
    flags.presence_penalty = 0.5f;
    const sampling_defaults d = sampling_defaults_resolve(flags, file.get());
    CHECK(d.temperature == 0.6f);
    CHECK(d.top_k == 50);
    CHECK(d.repeat_last_n == 128);
    CHECK(d.repeat_penalty == 1.05f);
    CHECK(d.presence_penalty == 0.5f);
    CHECK(d.min_p == sampling_defaults{}.min_p);  // neither: built in
    CHECK(d.from.at("temperature") == "model");
    CHECK(d.from.at("top_k") == "flag");
    CHECK(d.from.count("min_p") == 0);
    const json j = sampling_defaults_json(d);
    CHECK(j["top_k"] == 50);
    CHECK(j["repeat_last_n"] == 128);

    const sampling_defaults none = sampling_defaults_resolve({}, nullptr);
    CHECK(none.temperature == 0.8f);
    CHECK(none.top_k == 40);
    CHECK(none.top_p == 0.95f);
    CHECK(none.min_p == 0.05f);
    CHECK(none.repeat_last_n == 64);

    gguf_writer bad;
    bad.set_string("general.architecture", "test");
    bad.set_f32("general.sampling.top_p", 1.5f);
    bad.write(path, 1);
    const auto bad_file = gguf_file::open(path);
    CHECK_THROWS_WITH(sampling_defaults_resolve({}, bad_file.get()),
                      Catch::Contains("general.sampling.top_p") && Catch::Contains("--top-p"));
    sampling_flags fix;
    fix.top_p = 0.9f;
    CHECK(sampling_defaults_resolve(fix, bad_file.get()).top_p == 0.9f);
    std::remove(path.c_str());
}
