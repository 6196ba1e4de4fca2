// src/server/systemd_notify.cpp - sd_notify(3) and sd_watchdog_enabled(3) from libsystemd, when
// the build has it (see systemd_notify.h).
#include "src/server/systemd_notify.h"

#include "tandem/log.h"

#include <fmt/format.h>

#include <cstdlib>

#ifdef TANDEM_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace tandem::server {

void systemd_notify(const std::string &state) {
#ifdef TANDEM_HAVE_SYSTEMD
    const int r = sd_notify(0, state.c_str());
    if (r < 0) log_warn("systemd notification '{}' failed (error {})", state, -r);
#else
    (void)state;
#endif
}

systemd_watchdog::systemd_watchdog(std::function<bool(std::chrono::microseconds)> healthy) : healthy_(std::move(healthy)) {
#ifdef TANDEM_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
    const std::chrono::microseconds interval(usec);
    log_info("systemd watchdog: {} ms; pinged while the engine loop turns", usec / 1000);
    thread_ = std::thread([this, interval] {
        std::unique_lock lock(mutex_);
        bool warned = false;
        while (!cv_.wait_for(lock, interval / 2, [this] { return stop_; })) {
            if (healthy_(interval)) {
                sd_notify(0, "WATCHDOG=1");
                warned = false;
            } else if (!warned) {
                log_error("an engine step has run longer than the watchdog interval: no longer pinging systemd");
                warned = true;
            }
        }
    });
#endif
}

systemd_watchdog::~systemd_watchdog() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

systemd_loading_status::systemd_loading_status(const engine_load_progress &progress) {
    const char *socket = std::getenv("NOTIFY_SOCKET");
    if (socket == nullptr || *socket == '\0') return;
    thread_ = std::thread([this, &progress] {
        std::unique_lock lock(mutex_);
        do systemd_notify(fmt::format("STATUS=loading weights: {:.0f}%", progress.percent()));
        while (!cv_.wait_for(lock, std::chrono::seconds(2), [this] { return stop_; }));
    });
}

systemd_loading_status::~systemd_loading_status() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

}  // namespace tandem::server
