// src/server/http_server.cpp - the accept loop and its limits, the I/O threads and shutdown.
// Out of places (--max-connections) or descriptors (EMFILE, ENFILE), accepting never spins: the
// oldest idle connections are asked to close, accepts pause until a connection closes or a
// backoff timer fires, and one log line says so at most every 10 seconds.
#include "src/server/http_server.h"

#include "src/server/http_session.h"
#include "tandem/error.h"
#include "tandem/log.h"

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace tandem::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Idle connections asked to close at once when room is needed (nginx drains 32 too).
constexpr int32_t reclaim_batch = 32;
constexpr auto backoff_min = std::chrono::milliseconds(20);
constexpr auto backoff_max = std::chrono::milliseconds(1000);
constexpr auto pause_log_every = std::chrono::seconds(10);

bool out_of_descriptors(const boost::system::error_code &ec) {
    return ec == net::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
           ec == net::error::no_buffer_space || ec == net::error::no_memory;
}

int open_spare() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace

http_server::http_server(service &svc, const server_config &config)
    : svc_(svc), config_(config), table_(config.max_connections, config.overflow_connections),
      pool_(config.request_threads, config.request_queue), ioc_(std::make_unique<net::io_context>()),
      backoff_(backoff_min) {
    work_.emplace(ioc_->get_executor());
    acceptor_ = std::make_unique<tcp::acceptor>(net::make_strand(*ioc_));
    pause_timer_ = std::make_unique<net::steady_timer>(acceptor_->get_executor());
    table_.on_room([this] {
        if (stopped_.load()) return;
        net::post(acceptor_->get_executor(), [this] {
            if (paused_) resume_accepts();
        });
    });
}

http_server::~http_server() {
    stop();
    if (spare_fd_ >= 0) ::close(spare_fd_);
}

void http_server::check_descriptor_limit() {
    const rlim_t want = static_cast<rlim_t>(config_.max_connections) + config_.overflow_connections + config_.fd_reserve;
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = std::min(want, rl.rlim_max);
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < want)
        log_warn("--max-connections {} needs about {} descriptors but the limit is {} (ulimit -n): when they run out, "
                 "idle connections are closed and accepts pause until others close",
                 config_.max_connections, static_cast<uint64_t>(want), static_cast<uint64_t>(rl.rlim_cur));
}

void http_server::listen() {
    boost::system::error_code ec;
    auto addr = net::ip::make_address(config_.host, ec);
    if (ec) fail(error_kind::config, "--host '{}' is not an IP address: {}", config_.host, ec.message());
    if (config_.port < 0 || config_.port > 65535) fail(error_kind::config, "--port {} is out of range 0..65535", config_.port);
    check_descriptor_limit();
    tcp::endpoint ep(addr, static_cast<uint16_t>(config_.port));
    acceptor_->open(ep.protocol(), ec);
    if (!ec) acceptor_->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_->bind(ep, ec);
    if (!ec) acceptor_->listen(net::socket_base::max_listen_connections, ec);
    if (ec) fail(error_kind::config, "cannot listen on {}:{}: {}", config_.host, config_.port, ec.message());
    port_ = acceptor_->local_endpoint().port();
    svc_.set_port(port_);
    spare_fd_ = open_spare();
    accepting_ = true;
    net::post(acceptor_->get_executor(), [this] { do_accept(); });
}

void http_server::do_accept() {
    if (!accepting_ || paused_) return;
    if (!table_.has_room()) {
        return pause_accepts(fmt::format("{} connections open (--max-connections {} and {} overflow places)",
                                         table_.n_open(), config_.max_connections, config_.overflow_connections),
                             table_.reclaim_idle(reclaim_batch));
    }
    acceptor_->async_accept(net::make_strand(*ioc_), [this](const boost::system::error_code &ec, tcp::socket socket) {
        on_accept(ec, std::move(socket), false);
    });
}

void http_server::on_accept(const boost::system::error_code &ec, tcp::socket socket, bool spare) {
    if (!ec) {
        backoff_ = backoff_min;
        // The lane is decided now, not when the accept started: places may have freed up since.
        const connection_table::lane lane = spare ? connection_table::lane::overflow : table_.admit();
        try {
            session_start(std::move(socket), session_env{svc_, config_, table_, pool_}, lane);
        } catch (const std::bad_alloc &) {
            table_.closed(lane);
            log_error("out of memory accepting a connection; it is closed");
        }
        return do_accept();
    }
    if (spare) table_.closed(connection_table::lane::overflow);
    if (ec == net::error::operation_aborted || !accepting_) return;
    if (!out_of_descriptors(ec)) {
        log_debug("accept: {}", ec.message());  // that connection only (e.g. reset before we took it)
        return do_accept();
    }
    const int32_t reclaimed = table_.reclaim_idle(reclaim_batch);
    if (reclaimed == 0 && spare_fd_ >= 0 && table_.admit_overflow()) {
        // Nothing idle to close: give up the spare descriptor for one connection past the limit,
        // which answers /health (or 503) and closes quickly.
        ::close(spare_fd_);
        spare_fd_ = -1;
        acceptor_->async_accept(net::make_strand(*ioc_), [this](const boost::system::error_code &e, tcp::socket s) {
            on_accept(e, std::move(s), true);
        });
        return;
    }
    pause_accepts(fmt::format("accept failed: {} ({} connections open)", ec.message(), table_.n_open()), reclaimed);
}

void http_server::pause_accepts(const std::string &why, int32_t n_reclaimed) {
    paused_ = true;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_pause_log_ >= pause_log_every) {
        log_warn("accepts paused: {}; {} idle connections asked to close; resuming as connections close{}", why,
                 n_reclaimed, pauses_unlogged_ ? fmt::format(" ({} more pauses since the last report)", pauses_unlogged_) : "");
        last_pause_log_ = now;
        pauses_unlogged_ = 0;
    } else {
        ++pauses_unlogged_;
    }
    pause_timer_->expires_after(backoff_);
    backoff_ = std::min(backoff_ * 2, std::chrono::duration_cast<std::chrono::milliseconds>(backoff_max));
    pause_timer_->async_wait([this](const boost::system::error_code &ec) {
        if (!ec && paused_) resume_accepts();
    });
}

void http_server::resume_accepts() {
    paused_ = false;
    pause_timer_->cancel();
    if (spare_fd_ < 0) spare_fd_ = open_spare();  // fails harmlessly while descriptors are short
    do_accept();
}

void http_server::run(int n_threads) {
    for (int i = 0; i < std::max(1, n_threads); ++i) {
        threads_.emplace_back([this] {
            // A handler that throws (an allocation failure Beast could not report) loses its
            // connection; the thread goes on serving the others.
            for (;;) {
                try {
                    ioc_->run();
                    return;
                } catch (const std::bad_alloc &) {
                    log_error("HTTP I/O: out of memory in a handler; its connection is dropped");
                } catch (const std::exception &e) {
                    log_error("HTTP I/O: {}; its connection is dropped", e.what());
                }
            }
        });
    }
}

void http_server::stop_accepting() {
    net::post(acceptor_->get_executor(), [this] {
        accepting_ = false;
        paused_ = false;
        pause_timer_->cancel();
        boost::system::error_code ec;
        acceptor_->close(ec);
    });
}

void http_server::stop() {
    if (stopped_.exchange(true)) return;
    work_.reset();
    ioc_->stop();
    for (auto &t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
    pool_.stop();
    // Destroying the io_context destroys the handlers that own the connections.
    pause_timer_.reset();
    acceptor_.reset();
    ioc_.reset();
}

}  // namespace tandem::server
