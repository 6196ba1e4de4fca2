// src/engine/load_meter.cpp - loading progress for the server's log and /health.
#include "load_meter.h"

#include "tandem/log.h"

#include <algorithm>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace tandem {

namespace {
std::string size_text(uint64_t bytes) {
    const double gib = double(uint64_t(1) << 30), mib = double(uint64_t(1) << 20);
    return bytes >= uint64_t(1) << 30 ? fmt::format("{:.2f} GiB", double(bytes) / gib) : fmt::format("{:.1f} MiB", double(bytes) / mib);
}
}  // namespace

load_meter::load_meter(engine_load_progress *progress, uint64_t total)
    : progress_(progress), total_(total), start_(std::chrono::steady_clock::now()), logged_(start_) {
    if (progress_ == nullptr) return;
    progress_->done = 0;
    progress_->total = total_;
}

void load_meter::add(uint64_t bytes) {
    if (progress_ == nullptr) return;
    // Estimates may fall a little short of what is placed: the count stops below the total until finish.
    const uint64_t done = std::min(progress_->done.load() + bytes, total_ > 0 ? total_ - 1 : 0);
    progress_->done = done;
    const auto now = std::chrono::steady_clock::now();
    if (now - logged_ < std::chrono::seconds(1)) return;
    logged_ = now;
    log_info("loading weights: {} of {} ({:.0f}%)", size_text(done), size_text(total_), progress_->percent());
}

void load_meter::finish() {
    if (progress_ == nullptr) return;
    progress_->done = total_;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    log_info("weights loaded: {} in {:.1f} s (100%)", size_text(total_), s);
}

void load_touch(const uint8_t *data, size_t n, load_meter &meter) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    volatile uint8_t sink = 0;
    for (size_t at = 0; at < n; at += load_meter::piece_bytes) {
        const size_t len = std::min(load_meter::piece_bytes, n - at);
        // Ask for the whole piece at once so the kernel reads ahead, then fault each page in.
        const uintptr_t begin = reinterpret_cast<uintptr_t>(data + at) & ~uintptr_t(page - 1);
        madvise(reinterpret_cast<void *>(begin), reinterpret_cast<uintptr_t>(data + at + len) - begin, MADV_WILLNEED);
        for (size_t i = 0; i < len; i += page) sink = sink + data[at + i];
        meter.add(len);
    }
    (void)sink;
}

}  // namespace tandem
