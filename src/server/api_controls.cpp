// src/server/api_controls.cpp - the fields each route accepts, the sampling and penalty fields,
// logit_bias, response formats and grammars, the sampling defaults and the grammar vocabulary.
#include "src/server/api_controls.h"

#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/tokenizer.h"

#include <algorithm>
#include <array>
#include <limits>
#include <list>
#include <mutex>
#include <random>

namespace tandem::server {

namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::string_view chat_fields[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options", "stop", "n", "seed",
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "repeat_penalty", "repeat_last_n", "logit_bias", "logprobs", "top_logprobs", "response_format", "grammar",
    "chat_template_kwargs", "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort", "user", "metadata"};
constexpr std::string_view completion_fields[] = {
    "model", "prompt", "max_tokens", "stream", "stream_options", "stop", "n", "echo", "seed", "temperature", "top_p",
    "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "repeat_penalty", "repeat_last_n",
    "logit_bias", "logprobs", "response_format", "grammar", "user"};
constexpr std::string_view messages_fields[] = {"model", "max_tokens", "messages", "system", "stream", "stop_sequences",
                                                "temperature", "top_p", "top_k", "output_config", "output_format", "metadata",
                                                "tools", "tool_choice", "thinking"};
// Schemas add no prompt tokens here (the grammar acts on the output), so counting accepts them.
constexpr std::string_view count_tokens_fields[] = {"model", "messages", "system", "output_config", "output_format", "tools",
                                                    "tool_choice", "thinking"};

// Most logit_bias entries a request may carry (OpenAI documents no limit; this bounds a row's rules).
constexpr size_t max_logit_bias = 1024;
// Compiled grammars kept for reuse, by their source text.
constexpr size_t grammar_cache_size = 64;

class grammar_cache {
public:
    template <class Make>
    std::shared_ptr<const grammar> get(const std::string &key, Make make) {
        {
            std::lock_guard lock(mu_);
            for (auto it = lru_.begin(); it != lru_.end(); ++it) {
                if (it->first != key) continue;
                lru_.splice(lru_.begin(), lru_, it);
                return lru_.front().second;
            }
        }
        auto g = std::make_shared<const grammar>(make());  // compiled outside the lock
        std::lock_guard lock(mu_);
        lru_.emplace_front(key, g);
        if (lru_.size() > grammar_cache_size) lru_.pop_back();
        return g;
    }

private:
    std::mutex mu_;
    std::list<std::pair<std::string, std::shared_ptr<const grammar>>> lru_;
};

grammar_cache &grammars() {
    static grammar_cache cache;
    return cache;
}

bool present(const json &obj, const char *key) {
    auto it = obj.find(key);
    return it != obj.end() && !it->is_null();
}

float number_in(const json &body, const char *key, double lo, double hi, bool lo_open = false) {
    const double v = *json_number(body, key);
    if (v < lo || v > hi || (lo_open && v == lo))
        fail(error_kind::invalid_request, "'{}' must be in {}{}, {}], got {}", key, lo_open ? "(" : "[", lo, hi, v);
    return float(v);
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const json &body) {
    const json &m = body.at("logit_bias");
    if (!m.is_object()) fail(error_kind::invalid_request, "'logit_bias' must be an object mapping token ids to biases");
    if (m.size() > max_logit_bias)
        fail(error_kind::invalid_request, "'logit_bias' has {} entries; at most {} are allowed", m.size(), max_logit_bias);
    std::vector<std::pair<int32_t, float>> out;
    for (const auto &[key, value] : m.items()) {
        const bool digits = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits || std::stoll(key) > std::numeric_limits<int32_t>::max())
            fail(error_kind::invalid_request, "'logit_bias': key '{}' is not a token id (a decimal integer)", key);
        if (!value.is_number()) fail(error_kind::invalid_request, "'logit_bias': the bias of token {} must be a number", key);
        const double b = value.get<double>();
        if (!(b >= -100.0 && b <= 100.0))
            fail(error_kind::invalid_request, "'logit_bias': the bias of token {} must be in [-100, 100], got {}", key, b);
        out.emplace_back(int32_t(std::stoll(key)), float(b));
    }
    std::sort(out.begin(), out.end());
    for (size_t i = 1; i < out.size(); ++i)
        if (out[i].first == out[i - 1].first)
            fail(error_kind::invalid_request, "'logit_bias' names token {} twice", out[i].first);
    return out;
}

void parse_penalties(const json &body, api_request &r) {
    sampling_overrides &o = r.overrides;
    if (json_number(body, "presence_penalty")) o.presence_penalty = number_in(body, "presence_penalty", -2.0, 2.0);
    if (json_number(body, "frequency_penalty")) o.frequency_penalty = number_in(body, "frequency_penalty", -2.0, 2.0);
    std::optional<float> repeat;
    for (const char *key : {"repetition_penalty", "repeat_penalty"}) {
        if (!json_number(body, key)) continue;
        const float v = number_in(body, key, 0.0, 10.0, true);
        if (repeat && *repeat != v)
            fail(error_kind::invalid_request, "'repetition_penalty' and 'repeat_penalty' name one setting; give one of them");
        repeat = v;
    }
    o.repeat_penalty = repeat;
    if (auto n = json_integer(body, "repeat_last_n")) {
        if (*n < -1 || *n > (int64_t(1) << 30))
            fail(error_kind::invalid_request, "'repeat_last_n' must be -1 (every token) or a count >= 0, got {}", *n);
        o.repeat_last_n = int32_t(*n);
    }
    if (present(body, "logit_bias")) r.sampling.logit_bias = parse_logit_bias(body);
}

std::shared_ptr<const grammar> schema_grammar(const ordered_json &schema, const std::string &where) {
    if (!schema.is_object() && !schema.is_boolean())
        fail(error_kind::invalid_request, "'{}' must be a JSON Schema (an object)", where);
    try {
        return grammars().get("schema\n" + schema.dump(), [&] { return grammar::from_json_schema(schema); });
    } catch (const error &e) {
        fail(e.kind(), "'{}': {}", where, e.what());
    }
}

void check_keys(const ordered_json &obj, std::initializer_list<std::string_view> keys, const std::string &where) {
    for (const auto &[key, value] : obj.items())
        if (!value.is_null() && std::find(keys.begin(), keys.end(), key) == keys.end())
            fail(error_kind::invalid_request, "'{}.{}' is not supported (accepted: {})", where, key, fmt::join(keys, ", "));
}

std::optional<std::string> ordered_string(const ordered_json &obj, const char *key, const std::string &where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) fail(error_kind::invalid_request, "'{}.{}' must be a string", where, key);
    return it->get<std::string>();
}

}  // namespace

std::span<const std::string_view> route_fields(route_kind route) {
    switch (route) {
    case route_kind::chat: return chat_fields;
    case route_kind::completion: return completion_fields;
    case route_kind::messages: return messages_fields;
    case route_kind::count_tokens: return count_tokens_fields;
    case route_kind::responses: break;  // responses_parse checks its own
    }
    return {};
}

void check_request_fields(route_kind route, const json &body) {
    const std::span<const std::string_view> known = route_fields(route);
    for (const auto &[key, value] : body.items()) {
        if (value.is_null() || std::find(known.begin(), known.end(), key) != known.end()) continue;
        fail(error_kind::invalid_request, "'{}' is not supported by this server on this route; remove it (accepted: {})", key,
             fmt::join(known, ", "));
    }
}

void parse_sampling_controls(const json &body, api_kind api, api_request &r) {
    sampling_overrides &o = r.overrides;
    const bool openai = api == api_kind::openai;
    if (json_number(body, "temperature")) o.temperature = number_in(body, "temperature", 0.0, openai ? 2.0 : 1.0);
    if (json_number(body, "top_p")) o.top_p = number_in(body, "top_p", 0.0, 1.0, true);
    if (auto k = json_integer(body, "top_k")) {
        if (*k < 0) fail(error_kind::invalid_request, "'top_k' must be >= 0 (0: off), got {}", *k);
        o.top_k = int32_t(std::min<int64_t>(*k, int64_t(1) << 30));  // beyond the vocabulary: all of it
    }
    if (json_number(body, "min_p")) o.min_p = number_in(body, "min_p", 0.0, 1.0);
    if (!openai) {
        r.sampling.seed = uint64_t(std::random_device{}());
        return;
    }
    if (auto s = json_integer(body, "seed")) r.sampling.seed = uint64_t(*s);
    else r.sampling.seed = 0x7a5d'0000'0000'0000ull ^ uint64_t(std::random_device{}());
    parse_penalties(body, r);
}

std::shared_ptr<const grammar> grammar_from_gbnf(std::string_view text) {
    return grammars().get("gbnf\n" + std::string(text), [&] { return grammar::from_gbnf(text); });
}

std::shared_ptr<const grammar> grammar_from_response_format(const ordered_json &format, std::string_view where_view) {
    const std::string where(where_view);
    if (format.is_null()) return nullptr;
    if (!format.is_object()) fail(error_kind::invalid_request, "'{}' must be an object", where);
    const std::optional<std::string> type = ordered_string(format, "type", where);
    if (!type) fail(error_kind::invalid_request, "'{}.type' is required ('text', 'json_object' or 'json_schema')", where);
    if (*type == "text" || *type == "json_object") {
        check_keys(format, {"type"}, where);
        if (*type == "text") return nullptr;
        return grammars().get("json_object", [] { return grammar::json_object(); });
    }
    if (*type != "json_schema")
        fail(error_kind::invalid_request, "'{}.type' must be 'text', 'json_object' or 'json_schema', got '{}'", where, *type);
    // OpenAI's chat nests the schema's fields in "json_schema"; its Responses API and Anthropic do not.
    const ordered_json *spec = &format;
    std::string at = where;
    if (format.contains("json_schema")) {
        check_keys(format, {"type", "json_schema"}, where);
        at = where + ".json_schema";
        spec = &format.at("json_schema");
        if (!spec->is_object()) fail(error_kind::invalid_request, "'{}' must be an object", at);
        check_keys(*spec, {"name", "description", "schema", "strict"}, at);
    } else {
        check_keys(format, {"type", "name", "description", "schema", "strict"}, where);
    }
    ordered_string(*spec, "name", at);
    ordered_string(*spec, "description", at);
    if (auto s = spec->find("strict"); s != spec->end() && !s->is_null() && !s->is_boolean())
        fail(error_kind::invalid_request, "'{}.strict' must be a boolean", at);
    auto schema = spec->find("schema");
    if (schema == spec->end() || schema->is_null()) return schema_grammar(ordered_json::object(), at + ".schema");
    return schema_grammar(*schema, at + ".schema");
}


void parse_output_controls(const json &body, std::string_view raw_body, api_request &r) {
    // The schema's own property order lives only in the text (json keeps keys sorted).
    auto ordered = [&]() { return ordered_json::parse(raw_body); };
    if (r.route == route_kind::messages || r.route == route_kind::count_tokens) {
        const bool config = present(body, "output_config"), beta = present(body, "output_format");
        if (!config && !beta) return;
        if (config && beta) fail(error_kind::invalid_request, "'output_config.format' and 'output_format' name one setting; give one of them");
        const ordered_json doc = ordered();
        const ordered_json *format = beta ? &doc.at("output_format") : nullptr;
        std::string where = "output_format";
        if (config) {
            const ordered_json &oc = doc.at("output_config");
            if (!oc.is_object()) fail(error_kind::invalid_request, "'output_config' must be an object");
            check_keys(oc, {"format"}, "output_config");
            if (!oc.contains("format")) return;
            format = &oc.at("format");
            where = "output_config.format";
        }
        if (format->is_object() && format->value("type", ordered_json()) != "json_schema")
            fail(error_kind::invalid_request, "'{}.type' must be 'json_schema'", where);
        r.constraint = grammar_from_response_format(*format, where);
        return;
    }
    if (present(body, "grammar")) {
        const std::optional<std::string> text = json_string(body, "grammar");
        r.constraint = grammar_from_gbnf(*text);
    }
    if (present(body, "response_format")) {
        std::shared_ptr<const grammar> g = grammar_from_response_format(ordered().at("response_format"), "response_format");
        if (g && r.constraint) fail(error_kind::invalid_request, "'grammar' and a 'response_format' other than text both constrain the output; give one of them");
        if (g) r.constraint = std::move(g);
    }
}

sampling_params sampling_resolve(const sampling_defaults &d, const api_request &r) {
    sampling_params p = r.sampling;
    const sampling_overrides &o = r.overrides;
    p.temperature = o.temperature.value_or(d.temperature);
    p.top_k = o.top_k.value_or(d.top_k);
    p.top_p = o.top_p.value_or(d.top_p);
    p.min_p = o.min_p.value_or(d.min_p);
    p.presence_penalty = o.presence_penalty.value_or(d.presence_penalty);
    p.frequency_penalty = o.frequency_penalty.value_or(d.frequency_penalty);
    p.repeat_penalty = o.repeat_penalty.value_or(d.repeat_penalty);
    p.repeat_last_n = o.repeat_last_n.value_or(d.repeat_last_n);
    return p;
}

namespace {

struct default_source {
    const char *name, *key, *flag;  // key: the model file's general.sampling.* key (null: none exists)
    double lo, hi;
    bool lo_open;
};

constexpr default_source default_sources[] = {
    {"temperature", "general.sampling.temp", "--temp", 0.0, 2.0, false},
    {"top_k", "general.sampling.top_k", "--top-k", 0.0, double(1 << 30), false},
    {"top_p", "general.sampling.top_p", "--top-p", 0.0, 1.0, true},
    {"min_p", "general.sampling.min_p", "--min-p", 0.0, 1.0, false},
    {"presence_penalty", nullptr, "--presence-penalty", -2.0, 2.0, false},
    {"frequency_penalty", nullptr, "--frequency-penalty", -2.0, 2.0, false},
    {"repeat_penalty", "general.sampling.penalty_repeat", "--repeat-penalty", 0.0, 10.0, true},
    {"repeat_last_n", "general.sampling.penalty_last_n", "--repeat-last-n", -1.0, double(1 << 30), false},
};

// Keys of llama.cpp's recommended sampling that name samplers Tandem does not have.
constexpr const char *unsupported_sampling_keys[] = {"general.sampling.sequence", "general.sampling.xtc_probability",
                                                     "general.sampling.xtc_threshold", "general.sampling.mirostat",
                                                     "general.sampling.mirostat_tau", "general.sampling.mirostat_eta"};

}  // namespace

sampling_defaults sampling_defaults_resolve(const sampling_flags &f, const gguf_file *file) {
    sampling_defaults d;
    auto resolve = [&](const default_source &s, std::optional<double> flag, auto &field) {
        double v = 0.0;
        if (flag) {
            v = *flag;
            d.from[s.name] = "flag";
        } else if (file && s.key && file->has(s.key)) {
            v = file->get_float(s.key);
            // llama.cpp reads a top_k <= 0 as off, as 0 is here.
            if (std::string_view(s.name) == "top_k" && v < 0) v = 0;
            d.from[s.name] = "model";
        } else {
            return;
        }
        if (!(v >= s.lo && v <= s.hi) || (s.lo_open && v == s.lo))
            fail(error_kind::config, "{} {} is outside {}{}, {}]{}", flag ? s.flag : s.key, v, s.lo_open ? "(" : "[", s.lo, s.hi,
                 flag ? "" : fmt::format(" (set {} to override the model file)", s.flag));
        field = static_cast<std::remove_reference_t<decltype(field)>>(v);
    };
    auto opt = [](const auto &o) { return o ? std::optional<double>(double(*o)) : std::nullopt; };
    resolve(default_sources[0], opt(f.temperature), d.temperature);
    resolve(default_sources[1], opt(f.top_k), d.top_k);
    resolve(default_sources[2], opt(f.top_p), d.top_p);
    resolve(default_sources[3], opt(f.min_p), d.min_p);
    resolve(default_sources[4], opt(f.presence_penalty), d.presence_penalty);
    resolve(default_sources[5], opt(f.frequency_penalty), d.frequency_penalty);
    resolve(default_sources[6], opt(f.repeat_penalty), d.repeat_penalty);
    resolve(default_sources[7], opt(f.repeat_last_n), d.repeat_last_n);
    for (const char *key : unsupported_sampling_keys)
        if (file && file->has(key)) log_warn("the model file recommends {}, a sampler this server does not have: not applied", key);
    return d;
}

json sampling_defaults_json(const sampling_defaults &d) {
    return {{"temperature", d.temperature}, {"top_k", d.top_k}, {"top_p", d.top_p}, {"min_p", d.min_p},
            {"presence_penalty", d.presence_penalty}, {"frequency_penalty", d.frequency_penalty},
            {"repeat_penalty", d.repeat_penalty}, {"repeat_last_n", d.repeat_last_n}};
}

std::string sampling_defaults_line(const sampling_defaults &d) {
    std::string out;
    const json values = sampling_defaults_json(d);
    for (const auto &[name, value] : values.items()) {
        auto it = d.from.find(name);
        out += fmt::format("{}{}={}{}", out.empty() ? "" : " ", name, value.dump(), it == d.from.end() ? "" : " (" + it->second + ")");
    }
    return out;
}

grammar_vocab grammar_vocab_of(const tokenizer &tok) {
    const int32_t n = tok.n_vocab();
    std::vector<std::string> bytes(static_cast<size_t>(n));
    std::vector<int32_t> special;
    for (int32_t id = 0; id < n; ++id) {
        bytes[size_t(id)] = tok.token_bytes(id);
        const token_type t = tok.type(id);
        if (t == token_type::control || t == token_type::unused || t == token_type::unknown) special.push_back(id);
    }
    return grammar_vocab(bytes, special, tok.eog_ids());
}

}  // namespace tandem::server
