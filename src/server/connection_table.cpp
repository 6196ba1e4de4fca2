// src/server/connection_table.cpp - places, overflow places and the idle list.
#include "src/server/connection_table.h"

#include <vector>

namespace tandem::server {

connection_table::connection_table(int32_t max_regular, int32_t max_overflow)
    : max_regular_(max_regular), max_overflow_(max_overflow) {}

bool connection_table::has_room() const {
    std::lock_guard lock(mutex_);
    return n_regular_ < max_regular_ || n_overflow_ < max_overflow_;
}

connection_table::lane connection_table::admit() {
    std::lock_guard lock(mutex_);
    if (n_regular_ < max_regular_) {
        ++n_regular_;
        return lane::regular;
    }
    if (n_overflow_ < max_overflow_) {
        ++n_overflow_;
        return lane::overflow;
    }
    return lane::none;
}

bool connection_table::admit_overflow() {
    std::lock_guard lock(mutex_);
    if (n_overflow_ >= max_overflow_) return false;
    ++n_overflow_;
    return true;
}

void connection_table::closed(lane l) {
    {
        std::lock_guard lock(mutex_);
        if (l == lane::regular) --n_regular_;
        else if (l == lane::overflow) --n_overflow_;
        else return;
    }
    if (on_room_) on_room_();
}

uint64_t connection_table::idle(std::weak_ptr<reclaimable> conn) {
    std::lock_guard lock(mutex_);
    const uint64_t ticket = next_ticket_++;
    idle_.emplace(ticket, std::move(conn));
    return ticket;
}

void connection_table::busy(uint64_t ticket) {
    std::lock_guard lock(mutex_);
    idle_.erase(ticket);
}

int32_t connection_table::reclaim_idle(int32_t n) {
    std::vector<std::weak_ptr<reclaimable>> picked;
    {
        std::lock_guard lock(mutex_);
        while (static_cast<int32_t>(picked.size()) < n && !idle_.empty()) {
            picked.push_back(std::move(idle_.begin()->second));
            idle_.erase(idle_.begin());
        }
    }
    int32_t asked = 0;
    for (auto &w : picked) {
        if (auto c = w.lock()) {
            c->reclaim();
            ++asked;
        }
    }
    return asked;
}

int32_t connection_table::n_open() const {
    std::lock_guard lock(mutex_);
    return n_regular_ + n_overflow_;
}

int32_t connection_table::n_idle() const {
    std::lock_guard lock(mutex_);
    return static_cast<int32_t>(idle_.size());
}

}  // namespace tandem::server
