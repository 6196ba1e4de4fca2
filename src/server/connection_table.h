// src/server/connection_table.h - the open connections as the accept loop sees them: how many
// there are against --max-connections, a few overflow places beyond it for cheap requests, and
// the idle ones (waiting for a request's first byte), oldest first. At the limit, or when the
// process runs out of descriptors, the oldest idle connections are closed to make room, as nginx
// reuses its idle connections, so a slow or idle crowd cannot lock out /health.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace tandem::server {

// A connection that can be asked to close if it is still idle when the request gets to it.
class reclaimable {
public:
    virtual ~reclaimable() = default;
    virtual void reclaim() = 0;
};

class connection_table {
public:
    enum class lane { regular, overflow, none };

    // max_regular: --max-connections; max_overflow: places beyond it where only cheap requests
    // (/health, /metrics, ...) are served and the rest get 503.
    connection_table(int32_t max_regular, int32_t max_overflow);

    // Whether admit() would find a place. Only the accept loop admits, so a place seen here is
    // still there when the connection it accepts arrives (places only free up meanwhile).
    bool has_room() const;
    // Takes a place for an accepted connection: regular while below the limit, else overflow
    // (none: all taken). closed() gives it back when the connection ends.
    lane admit();
    // Takes an overflow place whatever the regular count (descriptors ran out below the limit).
    bool admit_overflow();
    void closed(lane l);

    // Called (from any thread, outside the table's lock) whenever a place frees up.
    void on_room(std::function<void()> fn) { on_room_ = std::move(fn); }

    // An idle connection registers and gets a ticket; busy() removes it (no-op once reclaimed).
    uint64_t idle(std::weak_ptr<reclaimable> conn);
    void busy(uint64_t ticket);
    // Asks up to n of the oldest idle connections to close; returns how many were asked.
    int32_t reclaim_idle(int32_t n);

    int32_t n_open() const;
    int32_t n_idle() const;
    int32_t max_regular() const { return max_regular_; }

private:
    const int32_t max_regular_, max_overflow_;
    mutable std::mutex mutex_;
    int32_t n_regular_ = 0, n_overflow_ = 0;
    uint64_t next_ticket_ = 1;
    std::map<uint64_t, std::weak_ptr<reclaimable>> idle_;  // by ticket: oldest first
    std::function<void()> on_room_;
};

}  // namespace tandem::server
