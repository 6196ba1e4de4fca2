// src/server/request_metrics.h - what the server records about each finished HTTP request: the
// log line, Prometheus histograms (TTFT, inter-token latency, duration, queue wait, prompt
// length), counters by status and by key, and recent latencies for /monitor's percentiles.
#pragma once

#include "src/server/api_common.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::server {

// One finished request as the connection saw it. Generation fields stay negative (or empty)
// for requests that generated nothing.
struct request_record {
    std::string id;          // X-Request-Id
    std::string key_name;    // the API key's name; "-" without keys or before the key was checked
    std::string method, route, model, client;
    int status = 0;
    bool generation = false;
    int32_t n_prompt = 0, n_cached = 0, n_generated = 0;
    double duration_s = 0.0;
    double ttft_s = -1.0;    // submit to first token
    double queue_s = -1.0;   // submit to admission into a slot
    double decode_tok_s = 0.0;
    std::string finish;      // stop, length, cancelled, error
    std::vector<float> itl_s;  // each generated token's gap to the one before
};

// Fixed upper bounds; counts per bucket, written cumulatively as Prometheus wants them.
class histogram {
public:
    explicit histogram(std::vector<double> bounds);
    void observe(double v);
    void write(std::string &out, const char *name, const char *help) const;
    uint64_t count() const { return count_; }

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // [bounds + 1], the last one +Inf
    double sum_ = 0.0;
    uint64_t count_ = 0;
};

// The latest `n` values of a series, for percentiles over what just happened.
class recent_values {
public:
    explicit recent_values(size_t n) : values_(n) {}
    void push(double v);
    // p in [0, 1]; empty when nothing was recorded.
    std::vector<double> percentiles(const std::vector<double> &ps) const;

private:
    std::vector<double> values_;
    size_t next_ = 0, size_ = 0;
};

class request_metrics {
public:
    request_metrics();
    // Thread-safe; called once per finished request.
    void record(const request_record &r);
    // The histogram and counter families, Prometheus text.
    std::string prometheus_text() const;
    // {"ttft_ms": {"p50","p90","p99","n"}, "itl_ms": {...}} over the latest requests and tokens.
    json latency_json() const;

private:
    struct key_counts {
        uint64_t requests = 0, prompt_tokens = 0, generated_tokens = 0;
    };
    mutable std::mutex mutex_;
    histogram ttft_, itl_, duration_, queue_, prompt_;
    std::map<int, uint64_t> by_status_;
    std::map<std::string, key_counts> by_key_;
    recent_values recent_ttft_{1024}, recent_itl_{8192};
};

// The request's log line (info; debug for the probes and pollers named in the .cpp).
void request_log(const request_record &r);

}  // namespace tandem::server
