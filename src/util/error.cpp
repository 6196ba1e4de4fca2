// src/util/error.cpp - error kinds to HTTP statuses, and the assertion failure path.
#include "tandem/error.h"

#include <cstdio>
#include <cstdlib>

namespace tandem {

int error_http_status(error_kind kind) {
    switch (kind) {
    case error_kind::invalid_request: return 400;
    case error_kind::unauthorized: return 401;
    case error_kind::not_found: return 404;
    case error_kind::too_large: return 413;
    case error_kind::unavailable: return 503;
    case error_kind::file_format: return 400;
    case error_kind::config: return 400;
    case error_kind::unsupported: return 501;
    case error_kind::internal: return 500;
    }
    return 500;
}

const char *error_kind_name(error_kind kind) {
    switch (kind) {
    case error_kind::invalid_request: return "invalid_request";
    case error_kind::unauthorized: return "unauthorized";
    case error_kind::not_found: return "not_found";
    case error_kind::too_large: return "too_large";
    case error_kind::unavailable: return "unavailable";
    case error_kind::file_format: return "file_format";
    case error_kind::config: return "config";
    case error_kind::unsupported: return "unsupported";
    case error_kind::internal: return "internal";
    }
    return "internal";
}

void assert_fail(const char *file, int line, const char *statement, const std::string &message) {
    std::fprintf(stderr, "TANDEM_ASSERT failed at %s:%d: %s%s%s\n", file, line, statement,
                 message.empty() ? "" : ": ", message.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace tandem
