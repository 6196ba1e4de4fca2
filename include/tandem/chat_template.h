// tandem/chat_template.h - renders a chat request into the model's prompt: with the model's own
// Jinja template (the file's tokenizer.chat_template, or one named on the command line), or with a
// built-in family for files that carry none.
#pragma once

#include "tandem/jinja.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
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
    jinja,       // the template's own source, rendered by the Jinja engine
    chatml,      // <|im_start|>role\n...<|im_end|>\n (Qwen2/Qwen3)
    qwen3,       // ChatML plus Qwen3's <think> handling
    fallback,    // unknown template: documented plain "role: content" rendering
};

struct chat_template {
    chat_template_family family = chat_template_family::fallback;
    std::string source;  // the template's text ("" for the built-ins)
    std::string origin;  // where it came from: "tokenizer.chat_template", "--chat-template-file F", "built-in chatml"

    // jinja only. A source that does not parse keeps its error here (jinja is then null), so the
    // server can serve raw completions and answer chat requests with the error.
    std::shared_ptr<const jinja_template> jinja;
    std::string parse_error;
    // bos_token and eos_token as the file names them, and how assistant tool-call arguments must
    // reach this template (probed: DeepSeek V3.1 concatenates strings, GLM and Qwen3-Coder iterate
    // objects; `given` when both work or neither does).
    jinja_chat_options jinja_options;

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
    // A Jinja template: parsed once (a syntax error is kept in parse_error), then probed for the
    // form of tool-call arguments it renders.
    static chat_template from_jinja(std::string source, std::string origin, std::optional<std::string> bos_token,
                                    std::optional<std::string> eos_token);
    // The built-in families by name: "chatml", "qwen3", "plain"; throws error(config) for others.
    static chat_template builtin(std::string_view name);

    // Renders an OpenAI chat request body (messages, tools, add_generation_prompt,
    // chat_template_kwargs) as transformers' apply_chat_template does; text that came from the
    // request is never special. The built-ins take system/user/assistant text messages and the
    // enable_thinking kwarg only. Throws error(invalid_request) with the template's own message
    // when it raises or does not parse, and naming what a built-in cannot render.
    rendered_prompt render_request(const nlohmann::ordered_json &request) const;

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
