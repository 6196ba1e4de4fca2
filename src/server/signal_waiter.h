// src/server/signal_waiter.h - SIGINT and SIGTERM taken by one thread with sigwait, never by a
// signal handler: the signals stay blocked in every thread, so none of them can take its default
// action (kill) at any point of the process's life, including while it exits after a first signal.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace tandem::server {

// Blocks SIGINT and SIGTERM in the calling thread. Call it first thing in main, before any thread
// starts (CUDA and the HTTP pool start threads): threads inherit the mask, so every thread blocks
// them and only a signal_waiter's sigwait takes them.
void signal_waiter_block_in_this_thread();

class signal_waiter {
public:
    // Starts the thread; on_signal(sig) runs on it for each SIGINT or SIGTERM, one at a time.
    explicit signal_waiter(std::function<void(int)> on_signal);
    ~signal_waiter();  // wakes and joins the thread; later signals stay pending (blocked), harmless
    signal_waiter(const signal_waiter &) = delete;
    signal_waiter &operator=(const signal_waiter &) = delete;

private:
    void run();

    std::function<void(int)> on_signal_;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace tandem::server
