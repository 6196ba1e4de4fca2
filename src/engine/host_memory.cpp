// src/engine/host_memory.cpp - parses /proc/meminfo.
#include "host_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace tandem {

host_memory host_memory_read() {
    host_memory mem;
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string key;
        uint64_t kib = 0;
        fields >> key >> kib;
        if (key == "MemTotal:") mem.total_bytes = kib * 1024;
        if (key == "MemAvailable:") mem.available_bytes = kib * 1024;
    }
    return mem;
}

}  // namespace tandem
