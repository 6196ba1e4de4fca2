// src/chat/tool_grammar.cpp - forced tool calls as GBNF: each tool's argument grammar from its JSON
// Schema (rules renamed per tool, the shared json-* rules written once) inside the family's
// call syntax.
#include "tool_grammar.h"

#include "tandem/error.h"
#include "tandem/grammar.h"

#include <fmt/format.h>

#include <functional>
#include <map>

namespace tandem {

namespace {

using ojson = nlohmann::ordered_json;

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Skips a quoted literal or a character class starting at `at` (backslash escapes included).
size_t skip_quoted(std::string_view s, size_t at, char close) {
    for (++at; at < s.size() && s[at] != close; ++at)
        if (s[at] == '\\') ++at;
    return std::min(at + 1, s.size());
}

// Rewrites every rule name in a rule body through `rename` (literals, classes and repetition
// counts are left alone).
std::string rename_refs(std::string_view body, const std::function<std::string(const std::string &)> &rename) {
    std::string out;
    for (size_t at = 0; at < body.size();) {
        const char c = body[at];
        size_t next = at + 1;
        if (c == '"') next = skip_quoted(body, at, '"');
        else if (c == '[') next = skip_quoted(body, at, ']');
        else if (c == '{') next = skip_quoted(body, at, '}');
        else if (is_name_char(c)) {
            while (next < body.size() && is_name_char(body[next])) ++next;
            out += rename(std::string(body.substr(at, next - at)));
            at = next;
            continue;
        }
        out.append(body.substr(at, next - at));
        at = next;
    }
    return out;
}

// Collects grammars into one: each added grammar's rules get a prefix, except the json-* rules
// every JSON Schema grammar shares, which are kept once.
class gbnf_builder {
public:
    // Adds a whole grammar (one rule per line); returns the name its root now has.
    std::string add(const std::string &gbnf, const std::string &prefix) {
        auto rename = [&](const std::string &name) { return name.starts_with("json-") ? name : prefix + name; };
        size_t at = 0;
        while (at < gbnf.size()) {
            size_t end = gbnf.find('\n', at);
            if (end == std::string::npos) end = gbnf.size();
            const std::string_view line = std::string_view(gbnf).substr(at, end - at);
            at = end + 1;
            const size_t sep = line.find(" ::= ");
            if (sep == std::string_view::npos) continue;
            const std::string name = rename(std::string(line.substr(0, sep)));
            const std::string body = rename_refs(line.substr(sep + 5), rename);
            const auto [it, fresh] = shared_.emplace(name, body);
            if (!fresh && it->second != body)
                fail(error_kind::internal, "tool grammar: rule {} differs between schemas", name);
            if (fresh) text_ += name + " ::= " + body + "\n";
        }
        return prefix + "root";
    }
    void rule(const std::string &name, const std::string &body) { text_ += name + " ::= " + body + "\n"; }
    const std::string &text() const { return text_; }

private:
    std::string text_;
    std::map<std::string, std::string> shared_;
};

std::string schema_gbnf(const ojson &schema, const std::string &tool, const std::string &where) {
    try {
        return json_schema_to_gbnf(schema);
    } catch (const error &e) {
        fail(error_kind::invalid_request, "tool '{}': {}{}", tool, where, e.what());
    }
}

const ojson &properties_of(const ojson &parameters) {
    static const ojson none = ojson::object();
    if (!parameters.is_object() || !parameters.contains("properties") || !parameters["properties"].is_object()) return none;
    return parameters["properties"];
}

bool is_required(const ojson &parameters, const std::string &key) {
    if (!parameters.contains("required") || !parameters["required"].is_array()) return false;
    for (const auto &r : parameters["required"])
        if (r.is_string() && r.get<std::string>() == key) return true;
    return false;
}

// A tagged parameter's value: raw text for strings (their enum or const as literals), JSON for
// the rest.
std::string xml_value_rule(gbnf_builder &g, const ojson &schema, const std::string &tool, const std::string &prefix) {
    const bool is_string = schema.is_object() && schema.contains("type") && schema["type"] == "string";
    if (is_string && schema.contains("const") && schema["const"].is_string()) return gbnf_quote(schema["const"].get<std::string>());
    if (is_string && schema.contains("enum") && schema["enum"].is_array()) {
        std::string alts;
        for (const auto &v : schema["enum"])
            if (v.is_string()) alts += (alts.empty() ? "" : " | ") + gbnf_quote(v.get<std::string>());
        if (!alts.empty()) return "(" + alts + ")";
    }
    if (is_string) return "xml-text";
    return g.add(schema_gbnf(schema, tool, "parameter schema: "), prefix);
}

// Qwen3-Coder's and GLM's parameter list, in the schema's order.
std::string xml_params(gbnf_builder &g, const tool_signature &t, tool_format format, const std::string &prefix) {
    std::string seq;
    int j = 0;
    for (const auto &[key, schema] : properties_of(t.parameters).items()) {
        const std::string value = xml_value_rule(g, schema, t.name, fmt::format("{}p{}-", prefix, j++));
        const std::string one = format == tool_format::qwen3_coder
                                    ? gbnf_quote("<parameter=" + key + ">\n") + " " + value + " " + gbnf_quote("\n</parameter>\n")
                                    : gbnf_quote("<arg_key>" + key + "</arg_key>\n<arg_value>") + " " + value + " " +
                                          gbnf_quote("</arg_value>\n");
        seq += is_required(t.parameters, key) ? " " + one : " (" + one + ")?";
    }
    return seq.empty() ? "\"\"" : seq.substr(1);
}

std::string call_rule(gbnf_builder &g, const tool_signature &t, tool_format format, const std::string &prefix) {
    const std::string json_name = ojson(t.name).dump();
    switch (format) {
    case tool_format::hermes:
        return gbnf_quote("<tool_call>\n{\"name\": " + json_name + ", \"arguments\": ") + " " +
               g.add(schema_gbnf(t.parameters, t.name, ""), prefix) + " " + gbnf_quote("}\n</tool_call>");
    case tool_format::deepseek_v31:
        return gbnf_quote("<｜tool▁call▁begin｜>" + t.name + "<｜tool▁sep｜>") + " " +
               g.add(schema_gbnf(t.parameters, t.name, ""), prefix) + " " + gbnf_quote("<｜tool▁call▁end｜>");
    case tool_format::kimi_k2:
        return gbnf_quote("<|tool_call_begin|>functions." + t.name + ":") + " [0-9]{1,3} " +
               gbnf_quote("<|tool_call_argument_begin|>") + " " + g.add(schema_gbnf(t.parameters, t.name, ""), prefix) + " " +
               gbnf_quote("<|tool_call_end|>");
    case tool_format::harmony:
        return gbnf_quote("<|channel|>commentary to=functions." + t.name + " <|constrain|>json<|message|>") + " " +
               g.add(schema_gbnf(t.parameters, t.name, ""), prefix);
    case tool_format::qwen3_coder:
        return gbnf_quote("<tool_call>\n<function=" + t.name + ">\n") + " " + xml_params(g, t, format, prefix) + " " +
               gbnf_quote("</function>\n</tool_call>");
    case tool_format::glm45:
        return gbnf_quote("<tool_call>" + t.name + "\n") + " " + xml_params(g, t, format, prefix) + " " + gbnf_quote("</tool_call>");
    }
    fail(error_kind::internal, "unknown tool format");
}

}  // namespace

std::string gbnf_quote(std::string_view bytes) {
    std::string out = "\"";
    for (unsigned char c : bytes) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02X}", c);
            else out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

std::string tool_call_gbnf(std::span<const tool_signature> tools, const tool_grammar_options &options) {
    if (tools.empty()) fail(error_kind::invalid_request, "a forced tool call needs at least one tool");
    gbnf_builder g;
    std::string any;
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string prefix = fmt::format("t{}-", i);
        g.rule(prefix + "call", call_rule(g, tools[i], options.format, prefix));
        any += (i ? " | " : "") + prefix + "call";
    }
    g.rule("call", any);
    g.rule("xml-text", "[^<]*");
    const std::string many = options.parallel ? "call+" : "call";
    switch (options.format) {
    case tool_format::hermes:
    case tool_format::qwen3_coder:
        g.rule("root", options.parallel ? "call ( \"\\n\" call )*" : "call");
        break;
    case tool_format::glm45: g.rule("root", many); break;
    case tool_format::deepseek_v31:
        g.rule("root", gbnf_quote("<｜tool▁calls▁begin｜>") + " " + many + " " + gbnf_quote("<｜tool▁calls▁end｜>"));
        break;
    case tool_format::kimi_k2:
        g.rule("root", gbnf_quote("<|tool_calls_section_begin|>") + " " + many + " " + gbnf_quote("<|tool_calls_section_end|>"));
        break;
    case tool_format::harmony:
        // gpt-oss may reason first; its one call ends with <|call|>, an end-of-generation token.
        g.rule("analysis", gbnf_quote("<|channel|>analysis<|message|>") + " [^<]* " + gbnf_quote("<|end|><|start|>assistant"));
        g.rule("root", "analysis? call");
        break;
    }
    return g.text();
}

}  // namespace tandem
