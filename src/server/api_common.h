// src/server/api_common.h - what the OpenAI and Anthropic front ends share: the parsed request,
// strict JSON field readers (wrong types are 400s naming the field), error bodies, and the job
// interface through which a connection turns scheduler events into response bytes.
#pragma once

#include "src/chat/chat_output.h"
#include "src/scheduler/scheduler.h"
#include "src/server/server_config.h"
#include "tandem/chat_template.h"
#include "tandem/error.h"
#include "tandem/grammar.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tandem::server {

// Ordered: a request's objects keep the client's key order, which the chat template's tojson of
// tool schemas and the tool-call grammar's property order both follow.
using json = nlohmann::ordered_json;

enum class api_kind { openai, anthropic };

enum class route_kind { chat, completion, messages, count_tokens, responses };

// Whether the model may call the offered tools, must call one of them, or must call one by name.
enum class tool_choice { automatic, none, required, named };

struct api_tools {
    std::vector<tool_signature> defs;  // the offered tools, in the request's order
    tool_choice choice = tool_choice::automatic;
    std::string named;                 // tool_choice named: the function
    bool parallel = true;              // more than one call in one reply
    bool offered() const { return !defs.empty() && choice != tool_choice::none; }
    bool forced() const { return choice == tool_choice::required || choice == tool_choice::named; }
};

// The sampling fields a request set (the others take the server's sampling_defaults).
struct sampling_overrides {
    std::optional<float> temperature, top_p, min_p, presence_penalty, frequency_penalty, repeat_penalty;
    std::optional<int32_t> top_k, repeat_last_n;
};

// A generation request after JSON mapping, before tokenization.
struct api_request {
    route_kind route = route_kind::chat;
    std::string model;
    // chat, messages, responses, count_tokens: the request as the chat template reads it, in
    // OpenAI's chat shape whatever the API (messages with tool_calls and tool results, tools,
    // chat_template_kwargs).
    json chat = json::object();
    std::string prompt;                  // completion
    std::optional<int32_t> max_tokens;
    sampling_params sampling;            // seed, logprobs and logit_bias; the rest from `overrides`
    sampling_overrides overrides;        // and the server's defaults (sampling_resolve)
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;          // OpenAI stream_options.include_usage
    bool logprobs = false;
    int32_t top_logprobs = 0;
    api_tools tools;
    bool thinking_blocks = true;         // Anthropic: reasoning is returned (thinking not disabled)
    // The grammar the output must match (response_format, grammar); null: none. A forced tool
    // choice gets its grammar from the service, which knows the model's call syntax.
    std::shared_ptr<const grammar> constraint;
    json responses;                      // responses: what the reply echoes (instructions, tools, ...)
};

// Serializes JSON; invalid UTF-8 (a token's partial bytes) becomes U+FFFD instead of throwing.
std::string json_dump(const json &j);

// Strict readers: absent or null gives nullopt; a present value of the wrong type throws a 400
// naming the field and the expected type.
std::optional<std::string> json_string(const json &obj, const char *key);
std::optional<bool> json_bool(const json &obj, const char *key);
std::optional<double> json_number(const json &obj, const char *key);
std::optional<int64_t> json_integer(const json &obj, const char *key);
// Parses a request body with nlohmann's SAX parser under `limits`; malformed JSON, a body past
// a limit (the message names it) or a non-object is a 400.
json json_parse_body(const std::string &body, const json_limits &limits = {});
// A message's content: a string, or an array of {"type":"text","text":...} parts joined.
std::string json_text_content(const json &content, const std::string &where);
// "stop" / "stop_sequences": a string or an array of strings (at most 16).
std::vector<std::string> json_stop_list(const json &obj, const char *key);

// Error bodies in each API's own shape.
json openai_error_body(int status, const std::string &message, const std::string &code = "");
json anthropic_error_body(int status, const std::string &message);
json api_error_body(api_kind api, int status, const std::string &message);

// A token as the response shows it: its text (raw bytes) and logprobs.
struct token_view {
    std::string text;
    float logprob = 0.0f;
    std::vector<std::pair<std::string, float>> top;
};

// Per-response context the formatters need.
struct response_context {
    std::string id;          // "chatcmpl-...", "cmpl-...", "msg_...", "resp_..."
    std::string model;       // as the client named it (or the alias)
    int64_t created = 0;     // unix seconds
    std::function<std::string(int32_t)> token_text;  // raw bytes of a token id
    chat_parse_options parse;  // how the model's output is read (chat routes)
    int32_t n_prompt = 0;      // prompt tokens (reported before the scheduler counts them)
};

// The per-request formatter a connection drives on its strand. Streaming: stream_begin() once,
// then on_event() for every event; the bytes returned are SSE text to send. Non-streaming:
// on_event() accumulates and returns "", then final_body() after the done event.
class generation_job {
public:
    virtual ~generation_job() = default;
    virtual bool streaming() const = 0;
    virtual std::string stream_begin() = 0;
    virtual std::string on_event(const gen_event &ev) = 0;
    virtual json final_body() = 0;
    // Status of the non-streaming reply (errors after submission: cancelled, engine failure).
    virtual int final_status() const = 0;

    gen_request request;  // tokenized, ready for the scheduler (the sink is set by the connection)
};

// llama.cpp's timings object.
json timings_json(const gen_timings &t);

// HTTP status of a finished non-streaming reply: 503 when cancelled (shutdown), 500 on an engine
// failure, else 200.
int finish_http_status(const gen_event &done);

}  // namespace tandem::server
