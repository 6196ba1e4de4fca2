// src/chat/chat_syntax.cpp - which family's output syntax a chat template implies, read from the
// markers the template itself writes for tool calls and reasoning.
#include "chat_output.h"

namespace tandem {

chat_syntax chat_syntax_detect(std::string_view source) {
    auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
    chat_syntax syntax;
    if (has("<|channel|>") && has("<|start|>")) syntax.tools = tool_format::harmony;
    else if (has("<｜tool▁calls▁begin｜>") || has("<｜tool▁call▁begin｜>")) syntax.tools = tool_format::deepseek_v31;
    else if (has("<|tool_calls_section_begin|>")) syntax.tools = tool_format::kimi_k2;
    else if (has("<arg_key>")) syntax.tools = tool_format::glm45;
    else if (has("<function=") && has("<parameter=")) syntax.tools = tool_format::qwen3_coder;
    else syntax.tools = tool_format::hermes;
    syntax.think_tags = syntax.tools != tool_format::harmony && has("<think>");
    return syntax;
}

const char *tool_format_name(tool_format format) {
    switch (format) {
    case tool_format::hermes: return "hermes";
    case tool_format::qwen3_coder: return "qwen3-coder";
    case tool_format::deepseek_v31: return "deepseek-v3.1";
    case tool_format::glm45: return "glm-4.5";
    case tool_format::kimi_k2: return "kimi-k2";
    case tool_format::harmony: return "harmony";
    }
    return "hermes";
}

}  // namespace tandem
