// src/server/api_tools.cpp - function tool validation, call ids, result checks, forced-call grammars.
#include "src/server/api_tools.h"

#include "src/chat/tool_grammar.h"

#include <algorithm>
#include <random>

namespace tandem::server {

namespace {

constexpr size_t max_tool_name_bytes = 128;

bool is_tool_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

}  // namespace

tool_signature tool_parse_function(const json &name, const json *parameters, const std::string &name_field,
                                   const std::string &parameters_field) {
    if (!name.is_string() || name.get_ref<const std::string &>().empty())
        fail(error_kind::invalid_request, "{} is required and must be a non-empty string", name_field);
    const std::string &n = name.get_ref<const std::string &>();
    if (n.size() > max_tool_name_bytes || !std::all_of(n.begin(), n.end(), is_tool_name_char))
        fail(error_kind::invalid_request, "{} '{}' must be 1 to {} letters, digits, '_', '-' or '.'", name_field, n,
             max_tool_name_bytes);
    tool_signature t;
    t.name = n;
    if (parameters != nullptr && !parameters->is_null()) {
        if (!parameters->is_object())
            fail(error_kind::invalid_request, "{} of tool '{}' must be a JSON Schema object", parameters_field, n);
        t.parameters = *parameters;
    } else {
        t.parameters = {{"type", "object"}, {"properties", json::object()}};
    }
    return t;
}

void tool_check(const api_tools &tools, const std::string &choice_field) {
    std::set<std::string> names;
    for (const auto &t : tools.defs)
        if (!names.insert(t.name).second) fail(error_kind::invalid_request, "tool '{}' is offered twice", t.name);
    if (tools.forced() && tools.defs.empty())
        fail(error_kind::invalid_request, "'{}' forces a tool call but no tools are offered", choice_field);
    if (tools.choice == tool_choice::named && !names.count(tools.named))
        fail(error_kind::invalid_request, "'{}' names '{}', which is not among the offered tools", choice_field, tools.named);
}

void tool_call_ledger::made(const std::string &id, const std::string &where) {
    if (id.empty()) fail(error_kind::invalid_request, "{} needs a non-empty id", where);
    ids_.insert(id);
}

void tool_call_ledger::answered(const std::string &id, const std::string &where) {
    if (!ids_.count(id))
        fail(error_kind::invalid_request, "{} answers tool call '{}', which no earlier assistant message made", where, id);
}

std::string tool_call_id(std::string_view prefix) {
    static constexpr char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::string id(prefix);
    for (int i = 0; i < 24; ++i) id += alphabet[rng() % (sizeof(alphabet) - 1)];
    return id;
}

json tool_template_entry(const std::string &name, const json &description, const json &parameters) {
    json fn = {{"name", name}};
    if (!description.is_null()) fn["description"] = description;
    fn["parameters"] = parameters;
    return {{"type", "function"}, {"function", fn}};
}

std::shared_ptr<const grammar> tool_forced_grammar(const api_tools &tools, tool_format format) {
    if (!tools.forced()) return nullptr;
    std::vector<tool_signature> allowed;
    for (const auto &t : tools.defs)
        if (tools.choice == tool_choice::required || t.name == tools.named) allowed.push_back(t);
    const std::string gbnf = tool_call_gbnf(allowed, {format, tools.parallel});
    return std::make_shared<const grammar>(grammar::from_gbnf(gbnf));
}

}  // namespace tandem::server
