// tests/server/alloc_failure_hook.cpp - replaces the global operator new and delete in
// tandem-server-test only: once armed, every allocation of at least a given size throws
// std::bad_alloc, so tests reach the server's out-of-memory paths deterministically.
#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<std::size_t> fail_from{0};  // 0: never fail
}

void alloc_failure_hook_arm(std::size_t min_bytes) { fail_from.store(min_bytes); }

// The array and sized forms' defaults call these.
void *operator new(std::size_t n) {
    const std::size_t limit = fail_from.load(std::memory_order_relaxed);
    if (limit != 0 && n >= limit) throw std::bad_alloc();
    if (void *p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}

void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
