// tests/server/test_signal_waiter.cpp - shutdown signals go to the waiter's callback, and a signal
// that lands after the waiter is gone stays pending instead of killing the process (a second
// SIGTERM during exit must not end tandem-server with -15).
#include "src/server/signal_waiter.h"

#include <catch2/catch.hpp>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

using namespace tandem::server;

namespace {

// Restores the thread's mask and drops pending shutdown signals, so test cases stay independent.
struct mask_guard {
    sigset_t saved;
    mask_guard() { pthread_sigmask(SIG_SETMASK, nullptr, &saved); }
    ~mask_guard() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        timespec zero{0, 0};
        while (sigtimedwait(&set, nullptr, &zero) > 0) {
        }
        pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    }
};

bool pending(int sig) {
    sigset_t set;
    sigpending(&set);
    return sigismember(&set, sig) == 1;
}

}  // namespace

TEST_CASE("the signal waiter hands each SIGTERM and SIGINT to its callback, in order", "[server][signals]") {
    mask_guard guard;
    signal_waiter_block_in_this_thread();
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<int> seen;
    {
        signal_waiter waiter([&](int sig) {
            std::lock_guard lock(mutex);
            seen.push_back(sig);
            cv.notify_all();
        });
        for (size_t want = 1; int sig : {SIGTERM, SIGINT, SIGTERM}) {
            REQUIRE(kill(getpid(), sig) == 0);
            std::unique_lock lock(mutex);
            REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return seen.size() == want; }));
            ++want;
        }
    }
    REQUIRE(seen == std::vector<int>{SIGTERM, SIGINT, SIGTERM});
}

TEST_CASE("a SIGTERM after the waiter is gone stays pending and does not kill the process", "[server][signals]") {
    mask_guard guard;
    signal_waiter_block_in_this_thread();
    int calls = 0;
    { signal_waiter waiter([&](int) { ++calls; }); }
    REQUIRE(calls == 0);  // the destructor's wake-up signal is not a shutdown signal
    REQUIRE(kill(getpid(), SIGTERM) == 0);
    // Reaching these lines is the test: with the default action the process would be dead.
    REQUIRE(pending(SIGTERM));
}
