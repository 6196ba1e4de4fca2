// src/server/api_controls.h - the generation controls of the three APIs: which fields each route
// accepts, the sampling fields and penalties, logit_bias, response formats and grammars (compiled
// once per text and shared), the server's sampling defaults (flags, then the model file), and the
// tokenizer's vocabulary as grammars see it.
#pragma once

#include "src/server/api_common.h"
#include "src/server/server_config.h"
#include "tandem/grammar.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tandem {
class gguf_file;
class tokenizer;
}  // namespace tandem

namespace tandem::server {

// The fields a route reads, and those accepted because they have no effect by nature (OpenAI's
// `user` and `metadata`, Anthropic's `metadata`). A field outside the list with a value other than
// null is refused with a 400 naming it: Tandem never ignores what a client asked for.
std::span<const std::string_view> route_fields(route_kind route);
void check_request_fields(route_kind route, const json &body);

// temperature, top_p, top_k, min_p, seed and, for OpenAI, presence_penalty, frequency_penalty,
// repetition_penalty (or llama.cpp's repeat_penalty), repeat_last_n and logit_bias, with each API's
// ranges: set fields into r.overrides and r.sampling (seed: a random one when absent). A value out
// of range or of the wrong type is a 400 naming the field.
void parse_sampling_controls(const json &body, api_kind api, api_request &r);

// The grammar the output must match: OpenAI's `response_format` and llama-server's `grammar` (chat
// and completions), Anthropic's `output_config.format` or `output_format` (messages and
// count_tokens, which accepts and checks them). raw_body is the body's text: schemas are read from
// it in their own property order, which the output keeps. Invalid schemas and grammars are 400s
// naming the problem.
void parse_output_controls(const json &body, std::string_view raw_body, api_request &r);

// A response format as OpenAI's chat ({"type": "json_schema", "json_schema": {"name", "schema",
// "strict", "description"}}), its Responses API's text.format (name, schema, strict at the top) and
// Anthropic ({"type": "json_schema", "schema"}) write it, or {"type": "json_object"} / {"type":
// "text"} (null: no constraint). `where` names the field in errors ("response_format"). `strict`
// false is enforced all the same. Pass an ordered_json to keep the schema's property order.
std::shared_ptr<const grammar> grammar_from_response_format(const nlohmann::ordered_json &format, std::string_view where);
// A llama.cpp GBNF grammar, compiled once per text.
std::shared_ptr<const grammar> grammar_from_gbnf(std::string_view text);

// The request's sampling: its own fields, the defaults for the others.
sampling_params sampling_resolve(const sampling_defaults &defaults, const api_request &r);

// Flags (set when given) over the model file's general.sampling.* keys over the built-in
// defaults; a file value out of range is a config error naming the key and the flag that
// overrides it. Keys Tandem has no sampler for (mirostat, xtc, sequence) are logged once.
struct sampling_flags {
    std::optional<float> temperature, top_p, min_p, presence_penalty, frequency_penalty, repeat_penalty;
    std::optional<int32_t> top_k, repeat_last_n;
};
sampling_defaults sampling_defaults_resolve(const sampling_flags &flags, const gguf_file *file);
// /props' default_generation_settings.params (llama-server's names).
json sampling_defaults_json(const sampling_defaults &d);
std::string sampling_defaults_line(const sampling_defaults &d);

// The tokenizer's tokens as raw bytes, control and unused tokens never allowed inside a constraint
// (user-defined ones such as <tool_call> are text), its end-of-generation ids allowed exactly when
// the output is complete.
grammar_vocab grammar_vocab_of(const tokenizer &tok);

}  // namespace tandem::server
