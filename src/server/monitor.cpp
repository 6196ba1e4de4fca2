// src/server/monitor.cpp - the throughput history behind /monitor's charts, and host memory.
#include "src/server/monitor.h"

#include <fstream>
#include <sstream>
#include <string>

namespace tandem::server {

monitor_history::monitor_history(const scheduler &sched, std::chrono::milliseconds period, size_t n_keep)
    : sched_(sched), period_(period), n_keep_(n_keep) {
    take();
    thread_ = std::thread([this] { run(); });
}

monitor_history::~monitor_history() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void monitor_history::take() {
    const scheduler_stats s = sched_.stats();
    const double t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::lock_guard lock(mutex_);
    samples_.push_back({t, s.predicted_tokens, s.prompt_tokens});
    while (samples_.size() > n_keep_) samples_.pop_front();
}

void monitor_history::run() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, period_, [this] { return stop_; })) {
        lock.unlock();
        take();
        lock.lock();
    }
}

json monitor_history::series() const {
    std::lock_guard lock(mutex_);
    json t = json::array(), decode = json::array(), prefill = json::array();
    for (size_t i = 1; i < samples_.size(); ++i) {
        const sample &a = samples_[i - 1], &b = samples_[i];
        const double dt = b.t - a.t;
        if (dt <= 0) continue;
        t.push_back(b.t);
        decode.push_back(static_cast<double>(b.predicted_tokens - a.predicted_tokens) / dt);
        prefill.push_back(static_cast<double>(b.prompt_tokens - a.prompt_tokens) / dt);
    }
    return {{"t", t}, {"decode_tok_s", decode}, {"prefill_tok_s", prefill}};
}

namespace {
// A "Key:   123 kB" line of a /proc file, in bytes; -1 when absent.
int64_t proc_kib_field(const char *path, std::string_view key) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() || line[key.size()] != ':') continue;
        std::istringstream rest(line.substr(key.size() + 1));
        int64_t kib = -1;
        rest >> kib;
        return kib < 0 ? -1 : kib * 1024;
    }
    return -1;
}
}  // namespace

json monitor_host_memory() {
    return {{"rss_bytes", proc_kib_field("/proc/self/status", "VmRSS")},
            {"available_bytes", proc_kib_field("/proc/meminfo", "MemAvailable")},
            {"total_bytes", proc_kib_field("/proc/meminfo", "MemTotal")}};
}

}  // namespace tandem::server
