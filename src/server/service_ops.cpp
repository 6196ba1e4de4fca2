// src/server/service_ops.cpp - the service's small operations routes: /v1/models/{id},
// /tokenize and /detokenize in llama-server's shapes, /slots?fail_on_no_slot, /monitor/data, and
// the per-request accounting (ids, metrics, log lines).
#include "src/server/service.h"

#include "src/server/api_openai.h"
#include "tandem/tokenizer.h"

#include <fmt/format.h>

namespace tandem::server {

namespace {

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool utf8_valid(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        const int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
        if (n < 0 || i + static_cast<size_t>(n) >= s.size()) return false;
        uint32_t cp = n == 0 ? c : c & (0x3fu >> n);
        for (int k = 1; k <= n; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
            if ((cc & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        static constexpr uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += static_cast<size_t>(n) + 1;
    }
    return true;
}

// Refuses members other than `known`: a field we do not implement must not be silently ignored.
void only_fields(const json &j, std::initializer_list<const char *> known) {
    if (!j.is_object()) fail(error_kind::invalid_request, "the request body must be a JSON object");
    for (const auto &[name, value] : j.items()) {
        bool ok = false;
        for (const char *k : known) ok = ok || name == k;
        if (!ok) fail(error_kind::invalid_request, "unsupported field '{}'", name);
    }
}

bool bool_field(const json &j, const char *name, bool fallback) {
    if (!j.contains(name)) return fallback;
    if (!j[name].is_boolean()) fail(error_kind::invalid_request, "'{}' must be a boolean", name);
    return j[name].get<bool>();
}

}  // namespace

http_reply service::model_one(std::string_view path) const {
    const std::string_view id = path.substr(path.find("/models/") + 8);
    for (const auto &name : model_.model_names) {
        if (name != id) continue;
        const auto created = std::chrono::duration_cast<std::chrono::seconds>(started_.time_since_epoch()).count();
        http_reply out;
        out.body = json_dump(openai_models_body(std::string(id), created, model_.meta)["data"][0]);
        return out;
    }
    fail(error_kind::not_found, "model '{}' not found; this server serves '{}'", id, model_.model_id);
}

http_reply service::slots_reply(std::string_view target) const {
    bool fail_on_no_slot = false;
    const size_t q = target.find('?');
    std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
    while (!query.empty()) {
        const std::string_view item = query.substr(0, query.find('&'));
        query.remove_prefix(std::min(query.size(), item.size() + 1));
        const size_t eq = item.find('=');
        const std::string_view key = item.substr(0, eq), value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
        if (key != "fail_on_no_slot") fail(error_kind::invalid_request, "unsupported query parameter '{}' (GET /slots takes fail_on_no_slot)", key);
        if (value == "1" || value == "true") fail_on_no_slot = true;
        else if (value == "0" || value == "false") fail_on_no_slot = false;
        else fail(error_kind::invalid_request, "fail_on_no_slot must be 1, 0, true or false, got '{}'", value);
    }
    const json slots = slots_json();
    if (fail_on_no_slot) {
        bool any_free = false;
        for (const auto &s : slots) any_free = any_free || !s["is_processing"].get<bool>();
        if (!any_free) fail(error_kind::unavailable, "no slot available");
    }
    http_reply out;
    out.body = json_dump(slots);
    return out;
}

http_reply service::tokenize(const std::string &body) const {
    const json j = json_parse_body(body, config_.json);
    only_fields(j, {"content", "add_special", "parse_special", "with_pieces"});
    if (!j.contains("content") || !j["content"].is_string()) fail(error_kind::invalid_request, "'content' must be a string");
    const bool add_special = bool_field(j, "add_special", false);
    const bool parse_special = bool_field(j, "parse_special", true);
    const bool with_pieces = bool_field(j, "with_pieces", false);
    const std::vector<int32_t> ids = model_.tok->encode(j["content"].get<std::string>(), parse_special, add_special);
    json tokens = json::array();
    for (int32_t id : ids) {
        if (!with_pieces) {
            tokens.push_back(id);
            continue;
        }
        // A piece that splits a UTF-8 character is given as its bytes, as llama-server does.
        const std::string &bytes = model_.tok->token_bytes(id);
        json piece = json::array();
        if (utf8_valid(bytes)) piece = bytes;
        else
            for (unsigned char b : bytes) piece.push_back(static_cast<int>(b));
        tokens.push_back({{"id", id}, {"piece", piece}});
    }
    http_reply out;
    out.body = json_dump({{"tokens", tokens}});
    return out;
}

http_reply service::detokenize(const std::string &body) const {
    const json j = json_parse_body(body, config_.json);
    only_fields(j, {"tokens"});
    if (!j.contains("tokens") || !j["tokens"].is_array()) fail(error_kind::invalid_request, "'tokens' must be an array of token ids");
    std::vector<int32_t> ids;
    for (const auto &t : j["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model_.tok->n_vocab())
            fail(error_kind::invalid_request, "'tokens' holds {}, not a token id below {}", t.dump(), model_.tok->n_vocab());
        ids.push_back(t.get<int32_t>());
    }
    http_reply out;
    out.body = json_dump({{"content", model_.tok->decode(ids)}});
    return out;
}

json service::monitor_json() const {
    const scheduler_stats s = model_.sched->stats();
    json slots = json::array();
    for (const auto &v : model_.sched->slots()) {
        const char *state = !v.processing ? "idle" : v.n_prompt_done < v.n_prompt ? "prefill" : "decode";
        slots.push_back({{"id", v.id}, {"state", state}, {"age_s", v.age_s}, {"n_cached", v.n_cached}, {"n_ctx", v.n_ctx},
                         {"n_prompt", v.n_prompt}, {"n_decoded", v.n_decoded}, {"decode_tok_s", v.predicted_per_second},
                         {"prefill_tok_s", v.prompt_per_second}});
    }
    json devices = json::array();
    for (const engine_device_memory &m : model_.eng->device_memory())
        devices.push_back({{"name", m.name}, {"weights_bytes", m.weights}, {"kv_bytes", m.kv}, {"other_bytes", m.other},
                           {"gpu_free_bytes", m.gpu_free}, {"gpu_total_bytes", m.gpu_total}});
    const auto now = std::chrono::system_clock::now();
    return {
        {"time", std::chrono::duration<double>(now.time_since_epoch()).count()},
        {"uptime_s", std::chrono::duration<double>(now - started_).count()},
        {"model", model_.model_id},
        {"layout", model_.eng->layout()},
        {"gpus", model_.eng->gpus()},
        {"slots", slots},
        {"slots_in_use", s.slots_in_use},
        {"queue_depth", s.queue_depth},
        {"series", history_ ? history_->series() : json::object()},
        {"latency", metrics_.latency_json()},
        {"prompt_tokens", {{"computed", s.prompt_tokens}, {"cached", s.cached_prompt_tokens}}},
        {"generated_tokens", s.predicted_tokens},
        {"drafts", {{"drafted", s.draft_tokens}, {"kept", s.draft_accepted}}},
        {"requests", {{"total", s.requests_total}, {"cancelled", s.requests_cancelled}, {"rejected", s.requests_rejected}}},
        {"memory", {{"host", monitor_host_memory()}, {"devices", devices}}},
    };
}

std::string service::next_request_id() { return fmt::format("req-{}", next_request_++); }

void service::request_finished(const request_record &r) {
    metrics_.record(r);
    request_log(r);
}

}  // namespace tandem::server
