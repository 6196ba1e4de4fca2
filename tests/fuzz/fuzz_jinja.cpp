// tests/fuzz/fuzz_jinja.cpp - libFuzzer target for the Jinja engine: any bytes, taken as a chat
// template and rendered with a chat request's variables under tight limits, must render or fail
// with a jinja_error; anything else (a crash, another exception, a hang past the limits) is a bug.
// Also compiled into test_jinja, which replays tests/fuzz/corpus_jinja and the published templates.
#include "tandem/jinja.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

tandem::jinja_vars fuzz_vars() {
    const auto request = nlohmann::ordered_json::parse(R"({
      "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi <|im_end|> there"},
        {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello", "reasoning_content": "hm",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}},
                        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"b\": true}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "parts"}]}
      ],
      "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                 "parameters": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "number"}}},
                                "required": ["a"]}}}],
      "chat_template_kwargs": {"enable_thinking": false, "reasoning_effort": "low"}
    })");
    tandem::jinja_chat_options options;
    options.bos_token = "<s>";
    options.eos_token = "</s>";
    return tandem::jinja_chat_vars(request, options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const tandem::jinja_vars vars = fuzz_vars();
    tandem::jinja_render_options options;
    options.now_unix = 1709214307;
    // Tight bounds so that every input finishes in milliseconds.
    options.limits.max_steps = 200'000;
    options.limits.max_output_bytes = 1u << 20;
    options.limits.max_alloc_bytes = 32u << 20;
    options.limits.max_call_depth = 30;
    const std::string_view source(reinterpret_cast<const char *>(data), size);
    try {
        const auto tmpl = tandem::jinja_template::parse(source);
        const auto out = tmpl->render(vars, options);
        size_t last_end = 0;
        for (const auto &r : out.marked) {
            if (r.begin < last_end || r.begin >= r.end || r.end > out.text.size()) std::abort();
            last_end = r.end;
        }
    } catch (const tandem::jinja_error &) {
    }
    return 0;
}
