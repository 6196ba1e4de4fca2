// src/chat/chat_output.h - the model's output as an API sees it: reasoning, text and tool calls,
// separated by the syntax of the model's family (chosen from its chat template), incrementally,
// so a stream and a whole-text parse give the same result.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// How a family writes tool calls.
enum class tool_format : uint8_t {
    hermes,        // Qwen2.5/Qwen3, Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    qwen3_coder,   // <tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>
    deepseek_v31,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>...
    glm45,         // <tool_call>NAME<arg_key>KEY</arg_key><arg_value>value</arg_value></tool_call>
    kimi_k2,       // <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{json}...
    harmony,       // gpt-oss: <|channel|>analysis|commentary|final ... to=functions.NAME ... <|message|>...
};

struct chat_syntax {
    tool_format tools = tool_format::hermes;
    bool think_tags = false;  // the family writes reasoning as <think>...</think>
};

// The syntax a chat template's family uses, from the markers its source writes. Templates that
// show no tool syntax get hermes, the most common one.
chat_syntax chat_syntax_detect(std::string_view template_source);
const char *tool_format_name(tool_format format);

// One piece of parsed output. Tool calls are numbered from 0 in the order they start; each has
// one tool_begin, any number of tool_args fragments (the arguments' JSON text, in order) and one
// tool_end.
struct chat_event {
    enum class kind : uint8_t { reasoning, content, tool_begin, tool_args, tool_end };
    kind type = kind::content;
    int32_t index = -1;  // tool events: the call's number
    std::string text;    // reasoning or content text; tool_begin: the function name; tool_args: a fragment
    std::string id;      // tool_begin: the call id the model wrote itself (Kimi K2), else empty
    bool operator==(const chat_event &) const = default;
};

// A tool as the parser and the tool-call grammar need it.
struct tool_signature {
    std::string name;
    nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // JSON Schema of the arguments
};

struct chat_parse_options {
    chat_syntax syntax;
    bool reasoning = true;     // separate reasoning; false passes it through as content
    bool think_open = false;   // the prompt ends inside a reasoning block the template opened
    bool tools = false;        // parse tool calls (the request offers tools and allows calls)
    bool parallel = true;      // false: only the first call is reported
    std::vector<tool_signature> signatures;  // typed parameter values (XML formats)
};

class chat_parser {
public:
    explicit chat_parser(chat_parse_options options);
    ~chat_parser();
    chat_parser(chat_parser &&) noexcept;
    chat_parser &operator=(chat_parser &&) noexcept;

    // Appends the events that `text` (the next bytes of the output) settles. Text that may still
    // turn out to be a marker is held back until it is settled.
    void feed(std::string_view text, std::vector<chat_event> &out);
    // The output is complete: settles everything held back.
    void finish(std::vector<chat_event> &out);
    int32_t n_calls() const;  // tool calls begun so far (reported or not)

    struct impl;

private:
    std::unique_ptr<impl> impl_;
};

// Adjacent events of one kind (and one call) joined: the form in which any two parses of the
// same output agree, however it was split.
std::vector<chat_event> chat_events_merge(std::span<const chat_event> events);

}  // namespace tandem
