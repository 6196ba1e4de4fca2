// src/server/api_anthropic.cpp - Anthropic Messages: request mapping, the message object and the
// streaming sequence message_start, content_block_start, ping, content_block_delta...,
// content_block_stop, message_delta, message_stop.
#include "src/server/api_anthropic.h"

#include "src/server/api_controls.h"

#include <random>

namespace tandem::server {

api_request anthropic_parse_messages(const json &body, bool count_tokens) {
    api_request r;
    r.route = count_tokens ? route_kind::count_tokens : route_kind::messages;
    auto model = json_string(body, "model");
    if (!model) fail(error_kind::invalid_request, "'model' is required");
    r.model = *model;
    if (!count_tokens) {
        auto m = json_integer(body, "max_tokens");
        if (!m) fail(error_kind::invalid_request, "'max_tokens' is required");
        if (*m < 1) fail(error_kind::invalid_request, "'max_tokens' must be >= 1, got {}", *m);
        if (*m > (1 << 30)) fail(error_kind::invalid_request, "'max_tokens' is too large: {}", *m);
        r.max_tokens = static_cast<int32_t>(*m);
    }
    if (auto sys = body.find("system"); sys != body.end() && !sys->is_null()) {
        std::string text = json_text_content(*sys, "system");
        if (!text.empty()) r.messages.push_back({"system", text});
    }
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty())
        fail(error_kind::invalid_request, "'messages' must be a non-empty array");
    for (size_t i = 0; i < it->size(); ++i) {
        const json &m = (*it)[i];
        std::string where = fmt::format("messages.{}", i);
        if (!m.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
        auto role = json_string(m, "role");
        if (role != "user" && role != "assistant")
            fail(error_kind::invalid_request, "{}.role must be 'user' or 'assistant', got '{}'", where, role.value_or(""));
        auto content = m.find("content");
        if (content == m.end() || content->is_null()) fail(error_kind::invalid_request, "{}.content is required", where);
        r.messages.push_back({*role, json_text_content(*content, where + ".content")});
    }
    parse_sampling_controls(body, api_kind::anthropic, r);
    r.stop = json_stop_list(body, "stop_sequences");
    r.stream = json_bool(body, "stream").value_or(false);
    return r;
}

namespace {

const char *stop_reason(const gen_event &done) {
    if (done.finish == finish_reason::length) return "max_tokens";
    if (!done.stop_matched.empty()) return "stop_sequence";
    return "end_turn";
}

class anthropic_job : public generation_job {
public:
    anthropic_job(const api_request &req, response_context ctx) : req_(req), ctx_(std::move(ctx)) {}

    bool streaming() const override { return req_.stream; }

    std::string stream_begin() override {
        json message = message_base();
        message["content"] = json::array();
        message["stop_reason"] = nullptr;
        message["stop_sequence"] = nullptr;
        message["usage"] = {{"input_tokens", request.prompt.size()}, {"output_tokens", 0}};
        return event("message_start", {{"type", "message_start"}, {"message", message}}) +
               event("content_block_start", {{"type", "content_block_start"}, {"index", 0},
                                             {"content_block", {{"type", "text"}, {"text", ""}}}}) +
               event("ping", {{"type", "ping"}});
    }

    std::string on_event(const gen_event &ev) override {
        if (ev.type == gen_event::kind::progress) return req_.stream ? std::string(": prefill\n\n") : std::string();
        if (ev.type == gen_event::kind::delta) {
            text_ += ev.text;
            if (!req_.stream || ev.text.empty()) return {};
            return event("content_block_delta", {{"type", "content_block_delta"}, {"index", 0},
                                                 {"delta", {{"type", "text_delta"}, {"text", ev.text}}}});
        }
        done_ = ev;
        if (!req_.stream) return {};
        if (ev.finish == finish_reason::cancelled || ev.finish == finish_reason::error)
            return event("error", anthropic_error_body(ev.finish == finish_reason::cancelled ? 503 : 500, ev.error));
        json delta = {{"stop_reason", stop_reason(ev)},
                      {"stop_sequence", ev.stop_matched.empty() ? json(nullptr) : json(ev.stop_matched)}};
        json md = {{"type", "message_delta"}, {"delta", delta}, {"usage", {{"output_tokens", ev.n_generated}}},
                   {"timings", timings_json(ev.timings)}};
        return event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
               event("message_delta", md) + event("message_stop", {{"type", "message_stop"}});
    }

    json final_body() override {
        if (final_status() != 200) return anthropic_error_body(final_status(), done_.error);
        json body = message_base();
        body["content"] = json::array({{{"type", "text"}, {"text", text_}}});
        body["stop_reason"] = stop_reason(done_);
        body["stop_sequence"] = done_.stop_matched.empty() ? json(nullptr) : json(done_.stop_matched);
        body["usage"] = {{"input_tokens", done_.n_prompt},
                         {"output_tokens", done_.n_generated},
                         {"cache_read_input_tokens", done_.timings.cache_n}};
        body["timings"] = timings_json(done_.timings);
        return body;
    }

    int final_status() const override { return finish_http_status(done_.finish); }

private:
    json message_base() const {
        return {{"id", ctx_.id}, {"type", "message"}, {"role", "assistant"}, {"model", ctx_.model}};
    }
    static std::string event(const char *name, const json &data) {
        return fmt::format("event: {}\ndata: {}\n\n", name, json_dump(data));
    }

    api_request req_;
    response_context ctx_;
    std::string text_;
    gen_event done_;
};

}  // namespace

std::unique_ptr<generation_job> anthropic_make_job(const api_request &req, response_context ctx) {
    return std::make_unique<anthropic_job>(req, std::move(ctx));
}

}  // namespace tandem::server
