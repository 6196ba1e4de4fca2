// tandem/log.h - one-line logging to stderr with a level and a timestamp.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3 };

void log_set_level(log_level level);
log_level log_get_level();
void log_write(log_level level, std::string_view message);

// text: "2026-11-29T13:31:27.123Z I message"; json: one object a line, {"time","level","msg"}
// and the fields of log_write_fields, for log collectors.
enum class log_format { text, json };
void log_set_format(log_format format);

// A named value of a structured line; `number` values are written unquoted in json.
struct log_field {
    std::string_view key;
    std::string value;
    bool number = false;
};
// One line: "message key=value ..." in text (values with spaces quoted), the fields as members
// beside "msg" in json.
void log_write_fields(log_level level, std::string_view message, const std::vector<log_field> &fields);

template <class... Args>
void log_info(fmt::format_string<Args...> f, Args &&...args) {
    if (log_get_level() <= log_level::info) log_write(log_level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_warn(fmt::format_string<Args...> f, Args &&...args) {
    if (log_get_level() <= log_level::warn) log_write(log_level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_error(fmt::format_string<Args...> f, Args &&...args) {
    log_write(log_level::error, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_debug(fmt::format_string<Args...> f, Args &&...args) {
    if (log_get_level() <= log_level::debug) log_write(log_level::debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tandem
