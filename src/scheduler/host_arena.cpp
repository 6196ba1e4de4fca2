// src/scheduler/host_arena.cpp - first-fit runs over one region, freed runs merged with their
// neighbours.
#include "src/scheduler/host_arena.h"

#include <algorithm>
#include <iterator>

namespace tandem {

host_arena::host_arena(std::shared_ptr<uint8_t> memory, size_t bytes) : memory_(std::move(memory)), bytes_(bytes / page * page) {
    if (memory_ && bytes_ > 0) free_.emplace(0, bytes_);
}

uint8_t *host_arena::allocate(size_t bytes) {
    const size_t want = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
    std::lock_guard lock(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second < want) continue;
        const size_t at = it->first, left = it->second - want;
        free_.erase(it);
        if (left > 0) free_.emplace(at + want, left);
        used_.emplace(at, want);
        used_bytes_ += want;
        return memory_.get() + at;
    }
    return nullptr;
}

bool host_arena::release(const uint8_t *p) {
    if (!memory_ || p < memory_.get() || p >= memory_.get() + bytes_) return false;
    const size_t at = size_t(p - memory_.get());
    std::lock_guard lock(mutex_);
    const auto u = used_.find(at);
    if (u == used_.end()) return false;
    size_t start = at, length = u->second;
    used_bytes_ -= length;
    used_.erase(u);
    const auto next = free_.find(start + length);
    if (next != free_.end()) {
        length += next->second;
        free_.erase(next);
    }
    const auto after = free_.lower_bound(start);
    if (after != free_.begin()) {
        const auto prev = std::prev(after);
        if (prev->first + prev->second == start) {
            start = prev->first;
            length += prev->second;
            free_.erase(prev);
        }
    }
    free_.emplace(start, length);
    return true;
}

size_t host_arena::bytes_used() const {
    std::lock_guard lock(mutex_);
    return used_bytes_;
}

}  // namespace tandem
