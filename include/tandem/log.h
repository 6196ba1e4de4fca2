// tandem/log.h - one-line logging to stderr with a level and a timestamp.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace tandem {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3 };

void log_set_level(log_level level);
log_level log_get_level();
void log_write(log_level level, std::string_view message);

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
