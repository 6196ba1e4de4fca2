// src/engine/host_memory.h - the host's RAM as /proc/meminfo reports it (memory plans).
#pragma once

#include <cstdint>

namespace tandem {

struct host_memory {
    uint64_t total_bytes = 0;      // MemTotal (0 when unknown)
    uint64_t available_bytes = 0;  // MemAvailable (0 when unknown)
};

host_memory host_memory_read();

}  // namespace tandem
