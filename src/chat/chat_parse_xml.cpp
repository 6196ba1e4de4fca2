// src/chat/chat_parse_xml.cpp - tool calls whose arguments are written as tagged key/value pairs:
// Qwen3-Coder (<function=NAME><parameter=KEY>\nvalue\n</parameter></function>) and GLM-4.5+
// (NAME<arg_key>KEY</arg_key><arg_value>value</arg_value>). Each parameter is reported once it is
// complete, as a fragment of the JSON arguments; values take the type the tool's schema gives.
#include "chat_parser_impl.h"

namespace tandem {

using namespace chat_detail;
using state = chat_parser::impl::state;
using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view function_open = "<function=";
constexpr std::string_view function_close = "</function>";
constexpr std::string_view parameter_open = "<parameter=";
constexpr std::string_view parameter_close = "</parameter>";
constexpr std::string_view call_close = "</tool_call>";
constexpr std::string_view key_open = "<arg_key>";
constexpr std::string_view key_close = "</arg_key>";
constexpr std::string_view value_open = "<arg_value>";
constexpr std::string_view value_close = "</arg_value>";
// A GLM function name longer than this without its newline is not a call.
constexpr size_t max_name_bytes = 256;

std::string dump(const ojson &j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

bool has_type(const ojson &j, std::string_view type) {
    if (type == "integer") return j.is_number_integer();
    if (type == "number") return j.is_number();
    if (type == "boolean") return j.is_boolean();
    if (type == "null") return j.is_null();
    if (type == "object") return j.is_object();
    if (type == "array") return j.is_array();
    if (type == "string") return j.is_string();
    return false;
}

// Python's str() of True, False and None, which Qwen3-Coder's template writes for such values.
ojson python_literal(std::string_view s) {
    if (s == "True") return true;
    if (s == "False") return false;
    if (s == "None") return nullptr;
    return ojson(ojson::value_t::discarded);
}

}  // namespace

namespace chat_detail {

std::string xml_value_json(std::string_view raw, const ojson *schema) {
    std::vector<std::string> types;
    if (schema != nullptr && schema->is_object() && schema->contains("type")) {
        const ojson &t = (*schema)["type"];
        if (t.is_string()) types.push_back(t.get<std::string>());
        else if (t.is_array())
            for (const auto &x : t)
                if (x.is_string()) types.push_back(x.get<std::string>());
    }
    const bool is_string_only = types.size() == 1 && types[0] == "string";
    if (is_string_only) return dump(ojson(raw));
    const std::string_view text = trim(raw);
    ojson parsed = ojson::parse(text, nullptr, false);
    if (parsed.is_discarded()) parsed = python_literal(text);
    if (!parsed.is_discarded()) {
        if (types.empty()) return dump(parsed);
        for (const std::string &t : types)
            if (t != "string" && has_type(parsed, t)) return dump(parsed);
    }
    return dump(ojson(raw));  // text, whatever the schema says: the caller sees what was written
}

}  // namespace chat_detail

const ojson *chat_parser::impl::param_schema(std::string_view key) const {
    for (const tool_signature &s : opt.signatures) {
        if (s.name != call_name) continue;
        if (!s.parameters.is_object() || !s.parameters.contains("properties")) return nullptr;
        const ojson &props = s.parameters["properties"];
        if (!props.is_object()) return nullptr;
        const auto it = props.find(std::string(key));
        return it == props.end() ? nullptr : &*it;
    }
    return nullptr;
}

void chat_parser::impl::xml_param(std::string_view key, std::string_view raw) {
    std::string fragment = n_params == 0 ? "{" : ", ";
    fragment += dump(ojson(std::string(trim(key)))) + ": " + xml_value_json(raw, param_schema(trim(key)));
    ++n_params;
    call_args(fragment);
}

void chat_parser::impl::xml_close() {
    call_args(n_params == 0 ? "{}" : "}");
    end_call();
}

bool chat_parser::impl::step_xml_head(bool at_end) {
    const bool coder = opt.syntax.tools == tool_format::qwen3_coder;
    const size_t i = skip_space(buf);
    const std::string_view rest = std::string_view(buf).substr(i);
    if (coder && rest.starts_with(function_open)) {
        const size_t close = rest.find('>');
        if (close != std::string_view::npos) {
            begin_call(trim(rest.substr(function_open.size(), close - function_open.size())));
            consume(i + close + 1);
            st = state::xml_body;
            return true;
        }
        if (!at_end) return false;
    } else if (coder && !at_end && may_become(rest, function_open)) {
        return false;
    } else if (!coder) {
        const marker_hit hit = find_first(rest, {"\n", key_open, call_close});
        const std::string_view name = trim(rest.substr(0, hit.which >= 0 ? hit.at : rest.size()));
        if (hit.which < 0 && !at_end && rest.size() <= max_name_bytes) return false;
        if (!name.empty() && name.size() <= max_name_bytes && name.find('<') == std::string_view::npos) {
            begin_call(name);
            consume(hit.which < 0 ? buf.size() : i + hit.at + (hit.which == 0 ? 1 : 0));
            st = state::xml_body;
            return true;
        }
    }
    // Not a call: the marker and what follows are text.
    const bool kept = opener == function_open;
    if (kept && !at_end) {
        emit_text(chat_event::kind::content, opener_space + std::string(function_open));
        consume(function_open.size());
    } else {
        emit_text(chat_event::kind::content, opener_space + (kept ? buf : opener));
        if (kept) buf.clear();
    }
    st = state::content;
    return true;
}

bool chat_parser::impl::step_xml_body(bool at_end) {
    const bool coder = opt.syntax.tools == tool_format::qwen3_coder;
    consume(skip_space(buf));
    const std::string_view rest = buf;
    const std::string_view param = coder ? parameter_open : key_open;
    const std::string_view end = coder ? function_close : call_close;
    if (rest.starts_with(param)) {
        if (coder) {
            const size_t close = rest.find('>');
            if (close == std::string_view::npos && !at_end) return false;
            const size_t value_at = close == std::string_view::npos ? rest.size() : close + 1;
            // A value ends at its close tag, or (the tag left out) where the next tag begins.
            const marker_hit hit = find_first(rest.substr(value_at), {parameter_close, parameter_open, function_close});
            if (hit.which < 0 && !at_end) return false;
            std::string_view value = rest.substr(value_at, hit.which < 0 ? std::string_view::npos : hit.at);
            if (value.starts_with('\n')) value.remove_prefix(1);
            if (value.ends_with('\n')) value.remove_suffix(1);
            const std::string_view key = rest.substr(param.size(), std::min(close, rest.size()) - param.size());
            const size_t used = hit.which < 0 ? rest.size() : value_at + hit.at + (hit.which == 0 ? parameter_close.size() : 0);
            xml_param(key, value);
            consume(used);
            return true;
        }
        const size_t key_end = rest.find(key_close);
        if (key_end == std::string_view::npos && !at_end) return false;
        const std::string_view key = rest.substr(param.size(), key_end == std::string_view::npos ? std::string_view::npos : key_end - param.size());
        size_t at = key_end == std::string_view::npos ? rest.size() : skip_space(rest, key_end + key_close.size());
        if (!at_end && may_become(rest.substr(at), value_open)) return false;
        if (rest.substr(at).starts_with(value_open)) at += value_open.size();
        const size_t value_end = rest.find(value_close, at);
        if (value_end == std::string_view::npos && !at_end) return false;
        xml_param(key, rest.substr(at, value_end == std::string_view::npos ? std::string_view::npos : value_end - at));
        consume(value_end == std::string_view::npos ? rest.size() : value_end + value_close.size());
        return true;
    }
    if (rest.starts_with(end)) {
        consume(end.size());
        xml_close();
        st = coder ? state::xml_tail : state::skip_space;
        return true;
    }
    if (!at_end && (may_become(rest, param) || may_become(rest, end))) return false;
    if (rest.empty()) {
        if (!at_end) return false;
        xml_close();  // cut off: the call ends with the output
        st = state::content;
        return false;
    }
    // Stray text between parameters is layout the format does not define: skipped to the next tag.
    const size_t next = rest.find('<', 1);
    if (next == std::string_view::npos && !at_end) {
        consume(rest.size());
        return false;
    }
    consume(next == std::string_view::npos ? rest.size() : next);
    return true;
}

bool chat_parser::impl::step_xml_tail(bool at_end) {
    const size_t i = skip_space(buf);
    const std::string_view rest = std::string_view(buf).substr(i);
    if (rest.starts_with(call_close)) {
        consume(i + call_close.size());
        st = state::skip_space;
        return true;
    }
    if (!at_end && may_become(rest, call_close)) return false;
    st = state::skip_space;
    return true;
}

}  // namespace tandem
