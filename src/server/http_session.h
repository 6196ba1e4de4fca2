// src/server/http_session.h - one HTTP connection on its own strand: wait for a request (idle,
// reclaimable), read its head, let the service decide on it before the body is read, read the
// body, hand heavy work to the request pool, then write a reply or run a generation.
#pragma once

#include "src/server/connection_table.h"
#include "src/server/request_pool.h"
#include "src/server/service.h"

#include <boost/asio/ip/tcp.hpp>

#include <memory>

namespace tandem::server {

// What every connection of a server shares.
struct session_env {
    service &svc;
    const server_config &config;
    connection_table &table;
    request_pool &pool;
};

// Starts serving an accepted connection; it lives as long as its asynchronous operations.
// `overflow`: past --max-connections (short timeouts, cheap routes only, no keep-alive).
void session_start(boost::asio::ip::tcp::socket &&socket, session_env env, connection_table::lane lane);

}  // namespace tandem::server
