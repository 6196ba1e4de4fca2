// src/server/request_pool.h - threads that do a request's CPU work (JSON parsing, prompt
// rendering, tokenization) off the HTTP I/O threads, behind a bounded queue: when it is full, a
// request is refused at once instead of waiting in a queue that grows with the load.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::server {

class request_pool {
public:
    // n_threads >= 1 workers; at most max_queued tasks wait (running ones not counted).
    request_pool(int32_t n_threads, int32_t max_queued);
    ~request_pool();
    request_pool(const request_pool &) = delete;
    request_pool &operator=(const request_pool &) = delete;

    // Queues a task; false (the task is not run) when the queue is full or the pool stopped.
    // A task must not throw: the caller's task catches and answers its own errors.
    bool try_post(std::function<void()> task);
    // Drops the tasks not yet started and joins the workers after their current task.
    void stop();
    int32_t queued() const;

private:
    void run();

    const int32_t max_queued_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> tasks_;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace tandem::server
