// src/server/service.h - the HTTP-independent server: routes, auth, request mapping to the
// scheduler, ops endpoints (/health, /metrics, /slots, /props). The Beast layer (http_server.h)
// only moves bytes; everything a request means is decided here.
#pragma once

#include "src/scheduler/scheduler.h"
#include "src/server/api_common.h"
#include "src/server/server_config.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
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
    std::string authorization;
    std::string x_api_key;
    std::string body;
};

struct http_reply {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

// What the model side provides once loaded (owned by server_main).
struct model_context {
    engine *eng = nullptr;
    scheduler *sched = nullptr;
    const tokenizer *tok = nullptr;
    chat_template tmpl;
    std::string model_id;                 // the alias clients use
    std::vector<std::string> model_names; // all accepted names (alias, file name)
    json meta;                            // /v1/models meta and /props details
};

class service {
public:
    explicit service(const server_config &config);

    // Called once the engine and scheduler exist; /health turns 200.
    void set_ready(model_context ctx);
    bool ready() const { return ready_.load(); }

    // Either a finished reply or a generation job to submit.
    using outcome = std::variant<http_reply, std::unique_ptr<generation_job>>;
    outcome handle(const http_request_view &req);

    // Submits a job (its request.sink set by the caller); throws error(unavailable) etc.
    uint64_t submit(generation_job &job);
    void cancel(uint64_t id);
    void job_finished() { --busy_; }
    int32_t busy() const { return busy_.load(); }

    // The API whose error shape a path uses.
    static api_kind api_of(const std::string &target);
    http_reply error_reply(api_kind api, int status, const std::string &message) const;

    std::string metrics_text() const;
    json slots_json() const;
    json props_json() const;

    const server_config &config() const { return config_; }

private:
    http_reply route(const http_request_view &req, const std::string &path, std::unique_ptr<generation_job> &job);
    std::unique_ptr<generation_job> prepare(const api_request &req);
    std::vector<int32_t> tokenize_prompt(const api_request &req) const;
    void check_model(const std::string &model) const;
    bool authorized(const http_request_view &req, api_kind api) const;

    server_config config_;
    std::atomic<bool> ready_{false};
    model_context model_;
    std::atomic<int32_t> busy_{0};
    std::atomic<uint64_t> next_response_{1};
    std::chrono::system_clock::time_point started_;
    // Completed-request accounting for the throughput gauges.
    std::atomic<uint64_t> http_requests_{0}, http_errors_{0};
};

// The scheduler's tokenizer and sampler hooks for a real model: token_streamer for UTF-8-safe
// text, a seeded tandem::sampler per request.
scheduler_hooks make_scheduler_hooks(const tokenizer &tok);

}  // namespace tandem::server
