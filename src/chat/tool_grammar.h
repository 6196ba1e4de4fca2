// src/chat/tool_grammar.h - the grammar of a forced tool call: output that is exactly one call (or
// several, when parallel calls are allowed) to the offered tools, in the syntax of the model's
// family, with each call's arguments matching that tool's JSON Schema.
#pragma once

#include "chat_output.h"

#include <span>
#include <string>

namespace tandem {

struct tool_grammar_options {
    tool_format format = tool_format::hermes;
    bool parallel = true;  // one call or more; false: exactly one
};

// GBNF (grammar::from_gbnf) for calls to any of `tools` (a named choice passes just that one).
// Arguments are JSON for the JSON families; for the tagged ones (Qwen3-Coder, GLM-4.5) each
// declared parameter is written in the schema's order, required ones always, string values as raw
// text without '<', other values as JSON matching the parameter's schema. Throws
// error(invalid_request) naming the tool whose schema json_schema_to_gbnf refuses.
std::string tool_call_gbnf(std::span<const tool_signature> tools, const tool_grammar_options &options);

// GBNF literal for exactly these bytes.
std::string gbnf_quote(std::string_view bytes);

}  // namespace tandem
