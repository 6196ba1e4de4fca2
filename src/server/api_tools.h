// src/server/api_tools.h - tools as every API offers them: validated function definitions, the
// tool choice, tool-call ids, the check that each tool result answers a call made earlier in the
// conversation, and the grammar that forces a call.
#pragma once

#include "src/server/api_common.h"

#include <memory>
#include <set>
#include <string>
#include <string_view>

namespace tandem::server {

// A function tool: `name` a string of letters, digits, '_', '-' and '.' (1..128 bytes, so it can
// stand inside any family's call markers), `parameters` a JSON Schema object (null: any object).
// The fields are named in errors as the API spells them ("tools[2].function.name").
tool_signature tool_parse_function(const json &name, const json *parameters, const std::string &name_field,
                                   const std::string &parameters_field);
// Duplicate names, and a named choice that names no offered tool (or a forced choice with no
// tools) are 400s naming `choice_field`.
void tool_check(const api_tools &tools, const std::string &choice_field);

// The ids of the calls a conversation has made, so each tool result can be checked against them.
class tool_call_ledger {
public:
    void made(const std::string &id, const std::string &where);      // an empty id is a 400
    void answered(const std::string &id, const std::string &where);  // an id never made is a 400

private:
    std::set<std::string> ids_;
};

// A fresh call id: `prefix` and 24 random letters and digits ("call_...", "toolu_...").
std::string tool_call_id(std::string_view prefix);

// A tool as chat templates read it: {"type": "function", "function": {name, description, parameters}}.
json tool_template_entry(const std::string &name, const json &description, const json &parameters);

// The grammar of a forced choice (required or named) in the model's call syntax; null otherwise.
std::shared_ptr<const grammar> tool_forced_grammar(const api_tools &tools, tool_format format);

}  // namespace tandem::server
