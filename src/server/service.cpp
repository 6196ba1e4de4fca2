// src/server/service.cpp - routes, auth, prompt rendering and tokenization, context checks,
// and the ops endpoints with llama.cpp's names and shapes.
#include "src/server/service.h"

#include "src/server/api_anthropic.h"
#include "src/server/api_controls.h"
#include "src/server/api_openai.h"
#include "src/server/api_responses.h"
#include "src/server/api_tools.h"
#include "tandem/log.h"
#include "tandem/sampler.h"
#include "tandem/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>

namespace tandem::server {

namespace {

constexpr route_entry routes[] = {
    {"/health", route_id::health, "GET", false},
    {"/v1/health", route_id::health, "GET", false},
    {"/v1/models", route_id::models, "GET", false},
    {"/models", route_id::models, "GET", false},
    {"/metrics", route_id::metrics, "GET", false},
    {"/slots", route_id::slots, "GET", false},
    {"/props", route_id::props, "GET", false},
    {"/expert-traffic", route_id::expert_traffic, "GET", false},
    {"/v1/chat/completions", route_id::chat, "POST", true},
    {"/chat/completions", route_id::chat, "POST", true},
    {"/v1/completions", route_id::completion, "POST", true},
    {"/completions", route_id::completion, "POST", true},
    {"/v1/messages", route_id::messages, "POST", true},
    {"/v1/messages/count_tokens", route_id::count_tokens, "POST", true},
    {"/v1/responses", route_id::responses, "POST", true},
    {"/responses", route_id::responses, "POST", true},
    {"/tokenize", route_id::tokenize, "POST", true},
    {"/detokenize", route_id::detokenize, "POST", true},
    {"/monitor", route_id::monitor, "GET", false},
    {"/monitor/data", route_id::monitor_data, "GET", false},
};
// GET /v1/models/{id} (and /models/{id}): the id may hold slashes, so it is matched by prefix.
constexpr route_entry model_one_route = {"/v1/models/", route_id::model_one, "GET", false};

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

// Request headers a CORS preflight may name: tokens only, so they can be echoed back safely.
bool is_header_list(std::string_view s) {
    for (char c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ')) return false;
    return s.size() < 1024;
}

}  // namespace

// /slots/{id}: the id is checked by the handler, so a bad one gets an error in the API's shape.
constexpr route_entry slot_action_route{"/slots/", route_id::slot_action, "POST", true};

const route_entry *route_find(std::string_view path) {
    for (const auto &r : routes)
        if (r.path == path) return &r;
    if (path.starts_with(slot_action_route.path) && path.size() > slot_action_route.path.size()) return &slot_action_route;
    for (std::string_view prefix : {"/v1/models/", "/models/"})
        if (path.starts_with(prefix) && path.size() > prefix.size()) return &model_one_route;
    return nullptr;
}

api_request api_parse_request(route_id route, const std::string &body, const json_limits &limits) {
    const json j = json_parse_body(body, limits);
    api_request r;
    switch (route) {
    case route_id::chat: r = openai_parse_chat(j); break;
    case route_id::completion: r = openai_parse_completion(j); break;
    case route_id::messages: r = anthropic_parse_messages(j, false); break;
    case route_id::count_tokens: r = anthropic_parse_messages(j, true); break;
    case route_id::responses: return responses_parse(j, body);  // checks its own fields and text.format
    default: fail(error_kind::internal, "route has no request body to map");
    }
    check_request_fields(r.route, j);
    parse_output_controls(j, body, r);
    return r;
}

service::service(const server_config &config) : config_(config), started_(std::chrono::system_clock::now()) {
    policy_.guard = is_loopback_address(config.host) && config.api_keys.empty();
    policy_.port = config.port;
    policy_.cors_origins = config.cors_origins;
    for (const auto &h : config.allowed_hosts) {
        std::string name = h;
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        policy_.allowed_hosts.push_back(name);
    }
}

void service::set_ready(model_context ctx) {
    model_ = std::move(ctx);
    // Five minutes of throughput for /monitor's charts, a sample every two seconds.
    if (model_.sched) history_ = std::make_unique<monitor_history>(*model_.sched, std::chrono::seconds(2), 151);
    ready_.store(true);
}

api_kind service::api_of(std::string_view target) {
    return target.starts_with("/v1/messages") ? api_kind::anthropic : api_kind::openai;
}

http_reply service::error_reply(api_kind api, int status, const std::string &message) const {
    http_reply r;
    r.status = status;
    r.body = json_dump(api_error_body(api, status, message));
    if (status == 503) r.headers.emplace_back("Retry-After", "1");
    if (status == 401 && api == api_kind::openai) r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
}

std::optional<std::string> service::key_of(const http_request_view &req, api_kind api) const {
    if (config_.api_keys.empty()) return "-";
    if (auto token = bearer_token(req.authorization))
        if (auto name = api_keys_match(config_.api_keys, *token)) return name;
    if (api == api_kind::anthropic && !req.x_api_key.empty()) return api_keys_match(config_.api_keys, req.x_api_key);
    return std::nullopt;
}

http_reply service::preflight_reply(const http_request_view &head) const {
    http_reply r;
    r.status = 204;
    r.content_type.clear();
    r.headers = policy_.cors_headers(head.origin);
    r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = is_header_list(head.cors_request_headers) ? head.cors_request_headers : std::string();
    r.headers.emplace_back("Access-Control-Allow-Headers",
                           asked.empty() ? "Authorization, Content-Type, x-api-key, anthropic-version" : asked);
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return r;
}

head_decision service::check_head(const http_request_view &head, bool overflow) const {
    head_decision d;
    const std::string_view path = path_of(head.target);
    const api_kind api = api_of(path);
    auto reject = [&](int status, const std::string &message) {
        d.reply = error_reply(api, status, message);
        for (const auto &h : d.headers) d.reply->headers.push_back(h);
        return d;
    };
    // RFC 9112 3.2: an HTTP/1.1 request without a Host, or with several, is a 400.
    if ((head.version >= 11 && head.n_host == 0) || head.n_host > 1)
        return reject(400, head.n_host == 0 ? "the request has no Host header" : "the request has more than one Host header");
    if (!policy_.host_allowed(head.host))
        return reject(403, fmt::format("Host '{}' is not this server; a loopback server without --api-key answers only "
                                       "localhost names and 127.0.0.1 on port {} (or an --allowed-host)",
                                       head.host, policy_.port));
    if (!policy_.origin_allowed(head.origin, head.host))
        return reject(403, fmt::format("cross-origin request from '{}' refused; start the server with --cors-origin {} "
                                       "to allow that page",
                                       head.origin, head.origin));
    d.headers = policy_.cors_headers(head.origin);
    if (head.method == "OPTIONS") {
        if (!head.origin.empty() && !head.cors_request_method.empty()) {
            if (!policy_.cors_allowed(head.origin))
                return reject(403, fmt::format("CORS preflight from '{}' refused (not a --cors-origin)", head.origin));
            d.reply = preflight_reply(head);
            return d;
        }
    }
    d.route = route_find(path);
    if (d.route == nullptr) return reject(404, fmt::format("no route for {} {}", head.method, path));
    if (head.method != d.route->method) {
        reject(405, fmt::format("{} {} is not allowed (use {})", head.method, path, d.route->method));
        d.reply->headers.emplace_back("Allow", std::string(d.route->method));
        return d;
    }
    if (overflow && d.route->heavy)
        return reject(503, fmt::format("the server is at its connection limit (--max-connections {}); retry later",
                                       config_.max_connections));
    // The page is static (it asks for the key and sends it with each /monitor/data request).
    if (d.route->id != route_id::health && d.route->id != route_id::monitor) {
        std::optional<std::string> key = key_of(head, api);
        if (!key) return reject(401, "invalid or missing API key");
        d.key_name = *key;
    }
    if (head.has_body && head.method == "POST" && !is_json_content_type(head.content_type))
        return reject(415, fmt::format("Content-Type must be application/json, got '{}'", head.content_type));
    d.body_limit = d.route->heavy ? config_.body_limit : config_.small_body_limit;
    if (head.content_length && *head.content_length > d.body_limit)
        return reject(413, fmt::format("the request body exceeds the limit of {} bytes", d.body_limit));
    if (d.route->id != route_id::health && d.route->id != route_id::monitor && !ready())
        return reject(503, "model is loading; retry when GET /health returns 200");
    return d;
}

service::outcome service::handle(const http_request_view &req) {
    ++http_requests_;
    const std::string_view path = path_of(req.target);
    const api_kind api = api_of(path);
    std::unique_ptr<generation_job> job;
    http_reply reply;
    try {
        const route_entry *r = route_find(path);
        if (r == nullptr) fail(error_kind::not_found, "no route for {} {}", req.method, path);
        reply = route(req, *r, job);
    } catch (const error &e) {
        reply = error_reply(api, e.http_status(), e.what());
    } catch (const std::bad_alloc &) {
        log_error("{} {}: out of memory", req.method, path);
        reply = error_reply(api, 503, "the server is out of memory; retry later");
    } catch (const std::exception &e) {
        log_error("{} {}: {}", req.method, path, e.what());
        reply = error_reply(api, 500, e.what());
    }
    if (job) return job;  // implicitly moved (C++20)
    if (reply.status >= 400) ++http_errors_;
    return reply;
}

http_reply service::route(const http_request_view &req, const route_entry &r, std::unique_ptr<generation_job> &job) {
    const api_kind api = api_of(r.path);
    if (r.id == route_id::health) {
        http_reply out;
        if (ready() && model_.eng)
            if (const std::vector<std::string> lost = model_.eng->lost_hosts(); !lost.empty()) {
                out.status = 503;
                out.body = json_dump(json{{"status", "error"}, {"error", "a host of the run was lost"}, {"lost_hosts", lost}});
                return out;
            }
        out.status = ready() ? 200 : 503;
        out.body = ready() ? std::string(R"({"status":"ok"})")
                           : json_dump({{"status", "loading model"},
                                        {"progress_percent", std::round(load_progress_.percent() * 10) / 10},
                                        {"bytes_loaded", load_progress_.done.load()},
                                        {"bytes_total", load_progress_.total.load()}});
        return out;
    }
    if (r.id == route_id::monitor) {
        http_reply out;
        out.content_type = "text/html; charset=utf-8";
        out.body = std::string(monitor_page());
        out.headers.emplace_back("Content-Security-Policy",
                                 "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:");
        out.headers.emplace_back("Cache-Control", "no-store");
        return out;
    }
    if (!ready()) return error_reply(api, 503, "model is loading; retry when GET /health returns 200");
    http_reply out;
    switch (r.id) {
    case route_id::chat:
    case route_id::completion:
    case route_id::messages:
    case route_id::responses: {
        if (stopping_.load()) return error_reply(api, 503, "the server is shutting down");
        job = prepare(api_parse_request(r.id, req.body, config_.json));
        return {};
    }
    case route_id::count_tokens: {
        api_request a = api_parse_request(r.id, req.body, config_.json);
        check_model(a.model);
        out.body = json_dump({{"input_tokens", tokenize_prompt(render_prompt(a)).size()}});
        return out;
    }
    case route_id::models: {
        auto created = std::chrono::duration_cast<std::chrono::seconds>(started_.time_since_epoch()).count();
        out.body = json_dump(openai_models_body(model_.model_id, created, model_.meta));
        return out;
    }
    case route_id::metrics:
        out.content_type = "text/plain; version=0.0.4; charset=utf-8";
        out.body = metrics_text() + metrics_.prometheus_text();
        return out;
    case route_id::model_one: return model_one(path_of(req.target));
    case route_id::slots: return slots_reply(req.target);
    case route_id::slot_action: out.body = json_dump(slot_action(req)); return out;
    case route_id::props: out.body = json_dump(props_json()); return out;
    case route_id::expert_traffic: out.body = json_dump(expert_traffic_json()); return out;
    case route_id::tokenize: return tokenize(req.body);
    case route_id::detokenize: return detokenize(req.body);
    case route_id::monitor_data:
        out.body = json_dump(monitor_json());
        out.headers.emplace_back("Cache-Control", "no-store");
        return out;
    case route_id::health:
    case route_id::monitor: break;
    }
    fail(error_kind::internal, "unrouted path {}", r.path);
}

void service::check_model(const std::string &model) const {
    if (model.empty()) return;
    for (const auto &name : model_.model_names)
        if (model == name) return;
    fail(error_kind::not_found, "model '{}' not found; this server serves '{}'", model, model_.model_id);
}

rendered_prompt service::render_prompt(const api_request &req) const {
    rendered_prompt rendered;
    if (req.route == route_kind::completion) {
        // A raw completion prompt is the client's whole prompt, turn markers included, so its
        // special-token texts are the tokens (as llama-server does).
        rendered.add_template(req.prompt);
        return rendered;
    }
    // transformers' choice: the file's tool_use template when the request offers tools.
    const chat_template &t = req.tools.offered() && model_.tool_tmpl ? *model_.tool_tmpl : model_.tmpl;
    // count_tokens counts what a generation would prefill, so the assistant opener is included.
    return t.render_request(req.chat);
}

std::vector<int32_t> service::tokenize_prompt(const rendered_prompt &prompt, size_t max_tokens) const {
    std::vector<text_piece> pieces;
    for (const auto &p : prompt.pieces) pieces.push_back({p.text, p.special || config_.allow_special_in_content});
    return model_.tok->encode(pieces, /*add_special=*/true, max_tokens);
}

chat_parse_options service::parse_options(const api_request &req, const rendered_prompt &prompt) const {
    chat_parse_options o;
    o.syntax = model_.syntax;
    o.reasoning = config_.reasoning_format != "none";
    if (o.syntax.think_tags && !prompt.pieces.empty()) {
        // Templates that open the reasoning block in the generation prompt (QwQ, DeepSeek V3.1
        // thinking) leave the reply inside it.
        std::string_view tail = prompt.pieces.back().text;
        while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
        o.think_open = prompt.pieces.back().special && tail.ends_with("<think>");
    }
    o.tools = req.tools.offered();
    o.parallel = req.tools.parallel;
    o.signatures = req.tools.defs;
    return o;
}

void service::set_tool_constraint(const api_request &req, bool think_open, gen_request &out) const {
    out.constraint = req.constraint;
    if (!req.tools.forced()) return;
    if (req.constraint) fail(error_kind::invalid_request, "a forced tool_choice and a response format cannot be combined");
    out.constraint = tool_forced_grammar(req.tools, model_.syntax.tools);
    if (think_open) out.constraint_after = "</think>";  // the reasoning the prompt opened runs free
}

std::unique_ptr<generation_job> service::prepare(api_request req) {
    check_model(req.model);
    if (req.route == route_kind::responses) responses_resolve(req, responses_);
    const int32_t n_ctx = model_.eng->n_ctx();
    const rendered_prompt rendered = render_prompt(req);
    // The context is the tokenizer's budget: a prompt that cannot fit stops being encoded there.
    std::vector<int32_t> prompt = tokenize_prompt(rendered, static_cast<size_t>(n_ctx));
    const int32_t n_prompt = static_cast<int32_t>(prompt.size());
    if (n_prompt == 0) fail(error_kind::invalid_request, "the prompt is empty");
    if (n_prompt > n_ctx)
        fail(error_kind::too_large, "the prompt has more than {} tokens but the context holds {} (--ctx); shorten it", n_ctx, n_ctx);
    if (n_prompt == n_ctx)
        fail(error_kind::too_large, "the prompt has {} tokens but the context holds {} (--ctx); shorten it", n_prompt, n_ctx);
    // A max_tokens beyond the context's room is clamped to it (finish_reason length), as
    // llama-server does: agents ask for 32,000 whatever the context.
    const int32_t max_tokens = std::min(req.max_tokens.value_or(n_ctx - n_prompt), n_ctx - n_prompt);

    response_context ctx;
    uint64_t serial = next_response_++;
    uint64_t salt = static_cast<uint64_t>(std::random_device{}());
    const char *prefix = req.route == route_kind::chat         ? "chatcmpl-"
                         : req.route == route_kind::completion ? "cmpl-"
                         : req.route == route_kind::responses  ? "resp_"
                                                               : "msg_";
    ctx.id = fmt::format("{}{:08x}{:08x}", prefix, salt & 0xffffffffu, serial);
    ctx.model = req.model.empty() ? model_.model_id : req.model;
    ctx.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const tokenizer *tok = model_.tok;
    ctx.token_text = [tok](int32_t id) { return tok->token_bytes(id); };
    ctx.n_prompt = n_prompt;
    if (req.route != route_kind::completion) ctx.parse = parse_options(req, rendered);

    gen_request request;
    set_tool_constraint(req, ctx.parse.think_open, request);
    std::unique_ptr<generation_job> job = req.route == route_kind::messages    ? anthropic_make_job(req, std::move(ctx))
                                          : req.route == route_kind::responses ? responses_make_job(req, std::move(ctx), &responses_)
                                                                               : openai_make_job(req, std::move(ctx));
    job->request = std::move(request);
    job->request.prompt = std::move(prompt);
    job->request.max_tokens = max_tokens;
    job->request.sampling = sampling_resolve(config_.sampling, req);
    sampler validate(job->request.sampling);  // throws invalid_request here, not later on the engine thread
    for (const auto &[id, bias] : job->request.sampling.logit_bias)
        if (id >= model_.tok->n_vocab())
            fail(error_kind::invalid_request, "'logit_bias': token id {} is out of range (the vocabulary has {} tokens)", id,
                 model_.tok->n_vocab());
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
    family("tandem_prompt_cache_bytes", "gauge", "Host memory the prompt cache holds (--cache-ram).",
           static_cast<double>(s.prompt_cache_bytes));
    family("tandem_prompt_cache_hits_total", "counter", "Requests that restored a prompt prefix from the host cache.",
           static_cast<double>(s.prompt_cache_hits));
    family("tandem_prompt_cache_misses_total", "counter", "Requests that found nothing longer in the host or disk cache than their slot held.",
           static_cast<double>(s.prompt_cache_misses));
    family("tandem_prompt_cache_tokens_restored_total", "counter", "Prompt tokens restored from the host cache.",
           static_cast<double>(s.prompt_cache_restored));
    family("tandem_prompt_cache_disk_bytes", "gauge", "Bytes of the prompt cache's files on disk (--cache-disk).",
           static_cast<double>(s.prompt_cache_disk_bytes));
    family("tandem_prompt_cache_disk_hits_total", "counter", "Requests that read a prompt prefix back from the disk cache.",
           static_cast<double>(s.prompt_cache_disk_hits));
    family("tandem_prompt_cache_disk_tokens_restored_total", "counter", "Prompt tokens read back from the disk cache.",
           static_cast<double>(s.prompt_cache_disk_restored));
    family("tandem_prefix_tokens_copied_total", "counter", "Prompt tokens copied from another slot's shared prefix.",
           static_cast<double>(s.prefix_tokens_copied));
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

namespace {

// The id of /slots/{id} and the one query parameter, action.
std::pair<int32_t, std::string> slot_action_target(std::string_view target) {
    const size_t q = target.find('?');
    const std::string_view id = target.substr(7, q == std::string_view::npos ? std::string_view::npos : q - 7);
    if (id.empty() || id.size() > 4 || !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; }))
        fail(error_kind::not_found, "no slot '{}'", id);
    const std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
    if (!query.starts_with("action=") || query.find('&') != std::string_view::npos)
        fail(error_kind::invalid_request, "POST /slots/{{id}} takes one query parameter, action=save|restore|erase");
    return {std::stoi(std::string(id)), std::string(query.substr(7))};
}

}  // namespace

// The routing profile recorded so far, in the --expert-traffic-out file's format, so a profile of
// real prompts reaches `tandem plan --expert-balance` without a restart.
json service::expert_traffic_json() const {
    const std::vector<std::vector<uint64_t>> counts = model_.sched->expert_traffic();
    if (counts.empty())
        fail(error_kind::not_found, "this server records no expert traffic; start it with --expert-traffic-out FILE");
    return {{"n_layer", counts.size()}, {"n_expert", counts.front().size()}, {"counts", counts}};
}

json service::slot_action(const http_request_view &req) {
    const auto [slot, action] = slot_action_target(req.target);
    if (action != "save" && action != "restore" && action != "erase")
        fail(error_kind::invalid_request, "unknown slot action '{}' (save, restore or erase)", action);
    const json body = req.body.empty() ? json::object() : json_parse_body(req.body, config_.json);
    if (!body.is_object()) fail(error_kind::invalid_request, "the body must be a JSON object");
    for (const auto &[key, value] : body.items())
        if (key != "filename" || action == "erase") fail(error_kind::invalid_request, "unsupported field '{}' for action {}", key, action);
    const auto start = std::chrono::steady_clock::now();
    auto ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(); };
    if (action == "erase") {
        const auto before = model_.sched->slots();
        model_.sched->slot_erase(slot);
        return {{"id_slot", slot}, {"n_erased", before[size_t(slot)].n_cached}};
    }
    if (config_.slot_save_path.empty())
        fail(error_kind::unsupported, "slot files are off; start the server with --slot-save-path DIR");
    if (!body.contains("filename") || !body["filename"].is_string()) fail(error_kind::invalid_request, "'filename' (a string) is required");
    const std::string name = body["filename"].get<std::string>();
    const std::string path = slot_file_path(config_.slot_save_path, name);
    if (action == "save") {
        const slot_snapshot snap = model_.sched->slot_save(slot);
        const uint64_t written = slot_file_write(path, model_.slot_identity, snap);
        return {{"id_slot", slot}, {"filename", name}, {"n_saved", snap.tokens.size()}, {"n_written", written},
                {"timings", {{"save_ms", ms()}}}};
    }
    uint64_t read = 0;
    slot_snapshot snap = slot_file_read(path, model_.slot_identity, read);
    const size_t n = snap.tokens.size();
    model_.sched->slot_restore(slot, std::move(snap));
    return {{"id_slot", slot}, {"filename", name}, {"n_restored", n}, {"n_read", read}, {"timings", {{"restore_ms", ms()}}}};
}

json service::props_json() const {
    json params = sampling_defaults_json(config_.sampling);
    params["n_predict"] = -1;
    json settings = {{"n_ctx", model_.eng ? model_.eng->n_ctx() : config_.n_ctx}, {"params", params}};
    return {
        {"default_generation_settings", settings},
        {"default_generation_settings_from", config_.sampling.from},
        {"total_slots", model_.eng ? model_.eng->n_slots() : config_.n_slots},
        {"model_path", config_.model_path},
        {"model_alias", model_.model_id},
        {"chat_template", model_.tmpl.source},
        {"chat_template_origin", model_.tmpl.origin},
        {"chat_template_family", chat_template_family_name(model_.tmpl.family)},
        {"chat_template_tool_use", model_.tool_tmpl ? json(model_.tool_tmpl->source) : json(nullptr)},
        {"chat_template_error", model_.tmpl.parse_error.empty() ? json(nullptr) : json(model_.tmpl.parse_error)},
        {"tool_call_format", tool_format_name(model_.syntax.tools)},
        {"reasoning_format", config_.reasoning_format},
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
    h.vocab = std::make_shared<const grammar_vocab>(grammar_vocab_of(tok));
    h.token_bytes = [t](int32_t id) -> const std::string & { return t->token_bytes(id); };
    return h;
}

}  // namespace tandem::server
