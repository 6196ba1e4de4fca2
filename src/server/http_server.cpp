// src/server/http_server.cpp - connections: read a request (timeout, body limit), ask the service
// what it means, then either write a reply (keep-alive) or run a generation: submit, receive the
// scheduler's events posted onto this connection's strand, write them (SSE chunks or one JSON
// body), and cancel the request as soon as a read or write shows the client is gone.
#include "src/server/http_server.h"

#include "tandem/error.h"
#include "tandem/log.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <deque>

namespace tandem::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

class session;

// Hands scheduler events (engine thread) to the connection's strand; a connection that is gone
// simply drops them (it cancelled its request when it went).
class strand_sink : public gen_sink {
public:
    strand_sink(std::weak_ptr<session> owner, net::any_io_executor strand) : owner_(std::move(owner)), strand_(std::move(strand)) {}
    void on_event(gen_event &&ev) override;

private:
    std::weak_ptr<session> owner_;
    net::any_io_executor strand_;
};

class session : public std::enable_shared_from_this<session> {
public:
    session(tcp::socket &&socket, service &svc, const server_config &config)
        : stream_(std::move(socket)), linger_(stream_.get_executor()), svc_(svc), config_(config) {}

    ~session() {
        // Last line of defence: a generation still running for a dead connection is cancelled.
        if (gen_id_ != 0 && !gen_done_) {
            svc_.cancel(gen_id_);
            svc_.job_finished();
        }
    }

    void start() { net::dispatch(stream_.get_executor(), beast::bind_front_handler(&session::do_read, shared_from_this())); }

    void on_gen_event(gen_event &&ev) {
        if (gen_done_ || !job_) return;
        bool done = ev.type == gen_event::kind::done;
        // Prefill progress becomes an SSE keep-alive comment at most once a second.
        auto now = std::chrono::steady_clock::now();
        if (ev.type == gen_event::kind::progress && now - last_sent_ < std::chrono::seconds(1)) return;
        last_sent_ = now;
        std::string bytes = job_->on_event(ev);
        if (job_->streaming()) {
            if (!bytes.empty()) queue_chunk(bytes);
        }
        if (!done) return;
        gen_done_ = true;
        svc_.job_finished();
        if (job_->streaming()) {
            queue_raw("0\r\n\r\n");  // last chunk
            close_after_write_ = true;
            if (!writing_) close();
        } else {
            int status = job_->final_status();
            http_reply r;
            r.status = status;
            r.body = json_dump(job_->final_body());
            if (status == 503) r.headers.emplace_back("Retry-After", "1");
            write_reply(std::move(r), false);
        }
    }

private:
    void do_read() {
        parser_.emplace();
        parser_->body_limit(config_.body_limit);
        stream_.expires_after(std::chrono::seconds(config_.read_timeout_s));
        http::async_read_header(stream_, buffer_, *parser_, beast::bind_front_handler(&session::on_header, shared_from_this()));
    }

    // curl sends "Expect: 100-continue" with bodies over 1 KiB and waits a second for the go-ahead.
    void on_header(beast::error_code ec, size_t n) {
        if (ec || parser_->is_done()) return on_read(ec, n);
        if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
            auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
            net::async_write(stream_, net::buffer(*cont), [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                if (wec) return self->close();
                self->read_body();
            });
            return;
        }
        read_body();
    }

    void read_body() {
        http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&session::on_read, shared_from_this()));
    }

    void on_read(beast::error_code ec, size_t) {
        if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::connection_reset ||
            ec == net::error::eof) {
            return close();
        }
        if (ec == http::error::body_limit) {
            // The limit trips on Content-Length while the header is being finished: the target is
            // already parsed even though is_header_done() is still false.
            std::string target(parser_->get().target());
            return write_reply(svc_.error_reply(service::api_of(target), 413,
                                                fmt::format("the request body exceeds the limit of {} bytes", config_.body_limit)),
                               false);
        }
        if (ec) {
            // Malformed HTTP: answer once and drop the connection (the stream position is unknown).
            return write_reply(svc_.error_reply(api_kind::openai, 400, std::string("malformed HTTP request: ") + ec.message()), false);
        }
        auto &req = parser_->get();
        http_request_view view;
        view.method = std::string(req.method_string());
        view.target = std::string(req.target());
        view.authorization = std::string(req[http::field::authorization]);
        view.x_api_key = std::string(req["x-api-key"]);
        view.body = std::move(req.body());
        keep_alive_ = req.keep_alive();
        api_ = service::api_of(view.target);

        service::outcome out = svc_.handle(view);
        if (auto *reply = std::get_if<http_reply>(&out)) return write_reply(std::move(*reply), keep_alive_);
        start_generation(std::move(std::get<std::unique_ptr<generation_job>>(out)));
    }

    void start_generation(std::unique_ptr<generation_job> job) {
        job_ = std::move(job);
        job_->request.sink = std::make_shared<strand_sink>(weak_from_this(), stream_.get_executor());
        try {
            gen_id_ = svc_.submit(*job_);
        } catch (const error &e) {
            job_.reset();
            return write_reply(svc_.error_reply(api_, e.http_status(), e.what()), false);
        }
        stream_.expires_never();
        watch_peer();
        if (job_->streaming()) {
            queue_raw("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                      "Connection: close\r\nTransfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n\r\n");
            std::string first = job_->stream_begin();
            if (!first.empty()) queue_chunk(first);
        }
    }

    // While a generation runs the client sends nothing; a read that completes with an error
    // means it closed or reset the connection: cancel at once (this also covers queued requests).
    void watch_peer() {
        watching_ = true;
        stream_.socket().async_read_some(net::buffer(scratch_), beast::bind_front_handler(&session::on_peer, shared_from_this()));
    }

    void on_peer(beast::error_code ec, size_t) {
        watching_ = false;
        if (closed_) {
            // Draining after our last byte: the peer's close (or the linger timer) ends it.
            if (ec) return hard_close();
            return watch_peer();
        }
        if (ec) return peer_gone();
        watch_peer();  // stray bytes (a pipelined request we will not serve): ignore
    }

    void peer_gone() {
        if (gen_id_ != 0 && !gen_done_) {
            gen_done_ = true;
            svc_.cancel(gen_id_);
            svc_.job_finished();
        }
        close();
    }

    void queue_chunk(const std::string &data) { queue_raw(fmt::format("{:x}\r\n{}\r\n", data.size(), data)); }

    void queue_raw(std::string bytes) {
        out_.push_back(std::move(bytes));
        if (!writing_) do_write();
    }

    void do_write() {
        if (closed_) return;
        writing_ = true;
        stream_.expires_after(std::chrono::seconds(config_.write_timeout_s));
        net::async_write(stream_, net::buffer(out_.front()), beast::bind_front_handler(&session::on_write, shared_from_this()));
    }

    void on_write(beast::error_code ec, size_t) {
        writing_ = false;
        if (ec) return peer_gone();
        out_.pop_front();
        if (!out_.empty()) return do_write();
        stream_.expires_never();
        if (close_after_write_) close();
    }

    void write_reply(http_reply r, bool keep_alive) {
        auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
        res->set(http::field::server, "tandem");
        res->set(http::field::content_type, r.content_type);
        for (auto &[k, v] : r.headers) res->set(k, v);
        res->keep_alive(keep_alive);
        res->body() = std::move(r.body);
        res->prepare_payload();
        stream_.expires_after(std::chrono::seconds(config_.write_timeout_s));
        http::async_write(stream_, *res, [self = shared_from_this(), res, keep_alive](beast::error_code ec, size_t) {
            if (ec || !keep_alive) return self->close();
            self->do_read();
        });
    }

    // Graceful: stop sending, read and drop what the peer still sends (the rest of an
    // oversized body) so it sees our reply rather than a reset, then close on its EOF or after
    // a short linger.
    void close() {
        if (closed_) return;
        closed_ = true;
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        if (ec) return hard_close();
        if (!watching_) watch_peer();
        linger_.expires_after(std::chrono::seconds(3));
        linger_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
            if (!wait_ec) self->hard_close();
        });
    }

    void hard_close() {
        beast::error_code ec;
        linger_.cancel();
        stream_.socket().close(ec);
    }

    beast::tcp_stream stream_;
    net::steady_timer linger_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    service &svc_;
    const server_config &config_;
    bool keep_alive_ = true;
    api_kind api_ = api_kind::openai;

    std::unique_ptr<generation_job> job_;
    uint64_t gen_id_ = 0;
    bool gen_done_ = false;
    std::deque<std::string> out_;
    bool writing_ = false;
    bool close_after_write_ = false;
    bool closed_ = false;
    bool watching_ = false;  // a read on the raw socket is pending
    std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
    std::array<char, 256> scratch_{};
};

void strand_sink::on_event(gen_event &&ev) {
    net::post(strand_, [owner = owner_, ev = std::move(ev)]() mutable {
        if (auto s = owner.lock()) s->on_gen_event(std::move(ev));
    });
}

}  // namespace

http_server::http_server(service &svc, const server_config &config)
    : svc_(svc), config_(config), acceptor_(net::make_strand(ioc_)) {}

http_server::~http_server() { stop(); }

void http_server::listen() {
    beast::error_code ec;
    auto addr = net::ip::make_address(config_.host, ec);
    if (ec) fail(error_kind::config, "--host '{}' is not an IP address: {}", config_.host, ec.message());
    if (config_.port < 0 || config_.port > 65535) fail(error_kind::config, "--port {} is out of range 0..65535", config_.port);
    tcp::endpoint ep(addr, static_cast<uint16_t>(config_.port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) fail(error_kind::config, "cannot listen on {}:{}: {}", config_.host, config_.port, ec.message());
    port_ = acceptor_.local_endpoint().port();
    do_accept();
}

void http_server::do_accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
        if (ec) {
            if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
            log_warn("accept failed: {}", ec.message());
        } else {
            std::make_shared<session>(std::move(socket), svc_, config_)->start();
        }
        do_accept();
    });
}

void http_server::run(int n_threads) {
    for (int i = 0; i < std::max(1, n_threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
}

void http_server::stop_accepting() {
    net::post(acceptor_.get_executor(), [this] {
        beast::error_code ec;
        acceptor_.close(ec);
    });
}

void http_server::stop() {
    ioc_.stop();
    for (auto &t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
}

}  // namespace tandem::server
