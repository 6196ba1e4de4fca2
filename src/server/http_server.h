// src/server/http_server.h - the Beast front: an acceptor under a connection limit (accepts pause
// with a backoff when places or descriptors run out, idle connections are reclaimed, a spare
// descriptor keeps /health answering), the I/O threads, the request pool, and the connections.
#pragma once

#include "src/server/connection_table.h"
#include "src/server/request_pool.h"
#include "src/server/service.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace tandem::server {

class http_server {
public:
    http_server(service &svc, const server_config &config);
    ~http_server();

    // Binds and listens on config.host:config.port; throws error(config) naming the address.
    void listen();
    uint16_t port() const { return port_; }
    // Runs the I/O threads (returns at once).
    void run(int n_threads);
    // Closes the acceptor: no new connections; open ones finish.
    void stop_accepting();
    // Stops the I/O threads and the request pool and destroys every connection, so none can call
    // into the service or the scheduler after this returns.
    void stop();

private:
    using tcp = boost::asio::ip::tcp;
    void do_accept();
    // spare: the connection holds the overflow place the spare descriptor was given up for.
    void on_accept(const boost::system::error_code &ec, tcp::socket socket, bool spare);
    void pause_accepts(const std::string &why, int32_t n_reclaimed);
    void resume_accepts();
    void check_descriptor_limit();

    service &svc_;
    server_config config_;
    connection_table table_;
    request_pool pool_;
    std::unique_ptr<boost::asio::io_context> ioc_;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
    std::unique_ptr<tcp::acceptor> acceptor_;
    std::unique_ptr<boost::asio::steady_timer> pause_timer_;
    uint16_t port_ = 0;
    std::vector<std::thread> threads_;
    std::atomic<bool> stopped_{false};

    // Acceptor strand only.
    bool paused_ = false;
    bool accepting_ = false;
    std::chrono::milliseconds backoff_;
    int spare_fd_ = -1;  // given up to accept one overflow connection when descriptors run out
    std::chrono::steady_clock::time_point last_pause_log_{};
    int64_t pauses_unlogged_ = 0;
};

}  // namespace tandem::server
