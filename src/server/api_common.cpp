// src/server/api_common.cpp - strict JSON readers, error bodies and timings shared by both APIs.
#include "src/server/api_common.h"

#include <cmath>
#include <limits>

namespace tandem::server {

std::string json_dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

static const char *type_name(const json &v) {
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number()) return "a number";
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    return "null";
}

std::optional<std::string> json_string(const json &obj, const char *key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) fail(error_kind::invalid_request, "'{}' must be a string, got {}", key, type_name(*it));
    return it->get<std::string>();
}

std::optional<bool> json_bool(const json &obj, const char *key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) fail(error_kind::invalid_request, "'{}' must be a boolean, got {}", key, type_name(*it));
    return it->get<bool>();
}

std::optional<double> json_number(const json &obj, const char *key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) fail(error_kind::invalid_request, "'{}' must be a number, got {}", key, type_name(*it));
    return it->get<double>();
}

std::optional<int64_t> json_integer(const json &obj, const char *key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (it->is_number_unsigned()) {
        const uint64_t u = it->get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            fail(error_kind::invalid_request, "'{}' is out of range: {}", key, u);
        return static_cast<int64_t>(u);
    }
    if (it->is_number_integer()) return it->get<int64_t>();
    if (it->is_number_float()) {
        const double d = it->get<double>();
        // Range first: converting a double outside int64's range is undefined behaviour.
        if (!(d > -9.0e15 && d < 9.0e15)) fail(error_kind::invalid_request, "'{}' is out of range: {}", key, d);
        // 16.0 is an integer written as a float by some clients; 16.5 is not.
        if (d == std::trunc(d)) return static_cast<int64_t>(d);
    }
    fail(error_kind::invalid_request, "'{}' must be an integer, got {}", key, type_name(*it));
}

namespace {

// Builds the DOM from SAX events (the parser never recurses), refusing a value nested deeper
// than max_depth or the value after max_values, so neither a "[[[[..." bomb nor a flat array
// of tiny values can make the parsed value outgrow the body by more than a small factor.
class limited_builder {
public:
    explicit limited_builder(const json_limits &limits) : limits_(limits) {}

    bool null() { return put(json(nullptr)) != nullptr; }
    bool boolean(bool v) { return put(json(v)) != nullptr; }
    bool number_integer(json::number_integer_t v) { return put(json(v)) != nullptr; }
    bool number_unsigned(json::number_unsigned_t v) { return put(json(v)) != nullptr; }
    bool number_float(json::number_float_t v, const json::string_t &) { return put(json(v)) != nullptr; }
    bool string(json::string_t &v) { return put(json(std::move(v))) != nullptr; }
    bool binary(json::binary_t &) { return fail_with("the request body holds binary data"); }
    bool start_object(std::size_t) { return open(json::object()); }
    bool key(json::string_t &k) {
        key_ = std::move(k);
        return true;
    }
    bool end_object() { return close(); }
    bool start_array(std::size_t) { return open(json::array()); }
    bool end_array() { return close(); }
    bool parse_error(std::size_t position, const std::string &, const json::exception &) {
        return fail_with(fmt::format("the request body is not valid JSON (at byte {})", position));
    }

    json &root() { return root_; }
    const std::string &error() const { return error_; }

private:
    json *put(json &&v) {
        if (++n_values_ > limits_.max_values) {
            fail_with(fmt::format("the request body has more than {} JSON values (the limit on values)", limits_.max_values));
            return nullptr;
        }
        if (stack_.empty()) {
            root_ = std::move(v);
            return &root_;
        }
        json &parent = *stack_.back();
        if (parent.is_array()) {
            parent.push_back(std::move(v));
            return &parent.back();
        }
        json &slot = parent[key_];  // a repeated key keeps the last value, as json::parse does
        slot = std::move(v);
        return &slot;
    }
    bool open(json &&container) {
        if (static_cast<int32_t>(stack_.size()) >= limits_.max_depth)
            return fail_with(fmt::format("the request body nests deeper than {} levels (the JSON depth limit)", limits_.max_depth));
        json *at = put(std::move(container));
        if (at == nullptr) return false;
        stack_.push_back(at);  // a parent's elements do not move while a child is open
        return true;
    }
    bool close() {
        stack_.pop_back();
        return true;
    }
    bool fail_with(std::string message) {
        if (error_.empty()) error_ = std::move(message);
        return false;
    }

    json_limits limits_;
    json root_;
    std::vector<json *> stack_;
    std::string key_;
    int64_t n_values_ = 0;
    std::string error_;
};

}  // namespace

json json_parse_body(const std::string &body, const json_limits &limits) {
    limited_builder builder(limits);
    const bool ok = json::sax_parse(body, &builder, json::input_format_t::json, /*strict=*/true);
    if (!ok || !builder.error().empty())
        fail(error_kind::invalid_request, "{}", builder.error().empty() ? "the request body is not valid JSON" : builder.error());
    json &j = builder.root();
    if (!j.is_object()) fail(error_kind::invalid_request, "the request body must be a JSON object, got {}", type_name(j));
    return std::move(j);
}

std::string json_text_content(const json &content, const std::string &where) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) fail(error_kind::invalid_request, "{} must be a string or an array of text parts", where);
    std::string out;
    for (const auto &part : content) {
        if (!part.is_object()) fail(error_kind::invalid_request, "{}: every part must be an object", where);
        auto type = json_string(part, "type");
        if (type != "text") fail(error_kind::invalid_request, "{}: only parts of type 'text' are supported, got '{}'", where, type.value_or(""));
        auto text = json_string(part, "text");
        if (!text) fail(error_kind::invalid_request, "{}: a text part needs 'text'", where);
        out += *text;
    }
    return out;
}

std::vector<std::string> json_stop_list(const json &obj, const char *key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return {};
    if (it->is_string()) return {it->get<std::string>()};
    if (!it->is_array()) fail(error_kind::invalid_request, "'{}' must be a string or an array of strings", key);
    if (it->size() > 16) fail(error_kind::invalid_request, "'{}' has {} entries; at most 16 are allowed", key, it->size());
    std::vector<std::string> out;
    for (const auto &s : *it) {
        if (!s.is_string()) fail(error_kind::invalid_request, "'{}' must contain only strings", key);
        out.push_back(s.get<std::string>());
    }
    return out;
}

json openai_error_body(int status, const std::string &message, const std::string &code) {
    const char *type = "invalid_request_error";
    switch (status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 501: type = "not_supported_error"; break;
    case 503: type = "unavailable_error"; break;
    default: type = status >= 500 ? "server_error" : "invalid_request_error"; break;
    }
    json err = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
    if (!code.empty()) err["code"] = code;
    return {{"error", err}};
}

json anthropic_error_body(int status, const std::string &message) {
    const char *type = "invalid_request_error";
    switch (status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: case 529: type = "overloaded_error"; break;
    default: type = status >= 500 ? "api_error" : "invalid_request_error"; break;
    }
    return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

json api_error_body(api_kind api, int status, const std::string &message) {
    return api == api_kind::anthropic ? anthropic_error_body(status, message) : openai_error_body(status, message);
}

json timings_json(const gen_timings &t) {
    auto per_token = [](double ms, int32_t n) { return n > 0 ? ms / n : 0.0; };
    auto per_second = [](double ms, int32_t n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
    return {
        {"cache_n", t.cache_n},
        {"prompt_n", t.prompt_n},
        {"prompt_ms", t.prompt_ms},
        {"prompt_per_token_ms", per_token(t.prompt_ms, t.prompt_n)},
        {"prompt_per_second", per_second(t.prompt_ms, t.prompt_n)},
        {"predicted_n", t.predicted_n},
        {"predicted_ms", t.predicted_ms},
        {"predicted_per_token_ms", per_token(t.predicted_ms, t.predicted_n)},
        {"predicted_per_second", per_second(t.predicted_ms, t.predicted_n)},
    };
}

int finish_http_status(const gen_event &done) {
    if (done.finish == finish_reason::cancelled) return 503;
    if (done.finish == finish_reason::error) return done.status ? done.status : 500;
    return 200;
}

}  // namespace tandem::server
