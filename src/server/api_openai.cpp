// src/server/api_openai.cpp - OpenAI chat/completions/models responses: the message (content,
// reasoning_content, tool_calls), streaming chunks (delta.content, delta.reasoning_content,
// delta.tool_calls) with stream_options.include_usage, logprobs and llama.cpp's timings.
#include "src/server/api_openai.h"
#include "src/server/api_output.h"

namespace tandem::server {

json openai_models_body(const std::string &model_id, int64_t created, const json &meta) {
    json m = {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "tandem"}, {"meta", meta}};
    return {{"object", "list"}, {"data", json::array({m})}};
}

static json bytes_of(const std::string &s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(static_cast<int>(c));
    return b;
}

namespace {

class openai_job : public generation_job {
public:
    openai_job(const api_request &req, response_context ctx) : req_(req), ctx_(std::move(ctx)) {
        if (chat()) reply_.emplace(ctx_.parse, "call_", /*keep_model_ids=*/true);
    }

    bool streaming() const override { return req_.stream; }

    std::string stream_begin() override {
        if (!chat()) return {};
        json delta = {{"role", "assistant"}, {"content", ""}};
        return sse(chunk(delta, nullptr, json(nullptr)));
    }

    std::string on_event(const gen_event &ev) override {
        if (ev.type == gen_event::kind::progress) return req_.stream ? std::string(": prefill\n\n") : std::string();
        std::vector<token_view> views;
        for (const auto &t : ev.tokens) views.push_back(view(t));
        if (ev.type == gen_event::kind::delta) {
            text_ += ev.text;
            tokens_.insert(tokens_.end(), views.begin(), views.end());
            if (!chat()) {
                if (!req_.stream || (ev.text.empty() && views.empty())) return {};
                json lp = req_.logprobs ? logprobs_json(views, text_.size() - ev.text.size()) : json(nullptr);
                return sse(chunk(ev.text, nullptr, lp));
            }
            const std::vector<chat_event> events = reply_->push(ev.text);
            if (!req_.stream) return {};
            return chat_chunks(events, req_.logprobs && !views.empty() ? logprobs_json(views, 0) : json(nullptr));
        }
        done_ = ev;
        std::string out;
        if (chat()) {
            const std::vector<chat_event> events = reply_->finish();
            if (req_.stream && ev.finish != finish_reason::cancelled && ev.finish != finish_reason::error)
                out = chat_chunks(events, json(nullptr));
        }
        if (!req_.stream) return {};
        if (ev.finish == finish_reason::cancelled || ev.finish == finish_reason::error) {
            int status = finish_http_status(ev);
            return "data: " + json_dump(openai_error_body(status, ev.error)) + "\n\n";
        }
        json last = chat() ? chunk(json::object(), finish_name(), json(nullptr))
                           : chunk(std::string(), finish_name(), json(nullptr));
        last["timings"] = timings_json(ev.timings);
        out += sse(last);
        if (req_.include_usage) {
            json u = chunk_base();
            u["choices"] = json::array();
            u["usage"] = usage();
            out += sse(u);
        }
        return out + "data: [DONE]\n\n";
    }

    json final_body() override {
        if (final_status() != 200) return openai_error_body(final_status(), done_.error);
        json choice = {{"index", 0}};
        json body = {{"id", ctx_.id}, {"created", ctx_.created}, {"model", ctx_.model}};
        if (chat()) {
            body["object"] = "chat.completion";
            choice["message"] = message();
        } else {
            body["object"] = "text_completion";
            choice["text"] = text_;
        }
        choice["logprobs"] = req_.logprobs ? logprobs_json(tokens_, 0) : json(nullptr);
        choice["finish_reason"] = finish_name();
        body["choices"] = json::array({choice});
        body["usage"] = usage();
        body["timings"] = timings_json(done_.timings);
        return body;
    }

    int final_status() const override { return finish_http_status(done_); }

private:
    bool chat() const { return req_.route == route_kind::chat; }

    const char *finish_name() const {
        if (done_.finish == finish_reason::length) return "length";
        return chat() && !reply_->calls().empty() ? "tool_calls" : "stop";
    }

    // The assistant message: content (null beside tool calls when there is none, as OpenAI
    // writes it), reasoning_content when the model reasoned, tool_calls when it called.
    json message() const {
        json m = {{"role", "assistant"}};
        const bool calls = !reply_->calls().empty();
        m["content"] = calls && reply_->content().empty() ? json(nullptr) : json(reply_->content());
        if (!reply_->reasoning().empty()) m["reasoning_content"] = reply_->reasoning();
        if (calls) {
            json list = json::array();
            for (const auto &c : reply_->calls())
                list.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
            m["tool_calls"] = list;
        }
        return m;
    }

    // One chunk per event; `lp` (this step's logprobs) rides on the first, or on an empty delta.
    std::string chat_chunks(const std::vector<chat_event> &events, json lp) {
        std::string out;
        for (const chat_event &e : events) {
            json delta;
            switch (e.type) {
            case chat_event::kind::content: delta = {{"content", e.text}}; break;
            case chat_event::kind::reasoning: delta = {{"reasoning_content", e.text}}; break;
            case chat_event::kind::tool_begin:
                delta = {{"tool_calls", json::array({{{"index", e.index}, {"id", e.id}, {"type", "function"},
                                                      {"function", {{"name", e.text}, {"arguments", ""}}}}})}};
                break;
            case chat_event::kind::tool_args:
                delta = {{"tool_calls", json::array({{{"index", e.index}, {"function", {{"arguments", e.text}}}}})}};
                break;
            case chat_event::kind::tool_end: continue;
            }
            out += sse(chunk(delta, nullptr, lp));
            lp = nullptr;
        }
        if (!lp.is_null()) out += sse(chunk({{"content", ""}}, nullptr, lp));
        return out;
    }

    token_view view(const gen_token &t) const {
        token_view v{ctx_.token_text(t.id), t.logprob, {}};
        for (const auto &alt : t.top) v.top.emplace_back(ctx_.token_text(alt.id), alt.logprob);
        return v;
    }

    json chunk_base() const {
        return {{"id", ctx_.id}, {"object", chat() ? "chat.completion.chunk" : "text_completion"},
                {"created", ctx_.created}, {"model", ctx_.model}};
    }

    json chunk(const json &delta_or_text, const char *finish, const json &lp) const {
        json c = chunk_base();
        json choice = {{"index", 0}, {"logprobs", lp}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
        if (chat()) choice["delta"] = delta_or_text;
        else choice["text"] = delta_or_text;
        c["choices"] = json::array({choice});
        return c;
    }

    static std::string sse(const json &j) { return "data: " + json_dump(j) + "\n\n"; }

    json logprobs_json(const std::vector<token_view> &views, size_t text_offset) const {
        if (chat()) {
            json content = json::array();
            for (const auto &v : views) {
                json top = json::array();
                for (size_t i = 0; i < v.top.size() && static_cast<int32_t>(i) < req_.top_logprobs; ++i)
                    top.push_back({{"token", v.top[i].first}, {"logprob", v.top[i].second}, {"bytes", bytes_of(v.top[i].first)}});
                content.push_back({{"token", v.text}, {"logprob", v.logprob}, {"bytes", bytes_of(v.text)}, {"top_logprobs", top}});
            }
            return {{"content", content}};
        }
        json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
        size_t off = text_offset;
        for (const auto &v : views) {
            tokens.push_back(v.text);
            lps.push_back(v.logprob);
            json top = json::object();
            for (const auto &[t, lp] : v.top) top[t] = lp;
            tops.push_back(top);
            offsets.push_back(off);
            off += v.text.size();
        }
        return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
    }

    json usage() const {
        return {{"prompt_tokens", done_.n_prompt},
                {"completion_tokens", done_.n_generated},
                {"total_tokens", done_.n_prompt + done_.n_generated},
                {"prompt_tokens_details", {{"cached_tokens", done_.timings.cache_n}}}};
    }

    api_request req_;
    response_context ctx_;
    std::optional<chat_reply> reply_;  // chat: the parsed output
    std::string text_;
    std::vector<token_view> tokens_;
    gen_event done_;
};

}  // namespace

std::unique_ptr<generation_job> openai_make_job(const api_request &req, response_context ctx) {
    return std::make_unique<openai_job>(req, std::move(ctx));
}

}  // namespace tandem::server
