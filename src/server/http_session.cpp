// src/server/http_session.cpp - a connection: wait for a request (idle and reclaimable), read the
// head, ask the service about it before any body byte is read (401, 403, 405, 413, 415 at once),
// read the body, run heavy work on the request pool, then write the reply or run a generation:
// submit, receive the scheduler's events posted onto this connection's strand, write them (SSE,
// chunked for HTTP/1.1 and close-delimited for HTTP/1.0, or one JSON body), and cancel the
// request as soon as the client is known to be gone. All writes go through one queue.
#include "src/server/http_session.h"

#include "src/server/http_request.h"

#include "tandem/error.h"
#include "tandem/log.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <deque>
#include <sstream>

namespace tandem::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// A connection past --max-connections gets this long to send its head.
constexpr auto overflow_timeout = std::chrono::seconds(2);
// After our last byte, how long the rest of an unread body is drained before the socket closes.
constexpr auto linger_time = std::chrono::seconds(3);

std::string serialize(const http_reply &r, bool keep_alive, const std::vector<std::pair<std::string, std::string>> &extra) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    res.set(http::field::server, "tandem");
    if (!r.content_type.empty()) res.set(http::field::content_type, r.content_type);
    for (const auto &[k, v] : r.headers) res.set(k, v);
    for (const auto &[k, v] : extra) res.set(k, v);
    res.keep_alive(keep_alive);
    res.body() = r.body;
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    return os.str();
}

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

class session : public std::enable_shared_from_this<session>, public reclaimable {
public:
    session(tcp::socket &&socket, session_env env, connection_table::lane lane)
        : stream_(std::move(socket)), timer_(stream_.get_executor()), env_(env), svc_(env.svc), config_(env.config), lane_(lane) {
        beast::error_code ec;
        const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
        client_ = ec ? "-" : fmt::format("{}:{}", peer.address().to_string(), peer.port());
    }

    ~session() override {
        // Last line of defence: a generation still running for a dead connection is cancelled.
        if (gen_id_ != 0 && !gen_done_) {
            svc_.cancel(gen_id_);
            svc_.job_finished();
            record_.finish = "cancelled";
        }
        finish_record(client_closed);
        if (idle_ticket_ != 0) env_.table.busy(idle_ticket_);
        beast::error_code ec;
        stream_.socket().close(ec);  // the descriptor is free before the place is given back
        env_.table.closed(lane_);
    }

    void start() { net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_request(); }); }

    void reclaim() override {
        net::post(stream_.get_executor(), [self = shared_from_this()] {
            if (self->idle_ticket_ == 0) return;  // a request arrived meanwhile: keep it
            self->idle_ticket_ = 0;
            self->hard_close();
        });
    }

    void on_gen_event(gen_event &&ev) {
        guarded([&] { gen_event_unguarded(std::move(ev)); });
    }

private:
    bool overflow() const { return lane_ == connection_table::lane::overflow; }
    std::chrono::steady_clock::duration read_timeout() const {
        return overflow() ? std::chrono::steady_clock::duration(overflow_timeout)
                          : std::chrono::steady_clock::duration(std::chrono::seconds(config_.read_timeout_s));
    }

    // An allocation failure in a handler answers 503 (or drops this connection) and the server
    // goes on serving the others.
    template <class Fn>
    void guarded(Fn &&fn) {
        try {
            fn();
        } catch (const std::bad_alloc &) {
            out_of_memory();
        }
    }

    void out_of_memory() {
        if (gen_id_ != 0 && !gen_done_) {
            gen_done_ = true;
            svc_.cancel(gen_id_);
            svc_.job_finished();
        }
        if (response_started_) return hard_close();
        static const std::string reply = [] {
            const std::string body = R"({"error":{"message":"the server is out of memory; retry later","type":"unavailable_error"}})";
            return fmt::format("HTTP/1.1 503 Service Unavailable\r\nServer: tandem\r\nContent-Type: application/json\r\n"
                               "Retry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
                               body.size(), body);
        }();
        try {
            out_.clear();
            response_started_ = true;
            finish_record(503);
            queue_raw(reply);
            then(after::close);
        } catch (const std::bad_alloc &) {
            hard_close();
        }
    }

    // ---- reading a request ----

    // Idle until the request's first byte: the connection is then reclaimable.
    void wait_request() {
        if (closed_) return;
        if (buffer_.size() > 0) return read_header();  // a pipelined request is already here
        idle_ticket_ = env_.table.idle(weak_from_this());
        waiting_request_ = true;
        timer_.expires_after(read_timeout());
        timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
            if (!ec && self->waiting_request_) self->hard_close();
        });
        stream_.socket().async_wait(tcp::socket::wait_read, beast::bind_front_handler(&session::on_request_bytes, shared_from_this()));
    }

    void on_request_bytes(beast::error_code ec) {
        waiting_request_ = false;
        timer_.cancel();
        if (idle_ticket_ != 0) {
            env_.table.busy(idle_ticket_);
            idle_ticket_ = 0;
        }
        if (ec || closed_) return hard_close();
        guarded([&] { read_header(); });
    }

    void read_header() {
        decision_ = {};
        response_started_ = false;
        parser_.emplace();
        parser_->header_limit(http_header_limit);
        parser_->body_limit(config_.body_limit);
        stream_.expires_after(read_timeout());
        http::async_read_header(stream_, buffer_, *parser_, beast::bind_front_handler(&session::on_header, shared_from_this()));
    }

    void on_header(beast::error_code ec, size_t) {
        if (ec) return on_read_error(ec);
        guarded([&] {
            head_ = http_head_view(*parser_);
            api_ = service::api_of(head_.target);
            version_ = head_.version;
            begin_record(head_.method, head_.target);
            decision_ = svc_.check_head(head_, overflow());
            record_.key_name = decision_.key_name;
            decision_.headers.emplace_back("X-Request-Id", record_.id);
            if (decision_.reply) {
                // The body, if any, is never read: the connection cannot carry another request.
                const bool keep = parser_->get().keep_alive() && parser_->is_done() && !overflow();
                return write_reply(std::move(*decision_.reply), keep);
            }
            parser_->body_limit(decision_.body_limit);
            if (parser_->is_done()) return dispatch();
            // curl sends "Expect: 100-continue" with bodies over 1 KiB and waits a second for it
            // (HTTP/1.0 has no interim responses: RFC 9110 10.1.1 says to ignore it there).
            if (version_ >= 11 && beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
                queue_raw("HTTP/1.1 100 Continue\r\n\r\n");
                return then(after::read_body);
            }
            read_body();
        });
    }

    void read_body() {
        stream_.expires_after(read_timeout());
        http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&session::on_body, shared_from_this()));
    }

    void on_body(beast::error_code ec, size_t) {
        if (ec) return on_read_error(ec);
        guarded([&] { dispatch(); });
    }

    void on_read_error(beast::error_code ec) {
        if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::connection_reset ||
            ec == net::error::eof || ec == net::error::operation_aborted || closed_) {
            return close();
        }
        guarded([&] {
            // The request line may have been parsed even when the head was not: its path picks the
            // API whose error shape the client reads.
            const api_kind api = parser_ ? service::api_of(std::string(parser_->get().target())) : api_kind::openai;
            decision_.headers.clear();
            if (!record_open_) begin_record(parser_ ? std::string(parser_->get().method_string()) : "-",
                                            parser_ ? std::string(parser_->get().target()) : "-");
            if (ec == http::error::body_limit) {
                const size_t limit = parser_->is_header_done() && decision_.body_limit ? decision_.body_limit : config_.body_limit;
                return write_reply(svc_.error_reply(api, 413, fmt::format("the request body exceeds the limit of {} bytes", limit)), false);
            }
            if (ec == http_out_of_memory()) {
                log_error("out of memory reading a request body");
                return write_reply(svc_.error_reply(api, 503, "the server is out of memory; retry later"), false);
            }
            // Malformed HTTP: answer once and drop the connection (the stream position is unknown).
            write_reply(svc_.error_reply(api, 400, std::string("malformed HTTP request: ") + ec.message()), false);
        });
    }

    // Cheap routes are answered here; heavy ones (JSON parsing, tokenization) on the request pool.
    void dispatch() {
        auto view = std::make_shared<http_request_view>(std::move(head_));
        view->body = std::move(parser_->get().body());
        keep_alive_ = parser_->get().keep_alive() && !overflow();
        stream_.expires_never();
        if (!decision_.route->heavy) return on_handled(svc_.handle(*view));
        const bool posted = env_.pool.try_post([self = shared_from_this(), view] {
            try {
                service::outcome out = self->svc_.handle(*view);
                view->body.clear();
                net::post(self->stream_.get_executor(),
                          [self, out = std::move(out)]() mutable { self->guarded([&] { self->on_handled(std::move(out)); }); });
            } catch (const std::exception &) {
                // Not even the reply could be queued (out of memory): dropping `self` closes the connection.
            }
        });
        if (!posted)
            write_reply(svc_.error_reply(api_, 503, "too many requests are waiting to be parsed; retry later"), false);
    }

    void on_handled(service::outcome &&out) {
        if (closed_) return;
        if (auto *reply = std::get_if<http_reply>(&out)) return write_reply(std::move(*reply), keep_alive_);
        start_generation(std::move(std::get<std::unique_ptr<generation_job>>(out)));
    }

    // ---- a generation ----

    void start_generation(std::unique_ptr<generation_job> job) {
        job_ = std::move(job);
        job_->request.sink = std::make_shared<strand_sink>(weak_from_this(), stream_.get_executor());
        record_.generation = true;
        try {
            gen_id_ = svc_.submit(*job_);
        } catch (const error &e) {
            job_.reset();
            return write_reply(svc_.error_reply(api_, e.http_status(), e.what()), false);
        }
        watch_peer();
        if (!job_->streaming()) return;
        // HTTP/1.0 has no chunked coding: the stream is delimited by the connection's close.
        chunked_ = version_ >= 11;
        std::string head = "HTTP/1.1 200 OK\r\nServer: tandem\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                           "Connection: close\r\nX-Accel-Buffering: no\r\n";
        if (chunked_) head += "Transfer-Encoding: chunked\r\n";
        for (const auto &[k, v] : decision_.headers) head += k + ": " + v + "\r\n";
        head += "\r\n";
        response_started_ = true;
        queue_raw(std::move(head));
        std::string first = job_->stream_begin();
        if (!first.empty()) queue_chunk(first);
    }

    void gen_event_unguarded(gen_event &&ev) {
        if (gen_done_ || !job_ || closed_) return;
        const bool done = ev.type == gen_event::kind::done;
        // Prefill progress becomes an SSE keep-alive comment at most once a second.
        auto now = std::chrono::steady_clock::now();
        if (ev.type == gen_event::kind::progress && now - last_sent_ < std::chrono::seconds(1)) return;
        last_sent_ = now;
        note_event(ev, now);
        std::string bytes = job_->on_event(ev);
        if (job_->streaming() && !bytes.empty()) queue_chunk(bytes);
        if (!done) return;
        gen_done_ = true;
        svc_.job_finished();
        if (job_->streaming()) {
            if (chunked_) queue_raw("0\r\n\r\n");  // last chunk
            finish_record(200);
            return then(after::close);
        }
        http_reply r;
        r.status = job_->final_status();
        r.body = json_dump(job_->final_body());
        if (r.status == 503) r.headers.emplace_back("Retry-After", "1");
        write_reply(std::move(r), false);
    }

    // While a generation runs the client sends nothing; a read that completes with an error
    // means it reset the connection: cancel at once (this also covers queued requests).
    void watch_peer() {
        watching_ = true;
        stream_.socket().async_read_some(net::buffer(scratch_), beast::bind_front_handler(&session::on_peer, shared_from_this()));
    }

    void on_peer(beast::error_code ec, size_t) {
        watching_ = false;
        if (shut_ || closed_) {
            // Draining after our last byte: the peer's close (or the linger timer) ends it.
            if (ec) return hard_close();
            return watch_peer();
        }
        if (ec == net::error::eof) return guarded([&] { on_half_close(); });
        if (ec) return peer_gone();
        watch_peer();  // stray bytes (a pipelined request we will not serve): ignore
    }

    // The peer sent FIN: it closed, or only shut down its sending side and still reads (RFC 9112
    // 9.6 lets it). Send bytes a reading peer accepts; a closed one answers them with a reset,
    // which the error wait below sees.
    void on_half_close() {
        if (!job_ || gen_done_) return;
        if (!job_->streaming() && version_ < 11) return peer_gone();  // no interim responses in HTTP/1.0
        if (job_->streaming()) queue_chunk(": ping\n\n");  // an SSE comment
        else queue_raw("HTTP/1.1 100 Continue\r\n\r\n");   // an interim response clients must skip
        stream_.socket().async_wait(tcp::socket::wait_error, [self = shared_from_this()](beast::error_code ec) {
            if (!ec && !self->closed_ && !self->gen_done_) self->peer_gone();
        });
    }

    void peer_gone() {
        if (gen_id_ != 0 && !gen_done_) {
            gen_done_ = true;
            svc_.cancel(gen_id_);
            svc_.job_finished();
            record_.finish = "cancelled";
        }
        finish_record(response_started_ && job_ && job_->streaming() ? 200 : client_closed);
        close();
    }

    // ---- the request's record: its log line and metrics ----

    // nginx's code for a client that went away before its reply.
    static constexpr int client_closed = 499;

    void begin_record(const std::string &method, const std::string &target) {
        record_ = {};
        record_open_ = true;
        got_token_ = false;
        t_start_ = std::chrono::steady_clock::now();
        record_.id = svc_.next_request_id();
        record_.method = method;
        record_.route = target.substr(0, target.find('?'));
        record_.client = client_;
        record_.key_name = "-";
        record_.model = "-";
    }

    // Inter-token times as the connection receives the tokens; tokens that arrive together (kept
    // drafts) are spread over the gap since the previous ones.
    void note_event(const gen_event &ev, std::chrono::steady_clock::time_point now) {
        if (ev.type == gen_event::kind::done) {
            record_.n_prompt = ev.n_prompt;
            record_.n_cached = ev.timings.cache_n;
            record_.n_generated = ev.n_generated;
            record_.finish = finish_reason_name(ev.finish);
            if (ev.slot >= 0) record_.queue_s = ev.queue_ms / 1e3;
            // The scheduler's own clock: from arrival through admission and prefill to the first token.
            if (ev.n_generated > 0) record_.ttft_s = (ev.queue_ms + ev.timings.prompt_ms) / 1e3;
            if (ev.timings.predicted_ms > 0) record_.decode_tok_s = ev.timings.predicted_n / (ev.timings.predicted_ms / 1e3);
            return;
        }
        if (ev.tokens.empty()) return;
        auto n = static_cast<double>(ev.tokens.size());
        if (!got_token_) {
            got_token_ = true;
            record_.itl_s.insert(record_.itl_s.end(), ev.tokens.size() - 1, 0.0f);
        } else {
            const double gap = std::chrono::duration<double>(now - t_last_token_).count() / n;
            record_.itl_s.insert(record_.itl_s.end(), ev.tokens.size(), static_cast<float>(gap));
        }
        t_last_token_ = now;
    }

    void finish_record(int status) {
        if (!record_open_) return;
        record_open_ = false;
        record_.status = status;
        record_.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start_).count();
        if (record_.generation) record_.model = svc_.model_id();
        try {
            svc_.request_finished(record_);
        } catch (const std::exception &) {
            // Out of memory for a log line: the reply matters more.
        }
        record_ = {};
    }

    // ---- writing ----

    enum class after { nothing, read_next, read_body, close };

    // What to do once every queued byte is written.
    void then(after next) {
        if (!writing_ && out_.empty()) return run_after(next);
        after_ = next;
    }

    void run_after(after next) {
        switch (next) {
        case after::read_next: return wait_request();
        case after::read_body: return read_body();
        case after::close: return close();
        case after::nothing: return;
        }
    }

    void write_reply(http_reply r, bool keep_alive) {
        response_started_ = true;
        finish_record(r.status);
        queue_raw(serialize(r, keep_alive, decision_.headers));
        then(keep_alive ? after::read_next : after::close);
    }

    void queue_chunk(const std::string &data) {
        if (chunked_) queue_raw(fmt::format("{:x}\r\n{}\r\n", data.size(), data));
        else queue_raw(data);
    }

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
        guarded([&] { run_after(std::exchange(after_, after::nothing)); });
    }

    // Graceful: stop sending, read and drop what the peer still sends (the rest of an unread
    // body) so it sees our reply rather than a reset, then close on its EOF or after a linger.
    void close() {
        if (shut_ || closed_) return;
        shut_ = true;
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        if (ec) return hard_close();
        if (!watching_) watch_peer();
        timer_.expires_after(linger_time);
        timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
            if (!wait_ec) self->hard_close();
        });
    }

    void hard_close() {
        closed_ = true;
        timer_.cancel();
        beast::error_code ec;
        stream_.socket().close(ec);
    }

    beast::tcp_stream stream_;
    net::steady_timer timer_;  // the idle wait, then the linger after our last byte
    beast::flat_buffer buffer_;
    std::optional<request_parser> parser_;
    session_env env_;
    service &svc_;
    const server_config &config_;
    const connection_table::lane lane_;
    uint64_t idle_ticket_ = 0;     // registered as idle (reclaimable) while non-zero
    bool waiting_request_ = false;

    http_request_view head_;
    head_decision decision_;
    api_kind api_ = api_kind::openai;
    int32_t version_ = 11;
    bool keep_alive_ = true;

    std::unique_ptr<generation_job> job_;
    uint64_t gen_id_ = 0;
    bool gen_done_ = false;
    bool chunked_ = true;
    std::deque<std::string> out_;
    after after_ = after::nothing;
    bool writing_ = false;
    bool response_started_ = false;
    bool shut_ = false;      // our side is shut down (draining the peer)
    bool closed_ = false;    // the socket is closed
    bool watching_ = false;  // a read on the raw socket is pending
    std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
    std::string client_;  // the peer's address:port
    request_record record_;
    bool record_open_ = false;
    bool got_token_ = false;
    std::chrono::steady_clock::time_point t_start_, t_last_token_;
    std::array<char, 4096> scratch_{};
};

void strand_sink::on_event(gen_event &&ev) {
    net::post(strand_, [owner = owner_, ev = std::move(ev)]() mutable {
        if (auto s = owner.lock()) s->on_gen_event(std::move(ev));
    });
}

}  // namespace

void session_start(tcp::socket &&socket, session_env env, connection_table::lane lane) {
    std::make_shared<session>(std::move(socket), env, lane)->start();
}

}  // namespace tandem::server
