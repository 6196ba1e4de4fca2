// src/server/api_responses_request.cpp - Responses request bodies to api_request: input (a string
// or items: messages, function_call, function_call_output, reasoning) into OpenAI chat messages,
// instructions, function tools, tool_choice, sampling and the fields echoed in the reply.
#include "src/server/api_responses.h"
#include "src/server/api_controls.h"
#include "src/server/api_tools.h"

#include <set>

namespace tandem::server {

namespace {

// Every field of the request body that Tandem reads; others are refused by name. user,
// safety_identifier, client_metadata (Codex's), service_tier and prompt_cache_key identify or route
// the caller (prompt prefixes are reused automatically), so they are accepted and change nothing.
const std::set<std::string> known_fields = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
    "temperature", "top_p", "text", "stream", "store", "previous_response_id", "reasoning", "metadata",
    "user", "safety_identifier", "client_metadata", "prompt_cache_key", "service_tier", "include", "truncation",
    "background", "stream_options"};

// The text of a message's content: a string or parts of type input_text / output_text / text.
std::string item_text(const json &content, const std::string &where) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) fail(error_kind::invalid_request, "{} must be a string or an array of parts", where);
    std::string out;
    for (size_t k = 0; k < content.size(); ++k) {
        const json &p = content[k];
        const std::string type = p.is_object() ? json_string(p, "type").value_or("") : "";
        if (type != "input_text" && type != "output_text" && type != "text" && type != "summary_text" && type != "reasoning_text")
            fail(error_kind::invalid_request, "{}[{}]: parts of type '{}' are not supported (text parts only)", where, k, type);
        out += json_string(p, "text").value_or("");
    }
    return out;
}

struct input_state {
    json messages = json::array();
    std::string reasoning;  // a reasoning item waiting for the assistant turn it belongs to
    tool_call_ledger ledger;
    json pending_answers = json::array();  // results for calls made before this request
    bool continues = false;                // previous_response_id: earlier calls are not here
};

json &assistant_turn(input_state &s) {
    if (s.messages.empty() || s.messages.back()["role"] != "assistant" || !s.reasoning.empty()) {
        s.messages.push_back({{"role", "assistant"}, {"content", ""}});
        if (!s.reasoning.empty()) s.messages.back()["reasoning_content"] = std::exchange(s.reasoning, {});
    }
    return s.messages.back();
}

void add_item(const json &item, const std::string &where, input_state &s) {
    if (!item.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
    std::string type = json_string(item, "type").value_or(item.contains("role") ? "message" : "");
    if (type == "message") {
        auto role = json_string(item, "role").value_or("");
        if (role == "developer") role = "system";
        if (role != "user" && role != "assistant" && role != "system")
            fail(error_kind::invalid_request, "{}.role must be user, assistant, system or developer, got '{}'", where, role);
        const auto content = item.find("content");
        if (content == item.end() || content->is_null()) fail(error_kind::invalid_request, "{}.content is required", where);
        json m = {{"role", role}, {"content", item_text(*content, where + ".content")}};
        if (role == "assistant" && !s.reasoning.empty()) m["reasoning_content"] = std::exchange(s.reasoning, {});
        s.messages.push_back(std::move(m));
    } else if (type == "function_call") {
        const auto call_id = json_string(item, "call_id").value_or("");
        const auto name = json_string(item, "name");
        if (!name || name->empty()) fail(error_kind::invalid_request, "{}.name is required", where);
        const auto args = json_string(item, "arguments").value_or("{}");
        s.ledger.made(call_id, where);
        json &turn = assistant_turn(s);
        if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
        turn["tool_calls"].push_back({{"id", call_id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", args}}}});
    } else if (type == "function_call_output") {
        const auto call_id = json_string(item, "call_id").value_or("");
        const auto output = item.find("output");
        if (output == item.end() || output->is_null()) fail(error_kind::invalid_request, "{}.output is required", where);
        try {
            s.ledger.answered(call_id, where);
        } catch (const error &) {
            if (!s.continues) throw;
            s.pending_answers.push_back({{"id", call_id}, {"where", where}});
        }
        s.messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", item_text(*output, where + ".output")}});
    } else if (type == "reasoning") {
        std::string text;
        if (auto c = item.find("content"); c != item.end() && c->is_array()) text = item_text(*c, where + ".content");
        if (text.empty())
            if (auto sm = item.find("summary"); sm != item.end() && sm->is_array()) text = item_text(*sm, where + ".summary");
        s.reasoning += text;
    } else {
        fail(error_kind::invalid_request, "{}: input items of type '{}' are not supported (message, function_call, "
             "function_call_output, reasoning)", where, type);
    }
}

void parse_tools(const json &body, api_request &r) {
    json entries = json::array();
    if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) fail(error_kind::invalid_request, "'tools' must be an array");
        for (size_t i = 0; i < it->size(); ++i) {
            const json &t = (*it)[i];
            const std::string where = fmt::format("tools[{}]", i);
            if (!t.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
            const auto type = json_string(t, "type").value_or("");
            if (type != "function")
                fail(error_kind::invalid_request, "{}: tools of type '{}' are not supported (function tools only)", where, type);
            const auto params = t.find("parameters");
            r.tools.defs.push_back(tool_parse_function(t.value("name", json()), params == t.end() ? nullptr : &*params,
                                                       where + ".name", where + ".parameters"));
            entries.push_back(tool_template_entry(r.tools.defs.back().name, t.value("description", json()),
                                                  r.tools.defs.back().parameters));
        }
    }
    if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
        if (c->is_string() && *c == "auto") r.tools.choice = tool_choice::automatic;
        else if (c->is_string() && *c == "none") r.tools.choice = tool_choice::none;
        else if (c->is_string() && *c == "required") r.tools.choice = tool_choice::required;
        else if (c->is_object() && json_string(*c, "type") == "function" && json_string(*c, "name")) {
            r.tools.choice = tool_choice::named;
            r.tools.named = *json_string(*c, "name");
        } else {
            fail(error_kind::invalid_request, "'tool_choice' must be 'auto', 'none', 'required' or {{\"type\": \"function\", \"name\": ...}}");
        }
    }
    r.tools.parallel = json_bool(body, "parallel_tool_calls").value_or(true);
    tool_check(r.tools, "tool_choice");
    if (r.tools.offered()) r.chat["tools"] = std::move(entries);
}

// text.format: plain text, or a JSON object or schema the output must match (read from the body's
// text when given, so the schema's property order is the output's).
void responses_text_format(const json &body, std::string_view raw_body, api_request &r) {
    auto text = body.find("text");
    if (text == body.end() || text->is_null()) return;
    if (!text->is_object()) fail(error_kind::invalid_request, "'text' must be an object");
    for (const auto &[key, value] : text->items()) {
        if (key == "format") {
            if (value.is_null()) continue;
            const nlohmann::ordered_json format =
                raw_body.empty() ? nlohmann::ordered_json(value) : nlohmann::ordered_json::parse(raw_body).at("text").at("format");
            r.constraint = grammar_from_response_format(format, "text.format");
            continue;
        }
        if (key == "verbosity" && (value.is_null() || value == "medium")) continue;
        fail(error_kind::invalid_request, "'text.{}' is not supported", key);
    }
}

void parse_options(const json &body, std::string_view raw_body, api_request &r, json &echo) {
    parse_sampling_controls(body, api_kind::openai, r);  // of them, only temperature and top_p pass the field check
    if (auto m = json_integer(body, "max_output_tokens")) {
        if (*m < 1 || *m > (1 << 30)) fail(error_kind::invalid_request, "'max_output_tokens' must be in 1..2^30, got {}", *m);
        r.max_tokens = static_cast<int32_t>(*m);
    }
    r.stream = json_bool(body, "stream").value_or(false);
    if (json_bool(body, "background").value_or(false)) fail(error_kind::invalid_request, "'background' responses are not supported");
    if (auto t = json_string(body, "truncation"); t && *t != "disabled")
        fail(error_kind::invalid_request, "'truncation' must be 'disabled', got '{}'", *t);
    if (auto inc = body.find("include"); inc != body.end() && !inc->is_null()) {
        if (!inc->is_array()) fail(error_kind::invalid_request, "'include' must be an array");
        for (const auto &v : *inc)  // reasoning is returned in the clear, never encrypted
            if (v != "reasoning.encrypted_content")
                fail(error_kind::invalid_request, "'include' value {} is not supported", v.dump());
    }
    if (auto reasoning = body.find("reasoning"); reasoning != body.end() && !reasoning->is_null()) {
        if (!reasoning->is_object()) fail(error_kind::invalid_request, "'reasoning' must be an object");
        if (auto effort = json_string(*reasoning, "effort")) {
            if (*effort != "minimal" && *effort != "low" && *effort != "medium" && *effort != "high")
                fail(error_kind::invalid_request, "'reasoning.effort' must be minimal, low, medium or high, got '{}'", *effort);
            r.chat["chat_template_kwargs"] = {{"reasoning_effort", *effort}};
        }
        echo["reasoning"] = {{"effort", reasoning->value("effort", json())}, {"summary", nullptr}};
    }
    responses_text_format(body, raw_body, r);
    for (const char *key : {"instructions", "max_output_tokens", "previous_response_id", "temperature", "top_p", "metadata"})
        if (body.contains(key)) echo[key] = body.at(key);
    echo["parallel_tool_calls"] = r.tools.parallel;
    echo["store"] = json_bool(body, "store").value_or(true);
    echo["tools"] = body.contains("tools") ? body.at("tools") : json::array();
    echo["tool_choice"] = body.contains("tool_choice") ? body.at("tool_choice") : json("auto");
}

}  // namespace

api_request responses_parse(const json &body, std::string_view raw_body) {
    for (const auto &[key, value] : body.items())
        if (!known_fields.count(key)) fail(error_kind::invalid_request, "'{}' is not supported by /v1/responses", key);
    api_request r;
    r.route = route_kind::responses;
    r.model = json_string(body, "model").value_or("");
    input_state s;
    s.continues = json_string(body, "previous_response_id").has_value();
    if (auto ins = json_string(body, "instructions"); ins && !ins->empty())
        s.messages.push_back({{"role", "system"}, {"content", *ins}});
    const size_t n_system = s.messages.size();
    auto input = body.find("input");
    if (input == body.end() || input->is_null()) fail(error_kind::invalid_request, "'input' is required");
    if (input->is_string()) {
        s.messages.push_back({{"role", "user"}, {"content", *input}});
    } else if (input->is_array()) {
        for (size_t i = 0; i < input->size(); ++i) add_item((*input)[i], fmt::format("input[{}]", i), s);
    } else {
        fail(error_kind::invalid_request, "'input' must be a string or an array of items");
    }
    if (s.messages.size() == n_system) fail(error_kind::invalid_request, "'input' holds no message");
    r.chat["messages"] = std::move(s.messages);
    parse_tools(body, r);
    json echo = json::object();
    parse_options(body, raw_body, r, echo);
    r.responses = {{"echo", echo}, {"n_system", n_system}, {"pending_answers", s.pending_answers}};
    return r;
}

void responses_resolve(api_request &r, const response_store &store) {
    const json &echo = r.responses["echo"];
    if (!echo.contains("previous_response_id") || echo["previous_response_id"].is_null()) return;
    const std::string id = echo["previous_response_id"].get<std::string>();
    const auto previous = store.get(id);
    if (!previous)
        fail(error_kind::invalid_request, "'previous_response_id': no stored response '{}' (responses are kept in memory "
             "while the server runs, when stored)", id);
    tool_call_ledger ledger;
    for (const auto &m : *previous)
        if (m.contains("tool_calls"))
            for (const auto &c : m["tool_calls"]) ledger.made(c.value("id", ""), "previous_response_id");
    for (const auto &a : r.responses["pending_answers"]) ledger.answered(a["id"].get<std::string>(), a["where"].get<std::string>());
    json &messages = r.chat["messages"];
    const size_t n_system = r.responses["n_system"].get<size_t>();
    json merged = json::array();
    for (size_t i = 0; i < n_system; ++i) merged.push_back(messages[i]);
    for (const auto &m : *previous) merged.push_back(m);
    for (size_t i = n_system; i < messages.size(); ++i) merged.push_back(messages[i]);
    messages = std::move(merged);
    r.responses["n_system"] = n_system;
}

}  // namespace tandem::server
