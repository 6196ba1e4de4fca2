// src/scheduler/host_arena.h - host memory for KV blobs: one region handed out first-fit in
// page-aligned runs, and the allocator of the blobs (kv_bytes) that draws from it. The region is
// the engine's page-locked memory (engine::host_pinned), so a slot's K/V moves between it and
// the device without staging, and no page is faulted in on the engine thread.
// Owns: the region's free and used runs. Does not own: the memory (shared with its provider).
// Threads: any; the disk tier's writer releases blobs it has written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace tandem {

class host_arena {
public:
    host_arena(std::shared_ptr<uint8_t> memory, size_t bytes);

    // A run of at least `bytes` (rounded up to whole pages), or nullptr when no free run is that long.
    uint8_t *allocate(size_t bytes);
    // Frees a run allocate gave; false (and nothing freed) when p is not the start of one.
    bool release(const uint8_t *p);
    size_t capacity() const { return bytes_; }
    size_t bytes_used() const;

    static constexpr size_t page = 4096;

private:
    std::shared_ptr<uint8_t> memory_;
    size_t bytes_ = 0;
    mutable std::mutex mutex_;
    std::map<size_t, size_t> free_;  // offset -> length, coalesced
    std::map<size_t, size_t> used_;  // offset -> length
    size_t used_bytes_ = 0;
};

// Allocates from the arena it holds while a run is free, else from the heap; elements are
// default-initialised, since a blob is written whole (zeroing it first would only cost time).
// Copies of a container live on the heap.
template <class T>
struct kv_allocator {
    using value_type = T;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    using is_always_equal = std::false_type;

    std::shared_ptr<host_arena> arena;

    kv_allocator() = default;
    explicit kv_allocator(std::shared_ptr<host_arena> a) : arena(std::move(a)) {}
    template <class U>
    kv_allocator(const kv_allocator<U> &o) : arena(o.arena) {}

    T *allocate(size_t n) {
        if (arena)
            if (uint8_t *p = arena->allocate(n * sizeof(T))) return reinterpret_cast<T *>(p);
        return static_cast<T *>(::operator new(n * sizeof(T)));
    }
    void deallocate(T *p, size_t) noexcept {
        if (arena && arena->release(reinterpret_cast<const uint8_t *>(p))) return;
        ::operator delete(p);
    }
    template <class U>
    void construct(U *p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        ::new (static_cast<void *>(p)) U;
    }
    template <class U, class... A>
    void construct(U *p, A &&...args) {
        ::new (static_cast<void *>(p)) U(std::forward<A>(args)...);
    }
    kv_allocator select_on_container_copy_construction() const { return {}; }
    friend bool operator==(const kv_allocator &a, const kv_allocator &b) { return a.arena == b.arena; }
};

// A KV blob (engine::slot_export's layout).
using kv_bytes = std::vector<uint8_t, kv_allocator<uint8_t>>;

}  // namespace tandem
