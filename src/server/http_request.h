// src/server/http_request.h - how a request is read: Beast's parser over a body that reports
// allocation failure as an error instead of throwing, and the head as the service sees it.
// Shared by the connections and the HTTP fuzz target, so the fuzzer parses what the server does.
#pragma once

#include "src/server/service.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <new>
#include <string>

namespace tandem::server {

// Bytes of a request's head. Beast's default is 8 KiB; long API keys and proxies' added headers
// fit in 16.
constexpr uint32_t http_header_limit = 16u << 10;

// The error a body read ends with when its memory cannot be had (answered 503).
inline boost::beast::error_code http_out_of_memory() { return make_error_code(boost::system::errc::not_enough_memory); }

// A string body whose allocation failures become a read error instead of an exception thrown
// through the I/O thread.
struct guarded_body {
    using value_type = std::string;

    class reader {
    public:
        template <bool is_request, class Fields>
        reader(boost::beast::http::header<is_request, Fields> &, value_type &body) : body_(body) {}

        void init(const boost::optional<std::uint64_t> &length, boost::beast::error_code &ec) {
            ec = {};
            try {
                if (length) body_.reserve(static_cast<size_t>(*length));
            } catch (const std::bad_alloc &) {
                ec = http_out_of_memory();
            }
        }

        template <class ConstBufferSequence>
        std::size_t put(const ConstBufferSequence &buffers, boost::beast::error_code &ec) {
            ec = {};
            size_t n = 0;
            try {
                for (const auto b : boost::beast::buffers_range_ref(buffers)) {
                    body_.append(static_cast<const char *>(b.data()), b.size());
                    n += b.size();
                }
            } catch (const std::bad_alloc &) {
                ec = http_out_of_memory();
            }
            return n;
        }

        void finish(boost::beast::error_code &ec) { ec = {}; }

    private:
        value_type &body_;
    };
};

using request_parser = boost::beast::http::request_parser<guarded_body>;

// The head of a parsed request (is_header_done()) as the service's checks read it; no body.
inline http_request_view http_head_view(const request_parser &parser) {
    namespace http = boost::beast::http;
    const auto &req = parser.get();
    http_request_view v;
    v.method = std::string(req.method_string());
    v.target = std::string(req.target());
    v.version = static_cast<int32_t>(req.version());
    v.n_host = static_cast<int32_t>(req.count(http::field::host));
    v.host = std::string(req[http::field::host]);
    v.origin = std::string(req[http::field::origin]);
    v.content_type = std::string(req[http::field::content_type]);
    v.authorization = std::string(req[http::field::authorization]);
    v.x_api_key = std::string(req["x-api-key"]);
    v.cors_request_method = std::string(req[http::field::access_control_request_method]);
    v.cors_request_headers = std::string(req[http::field::access_control_request_headers]);
    if (auto n = parser.content_length()) v.content_length = *n;
    v.has_body = parser.chunked() || (v.content_length && *v.content_length > 0);
    return v;
}

}  // namespace tandem::server
