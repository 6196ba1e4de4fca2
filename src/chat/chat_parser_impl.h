// src/chat/chat_parser_impl.h - the parser's state, shared by the files of each family's syntax.
// Every step settles a prefix of the unsettled bytes or waits for more; a step never settles text
// that later bytes could turn into a marker, which is what makes streamed and whole parses agree.
#pragma once

#include "chat_output.h"

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace tandem {

namespace chat_detail {

bool is_space(char c);
size_t skip_space(std::string_view s, size_t at = 0);
std::string_view trim_right(std::string_view s);
std::string_view trim(std::string_view s);
// The longest proper prefix of `marker` that `s` ends with (a marker that may be arriving).
size_t partial_suffix(std::string_view s, std::string_view marker);
// Whether `s` could still grow into `marker` (s is a proper prefix of it, or empty).
bool may_become(std::string_view s, std::string_view marker);

// The earliest of several markers in `s`: its position and which one (npos / -1 when none).
struct marker_hit {
    size_t at = std::string_view::npos;
    int which = -1;
};
marker_hit find_first(std::string_view s, std::initializer_list<std::string_view> markers);

// A marker that begins tool calls inside text, and the state it leads to. `keep`: the marker is
// part of what that state reads (Qwen3-Coder's bare <function=...>), so it stays unsettled.
struct tool_opener {
    std::string_view marker;
    int next;  // chat_parser::impl::state
    bool keep = false;
};
std::span<const tool_opener> openers_of(tool_format format);

// DeepSeek V3.1 and Kimi K2 write a section of calls, each a name (or id) and JSON arguments.
struct section_markers {
    std::string_view section_begin, section_end, call_begin, name_end, call_end;
};
const section_markers &section_markers_of(tool_format format);

// The JSON text of a parameter value written as raw text (XML families), by the type the tool's
// schema gives the parameter; schema may be null.
std::string xml_value_json(std::string_view raw, const nlohmann::ordered_json *schema);

}  // namespace chat_detail

struct chat_parser::impl {
    enum class state : uint8_t {
        start,         // may open a <think> block
        think,         // inside reasoning
        skip_space,    // drops whitespace, then content
        content,
        hermes_head, hermes_args, hermes_whole,
        section, section_name, section_args,  // DeepSeek V3.1 and Kimi K2
        xml_head, xml_body, xml_tail,         // Qwen3-Coder and GLM-4.5
        harmony_header, harmony_body, harmony_next, harmony_plain,
    };
    enum class message_kind : uint8_t { reasoning, content, tool };

    chat_parse_options opt;
    std::string buf;  // bytes not yet settled
    state st = state::start;
    std::vector<chat_event> *out = nullptr;

    bool reasoning_begun = false;  // leading whitespace of the reasoning is dropped
    int32_t n_calls = 0;
    std::string args;              // the current call's arguments reported so far
    std::string call_name;
    std::string opener;            // the marker that began the current tool section, as written
    std::string opener_space;      // the whitespace before it, given back if it was no call after all
    int32_t n_params = 0;          // XML families: parameters reported in the current call
    message_kind harmony_kind = message_kind::content;

    explicit impl(chat_parse_options o);
    void run(bool at_end);
    bool step(bool at_end);

    void emit(chat_event::kind kind, std::string_view text, std::string_view id = {});
    void emit_text(chat_event::kind kind, std::string_view text) {
        if (!text.empty()) emit(kind, text);
    }
    void begin_call(std::string_view name, std::string_view id = {});
    void call_args(std::string_view fragment);
    void end_call();
    void consume(size_t n) { buf.erase(0, n); }

    // The states of each family (chat_parser.cpp, chat_parse_sections.cpp, chat_parse_xml.cpp,
    // chat_parse_harmony.cpp).
    bool step_start(bool at_end);
    bool step_think(bool at_end);
    bool step_skip_space(bool at_end);
    bool step_content(bool at_end);
    bool step_hermes_head(bool at_end);
    bool step_hermes_args(bool at_end);
    bool step_hermes_whole(bool at_end);
    bool step_section(bool at_end);
    bool step_section_name(bool at_end);
    bool step_section_args(bool at_end);
    bool step_xml_head(bool at_end);
    bool step_xml_body(bool at_end);
    bool step_xml_tail(bool at_end);
    bool step_harmony_header(bool at_end);
    bool step_harmony_body(bool at_end);
    bool step_harmony_next(bool at_end);

    // XML families: one parameter's fragment, and the call's close.
    void xml_param(std::string_view key, std::string_view raw);
    void xml_close();
    const nlohmann::ordered_json *param_schema(std::string_view key) const;
};

}  // namespace tandem
