// src/util/log.cpp - stderr logger: "2026-11-29T13:31:27.123Z I message", one write per line.
#include "tandem/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace tandem {

namespace {
// TANDEM_LOG_LEVEL=debug|info|warn|error sets the starting level (default info), for every
// binary; another value is reported on stderr and info is used.
int level_from_env() {
    const char *v = std::getenv("TANDEM_LOG_LEVEL");
    const std::string s = v ? v : "";
    if (s == "debug") return static_cast<int>(log_level::debug);
    if (s == "warn") return static_cast<int>(log_level::warn);
    if (s == "error") return static_cast<int>(log_level::error);
    if (!s.empty() && s != "info")
        std::fprintf(stderr, "tandem: TANDEM_LOG_LEVEL=%s is not one of debug, info, warn, error; logging at info\n", s.c_str());
    return static_cast<int>(log_level::info);
}
std::atomic<int> g_level{level_from_env()};
}  // namespace

void log_set_level(log_level level) { g_level.store(static_cast<int>(level)); }
log_level log_get_level() { return static_cast<log_level>(g_level.load(std::memory_order_relaxed)); }

void log_write(log_level level, std::string_view message) {
    using namespace std::chrono;
    const auto now = system_clock::now();
    const std::time_t secs = system_clock::to_time_t(now);
    const int millis = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    static constexpr char tags[] = {'D', 'I', 'W', 'E'};
    std::string line = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {} {}\n", tm.tm_year + 1900,
                                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis,
                                   tags[static_cast<int>(level)], message);
    std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace tandem
