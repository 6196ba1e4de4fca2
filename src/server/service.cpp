// src/server/service.cpp - routes, auth, prompt rendering and tokenization, context checks,
// and the ops endpoints with llama.cpp's names and shapes.
#include "src/server/service.h"

#include "src/server/api_anthropic.h"
#include "src/server/api_openai.h"
#include "tandem/log.h"
#include "tandem/sampler.h"
#include "tandem/tokenizer.h"

#include <fmt/format.h>

#include <random>

namespace tandem::server {

service::service(const server_config &config) : config_(config), started_(std::chrono::system_clock::now()) {}

void service::set_ready(model_context ctx) {
    model_ = std::move(ctx);
    ready_.store(true);
}

api_kind service::api_of(const std::string &target) {
    return target.rfind("/v1/messages", 0) == 0 ? api_kind::anthropic : api_kind::openai;
}

http_reply service::error_reply(api_kind api, int status, const std::string &message) const {
    http_reply r;
    r.status = status;
    r.body = json_dump(api_error_body(api, status, message));
    if (status == 503) r.headers.emplace_back("Retry-After", "1");
    if (status == 401 && api == api_kind::openai) r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
}

bool service::authorized(const http_request_view &req, api_kind api) const {
    if (config_.api_key.empty()) return true;
    const std::string bearer = "Bearer " + config_.api_key;
    if (req.authorization == bearer) return true;
    return api == api_kind::anthropic && req.x_api_key == config_.api_key;
}

service::outcome service::handle(const http_request_view &req) {
    ++http_requests_;
    std::string path = req.target.substr(0, req.target.find('?'));
    api_kind api = api_of(path);
    std::unique_ptr<generation_job> job;
    http_reply reply;
    try {
        reply = route(req, path, job);
    } catch (const error &e) {
        reply = error_reply(api, e.http_status(), e.what());
    } catch (const std::exception &e) {
        log_error("{} {}: {}", req.method, path, e.what());
        reply = error_reply(api, 500, e.what());
    }
    if (job) return job;  // implicitly moved (C++20)
    if (reply.status >= 400) ++http_errors_;
    return reply;
}

http_reply service::route(const http_request_view &req, const std::string &path, std::unique_ptr<generation_job> &job) {
    api_kind api = api_of(path);
    if (path == "/health" || path == "/v1/health") {
        if (req.method != "GET") fail(error_kind::invalid_request, "use GET {}", path);
        http_reply r;
        r.status = ready() ? 200 : 503;
        r.body = ready() ? R"({"status":"ok"})" : R"({"status":"loading model"})";
        return r;
    }
    if (!authorized(req, api)) return error_reply(api, 401, "invalid or missing API key");
    if (!ready()) return error_reply(api, 503, "model is loading; retry when GET /health returns 200");

    auto post_only = [&] {
        if (req.method != "POST") fail(error_kind::not_found, "{} {} is not a route (use POST)", req.method, path);
    };
    if (path == "/v1/chat/completions" || path == "/chat/completions") {
        post_only();
        job = prepare(openai_parse_chat(json_parse_body(req.body)));
        return {};
    }
    if (path == "/v1/completions" || path == "/completions") {
        post_only();
        job = prepare(openai_parse_completion(json_parse_body(req.body)));
        return {};
    }
    if (path == "/v1/messages") {
        post_only();
        job = prepare(anthropic_parse_messages(json_parse_body(req.body), false));
        return {};
    }
    if (path == "/v1/messages/count_tokens") {
        post_only();
        api_request r = anthropic_parse_messages(json_parse_body(req.body), true);
        check_model(r.model);
        http_reply out;
        out.body = json_dump({{"input_tokens", tokenize_prompt(r).size()}});
        return out;
    }
    if (req.method != "GET") fail(error_kind::not_found, "{} {} is not a route", req.method, path);
    http_reply out;
    if (path == "/v1/models" || path == "/models") {
        auto created = std::chrono::duration_cast<std::chrono::seconds>(started_.time_since_epoch()).count();
        out.body = json_dump(openai_models_body(model_.model_id, created, model_.meta));
    } else if (path == "/metrics") {
        out.content_type = "text/plain; version=0.0.4; charset=utf-8";
        out.body = metrics_text();
    } else if (path == "/slots") {
        out.body = json_dump(slots_json());
    } else if (path == "/props") {
        out.body = json_dump(props_json());
    } else {
        fail(error_kind::not_found, "no route for GET {}", path);
    }
    return out;
}

void service::check_model(const std::string &model) const {
    if (model.empty()) return;
    for (const auto &name : model_.model_names)
        if (model == name) return;
    fail(error_kind::not_found, "model '{}' not found; this server serves '{}'", model, model_.model_id);
}

std::vector<int32_t> service::tokenize_prompt(const api_request &req) const {
    std::string text;
    if (req.route == route_kind::completion) {
        text = req.prompt;
    } else {
        // count_tokens counts what a generation would prefill, so the assistant opener is included.
        text = model_.tmpl.render(req.messages, /*add_generation_prompt=*/true, req.enable_thinking);
    }
    std::vector<int32_t> ids;
    if (model_.tok->add_bos() && model_.tok->bos_id() >= 0) ids.push_back(model_.tok->bos_id());
    auto body = model_.tok->encode(text, /*parse_special=*/true);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
}

std::unique_ptr<generation_job> service::prepare(const api_request &req) {
    check_model(req.model);
    std::vector<int32_t> prompt = tokenize_prompt(req);
    const int32_t n_ctx = model_.eng->n_ctx();
    const int32_t n_prompt = static_cast<int32_t>(prompt.size());
    if (n_prompt == 0) fail(error_kind::invalid_request, "the prompt is empty");
    if (n_prompt >= n_ctx)
        fail(error_kind::too_large, "the prompt has {} tokens but the context holds {} (--ctx); shorten it", n_prompt, n_ctx);
    int32_t max_tokens = req.max_tokens.value_or(n_ctx - n_prompt);
    if (static_cast<int64_t>(n_prompt) + max_tokens > n_ctx)
        fail(error_kind::invalid_request, "max_tokens {} plus the prompt's {} tokens exceed the context of {} tokens",
             max_tokens, n_prompt, n_ctx);

    response_context ctx;
    uint64_t serial = next_response_++;
    uint64_t salt = static_cast<uint64_t>(std::random_device{}());
    const char *prefix = req.route == route_kind::chat ? "chatcmpl-" : req.route == route_kind::completion ? "cmpl-" : "msg_";
    ctx.id = fmt::format("{}{:08x}{:08x}", prefix, salt & 0xffffffffu, serial);
    ctx.model = req.model.empty() ? model_.model_id : req.model;
    ctx.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const tokenizer *tok = model_.tok;
    ctx.token_text = [tok](int32_t id) { return tok->token_bytes(id); };

    std::unique_ptr<generation_job> job = req.route == route_kind::messages ? anthropic_make_job(req, std::move(ctx))
                                                                            : openai_make_job(req, std::move(ctx));
    job->request.prompt = std::move(prompt);
    job->request.max_tokens = max_tokens;
    job->request.sampling = req.sampling;
    sampler validate(req.sampling);  // throws invalid_request here, not later on the engine thread
    job->request.stop = req.stop;
    return job;
}

uint64_t service::submit(generation_job &job) {
    uint64_t id = model_.sched->submit(job.request);
    ++busy_;
    return id;
}

void service::cancel(uint64_t id) {
    if (model_.sched) model_.sched->cancel(id);
}

// Prometheus text: llama.cpp's llamacpp:* families with their types, then tandem_* ones.
std::string service::metrics_text() const {
    scheduler_stats s = model_.sched ? model_.sched->stats() : scheduler_stats{};
    std::string out;
    auto family = [&](const char *name, const char *type, const char *help, double value) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
    };
    family("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
           static_cast<double>(s.prompt_tokens));
    family("llamacpp:prompt_seconds_total", "counter", "Prompt process time", s.prompt_seconds);
    family("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
           static_cast<double>(s.predicted_tokens));
    family("llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time", s.predicted_seconds);
    family("llamacpp:n_decode_total", "counter", "Total number of engine forward calls", static_cast<double>(s.n_steps));
    family("llamacpp:n_busy_slots_per_decode", "counter", "Average number of busy slots per engine forward call",
           s.n_steps ? static_cast<double>(s.busy_slot_steps) / static_cast<double>(s.n_steps) : 0.0);
    family("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
           s.prompt_seconds > 0 ? static_cast<double>(s.prompt_tokens) / s.prompt_seconds : 0.0);
    family("llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
           s.predicted_seconds > 0 ? static_cast<double>(s.predicted_tokens) / s.predicted_seconds : 0.0);
    family("llamacpp:requests_processing", "gauge", "Number of requests processing.", s.slots_in_use);
    family("llamacpp:requests_deferred", "gauge", "Number of requests deferred.", s.queue_depth);
    family("llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens.", static_cast<double>(s.kv_tokens));
    double kv_capacity = static_cast<double>(s.n_slots) * (model_.eng ? model_.eng->n_ctx() : 0);
    family("llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           kv_capacity > 0 ? static_cast<double>(s.kv_tokens) / kv_capacity : 0.0);

    family("tandem_slots_total", "gauge", "KV slots (--batched-session).", s.n_slots);
    family("tandem_slots_in_use", "gauge", "KV slots holding a request.", s.slots_in_use);
    family("tandem_queue_depth", "gauge", "Requests waiting for a slot.", s.queue_depth);
    family("tandem_kv_tokens_cached", "gauge", "Tokens held in all slots' KV caches.", static_cast<double>(s.kv_tokens));
    family("tandem_decode_steps_total", "counter", "Engine calls with at least one decode row.",
           static_cast<double>(s.decode_steps));
    family("tandem_decode_rows_total", "counter", "Decode rows over all decode steps.", static_cast<double>(s.decode_rows));
    family("tandem_rows_per_decode_step", "gauge", "Average decode rows per decode step.",
           s.decode_steps ? static_cast<double>(s.decode_rows) / static_cast<double>(s.decode_steps) : 0.0);
    family("tandem_max_rows_per_decode_step", "gauge", "Most decode rows in one step so far.", s.max_rows_per_decode);
    family("tandem_draft_tokens_total", "counter", "Prompt-lookup drafted tokens fed as decode rows (--draft).",
           static_cast<double>(s.draft_tokens));
    family("tandem_draft_accepted_total", "counter", "Drafted tokens the sessions' samplers kept.",
           static_cast<double>(s.draft_accepted));
    family("tandem_prefill_yields_total", "counter", "Steps where a prefill was capped while sessions decode.",
           static_cast<double>(s.prefill_yields));
    family("tandem_prefill_budget_tokens", "gauge",
           "Prompt tokens a step may carry while sessions decode (--prefill-yield, fewer to hold --itl-budget).",
           s.prefill_budget);
    family("tandem_prompt_tokens_cached_total", "counter", "Prompt tokens reused from slot caches.",
           static_cast<double>(s.cached_prompt_tokens));
    family("tandem_requests_total", "counter", "Generation requests accepted.", static_cast<double>(s.requests_total));
    family("tandem_requests_cancelled_total", "counter", "Generation requests cancelled.",
           static_cast<double>(s.requests_cancelled));
    family("tandem_requests_rejected_total", "counter", "Generation requests refused (queue full, stopping).",
           static_cast<double>(s.requests_rejected));
    family("tandem_http_requests_total", "counter", "HTTP requests handled.", static_cast<double>(http_requests_.load()));
    family("tandem_http_errors_total", "counter", "HTTP requests answered with an error status.",
           static_cast<double>(http_errors_.load()));
    return out;
}

json service::slots_json() const {
    json out = json::array();
    if (!model_.sched) return out;
    for (const auto &s : model_.sched->slots()) {
        out.push_back({
            {"id", s.id},
            {"id_task", s.processing ? json(s.request_id) : json(-1)},
            {"n_ctx", s.n_ctx},
            {"speculative", config_.draft > 0},
            {"is_processing", s.processing},
            {"n_cached", s.n_cached},
            {"n_prompt_tokens", s.n_prompt},
            {"n_prompt_tokens_processed", s.n_prompt_done},
            {"next_token", {{"n_decoded", s.n_decoded}}},
            {"prompt_per_second", s.prompt_per_second},
            {"predicted_per_second", s.predicted_per_second},
        });
    }
    return out;
}

json service::props_json() const {
    json settings = {{"n_ctx", model_.eng ? model_.eng->n_ctx() : config_.n_ctx},
                     {"params", {{"temperature", 1.0}, {"top_k", 0}, {"top_p", 1.0}, {"min_p", 0.0}, {"n_predict", -1}}}};
    return {
        {"default_generation_settings", settings},
        {"total_slots", model_.eng ? model_.eng->n_slots() : config_.n_slots},
        {"model_path", config_.model_path},
        {"model_alias", model_.model_id},
        {"chat_template", model_.tmpl.source},
        {"chat_template_family", chat_template_family_name(model_.tmpl.family)},
        {"modalities", {{"vision", false}, {"audio", false}}},
        {"build_info", "tandem"},
        {"layout", model_.eng ? model_.eng->layout() : std::string()},
        {"kv_type", config_.kv_type},
        {"prefill_chunk", config_.prefill_chunk},
        {"prefill_yield", config_.prefill_yield},
        {"itl_budget", config_.itl_budget},
        {"max_queue", config_.max_queue},
        {"device_draws", config_.device_draws},
        {"draft", config_.draft},
        {"draft_ngram_min", config_.draft_ngram_min},
        {"draft_ngram_max", config_.draft_ngram_max},
        {"draft_step_rows", config_.draft_step_rows},
    };
}

namespace {

class streamer_text : public text_stream {
public:
    explicit streamer_text(const tokenizer &tok) : streamer_(tok) {}
    std::string push(int32_t id) override { return streamer_.push(id); }
    std::string flush() override { return streamer_.flush(); }

private:
    token_streamer streamer_;
};

}  // namespace

scheduler_hooks make_scheduler_hooks(const tokenizer &tok) {
    scheduler_hooks h;
    const tokenizer *t = &tok;
    h.is_eog = [t](int32_t id) { return t->is_eog(id); };
    h.make_text_stream = [t] { return std::make_unique<streamer_text>(*t); };
    h.make_picker = make_sampler_picker;
    return h;
}

}  // namespace tandem::server
