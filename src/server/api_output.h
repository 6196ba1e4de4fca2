// src/server/api_output.h - one reply's model output as the APIs report it: the chat parser run
// over the text as it arrives, call ids given, and the totals a non-streaming body needs.
#pragma once

#include "src/server/api_common.h"

#include <string>
#include <string_view>
#include <vector>

namespace tandem::server {

struct tool_call_out {
    std::string id;
    std::string name;
    std::string arguments;  // JSON text
};

class chat_reply {
public:
    // id_prefix: what fresh call ids start with; keep_model_ids: use an id the model wrote (Kimi
    // K2's functions.NAME:N, which its template reads back) instead of a fresh one.
    chat_reply(chat_parse_options options, std::string id_prefix, bool keep_model_ids);

    // The events the next text settles; every tool_begin carries its call's id.
    std::vector<chat_event> push(std::string_view text);
    // The output is complete: what was held back.
    std::vector<chat_event> finish();

    const std::string &content() const { return content_; }
    const std::string &reasoning() const { return reasoning_; }
    const std::vector<tool_call_out> &calls() const { return calls_; }

private:
    void account(std::vector<chat_event> &events);

    chat_parser parser_;
    std::string id_prefix_;
    bool keep_model_ids_;
    std::string content_, reasoning_;
    std::vector<tool_call_out> calls_;
};

// A tool call's arguments as an object, for APIs that report them parsed (Anthropic's input):
// arguments that are not a JSON object (a call cut off by max_tokens) give {}.
json tool_arguments_object(const std::string &arguments);

}  // namespace tandem::server
