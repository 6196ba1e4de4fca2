// src/chat/chat_parse_harmony.cpp - gpt-oss's harmony format: the output is a series of messages,
// each a header (channel, recipient) up to <|message|> and a body up to <|end|>, <|call|> or
// <|return|>. The analysis channel is reasoning; a message to functions.NAME is a tool call whose
// body is its JSON arguments; the rest (final, commentary to nobody) is text.
#include "chat_parser_impl.h"

namespace tandem {

using namespace chat_detail;
using state = chat_parser::impl::state;

namespace {

constexpr std::string_view message_open = "<|message|>";
constexpr std::string_view channel_open = "<|channel|>";
constexpr std::string_view start_open = "<|start|>";
constexpr std::string_view end_marks[] = {"<|end|>", "<|call|>", "<|return|>"};
// A header longer than this without <|message|> means the model is not writing harmony.
constexpr size_t max_header_bytes = 512;

// The word after `key` in a header, up to whitespace or the next marker.
std::string_view header_word(std::string_view header, std::string_view key) {
    const size_t at = header.find(key);
    if (at == std::string_view::npos) return {};
    std::string_view rest = header.substr(at + key.size());
    size_t n = 0;
    while (n < rest.size() && !is_space(rest[n]) && rest.substr(n, 2) != "<|") ++n;
    return rest.substr(0, n);
}

// Whether `s` may be the beginning of a header: a role, a channel or a recipient.
bool looks_like_header(std::string_view s) {
    for (std::string_view lead : {channel_open, std::string_view("assistant"), std::string_view(" to="), std::string_view("to=")})
        if (s.starts_with(lead) || may_become(s, lead)) return true;
    return false;
}

}  // namespace

bool chat_parser::impl::step_harmony_header(bool at_end) {
    const size_t at = buf.find(message_open);
    if (at == std::string::npos || at > max_header_bytes) {
        const bool may_come = at == std::string::npos && buf.size() <= max_header_bytes + message_open.size();
        if (!at_end && may_come && looks_like_header(buf)) return false;
        st = state::harmony_plain;  // not harmony: everything is text
        return true;
    }
    const std::string_view header = std::string_view(buf).substr(0, at);
    const std::string_view recipient = header_word(header, "to=");
    const std::string_view channel = header_word(header, channel_open);
    if (opt.tools && recipient.starts_with("functions.")) {
        harmony_kind = message_kind::tool;
        begin_call(recipient.substr(10));
    } else if (channel == "analysis" && opt.reasoning) {
        harmony_kind = message_kind::reasoning;
    } else {
        harmony_kind = message_kind::content;
    }
    consume(at + message_open.size());
    st = state::harmony_body;
    return true;
}

bool chat_parser::impl::step_harmony_body(bool at_end) {
    const marker_hit hit = find_first(buf, {end_marks[0], end_marks[1], end_marks[2]});
    const chat_event::kind kind = harmony_kind == message_kind::reasoning ? chat_event::kind::reasoning : chat_event::kind::content;
    if (hit.which >= 0 || at_end) {
        const std::string_view body = std::string_view(buf).substr(0, hit.which >= 0 ? hit.at : buf.size());
        if (harmony_kind == message_kind::tool) {
            call_args(trim_right(body));
            end_call();
        } else {
            emit_text(kind, body);
        }
        consume(hit.which >= 0 ? hit.at + end_marks[hit.which].size() : buf.size());
        st = state::harmony_next;
        return true;
    }
    size_t hold = 0;
    for (std::string_view m : end_marks) hold = std::max(hold, partial_suffix(buf, m));
    std::string_view settled = std::string_view(buf).substr(0, buf.size() - hold);
    if (harmony_kind == message_kind::tool) settled = trim_right(settled);  // arguments end trimmed
    if (settled.empty()) return false;
    if (harmony_kind == message_kind::tool) call_args(settled);
    else emit(kind, settled);
    consume(settled.size());
    return true;
}

bool chat_parser::impl::step_harmony_next(bool at_end) {
    if (buf.starts_with(start_open)) {
        consume(start_open.size());
        st = state::harmony_header;
        return true;
    }
    if (buf.empty() || (!at_end && may_become(buf, start_open))) return false;
    st = state::harmony_header;  // a header without its <|start|>
    return true;
}

}  // namespace tandem
