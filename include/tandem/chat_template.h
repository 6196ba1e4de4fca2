// tandem/chat_template.h - renders chat messages into a prompt in the model's template family.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

struct chat_message {
    std::string role;     // "system", "user", "assistant" (others are rejected by the API layer)
    std::string content;
};

// One stretch of a rendered prompt. The template's own text (turn markers, role names, think
// blocks) may hold special tokens; text that came from the request is tokenized as plain text, so
// a user who types "<|im_end|>" gets those characters, not the end-of-turn token.
struct prompt_piece {
    std::string text;
    bool special = false;  // true: written by the template; its special-token texts are the tokens
};

// A rendered prompt as (text, special) pieces in order. Adjacent pieces of the same kind merge.
struct rendered_prompt {
    std::vector<prompt_piece> pieces;

    void add_template(std::string_view text) { add(text, true); }
    void add_content(std::string_view text) { add(text, false); }
    void add(std::string_view text, bool special);
    std::string text() const;  // the pieces joined
};

enum class chat_template_family {
    chatml,      // <|im_start|>role\n...<|im_end|>\n (Qwen2/Qwen3)
    qwen3,       // ChatML plus Qwen3's <think> handling
    fallback,    // unknown template: documented plain "role: content" rendering
};

struct chat_template {
    chat_template_family family = chat_template_family::fallback;
    std::string source;  // the GGUF's tokenizer.chat_template text ("" when absent)
    // chatml only: the system prompt the template inserts when the first message is not a
    // system message (Qwen2/Qwen2.5: "You are a helpful assistant." / "You are Qwen, ..."),
    // found as a literal '<|im_start|>system\n...<|im_end|>' in the source; "" when none.
    std::string default_system;
    // qwen3 only, read from the source: whether it honours enable_thinking (Qwen3-2507 Instruct
    // templates do not), and whether its generation prompt itself opens "<think>\n" (QwQ,
    // Qwen3-2507 Thinking).
    bool thinking_switch = true;
    bool think_prefill = false;

    // Detects the family from the template text; unknown text gives `fallback` (callers warn).
    static chat_template detect(const std::string &source);

    // add_generation_prompt opens an assistant turn; with enable_thinking false, Qwen3 gets an
    // empty "<think>\n\n</think>\n\n" block as its own template does (when it has the switch;
    // a think_prefill template gets "<think>\n" instead, whatever enable_thinking says). chatml and qwen3 take
    // the roles system, user and assistant (others throw error(invalid_request)). fallback
    // writes "role: content\n" per message and "assistant:" as the generation prompt.
    // render_prompt marks which pieces the template wrote (special) and which came from the
    // messages; render is its joined text.
    rendered_prompt render_prompt(const std::vector<chat_message> &messages, bool add_generation_prompt,
                                  bool enable_thinking = true) const;
    std::string render(const std::vector<chat_message> &messages, bool add_generation_prompt,
                       bool enable_thinking = true) const;
};

const char *chat_template_family_name(chat_template_family family);

}  // namespace tandem
