// tandem/jinja.h - a sandboxed Jinja2 engine for chat templates, rendering exactly as Hugging Face
// transformers does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
// own tojson, raise_exception, strftime_now). Strings from the caller's data keep their provenance
// through every string operation, so the prompt says which bytes came from the request.
#pragma once

#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// What kind of template failure: a syntax error (at parse time), a runtime error (undefined
// values, wrong types), the template's own raise_exception, a sandbox refusal, or a limit.
enum class jinja_error_kind { syntax, runtime, raised, security, limit };

// A template error; `what()` is the message alone for `raised` (the template's own words) and
// "line L, column C: message" otherwise. The tandem error kind is invalid_request.
class jinja_error : public error {
public:
    jinja_error(jinja_error_kind kind, int line, int column, const std::string &message);
    jinja_error_kind jinja_kind() const { return jinja_kind_; }
    int line() const { return line_; }      // 1-based; 0 when not tied to a place in the source
    int column() const { return column_; }  // 1-based, in bytes
    const std::string &message() const { return message_; }

private:
    jinja_error_kind jinja_kind_;
    int line_, column_;
    std::string message_;
};

// Bounds that keep a hostile template from looping forever or exhausting memory; each one, when
// crossed, fails the render with a jinja_error of kind `limit` naming it.
struct jinja_limits {
    uint64_t max_steps = 20'000'000;        // expression and statement evaluations, plus per-item work
    size_t max_output_bytes = 64u << 20;    // the rendered text, and any one string value
    size_t max_alloc_bytes = 512u << 20;    // cumulative bytes of strings and lists a render creates
    int max_call_depth = 100;               // nested macro and caller() calls
    int64_t max_range = 100'000;            // jinja2's sandbox MAX_RANGE for range()
};

struct jinja_render_options {
    std::optional<int64_t> now_unix;  // strftime_now's clock (local time); unset = the system clock
    jinja_limits limits;
};

// A byte range [begin, end) of rendered text.
struct jinja_range {
    size_t begin = 0, end = 0;
    bool operator==(const jinja_range &) const = default;
};

struct jinja_output {
    std::string text;
    std::vector<jinja_range> marked;  // sorted, disjoint: bytes that came from marked strings
};

// The variables of one render. Every string inside a value set with `marked` stays marked
// wherever it travels in the output (concatenation, slicing, split, join, format, tojson, ...).
class jinja_vars {
public:
    jinja_vars();
    ~jinja_vars();
    jinja_vars(jinja_vars &&) noexcept;
    jinja_vars &operator=(jinja_vars &&) noexcept;

    // Throws jinja_error(limit) for values nested deeper than 512 lists and objects, and
    // jinja_error(runtime) for integers beyond 64 bits.
    void set(const std::string &name, const nlohmann::ordered_json &value, bool marked);
    bool has(const std::string &name) const;

    struct impl;
    const impl &get() const { return *impl_; }

private:
    std::unique_ptr<impl> impl_;
};

// A parsed template. parse() keeps the most recent templates by source text, so a server renders
// each request without parsing again; render() is const and safe from many threads at once.
class jinja_template {
public:
    // Throws jinja_error(syntax) naming line and column.
    static std::shared_ptr<const jinja_template> parse(std::string_view source);

    jinja_output render(const jinja_vars &vars, const jinja_render_options &options = {}) const;

    struct impl;
    explicit jinja_template(std::unique_ptr<impl> p);
    ~jinja_template();

private:
    std::unique_ptr<impl> impl_;
};

// ---- chat requests -> template variables, as transformers' apply_chat_template passes them ----

// How assistant tool calls' `function.arguments` reach the template. OpenAI clients send a JSON
// string; transformers passes whatever it is given (`given`); vLLM parses strings into objects
// (`object`); some templates (DeepSeek V3.1) concatenate them as strings (`string`).
enum class jinja_tool_arguments { given, object, string };

struct jinja_chat_options {
    std::optional<std::string> bos_token, eos_token;  // unset: the variable is not defined
    jinja_tool_arguments tool_arguments = jinja_tool_arguments::given;
};

// Variables for an OpenAI chat request body: messages, tools (null when absent, as transformers
// passes them), documents (null), add_generation_prompt (default true), bos_token, eos_token and
// each chat_template_kwargs entry. Request data is marked; tokens and flags are not. Throws
// tandem::error(invalid_request) naming the field for a malformed body.
jinja_vars jinja_chat_vars(const nlohmann::ordered_json &request, const jinja_chat_options &options);

}  // namespace tandem
