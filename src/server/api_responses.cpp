// src/server/api_responses.cpp - Responses replies: the response object with its output items
// (reasoning, message, function_call) and usage, and the stream: response.created,
// response.in_progress, per item output_item.added, its parts and deltas (reasoning_text,
// output_text, function_call_arguments), their done events and output_item.done, then
// response.completed or response.incomplete (or response.failed); every event numbered.
#include "src/server/api_responses.h"
#include "src/server/api_output.h"
#include "src/server/api_tools.h"

namespace tandem::server {

namespace {

class responses_job : public generation_job {
public:
    responses_job(const api_request &req, response_context ctx, response_store *store)
        : req_(req), ctx_(std::move(ctx)), store_(store), reply_(ctx_.parse, "call_", /*keep_model_ids=*/true) {}

    bool streaming() const override { return req_.stream; }

    std::string stream_begin() override {
        json r = response("in_progress");
        std::string out = event("response.created", {{"response", r}});
        return out + event("response.in_progress", {{"response", r}});
    }

    std::string on_event(const gen_event &ev) override {
        if (ev.type == gen_event::kind::progress) return req_.stream ? std::string(": prefill\n\n") : std::string();
        if (ev.type == gen_event::kind::delta) return items(reply_.push(ev.text));
        done_ = ev;
        std::string out = items(reply_.finish());
        out += close_item();
        if (final_status() == 200 && req_.responses["echo"].value("store", true) && store_ != nullptr) keep();
        if (!req_.stream) return {};
        if (final_status() != 200) {
            json r = response("failed");
            r["error"] = {{"code", "server_error"}, {"message", ev.error}};
            return out + event("response.failed", {{"response", r}});
        }
        const bool complete = ev.finish != finish_reason::length;
        return out + event(complete ? "response.completed" : "response.incomplete", {{"response", response(status())}});
    }

    json final_body() override {
        if (final_status() != 200) return openai_error_body(final_status(), done_.error);
        return response(status());
    }

    int final_status() const override { return finish_http_status(done_); }

private:
    enum class item_kind { none, reasoning, message, call };

    const char *status() const { return done_.finish == finish_reason::length ? "incomplete" : "completed"; }

    json response(const char *status) const {
        const json &echo = req_.responses["echo"];
        json r = {{"id", ctx_.id}, {"object", "response"}, {"created_at", ctx_.created}, {"status", status},
                  {"error", nullptr}, {"incomplete_details", nullptr}, {"instructions", echo.value("instructions", json())},
                  {"max_output_tokens", echo.value("max_output_tokens", json())}, {"model", ctx_.model},
                  {"output", output_}, {"parallel_tool_calls", echo["parallel_tool_calls"]},
                  {"previous_response_id", echo.value("previous_response_id", json())},
                  {"reasoning", echo.value("reasoning", json({{"effort", nullptr}, {"summary", nullptr}}))},
                  {"store", echo["store"]}, {"temperature", echo.value("temperature", json(1.0))},
                  {"text", {{"format", {{"type", "text"}}}}}, {"tool_choice", echo["tool_choice"]}, {"tools", echo["tools"]},
                  {"top_p", echo.value("top_p", json(1.0))}, {"truncation", "disabled"},
                  {"metadata", echo.value("metadata", json::object())}, {"usage", nullptr}};
        if (std::string_view(status) == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
        if (done_.type == gen_event::kind::done) {
            r["usage"] = {{"input_tokens", done_.n_prompt}, {"input_tokens_details", {{"cached_tokens", done_.timings.cache_n}}},
                          {"output_tokens", done_.n_generated}, {"total_tokens", done_.n_prompt + done_.n_generated}};
            r["timings"] = timings_json(done_.timings);
        }
        return r;
    }

    std::string event(const char *type, json data) {
        json e = {{"type", type}, {"sequence_number", sequence_++}};
        for (auto &[k, v] : data.items()) e[k] = std::move(v);
        return fmt::format("event: {}\ndata: {}\n\n", type, json_dump(e));
    }

    // Streams nothing when not streaming, but builds the same items.
    std::string emit(const char *type, json data) { return req_.stream ? event(type, std::move(data)) : std::string(); }

    json item_ref() const { return {{"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}}; }

    std::string open_item(item_kind kind, json item) {
        std::string out = close_item();
        current_ = kind;
        output_.push_back(item);
        out += emit("response.output_item.added", {{"output_index", output_.size() - 1}, {"item", item}});
        if (kind == item_kind::message || kind == item_kind::reasoning) {
            json part = kind == item_kind::message ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}
                                                   : json{{"type", "reasoning_text"}, {"text", ""}};
            json d = item_ref();
            d["content_index"] = 0;
            d["part"] = part;
            out += emit("response.content_part.added", d);
            output_.back()["content"].push_back(part);
        }
        return out;
    }

    std::string close_item() {
        if (current_ == item_kind::none) return {};
        json &item = output_.back();
        if (item["type"] != "reasoning") item["status"] = "completed";
        json d = item_ref();
        std::string out;
        if (current_ == item_kind::call) {
            d["arguments"] = item["arguments"];
            out += emit("response.function_call_arguments.done", d);
        } else {
            d["content_index"] = 0;
            const json &part = item["content"][0];
            d["text"] = part["text"];
            out += emit(current_ == item_kind::message ? "response.output_text.done" : "response.reasoning_text.done", d);
            d.erase("text");
            d["part"] = part;
            out += emit("response.content_part.done", d);
        }
        current_ = item_kind::none;
        return out + emit("response.output_item.done", {{"output_index", output_.size() - 1}, {"item", item}});
    }

    std::string text_delta(item_kind kind, const std::string &text) {
        std::string out;
        if (current_ != kind) {
            out += kind == item_kind::message
                       ? open_item(kind, {{"id", tool_call_id("msg_")}, {"type", "message"}, {"status", "in_progress"},
                                          {"role", "assistant"}, {"content", json::array()}})
                       : open_item(kind, {{"id", tool_call_id("rs_")}, {"type", "reasoning"}, {"summary", json::array()},
                                          {"content", json::array()}});
        }
        output_.back()["content"][0]["text"] = output_.back()["content"][0]["text"].get<std::string>() + text;
        json d = item_ref();
        d["content_index"] = 0;
        d["delta"] = text;
        if (kind == item_kind::message) d["logprobs"] = json::array();
        return out + emit(kind == item_kind::message ? "response.output_text.delta" : "response.reasoning_text.delta", d);
    }

    std::string items(const std::vector<chat_event> &events) {
        std::string out;
        for (const chat_event &e : events) {
            switch (e.type) {
            case chat_event::kind::reasoning: out += text_delta(item_kind::reasoning, e.text); break;
            case chat_event::kind::content: out += text_delta(item_kind::message, e.text); break;
            case chat_event::kind::tool_begin:
                out += open_item(item_kind::call, {{"id", tool_call_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
                                                   {"call_id", e.id}, {"name", e.text}, {"arguments", ""}});
                break;
            case chat_event::kind::tool_args: {
                output_.back()["arguments"] = output_.back()["arguments"].get<std::string>() + e.text;
                json d = item_ref();
                d["delta"] = e.text;
                out += emit("response.function_call_arguments.delta", d);
                break;
            }
            case chat_event::kind::tool_end: out += close_item(); break;
            }
        }
        return out;
    }

    // The conversation so far and this reply, for a later previous_response_id.
    void keep() {
        const json &messages = req_.chat["messages"];
        json kept = json::array();
        for (size_t i = req_.responses["n_system"].get<size_t>(); i < messages.size(); ++i) kept.push_back(messages[i]);
        json turn = {{"role", "assistant"}, {"content", reply_.content()}};
        if (!reply_.reasoning().empty()) turn["reasoning_content"] = reply_.reasoning();
        if (!reply_.calls().empty()) {
            turn["tool_calls"] = json::array();
            for (const auto &c : reply_.calls())
                turn["tool_calls"].push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        }
        kept.push_back(std::move(turn));
        store_->put(ctx_.id, std::move(kept));
    }

    api_request req_;
    response_context ctx_;
    response_store *store_;
    chat_reply reply_;
    gen_event done_;
    json output_ = json::array();
    item_kind current_ = item_kind::none;
    int64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<generation_job> responses_make_job(const api_request &req, response_context ctx, response_store *store) {
    return std::make_unique<responses_job>(req, std::move(ctx), store);
}

}  // namespace tandem::server
