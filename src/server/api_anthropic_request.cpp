// src/server/api_anthropic_request.cpp - Anthropic Messages request bodies to api_request: system,
// content blocks (text, tool_use, tool_result, thinking) into OpenAI-shaped messages for the chat
// template, tools with input_schema, tool_choice, thinking, and the sampling fields.
#include "src/server/api_anthropic.h"
#include "src/server/api_controls.h"
#include "src/server/api_tools.h"

namespace tandem::server {

namespace {

// tool_result content: a string, or text blocks (joined); other block types are refused.
std::string tool_result_text(const json &block, const std::string &where) {
    const auto content = block.find("content");
    std::string text;
    if (content != block.end() && !content->is_null()) text = json_text_content(*content, where + ".content");
    // The model reads a failed tool's output as such only if it is told.
    if (json_bool(block, "is_error").value_or(false)) text = "Error: " + text;
    return text;
}

// One message's blocks into OpenAI messages: a user message's tool_result blocks become tool
// messages (before its text, as Anthropic orders them); an assistant's tool_use blocks its
// tool_calls and its thinking its reasoning_content.
void add_message(const json &m, const std::string &where, tool_call_ledger &ledger, json &out) {
    if (!m.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
    const auto role = json_string(m, "role");
    if (role != "user" && role != "assistant")
        fail(error_kind::invalid_request, "{}.role must be 'user' or 'assistant', got '{}'", where, role.value_or(""));
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) fail(error_kind::invalid_request, "{}.content is required", where);
    json message = {{"role", *role}, {"content", ""}};
    if (content->is_string()) {
        message["content"] = *content;
        out.push_back(std::move(message));
        return;
    }
    if (!content->is_array()) fail(error_kind::invalid_request, "{}.content must be a string or an array of blocks", where);
    std::string text, reasoning;
    json calls = json::array();
    for (size_t k = 0; k < content->size(); ++k) {
        const json &b = (*content)[k];
        const std::string at = fmt::format("{}.content.{}", where, k);
        if (!b.is_object()) fail(error_kind::invalid_request, "{} must be an object", at);
        const std::string type = json_string(b, "type").value_or("");
        if (type == "text") {
            text += json_string(b, "text").value_or("");
        } else if (type == "tool_use" && role == "assistant") {
            const auto id = json_string(b, "id").value_or("");
            const auto name = json_string(b, "name");
            if (!name || name->empty()) fail(error_kind::invalid_request, "{}.name is required", at);
            const auto input = b.find("input");
            if (input != b.end() && !input->is_object()) fail(error_kind::invalid_request, "{}.input must be an object", at);
            ledger.made(id, at);
            calls.push_back({{"id", id}, {"type", "function"},
                             {"function", {{"name", *name}, {"arguments", input == b.end() ? json::object() : *input}}}});
        } else if (type == "tool_result" && role == "user") {
            const auto id = json_string(b, "tool_use_id").value_or("");
            ledger.answered(id, at);
            out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", tool_result_text(b, at)}});
        } else if (type == "thinking" && role == "assistant") {
            reasoning += json_string(b, "thinking").value_or("");
        } else if (type == "redacted_thinking" && role == "assistant") {
            // Another server's sealed reasoning: nothing here can read it.
        } else {
            fail(error_kind::invalid_request, "{}: content blocks of type '{}' are not supported in {} messages", at, type, *role);
        }
    }
    if (text.empty() && calls.empty() && reasoning.empty() && role == "user") return;  // only tool results
    message["content"] = text;
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    if (!calls.empty()) message["tool_calls"] = calls;
    out.push_back(std::move(message));
}

void parse_tools(const json &body, api_request &r) {
    json entries = json::array();
    if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) fail(error_kind::invalid_request, "'tools' must be an array");
        for (size_t i = 0; i < it->size(); ++i) {
            const json &t = (*it)[i];
            const std::string where = fmt::format("tools.{}", i);
            if (!t.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
            if (auto type = json_string(t, "type"); type && *type != "custom")
                fail(error_kind::invalid_request, "{}: tools of type '{}' are not supported (custom tools with input_schema only)", where, *type);
            const auto schema = t.find("input_schema");
            if (schema == t.end() || schema->is_null()) fail(error_kind::invalid_request, "{}.input_schema is required", where);
            r.tools.defs.push_back(tool_parse_function(t.value("name", json()), &*schema, where + ".name", where + ".input_schema"));
            entries.push_back(tool_template_entry(r.tools.defs.back().name, t.value("description", json()), *schema));
        }
    }
    if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
        if (!c->is_object()) fail(error_kind::invalid_request, "'tool_choice' must be an object");
        const std::string type = json_string(*c, "type").value_or("");
        if (type == "auto") r.tools.choice = tool_choice::automatic;
        else if (type == "any") r.tools.choice = tool_choice::required;
        else if (type == "none") r.tools.choice = tool_choice::none;
        else if (type == "tool") {
            r.tools.choice = tool_choice::named;
            r.tools.named = json_string(*c, "name").value_or("");
        } else {
            fail(error_kind::invalid_request, "'tool_choice.type' must be auto, any, tool or none, got '{}'", type);
        }
        r.tools.parallel = !json_bool(*c, "disable_parallel_tool_use").value_or(false);
    }
    tool_check(r.tools, "tool_choice");
    if (r.tools.offered()) r.chat["tools"] = std::move(entries);
}

// thinking: enabled (the template's default, reasoning returned), disabled (enable_thinking false
// for the template, no thinking blocks).
void parse_thinking(const json &body, api_request &r) {
    auto it = body.find("thinking");
    if (it == body.end() || it->is_null()) return;
    if (!it->is_object()) fail(error_kind::invalid_request, "'thinking' must be an object");
    const std::string type = json_string(*it, "type").value_or("");
    if (type == "disabled") {
        r.thinking_blocks = false;
        r.chat["chat_template_kwargs"] = {{"enable_thinking", false}};
    } else if (type == "enabled") {
        const auto budget = json_integer(*it, "budget_tokens");
        if (!budget || *budget < 1024) fail(error_kind::invalid_request, "'thinking.budget_tokens' must be an integer >= 1024");
        if (r.max_tokens && *budget >= *r.max_tokens)
            fail(error_kind::invalid_request, "'thinking.budget_tokens' must be less than max_tokens ({})", *r.max_tokens);
        r.chat["chat_template_kwargs"] = {{"enable_thinking", true}};
    } else {
        fail(error_kind::invalid_request, "'thinking.type' must be 'enabled' or 'disabled', got '{}'", type);
    }
}

void parse_sampling(const json &body, api_request &r) {
    parse_sampling_controls(body, api_kind::anthropic, r);
    r.stop = json_stop_list(body, "stop_sequences");
    r.stream = json_bool(body, "stream").value_or(false);
}

}  // namespace

api_request anthropic_parse_messages(const json &body, bool count_tokens) {
    api_request r;
    r.route = count_tokens ? route_kind::count_tokens : route_kind::messages;
    auto model = json_string(body, "model");
    if (!model) fail(error_kind::invalid_request, "'model' is required");
    r.model = *model;
    if (!count_tokens) {
        auto m = json_integer(body, "max_tokens");
        if (!m) fail(error_kind::invalid_request, "'max_tokens' is required");
        if (*m < 1) fail(error_kind::invalid_request, "'max_tokens' must be >= 1, got {}", *m);
        if (*m > (1 << 30)) fail(error_kind::invalid_request, "'max_tokens' is too large: {}", *m);
        r.max_tokens = static_cast<int32_t>(*m);
    }
    json messages = json::array();
    if (auto sys = body.find("system"); sys != body.end() && !sys->is_null()) {
        std::string text = json_text_content(*sys, "system");
        if (!text.empty()) messages.push_back({{"role", "system"}, {"content", text}});
    }
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty())
        fail(error_kind::invalid_request, "'messages' must be a non-empty array");
    tool_call_ledger ledger;
    for (size_t i = 0; i < it->size(); ++i) add_message((*it)[i], fmt::format("messages.{}", i), ledger, messages);
    r.chat["messages"] = std::move(messages);
    parse_tools(body, r);
    parse_thinking(body, r);
    parse_sampling(body, r);
    return r;
}

}  // namespace tandem::server
