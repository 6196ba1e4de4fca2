// src/server/request_guard.cpp - API key comparison, Host/Origin/CORS rules and the content type.
#include "src/server/request_guard.h"

#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <cctype>

namespace tandem::server {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

bool iequal(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
               return std::tolower(x) == std::tolower(y);
           });
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool is_port(std::string_view s, int32_t &port) {
    if (s.empty() || s.size() > 5) return false;
    int32_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    if (v > 65535) return false;
    port = v;
    return true;
}

// A reg-name or IPv4 literal of a Host header: letters, digits, '-', '.', '_' (no userinfo,
// no percent escapes: browsers never send them in Host).
bool is_host_name(std::string_view s) {
    if (s.empty() || s.size() > 253) return false;
    return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '.' || c == '_'; });
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
    // Every byte of the longer string is visited; the length difference joins the result.
    const size_t n = std::max(a.size(), b.size());
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned>(x ^ y);
    }
    return diff == 0;
}

std::optional<std::string_view> bearer_token(std::string_view authorization) {
    constexpr std::string_view scheme = "bearer";
    if (authorization.size() <= scheme.size() || !iequal(authorization.substr(0, scheme.size()), scheme)) return std::nullopt;
    std::string_view rest = authorization.substr(scheme.size());
    if (rest.front() != ' ') return std::nullopt;
    rest = trim(rest);
    if (rest.empty()) return std::nullopt;
    return rest;
}

bool is_loopback_address(std::string_view ip) {
    boost::system::error_code ec;
    const auto addr = boost::asio::ip::make_address(std::string(ip), ec);
    if (ec) return false;
    if (addr.is_v6() && addr.to_v6().is_v4_mapped())
        return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, addr.to_v6()).is_loopback();
    return addr.is_loopback();
}

std::optional<host_port> parse_host(std::string_view host) {
    host = trim(host);
    host_port out;
    std::string_view name = host;
    if (!host.empty() && host.front() == '[') {
        const size_t close = host.find(']');
        if (close == std::string_view::npos) return std::nullopt;
        name = host.substr(0, close + 1);
        std::string_view rest = host.substr(close + 1);
        boost::system::error_code ec;
        boost::asio::ip::make_address_v6(std::string(name.substr(1, name.size() - 2)), ec);
        if (ec) return std::nullopt;
        if (!rest.empty() && (rest.front() != ':' || !is_port(rest.substr(1), out.port))) return std::nullopt;
    } else {
        const size_t colon = host.rfind(':');
        if (colon != std::string_view::npos) {
            name = host.substr(0, colon);
            if (!is_port(host.substr(colon + 1), out.port)) return std::nullopt;
        }
        if (!is_host_name(name)) return std::nullopt;
    }
    out.name = lower(name);
    return out;
}

bool is_loopback_name(std::string_view name) {
    if (name == "localhost" || (name.size() > 10 && name.ends_with(".localhost"))) return true;
    if (name == "[::1]") return true;
    boost::system::error_code ec;
    const auto v4 = boost::asio::ip::make_address_v4(std::string(name), ec);
    return !ec && v4.is_loopback();
}

bool is_json_content_type(std::string_view content_type) {
    const std::string_view media = trim(content_type.substr(0, content_type.find(';')));
    return iequal(media, "application/json");
}

bool origin_policy::host_allowed(std::string_view host_header) const {
    // Browsers always send a Host; a request without one (HTTP/1.0) is not a web page's.
    if (!guard || host_header.empty()) return true;
    const auto hp = parse_host(host_header);
    if (!hp) return false;
    for (const auto &name : allowed_hosts)
        if (hp->name == name) return true;
    if (!is_loopback_name(hp->name)) return false;
    // A browser omits the port only for its scheme's default one.
    return hp->port == port || (hp->port < 0 && port == 80);
}

bool origin_policy::cors_allowed(std::string_view origin) const {
    if (origin.empty()) return false;
    for (const auto &o : cors_origins)
        if (o == "*" || iequal(o, origin)) return true;
    return false;
}

bool origin_policy::origin_allowed(std::string_view origin, std::string_view host_header) const {
    if (!guard || origin.empty()) return true;
    if (cors_allowed(origin)) return true;
    // Same origin: a page served by this host and port (the Host already passed the guard).
    return iequal(origin, "http://" + std::string(trim(host_header)));
}

std::vector<std::pair<std::string, std::string>> origin_policy::cors_headers(std::string_view origin) const {
    if (!cors_allowed(origin)) return {};
    const bool any = std::find(cors_origins.begin(), cors_origins.end(), "*") != cors_origins.end();
    return {{"Access-Control-Allow-Origin", any ? std::string("*") : std::string(origin)}, {"Vary", "Origin"}};
}

}  // namespace tandem::server
