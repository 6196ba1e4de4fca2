// src/engine/load_meter.h - an opening engine's weights counted into engine_load_progress and
// logged at most once a second, then once when all are placed.
#pragma once

#include "tandem/engine.h"

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace tandem {

class load_meter {
public:
    // progress may be null: then the meter counts nothing and logs nothing.
    load_meter(engine_load_progress *progress, uint64_t total);
    void add(uint64_t bytes);
    void finish();  // done = total, and the closing log line

    // Copies in pieces small enough for the log to move while one large tensor loads.
    static constexpr size_t piece_bytes = size_t(256) << 20;

private:
    engine_load_progress *progress_;
    uint64_t total_;
    std::chrono::steady_clock::time_point start_, logged_;
};

// Reads [data, data + n) in from a mapped file, one byte a page, counting the bytes.
void load_touch(const uint8_t *data, size_t n, load_meter &meter);

}  // namespace tandem
