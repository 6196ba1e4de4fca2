// src/server/api_openai.cpp - OpenAI chat/completions/models: request mapping and responses,
// streaming chunks with stream_options.include_usage, logprobs and llama.cpp's timings.
#include "src/server/api_openai.h"

#include "src/server/api_controls.h"

namespace tandem::server {

// Fields common to chat and completions (sampling, penalties, logit_bias: api_controls.h).
static void parse_sampling(const json &body, api_request &r) {
    parse_sampling_controls(body, api_kind::openai, r);
    r.stop = json_stop_list(body, "stop");
    if (auto n = json_integer(body, "n"); n && *n != 1) fail(error_kind::invalid_request, "only 'n': 1 is supported, got {}", *n);
    r.model = json_string(body, "model").value_or("");
    r.stream = json_bool(body, "stream").value_or(false);
    if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) fail(error_kind::invalid_request, "'stream_options' must be an object");
        r.include_usage = json_bool(*it, "include_usage").value_or(false);
    }
}

static int32_t parse_max_tokens(const json &body, const char *key) {
    auto v = json_integer(body, key);
    if (!v) return -1;
    if (*v < 1) fail(error_kind::invalid_request, "'{}' must be >= 1, got {}", key, *v);
    if (*v > (1 << 30)) fail(error_kind::invalid_request, "'{}' is too large: {}", key, *v);
    return static_cast<int32_t>(*v);
}

api_request openai_parse_chat(const json &body) {
    api_request r;
    r.route = route_kind::chat;
    parse_sampling(body, r);
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty())
        fail(error_kind::invalid_request, "'messages' must be a non-empty array");
    for (size_t i = 0; i < it->size(); ++i) {
        const json &m = (*it)[i];
        std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object()) fail(error_kind::invalid_request, "{} must be an object", where);
        auto role = json_string(m, "role");
        if (!role) fail(error_kind::invalid_request, "{} needs a 'role'", where);
        if (*role == "developer") role = "system";
        if (*role != "system" && *role != "user" && *role != "assistant")
            fail(error_kind::invalid_request, "{}: role '{}' is not supported (system, developer, user, assistant)", where, *role);
        auto content = m.find("content");
        std::string text;
        if (content != m.end() && !content->is_null()) text = json_text_content(*content, where + ".content");
        else if (*role != "assistant") fail(error_kind::invalid_request, "{} needs 'content'", where);
        r.messages.push_back({*role, text});
    }
    int32_t a = parse_max_tokens(body, "max_completion_tokens");
    int32_t b = parse_max_tokens(body, "max_tokens");
    if (a > 0) r.max_tokens = a;
    else if (b > 0) r.max_tokens = b;
    r.logprobs = json_bool(body, "logprobs").value_or(false);
    if (auto n = json_integer(body, "top_logprobs")) {
        if (*n < 0 || *n > 20) fail(error_kind::invalid_request, "'top_logprobs' must be in 0..20, got {}", *n);
        if (!r.logprobs) fail(error_kind::invalid_request, "'top_logprobs' needs 'logprobs': true");
        r.top_logprobs = static_cast<int32_t>(*n);
    }
    if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
        if (!kw->is_object()) fail(error_kind::invalid_request, "'chat_template_kwargs' must be an object");
        r.enable_thinking = json_bool(*kw, "enable_thinking").value_or(true);
    }
    r.sampling.n_logprobs = r.logprobs ? std::max<int32_t>(r.top_logprobs, 1) : 0;
    return r;
}

api_request openai_parse_completion(const json &body) {
    api_request r;
    r.route = route_kind::completion;
    parse_sampling(body, r);
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) fail(error_kind::invalid_request, "'prompt' is required");
    if (it->is_string()) r.prompt = it->get<std::string>();
    else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) r.prompt = (*it)[0].get<std::string>();
    else fail(error_kind::invalid_request, "'prompt' must be a string (or an array of one string)");
    int32_t m = parse_max_tokens(body, "max_tokens");
    r.max_tokens = m > 0 ? m : 16;  // the legacy API's default
    if (auto n = json_integer(body, "logprobs")) {
        if (*n < 0 || *n > 5) fail(error_kind::invalid_request, "'logprobs' must be in 0..5, got {}", *n);
        r.logprobs = *n > 0;
        r.top_logprobs = static_cast<int32_t>(*n);
    }
    if (json_bool(body, "echo").value_or(false)) fail(error_kind::invalid_request, "'echo' is not supported");
    r.sampling.n_logprobs = r.top_logprobs;
    return r;
}

json openai_models_body(const std::string &model_id, int64_t created, const json &meta) {
    json m = {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "tandem"}, {"meta", meta}};
    return {{"object", "list"}, {"data", json::array({m})}};
}

static json bytes_of(const std::string &s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(static_cast<int>(c));
    return b;
}

static const char *finish_name(finish_reason f) { return f == finish_reason::length ? "length" : "stop"; }

namespace {

class openai_job : public generation_job {
public:
    openai_job(const api_request &req, response_context ctx) : req_(req), ctx_(std::move(ctx)) {}

    bool streaming() const override { return req_.stream; }

    std::string stream_begin() override {
        if (!chat()) return {};
        json delta = {{"role", "assistant"}, {"content", ""}};
        return sse(chunk(delta, nullptr, json(nullptr)));
    }

    std::string on_event(const gen_event &ev) override {
        std::vector<token_view> views;
        for (const auto &t : ev.tokens) views.push_back(view(t));
        if (ev.type == gen_event::kind::progress) return req_.stream ? std::string(": prefill\n\n") : std::string();
        if (ev.type == gen_event::kind::delta) {
            text_ += ev.text;
            tokens_.insert(tokens_.end(), views.begin(), views.end());
            if (!req_.stream || (ev.text.empty() && views.empty())) return {};
            json lp = req_.logprobs ? logprobs_json(views, text_.size() - ev.text.size()) : json(nullptr);
            if (chat()) return sse(chunk({{"content", ev.text}}, nullptr, lp));
            return sse(chunk(ev.text, nullptr, lp));
        }
        done_ = ev;
        if (!req_.stream) return {};
        if (ev.finish == finish_reason::cancelled || ev.finish == finish_reason::error) {
            int status = ev.finish == finish_reason::cancelled ? 503 : 500;
            return "data: " + json_dump(openai_error_body(status, ev.error)) + "\n\n";
        }
        json last = chat() ? chunk(json::object(), finish_name(ev.finish), json(nullptr))
                           : chunk(std::string(), finish_name(ev.finish), json(nullptr));
        last["timings"] = timings_json(ev.timings);
        std::string out = sse(last);
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
        json choice = {{"index", 0}, {"finish_reason", finish_name(done_.finish)}};
        choice["logprobs"] = req_.logprobs ? logprobs_json(tokens_, 0) : json(nullptr);
        json body = {{"id", ctx_.id}, {"created", ctx_.created}, {"model", ctx_.model}};
        if (chat()) {
            body["object"] = "chat.completion";
            choice["message"] = {{"role", "assistant"}, {"content", text_}};
        } else {
            body["object"] = "text_completion";
            choice["text"] = text_;
        }
        body["choices"] = json::array({choice});
        body["usage"] = usage();
        body["timings"] = timings_json(done_.timings);
        return body;
    }

    int final_status() const override { return finish_http_status(done_.finish); }

private:
    bool chat() const { return req_.route == route_kind::chat; }

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
    std::string text_;
    std::vector<token_view> tokens_;
    gen_event done_;
};

}  // namespace

std::unique_ptr<generation_job> openai_make_job(const api_request &req, response_context ctx) {
    return std::make_unique<openai_job>(req, std::move(ctx));
}

}  // namespace tandem::server
