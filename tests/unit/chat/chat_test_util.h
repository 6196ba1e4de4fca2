// tests/unit/chat/chat_test_util.h - parsing helpers for the chat parser tests.
#pragma once

#include "src/chat/chat_output.h"

#include <string>
#include <vector>

namespace tandem::test {

// The whole text in one feed, then finish; events merged.
inline std::vector<chat_event> parse_whole(const chat_parse_options &o, const std::string &text) {
    chat_parser p(o);
    std::vector<chat_event> ev;
    p.feed(text, ev);
    p.finish(ev);
    return chat_events_merge(ev);
}

// The text fed in pieces that end at `cuts` (ascending byte offsets), then finish; events merged.
inline std::vector<chat_event> parse_split(const chat_parse_options &o, const std::string &text, const std::vector<size_t> &cuts) {
    chat_parser p(o);
    std::vector<chat_event> ev;
    size_t at = 0;
    for (size_t c : cuts) {
        p.feed(std::string_view(text).substr(at, c - at), ev);
        at = c;
    }
    p.feed(std::string_view(text).substr(at), ev);
    p.finish(ev);
    return chat_events_merge(ev);
}

// What a reply comes to: reasoning, text, and each call as name + arguments.
struct reply_view {
    std::string reasoning, content;
    std::vector<std::pair<std::string, std::string>> calls;
    std::vector<std::string> ids;
};

inline reply_view view_of(const std::vector<chat_event> &events) {
    reply_view v;
    for (const auto &e : events) {
        switch (e.type) {
        case chat_event::kind::reasoning: v.reasoning += e.text; break;
        case chat_event::kind::content: v.content += e.text; break;
        case chat_event::kind::tool_begin:
            v.calls.push_back({e.text, ""});
            v.ids.push_back(e.id);
            break;
        case chat_event::kind::tool_args: v.calls.at(static_cast<size_t>(e.index)).second += e.text; break;
        case chat_event::kind::tool_end: break;
        }
    }
    return v;
}

inline chat_parse_options options_for(tool_format format, bool think_tags, bool tools = true) {
    chat_parse_options o;
    o.syntax.tools = format;
    o.syntax.think_tags = think_tags;
    o.tools = tools;
    return o;
}

}  // namespace tandem::test
