// src/server/service.h - the HTTP-independent server: routes, auth, request mapping to the
// scheduler, ops endpoints (/health, /metrics, /slots, /props). The Beast layer (http_server.h)
// only moves bytes; everything a request means is decided here.
#pragma once

#include "src/scheduler/scheduler.h"
#include "src/server/api_common.h"
#include "src/server/monitor.h"
#include "src/server/request_guard.h"
#include "src/server/request_metrics.h"
#include "src/server/response_store.h"
#include "src/server/server_config.h"
#include "src/server/slot_files.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tandem {
class tokenizer;
}

namespace tandem::server {

struct http_request_view {
    std::string method;  // "GET", "POST", ...
    std::string target;  // path with query
    int32_t version = 11;                   // 10: HTTP/1.0, 11: HTTP/1.1
    int32_t n_host = 1;                     // Host fields in the head (HTTP/1.1 needs exactly one)
    std::string host;
    std::string origin;
    std::string content_type;
    std::string authorization;
    std::string x_api_key;
    std::string cors_request_method;        // Access-Control-Request-Method (a CORS preflight)
    std::string cors_request_headers;       // Access-Control-Request-Headers
    bool has_body = false;                  // a Content-Length above 0 or a chunked body follows
    std::optional<uint64_t> content_length;
    std::string body;
};

struct http_reply {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

// The routes, with the method each takes and whether its work is heavy (JSON bodies parsed and
// prompts tokenized on the request pool) or cheap (answered on the I/O thread).
enum class route_id {
    health, models, model_one, metrics, slots, slot_action, props, chat, completion, messages, count_tokens, responses,
    tokenize, detokenize, monitor, monitor_data, expert_traffic
};
struct route_entry {
    std::string_view path;
    route_id id;
    std::string_view method;
    bool heavy;
};
const route_entry *route_find(std::string_view path);

// Maps a generation route's body (JSON under `limits`) to an api_request; throws error(...) as
// the API mapping does.
api_request api_parse_request(route_id route, const std::string &body, const json_limits &limits);

// What the head of a request decides before its body is read.
struct head_decision {
    std::optional<http_reply> reply;  // answer now (the body, if any, is never read)
    const route_entry *route = nullptr;
    size_t body_limit = 0;            // bytes this route accepts
    std::string key_name = "-";       // the name of the API key presented ("-": no keys, or not checked)
    std::vector<std::pair<std::string, std::string>> headers;  // CORS headers for every reply
};

// What the model side provides once loaded (owned by server_main).
struct model_context {
    engine *eng = nullptr;
    scheduler *sched = nullptr;
    const tokenizer *tok = nullptr;
    chat_template tmpl;                      // the chat template in use
    std::optional<chat_template> tool_tmpl;  // the file's tool_use template, for requests with tools
    chat_syntax syntax;                      // how the model writes reasoning and tool calls
    std::string model_id;                 // the alias clients use
    std::vector<std::string> model_names; // all accepted names (alias, file name)
    json meta;                            // /v1/models meta and /props details
    slot_file_identity slot_identity;     // what slot files must match
};

class service {
public:
    explicit service(const server_config &config);

    // Called once the engine and scheduler exist; /health turns 200.
    void set_ready(model_context ctx);
    bool ready() const { return ready_.load(); }
    // Where the engine counts its weights while it opens: /health's 503 body reports it.
    engine_load_progress *load_progress() { return &load_progress_; }

    // The port the server listens on (Host checks); set once it is bound.
    void set_port(int32_t port) { policy_.port = port; }
    // Refuses new generations (503) from now on; cheap routes keep answering.
    void begin_shutdown() { stopping_.store(true); }

    // Checks a request's head: Host, Origin, CORS preflight, route and method, API key, content
    // type, body size, readiness. `overflow`: the connection is past --max-connections, so only
    // cheap routes are served.
    head_decision check_head(const http_request_view &head, bool overflow) const;

    // Either a finished reply or a generation job to submit. Thread-safe: heavy routes run on the
    // request pool. Every error, allocation failures included, becomes an error reply.
    using outcome = std::variant<http_reply, std::unique_ptr<generation_job>>;
    outcome handle(const http_request_view &req);

    // Submits a job (its request.sink set by the caller); throws error(unavailable) etc.
    uint64_t submit(generation_job &job);
    void cancel(uint64_t id);
    void job_finished() { --busy_; }
    int32_t busy() const { return busy_.load(); }

    // The API whose error shape a path uses.
    static api_kind api_of(std::string_view target);
    http_reply error_reply(api_kind api, int status, const std::string &message) const;

    std::string metrics_text() const;
    json slots_json() const;
    json props_json() const;
    json expert_traffic_json() const;
    // POST /slots/{id}?action=save|restore|erase, llama-server's shapes.
    json slot_action(const http_request_view &req);
    json monitor_json() const;

    // The id a request's reply carries (X-Request-Id) and its log line names.
    std::string next_request_id();
    // Counts a finished request in the metrics and writes its log line.
    void request_finished(const request_record &r);
    const std::string &model_id() const { return model_.model_id; }

    const server_config &config() const { return config_; }

private:
    http_reply route(const http_request_view &req, const route_entry &r, std::unique_ptr<generation_job> &job);
    std::unique_ptr<generation_job> prepare(api_request req);
    // The prompt as the template renders it (a completion's prompt as it is).
    rendered_prompt render_prompt(const api_request &req) const;
    // At most max_tokens + 1 ids (tokenizer::encode's budget); count_tokens takes them all.
    std::vector<int32_t> tokenize_prompt(const rendered_prompt &prompt, size_t max_tokens = SIZE_MAX) const;
    // How the reply's text is read, and the grammar a forced tool choice imposes.
    chat_parse_options parse_options(const api_request &req, const rendered_prompt &prompt) const;
    void set_tool_constraint(const api_request &req, bool think_open, gen_request &out) const;
    void check_model(const std::string &model) const;
    // The name of the key the request presents ("-" when the server has none), or nothing.
    std::optional<std::string> key_of(const http_request_view &req, api_kind api) const;
    http_reply tokenize(const std::string &body) const;
    http_reply detokenize(const std::string &body) const;
    http_reply model_one(std::string_view path) const;
    http_reply slots_reply(std::string_view target) const;
    http_reply preflight_reply(const http_request_view &head) const;

    server_config config_;
    origin_policy policy_;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> ready_{false};
    engine_load_progress load_progress_;
    model_context model_;
    std::atomic<int32_t> busy_{0};
    std::atomic<uint64_t> next_response_{1};
    std::chrono::system_clock::time_point started_;
    response_store responses_{256, 64u << 20};  // previous_response_id: the latest responses, up to 64 MiB
    // Completed-request accounting for the throughput gauges.
    std::atomic<uint64_t> http_requests_{0}, http_errors_{0};
    std::atomic<uint64_t> next_request_{1};
    request_metrics metrics_;
    std::unique_ptr<monitor_history> history_;  // from set_ready on
};

// The scheduler's tokenizer and sampler hooks for a real model: token_streamer for UTF-8-safe
// text, a seeded tandem::sampler per request.
scheduler_hooks make_scheduler_hooks(const tokenizer &tok);

}  // namespace tandem::server
