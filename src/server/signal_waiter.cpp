// src/server/signal_waiter.cpp - the sigwait loop behind tandem-server's shutdown signals.
#include "src/server/signal_waiter.h"

#include "tandem/error.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstring>

namespace tandem::server {

namespace {

sigset_t shutdown_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    return set;
}

}  // namespace

void signal_waiter_block_in_this_thread() {
    sigset_t set = shutdown_signals();
    int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
    if (rc != 0) fail(error_kind::internal, "pthread_sigmask: {}", std::strerror(rc));
}

signal_waiter::signal_waiter(std::function<void(int)> on_signal) : on_signal_(std::move(on_signal)) {
    // The waiting thread must block the signals too (sigwait takes only blocked, pending ones);
    // it inherits the mask of the thread that starts it, so block here as well.
    signal_waiter_block_in_this_thread();
    thread_ = std::thread([this] { run(); });
}

signal_waiter::~signal_waiter() {
    stopping_.store(true);
    // A signal aimed at the waiting thread alone wakes its sigwait; it sees stopping_ and returns.
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
}

void signal_waiter::run() {
    const sigset_t set = shutdown_signals();
    while (!stopping_.load()) {
        int sig = 0;
        int rc = sigwait(&set, &sig);
        if (rc == EINTR) continue;
        if (rc != 0 || stopping_.load()) return;
        on_signal_(sig);
    }
}

}  // namespace tandem::server
