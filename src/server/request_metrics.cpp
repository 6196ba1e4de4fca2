// src/server/request_metrics.cpp - histograms, counters and the per-request log line.
#include "src/server/request_metrics.h"

#include "tandem/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tandem::server {

namespace {

// Bucket bounds follow vLLM's choices where they exist, so dashboards built for it read ours.
std::vector<double> ttft_bounds() { return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80}; }
std::vector<double> itl_bounds() { return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5}; }
std::vector<double> duration_bounds() { return {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640}; }
std::vector<double> queue_bounds() { return {0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}; }
std::vector<double> prompt_bounds() { return {16, 64, 256, 1024, 4096, 16384, 65536, 262144}; }

std::string label_value(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

std::string bound_text(double b) { return std::isinf(b) ? "+Inf" : fmt::format("{}", b); }

}  // namespace

histogram::histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void histogram::observe(double v) {
    const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // le: v <= bound
    ++counts_[static_cast<size_t>(at - bounds_.begin())];
    sum_ += v;
    ++count_;
}

void histogram::write(std::string &out, const char *name, const char *help) const {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
        cumulative += counts_[i];
        const double bound = i < bounds_.size() ? bounds_[i] : INFINITY;
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bound_text(bound), cumulative);
    }
    out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
}

void recent_values::push(double v) {
    values_[next_] = v;
    next_ = (next_ + 1) % values_.size();
    size_ = std::min(size_ + 1, values_.size());
}

std::vector<double> recent_values::percentiles(const std::vector<double> &ps) const {
    if (size_ == 0) return {};
    std::vector<double> sorted(values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(size_));
    std::sort(sorted.begin(), sorted.end());
    std::vector<double> out;
    for (double p : ps) out.push_back(sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size())))]);
    return out;
}

request_metrics::request_metrics()
    : ttft_(ttft_bounds()), itl_(itl_bounds()), duration_(duration_bounds()), queue_(queue_bounds()), prompt_(prompt_bounds()) {}

void request_metrics::record(const request_record &r) {
    std::lock_guard lock(mutex_);
    ++by_status_[r.status];
    key_counts &k = by_key_[r.key_name];
    ++k.requests;
    if (!r.generation) return;
    k.prompt_tokens += static_cast<uint64_t>(r.n_prompt);
    k.generated_tokens += static_cast<uint64_t>(r.n_generated);
    duration_.observe(r.duration_s);
    prompt_.observe(r.n_prompt);
    if (r.queue_s >= 0) queue_.observe(r.queue_s);
    if (r.ttft_s >= 0) {
        ttft_.observe(r.ttft_s);
        recent_ttft_.push(r.ttft_s);
    }
    for (float gap : r.itl_s) {
        itl_.observe(gap);
        recent_itl_.push(gap);
    }
}

std::string request_metrics::prometheus_text() const {
    std::lock_guard lock(mutex_);
    std::string out;
    ttft_.write(out, "tandem_time_to_first_token_seconds", "Time from a generation request's submission to its first token.");
    itl_.write(out, "tandem_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.");
    duration_.write(out, "tandem_request_duration_seconds", "Time from a generation request's submission to its end.");
    queue_.write(out, "tandem_queue_wait_seconds", "Time a generation request waited for a KV slot.");
    prompt_.write(out, "tandem_prompt_tokens", "Prompt length of generation requests in tokens.");
    out += "# HELP tandem_http_responses_total HTTP requests answered, by status code.\n"
           "# TYPE tandem_http_responses_total counter\n";
    for (const auto &[code, n] : by_status_) out += fmt::format("tandem_http_responses_total{{code=\"{}\"}} {}\n", code, n);
    auto per_key = [&](const char *name, const char *help, uint64_t key_counts::*field) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
        for (const auto &[key, c] : by_key_) out += fmt::format("{}{{key=\"{}\"}} {}\n", name, label_value(key), c.*field);
    };
    per_key("tandem_key_requests_total", "HTTP requests by API key name.", &key_counts::requests);
    per_key("tandem_key_prompt_tokens_total", "Prompt tokens of generation requests by API key name.", &key_counts::prompt_tokens);
    per_key("tandem_key_generated_tokens_total", "Generated tokens by API key name.", &key_counts::generated_tokens);
    return out;
}

json request_metrics::latency_json() const {
    std::lock_guard lock(mutex_);
    auto summary = [](const recent_values &v, uint64_t n) {
        const std::vector<double> p = v.percentiles({0.5, 0.9, 0.99});
        if (p.empty()) return json{{"n", n}};
        return json{{"p50", p[0] * 1e3}, {"p90", p[1] * 1e3}, {"p99", p[2] * 1e3}, {"n", n}};
    };
    return {{"ttft_ms", summary(recent_ttft_, ttft_.count())}, {"itl_ms", summary(recent_itl_, itl_.count())}};
}

void request_log(const request_record &r) {
    // Probes and pollers would drown the requests people make.
    const bool poll = r.route == "/health" || r.route == "/v1/health" || r.route == "/metrics" || r.route == "/monitor/data";
    std::vector<log_field> f = {
        {"id", r.id}, {"key", r.key_name}, {"method", r.method}, {"route", r.route}, {"model", r.model},
        {"status", std::to_string(r.status), true}, {"client", r.client}, {"duration_ms", fmt::format("{:.1f}", r.duration_s * 1e3), true},
    };
    if (r.generation) {
        f.push_back({"prompt_tokens", std::to_string(r.n_prompt), true});
        f.push_back({"cached_tokens", std::to_string(r.n_cached), true});
        f.push_back({"generated_tokens", std::to_string(r.n_generated), true});
        f.push_back({"ttft_ms", r.ttft_s >= 0 ? fmt::format("{:.1f}", r.ttft_s * 1e3) : "null", true});
        f.push_back({"tok_s", fmt::format("{:.1f}", r.decode_tok_s), true});
        f.push_back({"finish", r.finish});
    }
    log_write_fields(poll ? log_level::debug : log_level::info, "request", f);
}

}  // namespace tandem::server
