// src/server/systemd_notify.h - tandem-server under systemd (Type=notify, WatchdogSec=): READY=1
// once the model is loaded, STOPPING=1 at shutdown, STATUS= lines, and WATCHDOG=1 pings while the
// engine loop turns. Everything is a no-op outside systemd (no NOTIFY_SOCKET) or in a build
// without libsystemd.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "tandem/engine.h"

namespace tandem::server {

// Sends `state` ("READY=1", "STOPPING=1", "STATUS=...", several joined by newlines) to systemd.
void systemd_notify(const std::string &state);

// Pings systemd's watchdog every half of its interval while healthy(interval) is true; once a step
// of the engine loop has run longer than the interval, it stops, so systemd restarts the service.
// Starts no thread when the service has no watchdog.
class systemd_watchdog {
public:
    explicit systemd_watchdog(std::function<bool(std::chrono::microseconds interval)> healthy);
    ~systemd_watchdog();
    systemd_watchdog(const systemd_watchdog &) = delete;
    systemd_watchdog &operator=(const systemd_watchdog &) = delete;

private:
    std::function<bool(std::chrono::microseconds)> healthy_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

// While it lives, systemd's status line (`systemctl status`) shows the share of the weights loaded:
// at once, then every two seconds. Starts no thread outside systemd.
class systemd_loading_status {
public:
    explicit systemd_loading_status(const engine_load_progress &progress);
    ~systemd_loading_status();
    systemd_loading_status(const systemd_loading_status &) = delete;
    systemd_loading_status &operator=(const systemd_loading_status &) = delete;

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace tandem::server
