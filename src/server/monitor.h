// src/server/monitor.h - /monitor's data: a short history of the scheduler's throughput, sampled
// on its own thread every few seconds (a copy of the counters: nothing when nobody looks at the
// page but two numbers kept), and the page itself, embedded in the binary.
#pragma once

#include "src/scheduler/scheduler.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>

#include "src/server/api_common.h"

namespace tandem::server {

// The /monitor page: HTML with its script and style inline, no external assets.
std::string_view monitor_page();

class monitor_history {
public:
    // Samples `sched` every `period` until destroyed; keeps `n_keep` samples.
    monitor_history(const scheduler &sched, std::chrono::milliseconds period, size_t n_keep);
    ~monitor_history();
    monitor_history(const monitor_history &) = delete;
    monitor_history &operator=(const monitor_history &) = delete;

    // {"t": [unix seconds], "decode_tok_s": [...], "prefill_tok_s": [...]}: rates between samples.
    json series() const;

private:
    struct sample {
        double t;  // unix seconds
        uint64_t predicted_tokens, prompt_tokens;
    };
    void take();
    void run();

    const scheduler &sched_;
    const std::chrono::milliseconds period_;
    const size_t n_keep_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;
    std::deque<sample> samples_;
    std::thread thread_;
};

// The process's resident memory and the host's available memory, in bytes, from /proc.
json monitor_host_memory();

}  // namespace tandem::server
