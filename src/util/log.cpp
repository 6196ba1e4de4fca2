// src/util/log.cpp - stderr logger: "2026-11-29T13:31:27.123Z I message" or one JSON object a
// line (--log-format json), one write per line.
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
std::atomic<int> g_format{static_cast<int>(log_format::text)};

std::string timestamp() {
    using namespace std::chrono;
    const auto now = system_clock::now();
    const std::time_t secs = system_clock::to_time_t(now);
    const int millis = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                       tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
}

void json_escape(std::string &out, std::string_view s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20) out += fmt::format("\\u{:04x}", c);
            else out += static_cast<char>(c);
        }
    }
    out += '"';
}

const char *level_name(log_level level) {
    static constexpr const char *names[] = {"debug", "info", "warn", "error"};
    return names[static_cast<int>(level)];
}

void emit(log_level level, std::string_view message, const std::vector<log_field> *fields) {
    std::string line;
    if (static_cast<log_format>(g_format.load(std::memory_order_relaxed)) == log_format::json) {
        line = "{\"time\":\"" + timestamp() + "\",\"level\":\"" + level_name(level) + "\",\"msg\":";
        json_escape(line, message);
        for (const auto &f : fields ? *fields : std::vector<log_field>{}) {
            line += ',';
            json_escape(line, f.key);
            line += ':';
            if (f.number) line += f.value;
            else json_escape(line, f.value);
        }
        line += "}\n";
    } else {
        static constexpr char tags[] = {'D', 'I', 'W', 'E'};
        line = fmt::format("{} {} {}", timestamp(), tags[static_cast<int>(level)], message);
        for (const auto &f : fields ? *fields : std::vector<log_field>{}) {
            const bool quote = f.value.empty() || f.value.find_first_of(" \"=") != std::string::npos;
            line += quote ? fmt::format(" {}=\"{}\"", f.key, f.value) : fmt::format(" {}={}", f.key, f.value);
        }
        line += '\n';
    }
    std::fwrite(line.data(), 1, line.size(), stderr);
}
}  // namespace

void log_set_level(log_level level) { g_level.store(static_cast<int>(level)); }
log_level log_get_level() { return static_cast<log_level>(g_level.load(std::memory_order_relaxed)); }
void log_set_format(log_format format) { g_format.store(static_cast<int>(format)); }

void log_write(log_level level, std::string_view message) { emit(level, message, nullptr); }

void log_write_fields(log_level level, std::string_view message, const std::vector<log_field> &fields) {
    if (log_get_level() <= level) emit(level, message, &fields);
}

}  // namespace tandem
