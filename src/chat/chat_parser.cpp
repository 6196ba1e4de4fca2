// src/chat/chat_parser.cpp - the parser's driver, reasoning blocks, text between tool calls, and
// the Hermes family's calls (<tool_call>{"name": ..., "arguments": ...}</tool_call>).
#include "chat_parser_impl.h"

namespace tandem {

using namespace chat_detail;
using state = chat_parser::impl::state;

namespace chat_detail {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s, size_t at) {
    while (at < s.size() && is_space(s[at])) ++at;
    return at;
}

std::string_view trim_right(std::string_view s) {
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

std::string_view trim(std::string_view s) { return trim_right(s.substr(std::min(skip_space(s), s.size()))); }

size_t partial_suffix(std::string_view s, std::string_view marker) {
    for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
    return 0;
}

bool may_become(std::string_view s, std::string_view marker) { return s.size() < marker.size() && marker.starts_with(s); }

marker_hit find_first(std::string_view s, std::initializer_list<std::string_view> markers) {
    marker_hit hit;
    int i = 0;
    for (std::string_view m : markers) {
        const size_t at = s.find(m);
        if (at < hit.at) hit = {at, i};
        ++i;
    }
    return hit;
}

std::span<const tool_opener> openers_of(tool_format format) {
    static constexpr tool_opener hermes[] = {{"<tool_call>", int(state::hermes_head)}};
    static constexpr tool_opener coder[] = {{"<tool_call>", int(state::xml_head)}, {"<function=", int(state::xml_head), true}};
    static constexpr tool_opener glm[] = {{"<tool_call>", int(state::xml_head)}};
    static constexpr tool_opener deepseek[] = {{"<｜tool▁calls▁begin｜>", int(state::section)},
                                          {"<｜tool▁call▁begin｜>", int(state::section_name)}};
    static constexpr tool_opener kimi[] = {{"<|tool_calls_section_begin|>", int(state::section)},
                                      {"<|tool_call_begin|>", int(state::section_name)}};
    switch (format) {
    case tool_format::hermes: return hermes;
    case tool_format::qwen3_coder: return coder;
    case tool_format::glm45: return glm;
    case tool_format::deepseek_v31: return deepseek;
    case tool_format::kimi_k2: return kimi;
    case tool_format::harmony: return {};
    }
    return hermes;
}

}  // namespace chat_detail

chat_parser::impl::impl(chat_parse_options o) : opt(std::move(o)) {
    if (opt.syntax.tools == tool_format::harmony) st = state::harmony_header;
    else if (!opt.reasoning || !opt.syntax.think_tags) st = state::content;
    else st = opt.think_open ? state::think : state::start;
}

void chat_parser::impl::run(bool at_end) {
    while (step(at_end)) {
    }
}

bool chat_parser::impl::step(bool at_end) {
    switch (st) {
    case state::start: return step_start(at_end);
    case state::think: return step_think(at_end);
    case state::skip_space: return step_skip_space(at_end);
    case state::content: return step_content(at_end);
    case state::hermes_head: return step_hermes_head(at_end);
    case state::hermes_args: return step_hermes_args(at_end);
    case state::hermes_whole: return step_hermes_whole(at_end);
    case state::section: return step_section(at_end);
    case state::section_name: return step_section_name(at_end);
    case state::section_args: return step_section_args(at_end);
    case state::xml_head: return step_xml_head(at_end);
    case state::xml_body: return step_xml_body(at_end);
    case state::xml_tail: return step_xml_tail(at_end);
    case state::harmony_header: return step_harmony_header(at_end);
    case state::harmony_body: return step_harmony_body(at_end);
    case state::harmony_next: return step_harmony_next(at_end);
    case state::harmony_plain:
        emit_text(chat_event::kind::content, buf);
        buf.clear();
        return false;
    }
    return false;
}

void chat_parser::impl::emit(chat_event::kind kind, std::string_view text, std::string_view id) {
    const bool tool = kind == chat_event::kind::tool_begin || kind == chat_event::kind::tool_args ||
                      kind == chat_event::kind::tool_end;
    const int32_t index = tool ? n_calls - 1 : -1;
    if (tool && !opt.parallel && index > 0) return;  // only the first call is reported
    // Text pieces settled in one step join the previous piece of their kind.
    if (!out->empty() && (kind == chat_event::kind::reasoning || kind == chat_event::kind::content ||
                          kind == chat_event::kind::tool_args)) {
        chat_event &last = out->back();
        if (last.type == kind && last.index == index) {
            last.text.append(text);
            return;
        }
    }
    out->push_back({kind, index, std::string(text), std::string(id)});
}

void chat_parser::impl::begin_call(std::string_view name, std::string_view id) {
    ++n_calls;
    opener_space.clear();
    args.clear();
    n_params = 0;
    call_name = std::string(name);
    emit(chat_event::kind::tool_begin, name, id);
}

void chat_parser::impl::call_args(std::string_view fragment) {
    if (fragment.empty()) return;
    args.append(fragment);
    emit(chat_event::kind::tool_args, fragment);
}

void chat_parser::impl::end_call() { emit(chat_event::kind::tool_end, {}); }

// ---- reasoning ----

bool chat_parser::impl::step_start(bool at_end) {
    constexpr std::string_view open = "<think>";
    const size_t i = skip_space(buf);
    const std::string_view rest = std::string_view(buf).substr(i);
    if (rest.starts_with(open)) {
        consume(i + open.size());
        st = state::think;
        return true;
    }
    if (!at_end && may_become(rest, open)) return false;
    st = state::content;  // the whitespace read so far is text
    return true;
}

bool chat_parser::impl::step_think(bool at_end) {
    constexpr std::string_view close = "</think>";
    if (!reasoning_begun) {
        const size_t i = skip_space(buf);
        consume(i);
        if (buf.empty()) return i > 0;
        reasoning_begun = true;
    }
    const size_t at = buf.find(close);
    if (at != std::string::npos) {
        emit_text(chat_event::kind::reasoning, trim_right(std::string_view(buf).substr(0, at)));
        consume(at + close.size());
        st = state::skip_space;
        return true;
    }
    if (at_end) {
        emit_text(chat_event::kind::reasoning, trim_right(buf));
        buf.clear();
        st = state::content;
        return false;
    }
    // Trailing whitespace waits: the block's last whitespace is dropped.
    const std::string_view settled = trim_right(std::string_view(buf).substr(0, buf.size() - partial_suffix(buf, close)));
    if (settled.empty()) return false;
    emit(chat_event::kind::reasoning, settled);
    consume(settled.size());
    return true;
}

bool chat_parser::impl::step_skip_space(bool) {
    const size_t i = skip_space(buf);
    consume(i);
    if (buf.empty()) return i > 0;
    st = state::content;
    return true;
}

// ---- text, and the start of tool calls ----

bool chat_parser::impl::step_content(bool at_end) {
    const auto openers = opt.tools ? openers_of(opt.syntax.tools) : std::span<const tool_opener>{};
    if (openers.empty()) {
        if (buf.empty()) return false;
        emit(chat_event::kind::content, buf);
        buf.clear();
        return false;
    }
    size_t first = std::string::npos;
    const tool_opener *hit = nullptr;
    for (const tool_opener &o : openers) {
        const size_t at = buf.find(o.marker);
        if (at < first) first = at, hit = &o;
    }
    if (hit != nullptr) {
        // Whitespace between text and a call is layout, not text.
        const std::string_view before = trim_right(std::string_view(buf).substr(0, first));
        emit_text(chat_event::kind::content, before);
        opener_space = buf.substr(before.size(), first - before.size());
        opener = std::string(hit->marker);
        consume(hit->keep ? first : first + hit->marker.size());
        st = static_cast<state>(hit->next);
        return true;
    }
    if (at_end) {
        // Text after the last call loses its trailing whitespace; text alone is kept as written.
        emit_text(chat_event::kind::content, n_calls > 0 ? trim_right(buf) : std::string_view(buf));
        buf.clear();
        return false;
    }
    size_t hold = 0;
    for (const tool_opener &o : openers) hold = std::max(hold, partial_suffix(buf, o.marker));
    const std::string_view settled = trim_right(std::string_view(buf).substr(0, buf.size() - hold));
    if (settled.empty()) return false;
    emit(chat_event::kind::content, settled);
    consume(settled.size());
    return true;
}

// ---- Hermes: <tool_call>{"name": "f", "arguments": {...}}</tool_call> ----

namespace {

constexpr std::string_view hermes_close = "</tool_call>";

enum class head_match { yes, no, more };

// ws { ws "name" ws : ws "NAME" ws , ws "arguments" ws : ws - the head that lets the arguments be
// streamed as they are written. `len` is the head's length; `name` its unescaped name.
head_match match_hermes_head(std::string_view s, size_t &len, std::string &name) {
    size_t at = 0;
    auto literal = [&](std::string_view lit) {
        at = skip_space(s, at);
        const std::string_view rest = s.substr(at);
        if (rest.starts_with(lit)) {
            at += lit.size();
            return head_match::yes;
        }
        return may_become(rest, lit) ? head_match::more : head_match::no;
    };
    for (std::string_view lit : {"{", "\"name\"", ":", "\""}) {
        const head_match m = literal(lit);
        if (m != head_match::yes) return m;
    }
    const size_t name_begin = at;
    while (at < s.size() && s[at] != '"') at += s[at] == '\\' ? 2 : 1;
    if (at >= s.size()) return head_match::more;
    const auto parsed = nlohmann::json::parse("\"" + std::string(s.substr(name_begin, at - name_begin)) + "\"", nullptr, false);
    if (!parsed.is_string()) return head_match::no;
    name = parsed.get<std::string>();
    ++at;
    for (std::string_view lit : {",", "\"arguments\"", ":"}) {
        const head_match m = literal(lit);
        if (m != head_match::yes) return m;
    }
    at = skip_space(s, at);
    if (at == s.size()) return head_match::more;  // the arguments' first byte settles their start
    len = at;
    return head_match::yes;
}

// How much of `s` (arguments so far, the close not yet seen) is surely arguments: not the part
// that may still be "ws } ws </tool_call>".
size_t hermes_settled(std::string_view s) {
    std::string_view t = trim_right(s.substr(0, s.size() - partial_suffix(s, hermes_close)));
    if (!t.empty() && t.back() == '}') t = trim_right(t.substr(0, t.size() - 1));
    return t.size();
}

}  // namespace

bool chat_parser::impl::step_hermes_head(bool at_end) {
    size_t len = 0;
    std::string name;
    const head_match m = match_hermes_head(buf, len, name);
    if (m == head_match::yes) {
        begin_call(name);
        consume(len);
        st = state::hermes_args;
        return true;
    }
    if (m == head_match::more && !at_end) return false;
    st = state::hermes_whole;  // another key order, or not JSON: read the whole call
    return true;
}

bool chat_parser::impl::step_hermes_args(bool at_end) {
    const size_t at = buf.find(hermes_close);
    if (at != std::string::npos || at_end) {
        // The whole call: its arguments end before the object's closing brace.
        std::string whole = args + buf.substr(0, at);
        std::string_view t = trim_right(whole);
        if (!t.empty() && t.back() == '}') {
            const std::string_view inner = trim_right(t.substr(0, t.size() - 1));
            if (at != std::string::npos || nlohmann::json::accept(inner)) t = inner;
        }
        call_args(t.size() > args.size() ? t.substr(args.size()) : std::string_view());
        end_call();
        consume(at == std::string::npos ? buf.size() : at + hermes_close.size());
        st = state::skip_space;
        return true;
    }
    const size_t settled = hermes_settled(buf);
    if (settled == 0) return false;
    call_args(std::string_view(buf).substr(0, settled));
    consume(settled);
    return true;
}

bool chat_parser::impl::step_hermes_whole(bool at_end) {
    const size_t at = buf.find(hermes_close);
    if (at == std::string::npos && !at_end) return false;
    const std::string body = buf.substr(0, at);
    const bool closed = at != std::string::npos;
    consume(closed ? at + hermes_close.size() : buf.size());
    const auto j = nlohmann::ordered_json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("name") && j["name"].is_string()) {
        begin_call(j["name"].get<std::string>());
        const auto a = j.contains("arguments") ? j["arguments"] : j.value("parameters", nlohmann::ordered_json::object());
        call_args(a.is_string() ? a.get<std::string>() : a.dump());
        end_call();
        st = state::skip_space;
    } else {
        // Not a call after all: the text stands as written.
        emit_text(chat_event::kind::content, opener_space + opener + body + (closed ? std::string(hermes_close) : std::string()));
        st = state::content;
    }
    return true;
}

// ---- the public face ----

chat_parser::chat_parser(chat_parse_options options) : impl_(std::make_unique<impl>(std::move(options))) {}
chat_parser::~chat_parser() = default;
chat_parser::chat_parser(chat_parser &&) noexcept = default;
chat_parser &chat_parser::operator=(chat_parser &&) noexcept = default;

void chat_parser::feed(std::string_view text, std::vector<chat_event> &out) {
    impl_->out = &out;
    impl_->buf.append(text);
    impl_->run(false);
}

void chat_parser::finish(std::vector<chat_event> &out) {
    impl_->out = &out;
    impl_->run(true);
}

int32_t chat_parser::n_calls() const { return impl_->n_calls; }

std::vector<chat_event> chat_events_merge(std::span<const chat_event> events) {
    std::vector<chat_event> merged;
    for (const chat_event &e : events) {
        const bool text = e.type == chat_event::kind::reasoning || e.type == chat_event::kind::content ||
                          e.type == chat_event::kind::tool_args;
        if (text && !merged.empty() && merged.back().type == e.type && merged.back().index == e.index) {
            merged.back().text += e.text;
            continue;
        }
        if (text && e.text.empty()) continue;
        merged.push_back(e);
    }
    return merged;
}

}  // namespace tandem
