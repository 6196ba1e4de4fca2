// src/server/api_anthropic.cpp - Anthropic Messages replies: the message object with thinking,
// text and tool_use blocks, and the streaming sequence message_start, ping, then per block
// content_block_start, content_block_delta (thinking_delta, text_delta, input_json_delta)...,
// content_block_stop, then message_delta and message_stop.
#include "src/server/api_anthropic.h"
#include "src/server/api_output.h"

namespace tandem::server {

namespace {

const char *stop_reason(const gen_event &done, bool called) {
    if (done.finish == finish_reason::length) return "max_tokens";
    if (!done.stop_matched.empty()) return "stop_sequence";
    return called ? "tool_use" : "end_turn";
}

class anthropic_job : public generation_job {
public:
    anthropic_job(const api_request &req, response_context ctx)
        : req_(req), ctx_(std::move(ctx)), reply_(ctx_.parse, "toolu_", /*keep_model_ids=*/false) {}

    bool streaming() const override { return req_.stream; }

    std::string stream_begin() override {
        json message = message_base();
        message["content"] = json::array();
        message["stop_reason"] = nullptr;
        message["stop_sequence"] = nullptr;
        message["usage"] = {{"input_tokens", ctx_.n_prompt}, {"output_tokens", 0}};
        std::string out = event("message_start", {{"type", "message_start"}, {"message", message}});
        return out + event("ping", {{"type", "ping"}});
    }

    std::string on_event(const gen_event &ev) override {
        if (ev.type == gen_event::kind::progress) return req_.stream ? std::string(": prefill\n\n") : std::string();
        if (ev.type == gen_event::kind::delta) {
            const std::string out = blocks(reply_.push(ev.text));
            return req_.stream ? out : std::string();
        }
        done_ = ev;
        std::string out = blocks(reply_.finish());
        if (!req_.stream) return {};
        if (ev.finish == finish_reason::cancelled || ev.finish == finish_reason::error)
            return event("error", anthropic_error_body(finish_http_status(ev), ev.error));
        if (n_blocks_ == 0) out += open_block({{"type", "text"}, {"text", ""}}, block::text);  // never an empty reply
        out += close_block();
        json delta = {{"stop_reason", stop_reason(ev, !reply_.calls().empty())},
                      {"stop_sequence", ev.stop_matched.empty() ? json(nullptr) : json(ev.stop_matched)}};
        json md = {{"type", "message_delta"}, {"delta", delta}, {"usage", usage(ev)},
                   {"timings", timings_json(ev.timings)}};
        return out + event("message_delta", md) + event("message_stop", {{"type", "message_stop"}});
    }

    json final_body() override {
        if (final_status() != 200) return anthropic_error_body(final_status(), done_.error);
        json body = message_base();
        json content = json::array();
        if (req_.thinking_blocks && !reply_.reasoning().empty())
            content.push_back({{"type", "thinking"}, {"thinking", reply_.reasoning()}, {"signature", ""}});
        if (!reply_.content().empty() || reply_.calls().empty()) content.push_back({{"type", "text"}, {"text", reply_.content()}});
        for (const auto &c : reply_.calls())
            content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", tool_arguments_object(c.arguments)}});
        body["content"] = content;
        body["stop_reason"] = stop_reason(done_, !reply_.calls().empty());
        body["stop_sequence"] = done_.stop_matched.empty() ? json(nullptr) : json(done_.stop_matched);
        body["usage"] = usage(done_);
        body["timings"] = timings_json(done_.timings);
        return body;
    }

    int final_status() const override { return finish_http_status(done_); }

    // Anthropic's input_tokens leaves out the tokens read from the cache: the prompt is their sum.
    static json usage(const gen_event &ev) {
        return {{"input_tokens", ev.n_prompt - ev.timings.cache_n},
                {"output_tokens", ev.n_generated},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", ev.timings.cache_n}};
    }

private:
    enum class block { none, thinking, text, tool };

    json message_base() const {
        return {{"id", ctx_.id}, {"type", "message"}, {"role", "assistant"}, {"model", ctx_.model}};
    }
    static std::string event(const char *name, const json &data) {
        return fmt::format("event: {}\ndata: {}\n\n", name, json_dump(data));
    }

    std::string open_block(const json &start, block kind) {
        std::string out = close_block();
        current_ = kind;
        return out + event("content_block_start", {{"type", "content_block_start"}, {"index", n_blocks_++}, {"content_block", start}});
    }
    std::string close_block() {
        if (current_ == block::none) return {};
        current_ = block::none;
        return event("content_block_stop", {{"type", "content_block_stop"}, {"index", n_blocks_ - 1}});
    }
    std::string delta(const json &d) {
        return event("content_block_delta", {{"type", "content_block_delta"}, {"index", n_blocks_ - 1}, {"delta", d}});
    }

    // The stream's blocks for these events: a block opens when the kind of output changes.
    std::string blocks(const std::vector<chat_event> &events) {
        if (!req_.stream) return {};
        std::string out;
        for (const chat_event &e : events) {
            switch (e.type) {
            case chat_event::kind::reasoning:
                if (!req_.thinking_blocks) break;
                if (current_ != block::thinking) out += open_block({{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, block::thinking);
                out += delta({{"type", "thinking_delta"}, {"thinking", e.text}});
                break;
            case chat_event::kind::content:
                if (current_ != block::text) out += open_block({{"type", "text"}, {"text", ""}}, block::text);
                out += delta({{"type", "text_delta"}, {"text", e.text}});
                break;
            case chat_event::kind::tool_begin:
                out += open_block({{"type", "tool_use"}, {"id", e.id}, {"name", e.text}, {"input", json::object()}}, block::tool);
                break;
            case chat_event::kind::tool_args: out += delta({{"type", "input_json_delta"}, {"partial_json", e.text}}); break;
            case chat_event::kind::tool_end: out += close_block(); break;
            }
        }
        return out;
    }

    api_request req_;
    response_context ctx_;
    chat_reply reply_;
    gen_event done_;
    block current_ = block::none;
    int32_t n_blocks_ = 0;
};

}  // namespace

std::unique_ptr<generation_job> anthropic_make_job(const api_request &req, response_context ctx) {
    return std::make_unique<anthropic_job>(req, std::move(ctx));
}

}  // namespace tandem::server
