// tandem/error.h - typed errors (request, file, configuration) and always-on assertions.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tandem {

// What went wrong, which decides the HTTP status (request errors) or the exit code (CLI).
enum class error_kind {
    invalid_request,  // 400: malformed JSON, wrong types, bad values
    unauthorized,     // 401: missing or wrong API key
    not_found,        // 404: unknown model, route or slot
    too_large,        // 413: body over the limit, prompt longer than the context
    unavailable,      // 503: queue full, loading, shutting down
    file_format,      // a model or data file is malformed (names the key or tensor)
    config,           // a flag or configuration value is wrong; CLIs exit with code 2
    unsupported,      // valid input that this build cannot run (tensor type, architecture)
    internal,         // a bug or a device failure surfaced as an exception
};

int error_http_status(error_kind kind);
const char *error_kind_name(error_kind kind);

class error : public std::runtime_error {
public:
    error(error_kind kind, const std::string &message) : std::runtime_error(message), kind_(kind) {}
    error_kind kind() const { return kind_; }
    int http_status() const { return error_http_status(kind_); }

private:
    error_kind kind_;
};

template <class... Args>
[[noreturn]] void fail(error_kind kind, fmt::format_string<Args...> format, Args &&...args) {
    throw error(kind, fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void assert_fail(const char *file, int line, const char *statement, const std::string &message);

}  // namespace tandem

// Always on, also in release builds: programmer errors abort with file, line and statement.
#define TANDEM_ASSERT(cond, ...)                                                                  \
    do {                                                                                          \
        if (!(cond)) ::tandem::assert_fail(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
    } while (0)
