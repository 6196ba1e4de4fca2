// src/server/request_guard.h - checks on a request's head, made before its body is read: the API
// key (constant time, any case of "Bearer"), Host and Origin for a loopback server without a key
// (the DNS-rebinding and cross-site defence of local servers), CORS, and the JSON content type.
// Pure functions of strings, so the rules are unit-tested without sockets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::server {

// Equal strings, in a time that depends on their lengths only, never on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// The credentials of "Authorization: Bearer <token>": the scheme in any case (RFC 9110 11.1),
// one or more spaces; nullopt for another scheme or an empty token.
std::optional<std::string_view> bearer_token(std::string_view authorization);

// 127.0.0.0/8 or ::1 (also ::ffff:127.x.x.x), as --host writes an address.
bool is_loopback_address(std::string_view ip);

// A Host header split into its name (lower case; an IPv6 literal keeps its brackets) and its
// port (-1 when absent); nullopt when it is not "name[:port]".
struct host_port {
    std::string name;
    int32_t port = -1;
};
std::optional<host_port> parse_host(std::string_view host);

// Names that only ever mean this machine: localhost and *.localhost (RFC 6761; browsers never
// ask DNS for them), 127.x.x.x and [::1].
bool is_loopback_name(std::string_view name);

// "application/json", with or without parameters, in any case.
bool is_json_content_type(std::string_view content_type);

// Whom the server answers, decided from the head alone.
struct origin_policy {
    // Any web page can POST to a loopback server without a key, and read its replies by rebinding
    // its own DNS name to 127.0.0.1: so then the Host must name this machine and Origin be allowed.
    bool guard = false;
    int32_t port = 0;                       // the port this server listens on
    std::vector<std::string> allowed_hosts; // --allowed-host: more names the Host may carry (lower case)
    std::vector<std::string> cors_origins;  // --cors-origin: origins browsers may call from ("*": any)

    // Whether the Host header passes (always without the guard, or without a Host: HTTP/1.0).
    bool host_allowed(std::string_view host_header) const;
    // Whether --cors-origin lists this Origin.
    bool cors_allowed(std::string_view origin) const;
    // Whether a request with this Origin (empty: none, a non-browser client) may be served.
    bool origin_allowed(std::string_view origin, std::string_view host_header) const;
    // The CORS response headers for a request from `origin` (none unless cors_allowed).
    std::vector<std::pair<std::string, std::string>> cors_headers(std::string_view origin) const;
};

}  // namespace tandem::server
