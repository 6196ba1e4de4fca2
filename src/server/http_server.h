// src/server/http_server.h - the Beast front: an acceptor, one strand per connection, body limit
// and timeouts on every read and write, SSE streaming, cancellation when the client goes away.
#pragma once

#include "src/server/service.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <memory>
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
    // Stops the I/O threads and joins them.
    void stop();

    boost::asio::io_context &io() { return ioc_; }

private:
    void do_accept();

    service &svc_;
    server_config config_;
    boost::asio::io_context ioc_;
    boost::asio::ip::tcp::acceptor acceptor_;
    uint16_t port_ = 0;
    std::vector<std::thread> threads_;
};

}  // namespace tandem::server
