// src/server/api_output.cpp - the parsed reply shared by the OpenAI, Anthropic and Responses formats.
#include "src/server/api_output.h"

#include "src/server/api_tools.h"

namespace tandem::server {

chat_reply::chat_reply(chat_parse_options options, std::string id_prefix, bool keep_model_ids)
    : parser_(std::move(options)), id_prefix_(std::move(id_prefix)), keep_model_ids_(keep_model_ids) {}

std::vector<chat_event> chat_reply::push(std::string_view text) {
    std::vector<chat_event> events;
    parser_.feed(text, events);
    account(events);
    return events;
}

std::vector<chat_event> chat_reply::finish() {
    std::vector<chat_event> events;
    parser_.finish(events);
    account(events);
    return events;
}

void chat_reply::account(std::vector<chat_event> &events) {
    for (chat_event &e : events) {
        switch (e.type) {
        case chat_event::kind::reasoning: reasoning_ += e.text; break;
        case chat_event::kind::content: content_ += e.text; break;
        case chat_event::kind::tool_begin:
            if (!keep_model_ids_ || e.id.empty()) e.id = tool_call_id(id_prefix_);
            calls_.push_back({e.id, e.text, {}});
            break;
        case chat_event::kind::tool_args: calls_.at(static_cast<size_t>(e.index)).arguments += e.text; break;
        case chat_event::kind::tool_end: break;
        }
    }
}

json tool_arguments_object(const std::string &arguments) {
    json j = json::parse(arguments, nullptr, false);
    return j.is_object() ? j : json::object();
}

}  // namespace tandem::server
