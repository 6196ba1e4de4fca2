// src/jinja/jinja_chat.cpp - an OpenAI chat request body to the variables transformers'
// apply_chat_template gives a chat template.
#include "jinja_eval.h"

namespace tandem {

namespace {

// Python's json.dumps(x, ensure_ascii=False): how an object argument becomes a string.
std::string dumps(const nlohmann::ordered_json &j) {
    static const jinja_limits limits;
    jinja::budget bud{limits};
    jinja::mstring out(&bud);
    jinja::to_json(jinja::from_json(j, false), jinja::json_style{}, out);
    return out.text;
}

void convert_tool_arguments(nlohmann::ordered_json &messages, jinja_tool_arguments mode) {
    if (mode == jinja_tool_arguments::given) return;
    for (size_t i = 0; i < messages.size(); ++i) {
        auto &m = messages[i];
        if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
        auto &calls = m["tool_calls"];
        for (size_t k = 0; k < calls.size(); ++k) {
            auto &call = calls[k];
            if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
            auto &fn = call["function"];
            if (!fn.contains("arguments")) continue;
            auto &args = fn["arguments"];
            if (mode == jinja_tool_arguments::object && args.is_string()) {
                auto parsed = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
                if (parsed.is_discarded())
                    fail(error_kind::invalid_request, "messages[{}].tool_calls[{}].function.arguments is not valid JSON", i, k);
                args = std::move(parsed);
            } else if (mode == jinja_tool_arguments::string && !args.is_string()) {
                args = dumps(args);
            }
        }
    }
}

}  // namespace

jinja_vars jinja_chat_vars(const nlohmann::ordered_json &request, const jinja_chat_options &options) {
    if (!request.is_object()) fail(error_kind::invalid_request, "the request body must be a JSON object");
    if (!request.contains("messages") || !request["messages"].is_array())
        fail(error_kind::invalid_request, "'messages' must be an array of messages");
    // The request's own messages unless tool arguments must change: no copy of a long conversation.
    const nlohmann::ordered_json *messages = &request["messages"];
    nlohmann::ordered_json converted;
    if (options.tool_arguments != jinja_tool_arguments::given) {
        converted = *messages;
        convert_tool_arguments(converted, options.tool_arguments);
        messages = &converted;
    }

    nlohmann::ordered_json tools = nullptr;
    if (request.contains("tools") && !request["tools"].is_null()) {
        if (!request["tools"].is_array()) fail(error_kind::invalid_request, "'tools' must be an array");
        tools = request["tools"];
    }
    bool add_generation_prompt = true;
    if (request.contains("add_generation_prompt")) {
        if (!request["add_generation_prompt"].is_boolean())
            fail(error_kind::invalid_request, "'add_generation_prompt' must be true or false");
        add_generation_prompt = request["add_generation_prompt"].get<bool>();
    }

    jinja_vars vars;
    vars.set("messages", *messages, true);
    vars.set("tools", tools, true);
    vars.set("documents", nullptr, false);
    vars.set("add_generation_prompt", add_generation_prompt, false);
    if (options.bos_token) vars.set("bos_token", *options.bos_token, false);
    if (options.eos_token) vars.set("eos_token", *options.eos_token, false);
    if (request.contains("chat_template_kwargs") && !request["chat_template_kwargs"].is_null()) {
        const auto &kwargs = request["chat_template_kwargs"];
        if (!kwargs.is_object()) fail(error_kind::invalid_request, "'chat_template_kwargs' must be an object");
        for (const auto &[k, v] : kwargs.items()) {
            if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
                fail(error_kind::invalid_request, "chat_template_kwargs.{} would replace the request's own '{}'", k, k);
            vars.set(k, v, true);
        }
    }
    return vars;
}

}  // namespace tandem
