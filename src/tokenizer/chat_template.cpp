// src/tokenizer/chat_template.cpp - template family detection and rendering of ChatML, Qwen3
// (ChatML with its <think> rules) and the plain fallback, for system/user/assistant messages, as
// pieces that say which text the template wrote and which came from the messages.
#include "tandem/chat_template.h"

#include "tandem/error.h"

#include <string_view>

namespace tandem {

namespace {

constexpr std::string_view im_start = "<|im_start|>";
constexpr std::string_view im_end = "<|im_end|>";

void check_role(const chat_message &m) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
        fail(error_kind::invalid_request, "chat role '{}' is not supported (system, user, assistant)", m.role);
}

// The role is the template's (the API layer admits only the roles checked above); the content is
// the request's.
void append_turn(rendered_prompt &out, std::string_view role, std::string_view content) {
    out.add_template(std::string(im_start).append(role).append("\n"));
    out.add_content(content);
    out.add_template(std::string(im_end).append("\n"));
}

// Python's str.lstrip('\n') / rstrip('\n') / strip('\n'), which the Qwen3 template uses.
std::string_view lstrip_nl(std::string_view s) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    return s;
}
std::string_view rstrip_nl(std::string_view s) {
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    return s;
}

// The literal default system prompt of Qwen2/Qwen2.5-style ChatML templates: the text of a
// quoted '<|im_start|>system\n TEXT <|im_end|>' with no expression inside. In the Jinja source
// the newline is usually the escape "\n" (backslash, n); a real newline is accepted too.
std::string find_default_system(const std::string &source) {
    const std::string_view src(source);
    const std::string_view head = "<|im_start|>system";
    for (size_t at = src.find(head); at != std::string_view::npos; at = src.find(head, at + 1)) {
        size_t text_begin = at + head.size();
        if (src.substr(text_begin, 2) == "\\n") text_begin += 2;
        else if (src.substr(text_begin, 1) == "\n") text_begin += 1;
        else continue;
        const size_t text_end = src.find(im_end, text_begin);
        if (text_end == std::string_view::npos) continue;
        const std::string_view text = src.substr(text_begin, text_end - text_begin);
        if (text.empty() || text.find_first_of("'\"{}+\\") != std::string_view::npos) continue;
        return std::string(text);
    }
    return {};
}

rendered_prompt render_chatml(const chat_template &t, const std::vector<chat_message> &messages,
                              bool add_generation_prompt) {
    rendered_prompt out;
    if (!t.default_system.empty() && (messages.empty() || messages.front().role != "system")) {
        // The default system prompt is a literal of the template, not request text.
        out.add_template(std::string(im_start).append("system\n").append(t.default_system).append(im_end).append("\n"));
    }
    for (const auto &m : messages) {
        check_role(m);
        append_turn(out, m.role, m.content);
    }
    if (add_generation_prompt) out.add_template(std::string(im_start).append("assistant\n"));
    return out;
}

bool is_tool_response(std::string_view s) {
    return s.starts_with("<tool_response>") && s.ends_with("</tool_response>");
}

// Qwen3's template for string contents without tools. Assistant turns before the last real user
// query lose their <think> block; turns after it (the current agentic step) keep their
// reasoning, and the last message, if an assistant turn, always gets a (possibly empty) block.
rendered_prompt render_qwen3(const chat_template &t, const std::vector<chat_message> &messages,
                             bool add_generation_prompt, bool enable_thinking) {
    for (const auto &m : messages) check_role(m);
    const size_t n = messages.size();
    // The template's namespace starts at len-1 and moves to the last user message that is not
    // a wrapped tool response.
    size_t last_query = n == 0 ? 0 : n - 1;
    for (size_t k = n; k-- > 0;) {
        if (messages[k].role == "user" && !is_tool_response(messages[k].content)) {
            last_query = k;
            break;
        }
    }
    rendered_prompt out;
    for (size_t i = 0; i < n; ++i) {
        const chat_message &m = messages[i];
        if (m.role != "assistant") {
            // A leading system message is printed before the loop and later ones inside it,
            // both in the same form.
            append_turn(out, m.role, m.content);
            continue;
        }
        std::string_view content = m.content;
        std::string_view reasoning;
        const size_t first_close = content.find("</think>");
        if (first_close != std::string_view::npos) {
            // reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
            std::string_view before = rstrip_nl(content.substr(0, first_close));
            const size_t open = before.rfind("<think>");
            if (open != std::string_view::npos) before.remove_prefix(open + std::string_view("<think>").size());
            reasoning = lstrip_nl(before);
            // content = content.split('</think>')[-1].lstrip('\n')
            const size_t last_close = content.rfind("</think>");
            content = lstrip_nl(content.substr(last_close + std::string_view("</think>").size()));
        }
        out.add_template(std::string(im_start).append("assistant\n"));
        if (i > last_query && (i + 1 == n || !reasoning.empty())) {
            out.add_template("<think>\n");
            out.add_content(lstrip_nl(rstrip_nl(reasoning)));
            out.add_template("\n</think>\n\n");
            out.add_content(lstrip_nl(content));
        } else {
            out.add_content(content);
        }
        out.add_template(std::string(im_end).append("\n"));
    }
    if (add_generation_prompt) {
        out.add_template(std::string(im_start).append("assistant\n"));
        if (t.think_prefill) out.add_template("<think>\n");
        else if (t.thinking_switch && !enable_thinking) out.add_template("<think>\n\n</think>\n\n");
    }
    return out;
}

// Unknown templates: a plain transcript the model can at least continue; callers warn.
rendered_prompt render_fallback(const std::vector<chat_message> &messages, bool add_generation_prompt) {
    rendered_prompt out;
    for (const auto &m : messages) {
        out.add_content(m.role);  // unchecked here, so never special
        out.add_template(": ");
        out.add_content(m.content);
        out.add_template("\n");
    }
    if (add_generation_prompt) out.add_template("assistant:");
    return out;
}

}  // namespace

chat_template chat_template::detect(const std::string &source) {
    chat_template t;
    t.source = source;
    if (source.find(im_start) == std::string::npos) {
        t.family = chat_template_family::fallback;
    } else if (source.find("<think>") != std::string::npos) {
        t.family = chat_template_family::qwen3;
        t.thinking_switch = source.find("enable_thinking") != std::string::npos;
        // The quoted literal, with the Jinja escape "\n" or a real newline.
        t.think_prefill = source.find("<|im_start|>assistant\\n<think>\\n") != std::string::npos ||
                          source.find("<|im_start|>assistant\n<think>\n") != std::string::npos;
    } else {
        t.family = chat_template_family::chatml;
        t.default_system = find_default_system(source);
    }
    return t;
}

void rendered_prompt::add(std::string_view text, bool special) {
    if (text.empty()) return;
    if (!pieces.empty() && pieces.back().special == special) pieces.back().text.append(text);
    else pieces.push_back({std::string(text), special});
}

std::string rendered_prompt::text() const {
    std::string out;
    for (const auto &p : pieces) out += p.text;
    return out;
}

rendered_prompt chat_template::render_prompt(const std::vector<chat_message> &messages, bool add_generation_prompt,
                                             bool enable_thinking) const {
    switch (family) {
    case chat_template_family::jinja: {
        nlohmann::ordered_json request = {{"messages", nlohmann::ordered_json::array()},
                                          {"add_generation_prompt", add_generation_prompt},
                                          {"chat_template_kwargs", {{"enable_thinking", enable_thinking}}}};
        for (const auto &m : messages) request["messages"].push_back({{"role", m.role}, {"content", m.content}});
        return render_request(request);
    }
    case chat_template_family::chatml: return render_chatml(*this, messages, add_generation_prompt);
    case chat_template_family::qwen3: return render_qwen3(*this, messages, add_generation_prompt, enable_thinking);
    case chat_template_family::fallback: return render_fallback(messages, add_generation_prompt);
    }
    return render_fallback(messages, add_generation_prompt);
}

std::string chat_template::render(const std::vector<chat_message> &messages, bool add_generation_prompt,
                                  bool enable_thinking) const {
    return render_prompt(messages, add_generation_prompt, enable_thinking).text();
}

const char *chat_template_family_name(chat_template_family family) {
    switch (family) {
    case chat_template_family::jinja: return "jinja";
    case chat_template_family::chatml: return "chatml";
    case chat_template_family::qwen3: return "qwen3";
    case chat_template_family::fallback: return "fallback";
    }
    return "fallback";
}

}  // namespace tandem
