// src/chat/chat_parse_sections.cpp - DeepSeek V3.1's and Kimi K2's tool calls: a section of calls,
// each a name (DeepSeek) or an id naming the function (Kimi: functions.NAME:N), then JSON
// arguments up to the call's end marker, streamed as they are written.
#include "chat_parser_impl.h"

namespace tandem {

using namespace chat_detail;
using state = chat_parser::impl::state;

namespace chat_detail {

const section_markers &section_markers_of(tool_format format) {
    static const section_markers deepseek = {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                             "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"};
    static const section_markers kimi = {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                         "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"};
    return format == tool_format::kimi_k2 ? kimi : deepseek;
}

}  // namespace chat_detail

namespace {

// Kimi K2's call ids are "functions.NAME:N"; the function is NAME.
std::string_view kimi_function(std::string_view id) {
    if (id.starts_with("functions.")) id.remove_prefix(10);
    const size_t colon = id.rfind(':');
    if (colon != std::string_view::npos && colon + 1 < id.size() &&
        id.find_first_not_of("0123456789", colon + 1) == std::string_view::npos)
        id = id.substr(0, colon);
    return id;
}

}  // namespace

// Between calls: another call, the section's end, or (the end marker left out) text.
bool chat_parser::impl::step_section(bool at_end) {
    const section_markers &m = section_markers_of(opt.syntax.tools);
    const size_t i = skip_space(buf);
    const std::string_view rest = std::string_view(buf).substr(i);
    if (rest.starts_with(m.call_begin)) {
        consume(i + m.call_begin.size());
        st = state::section_name;
        return true;
    }
    if (rest.starts_with(m.section_end)) {
        consume(i + m.section_end.size());
        st = state::skip_space;
        return true;
    }
    if (!at_end && (may_become(rest, m.call_begin) || may_become(rest, m.section_end))) return false;
    if (rest.empty()) return false;
    st = state::content;
    return true;
}

bool chat_parser::impl::step_section_name(bool at_end) {
    const section_markers &m = section_markers_of(opt.syntax.tools);
    const size_t at = buf.find(m.name_end);
    if (at == std::string::npos) {
        if (!at_end) return false;
        // Cut off before the arguments: the text stands as written.
        emit_text(chat_event::kind::content, opener_space + std::string(m.call_begin) + buf);
        buf.clear();
        st = state::content;
        return false;
    }
    const std::string_view written = trim(std::string_view(buf).substr(0, at));
    if (opt.syntax.tools == tool_format::kimi_k2) begin_call(kimi_function(written), written);
    else begin_call(written);
    consume(at + m.name_end.size());
    st = state::section_args;
    return true;
}

bool chat_parser::impl::step_section_args(bool at_end) {
    const section_markers &m = section_markers_of(opt.syntax.tools);
    const marker_hit hit = find_first(buf, {m.call_end, m.section_end});
    if (hit.which >= 0 || at_end) {
        const size_t end = hit.which >= 0 ? hit.at : buf.size();
        call_args(trim_right(std::string_view(buf).substr(0, end)));
        end_call();
        // A section end in place of the call's end closes both.
        consume(hit.which == 0 ? end + m.call_end.size() : end);
        st = state::section;
        return true;
    }
    const size_t hold = std::max(partial_suffix(buf, m.call_end), partial_suffix(buf, m.section_end));
    const std::string_view settled = trim_right(std::string_view(buf).substr(0, buf.size() - hold));
    if (settled.empty()) return false;
    call_args(settled);
    consume(settled.size());
    return true;
}

}  // namespace tandem
