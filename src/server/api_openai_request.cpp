// src/server/api_openai_request.cpp - OpenAI chat and completion request bodies to api_request:
// sampling fields with OpenAI's ranges, messages with tool calls and tool results, tools and the
// tool choice, and the template's keyword arguments.
#include "src/server/api_openai.h"
#include "src/server/api_controls.h"
#include "src/server/api_tools.h"

namespace tandem::server {

namespace {

// Fields common to chat and completions (sampling, penalties, logit_bias: api_controls.h).
void parse_sampling(const json &body, api_request &r) {
    parse_sampling_controls(body, api_kind::openai, r);
    r.stop = json_stop_list(body, "stop");
    if (auto n = json_integer(body, "n"); n && *n != 1) fail(error_kind::invalid_request, "only 'n': 1 is supported, got {}", *n);
    r.model = json_string(body, "model").value_or("");
    r.stream = json_bool(body, "stream").value_or(false);
    if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) fail(error_kind::invalid_request, "'stream_options' must be an object");
        r.include_usage = json_bool(*it, "include_usage").value_or(false);
    }
}

int32_t parse_max_tokens(const json &body, const char *key) {
    auto v = json_integer(body, key);
    if (!v) return -1;
    if (*v < 1) fail(error_kind::invalid_request, "'{}' must be >= 1, got {}", key, *v);
    if (*v > (1 << 30)) fail(error_kind::invalid_request, "'{}' is too large: {}", key, *v);
    return static_cast<int32_t>(*v);
}

// One assistant tool call, as templates read it: {id, type, function: {name, arguments}}.
json parse_tool_call(const json &call, const std::string &where, tool_call_ledger &ledger) {
    if (!call.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
    const auto type = json_string(call, "type");
    if (type && *type != "function") fail(error_kind::invalid_request, "{}.type must be 'function', got '{}'", where, *type);
    const auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) fail(error_kind::invalid_request, "{}.function must be an object", where);
    const auto name = json_string(*fn, "name");
    if (!name || name->empty()) fail(error_kind::invalid_request, "{}.function.name is required", where);
    const auto args = fn->find("arguments");
    json arguments = "{}";
    if (args != fn->end() && !args->is_null()) {
        if (!args->is_string() && !args->is_object())
            fail(error_kind::invalid_request, "{}.function.arguments must be a JSON string or an object", where);
        arguments = *args;
    }
    const std::string id = json_string(call, "id").value_or("");
    ledger.made(id, where);
    return {{"id", id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", arguments}}}};
}

json parse_message(const json &m, const std::string &where, tool_call_ledger &ledger) {
    if (!m.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
    auto role = json_string(m, "role");
    if (!role) fail(error_kind::invalid_request, "{} needs a 'role'", where);
    if (*role == "developer") role = "system";
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool")
        fail(error_kind::invalid_request, "{}: role '{}' is not supported (system, developer, user, assistant, tool)", where, *role);
    json out = {{"role", *role}};
    const auto content = m.find("content");
    const bool has_content = content != m.end() && !content->is_null();
    // Templates concatenate content: a missing one beside tool calls is the empty string.
    out["content"] = has_content ? json_text_content(*content, where + ".content") : std::string();
    if (auto name = json_string(m, "name")) out["name"] = *name;
    if (*role == "assistant") {
        if (auto r = json_string(m, "reasoning_content")) out["reasoning_content"] = *r;
        if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
            if (!calls->is_array()) fail(error_kind::invalid_request, "{}.tool_calls must be an array", where);
            json list = json::array();
            for (size_t k = 0; k < calls->size(); ++k)
                list.push_back(parse_tool_call((*calls)[k], fmt::format("{}.tool_calls[{}]", where, k), ledger));
            if (!list.empty()) out["tool_calls"] = list;
        }
        return out;
    }
    if (!has_content) fail(error_kind::invalid_request, "{} needs 'content'", where);
    if (*role == "tool") {
        const auto id = json_string(m, "tool_call_id");
        if (!id) fail(error_kind::invalid_request, "{}.tool_call_id is required on a tool message", where);
        ledger.answered(*id, where);
        out["tool_call_id"] = *id;
    }
    return out;
}

// tools and tool_choice; the template sees the tools as given unless the choice is none.
void parse_tools(const json &body, api_request &r) {
    if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) fail(error_kind::invalid_request, "'tools' must be an array");
        for (size_t i = 0; i < it->size(); ++i) {
            const json &t = (*it)[i];
            const std::string where = fmt::format("tools[{}]", i);
            if (!t.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
            const auto type = json_string(t, "type");
            if (type != "function")
                fail(error_kind::invalid_request, "{}.type must be 'function', got '{}'", where, type.value_or(""));
            const auto fn = t.find("function");
            if (fn == t.end() || !fn->is_object()) fail(error_kind::invalid_request, "{}.function must be an object", where);
            const auto params = fn->find("parameters");
            r.tools.defs.push_back(tool_parse_function(fn->value("name", json()), params == fn->end() ? nullptr : &*params,
                                                       where + ".function.name", where + ".function.parameters"));
        }
    }
    if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
        if (c->is_string()) {
            const std::string s = c->get<std::string>();
            if (s == "auto") r.tools.choice = tool_choice::automatic;
            else if (s == "none") r.tools.choice = tool_choice::none;
            else if (s == "required") r.tools.choice = tool_choice::required;
            else fail(error_kind::invalid_request, "'tool_choice' must be 'auto', 'none', 'required' or a function, got '{}'", s);
        } else if (c->is_object() && json_string(*c, "type") == "function" && c->contains("function") &&
                   (*c)["function"].is_object() && json_string((*c)["function"], "name")) {
            r.tools.choice = tool_choice::named;
            r.tools.named = *json_string((*c)["function"], "name");
        } else {
            fail(error_kind::invalid_request, "'tool_choice' must be a string or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
        }
    }
    r.tools.parallel = json_bool(body, "parallel_tool_calls").value_or(true);
    tool_check(r.tools, "tool_choice");
    if (r.tools.offered()) r.chat["tools"] = body.at("tools");
}

// chat_template_kwargs reach the template as variables; reasoning_effort is one of them.
void parse_template_kwargs(const json &body, api_request &r) {
    json kwargs = json::object();
    if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
        if (!kw->is_object()) fail(error_kind::invalid_request, "'chat_template_kwargs' must be an object");
        kwargs = *kw;
    }
    if (auto effort = json_string(body, "reasoning_effort"); effort && !kwargs.contains("reasoning_effort")) {
        if (*effort != "minimal" && *effort != "low" && *effort != "medium" && *effort != "high")
            fail(error_kind::invalid_request, "'reasoning_effort' must be minimal, low, medium or high, got '{}'", *effort);
        kwargs["reasoning_effort"] = *effort;
    }
    if (!kwargs.empty()) r.chat["chat_template_kwargs"] = kwargs;
}

}  // namespace

api_request openai_parse_chat(const json &body) {
    api_request r;
    r.route = route_kind::chat;
    parse_sampling(body, r);
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty())
        fail(error_kind::invalid_request, "'messages' must be a non-empty array");
    tool_call_ledger ledger;
    json messages = json::array();
    for (size_t i = 0; i < it->size(); ++i) messages.push_back(parse_message((*it)[i], fmt::format("messages[{}]", i), ledger));
    r.chat["messages"] = std::move(messages);
    parse_tools(body, r);
    parse_template_kwargs(body, r);
    int32_t a = parse_max_tokens(body, "max_completion_tokens");
    int32_t b = parse_max_tokens(body, "max_tokens");
    if (a > 0) r.max_tokens = a;
    else if (b > 0) r.max_tokens = b;
    r.logprobs = json_bool(body, "logprobs").value_or(false);
    if (auto n = json_integer(body, "top_logprobs")) {
        if (*n < 0 || *n > 20) fail(error_kind::invalid_request, "'top_logprobs' must be in 0..20, got {}", *n);
        if (!r.logprobs) fail(error_kind::invalid_request, "'top_logprobs' needs 'logprobs': true");
        r.top_logprobs = static_cast<int32_t>(*n);
    }
    r.sampling.n_logprobs = r.logprobs ? std::max<int32_t>(r.top_logprobs, 1) : 0;
    return r;
}

api_request openai_parse_completion(const json &body) {
    api_request r;
    r.route = route_kind::completion;
    parse_sampling(body, r);
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) fail(error_kind::invalid_request, "'prompt' is required");
    if (it->is_string()) r.prompt = it->get<std::string>();
    else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) r.prompt = (*it)[0].get<std::string>();
    else fail(error_kind::invalid_request, "'prompt' must be a string (or an array of one string)");
    int32_t m = parse_max_tokens(body, "max_tokens");
    r.max_tokens = m > 0 ? m : 16;  // the legacy API's default
    if (auto n = json_integer(body, "logprobs")) {
        if (*n < 0 || *n > 5) fail(error_kind::invalid_request, "'logprobs' must be in 0..5, got {}", *n);
        r.logprobs = *n > 0;
        r.top_logprobs = static_cast<int32_t>(*n);
    }
    if (json_bool(body, "echo").value_or(false)) fail(error_kind::invalid_request, "'echo' is not supported");
    r.sampling.n_logprobs = r.top_logprobs;
    return r;
}

}  // namespace tandem::server
