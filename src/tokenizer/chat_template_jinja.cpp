// src/tokenizer/chat_template_jinja.cpp - the model's own chat template: parsed once, probed for
// the form of tool-call arguments it needs, rendered per request with the bytes that came from the
// request marked as content; and the built-ins' reading of the same request body.
#include "tandem/chat_template.h"

#include "tandem/error.h"

namespace tandem {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view probe_key = "tandem_probe_key";
constexpr std::string_view probe_value = "tandem_probe_value";

// A tool-call round trip whose call carries `arguments`.
ojson probe_request(const ojson &arguments) {
    const ojson call = {{"id", "call_probe"}, {"type", "function"},
                        {"function", {{"name", "tandem_probe"}, {"arguments", arguments}}}};
    const ojson params = {{"type", "object"}, {"properties", {{probe_key, {{"type", "string"}}}}}};
    return {{"messages", ojson::array({{{"role", "user"}, {"content", "probe"}},
                                       {{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array({call})}},
                                       {{"role", "tool"}, {"tool_call_id", "call_probe"}, {"content", "done"}}})},
            {"tools", ojson::array({{{"type", "function"},
                                     {"function", {{"name", "tandem_probe"}, {"description", "probe"}, {"parameters", params}}}}})}};
}

std::optional<std::string> probe_render(const jinja_template &t, const jinja_chat_options &options, const ojson &arguments) {
    try {
        return t.render(jinja_chat_vars(probe_request(arguments), options)).text;
    } catch (const error &) {
        return std::nullopt;
    }
}

// Which form of arguments shows up in the prompt as written: an object must appear as its key and
// value (not as an escaped string), a string verbatim.
jinja_tool_arguments probe_tool_arguments(const jinja_template &t, jinja_chat_options options) {
    options.tool_arguments = jinja_tool_arguments::given;
    const std::string as_string = "{\"" + std::string(probe_key) + "\": \"" + std::string(probe_value) + "\"}";
    const auto with_object = probe_render(t, options, ojson{{probe_key, probe_value}});
    const auto with_string = probe_render(t, options, as_string);
    const bool object_ok = with_object && with_object->find(probe_value) != std::string::npos &&
                           with_object->find("\\\"" + std::string(probe_key)) == std::string::npos;
    const bool string_ok = with_string && with_string->find(as_string) != std::string::npos;
    if (object_ok && !string_ok) return jinja_tool_arguments::object;
    if (string_ok && !object_ok) return jinja_tool_arguments::string;
    return jinja_tool_arguments::given;
}

rendered_prompt pieces_of(const jinja_output &out) {
    rendered_prompt r;
    size_t at = 0;
    for (const jinja_range &m : out.marked) {
        r.add_template(std::string_view(out.text).substr(at, m.begin - at));
        r.add_content(std::string_view(out.text).substr(m.begin, m.end - m.begin));
        at = m.end;
    }
    r.add_template(std::string_view(out.text).substr(at));
    return r;
}

// The built-ins' messages: system, user and assistant text.
std::vector<chat_message> builtin_messages(const chat_template &t, const ojson &request) {
    if (request.contains("tools") && !request["tools"].is_null() && !request["tools"].empty())
        fail(error_kind::invalid_request, "the built-in {} chat template cannot offer tools; serve a model whose file has "
              "a chat template, or pass --chat-template-file", chat_template_family_name(t.family));
    std::vector<chat_message> out;
    const ojson &messages = request.at("messages");
    for (size_t i = 0; i < messages.size(); ++i) {
        const ojson &m = messages[i];
        const std::string role = m.value("role", "");
        if (m.contains("tool_calls") || role == "tool")
            fail(error_kind::invalid_request, "messages[{}]: the built-in {} chat template cannot render tool calls or "
                  "results; pass --chat-template-file", i, chat_template_family_name(t.family));
        const ojson &content = m.contains("content") ? m["content"] : ojson();
        out.push_back({role, content.is_string() ? content.get<std::string>() : std::string()});
    }
    return out;
}

}  // namespace

chat_template chat_template::from_jinja(std::string source, std::string origin, std::optional<std::string> bos_token,
                                        std::optional<std::string> eos_token) {
    chat_template t;
    t.family = chat_template_family::jinja;
    t.source = std::move(source);
    t.origin = std::move(origin);
    t.jinja_options.bos_token = std::move(bos_token);
    t.jinja_options.eos_token = std::move(eos_token);
    try {
        t.jinja = jinja_template::parse(t.source);
    } catch (const jinja_error &e) {
        t.parse_error = e.what();
        return t;
    }
    t.jinja_options.tool_arguments = probe_tool_arguments(*t.jinja, t.jinja_options);
    return t;
}

chat_template chat_template::builtin(std::string_view name) {
    chat_template t;
    if (name == "chatml") t.family = chat_template_family::chatml;
    else if (name == "qwen3") t.family = chat_template_family::qwen3;
    else if (name == "plain") t.family = chat_template_family::fallback;
    else fail(error_kind::config, "--chat-template '{}': the built-in templates are chatml, qwen3 and plain", name);
    t.origin = "built-in " + std::string(name);
    return t;
}

rendered_prompt chat_template::render_request(const nlohmann::ordered_json &request) const {
    if (family != chat_template_family::jinja) {
        bool add_generation_prompt = request.value("add_generation_prompt", true);
        bool enable_thinking = true;
        if (request.contains("chat_template_kwargs") && request["chat_template_kwargs"].is_object()) {
            const ojson &kw = request["chat_template_kwargs"];
            if (kw.contains("enable_thinking") && kw["enable_thinking"].is_boolean()) enable_thinking = kw["enable_thinking"].get<bool>();
        }
        return render_prompt(builtin_messages(*this, request), add_generation_prompt, enable_thinking);
    }
    if (!jinja)
        fail(error_kind::invalid_request, "the chat template ({}) does not parse: {}; pass --chat-template-file or "
              "--chat-template", origin, parse_error);
    try {
        return pieces_of(jinja->render(jinja_chat_vars(request, jinja_options)));
    } catch (const jinja_error &e) {
        if (e.jinja_kind() == jinja_error_kind::raised) fail(error_kind::invalid_request, "the chat template refused the request: {}", e.message());
        fail(error_kind::invalid_request, "the chat template ({}) failed on this request: {}", origin, e.what());
    }
}

}  // namespace tandem
