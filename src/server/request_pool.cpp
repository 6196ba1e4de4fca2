// src/server/request_pool.cpp - the worker threads and their bounded queue.
#include "src/server/request_pool.h"

#include "tandem/log.h"

#include <algorithm>
#include <cerrno>

#include <sys/resource.h>
#include <unistd.h>

namespace tandem::server {

request_pool::request_pool(int32_t n_threads, int32_t max_queued) : max_queued_(max_queued) {
    for (int32_t i = 0; i < std::max<int32_t>(1, n_threads); ++i) threads_.emplace_back([this] { run(); });
}

request_pool::~request_pool() { stop(); }

bool request_pool::try_post(std::function<void()> task) {
    {
        std::lock_guard lock(mutex_);
        if (stopping_ || static_cast<int32_t>(tasks_.size()) >= max_queued_) return false;
        tasks_.push_back(std::move(task));
    }
    wake_.notify_one();
    return true;
}

void request_pool::stop() {
    std::deque<std::function<void()>> dropped;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        dropped.swap(tasks_);
    }
    wake_.notify_all();
    for (auto &t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
    // Destroyed here, outside the lock: a task may own the last reference to a connection.
    dropped.clear();
}

int32_t request_pool::queued() const {
    std::lock_guard lock(mutex_);
    return static_cast<int32_t>(tasks_.size());
}

void request_pool::run() {
    // Linux nice values are per thread: a worker tokenizing a 7 MB prompt yields the core to the
    // I/O threads, so /health and streaming writes stay prompt on a busy machine.
    const auto tid = static_cast<id_t>(gettid());
    errno = 0;
    const int nice_now = getpriority(PRIO_PROCESS, tid);
    if (errno == 0 && setpriority(PRIO_PROCESS, tid, std::min(19, nice_now + 5)) != 0)
        log_debug("request worker: cannot lower its priority");
    for (;;) {
        std::function<void()> task;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
            if (stopping_) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
        }
        task();
    }
}

}  // namespace tandem::server
