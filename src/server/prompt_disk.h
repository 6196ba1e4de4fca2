// src/server/prompt_disk.h - the prompt cache's disk tier (--cache-disk): conversations the host
// cache lets go, written as slot files into a folder of their own by a background thread, under an
// LRU byte bound (the oldest files deleted), indexed by their tokens and read back when a prompt
// shares their prefix. Files an earlier run of the same model left there are indexed at start.
#pragma once

#include "src/scheduler/prompt_cache.h"
#include "src/server/slot_files.h"

#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::server {

class prompt_disk final : public prompt_spill {
public:
    // folder: created when missing (throws error(config) when it cannot be); capacity_bytes: the
    // files' bound; max_pending_bytes: the most KV waiting for the writer (beyond it a store is
    // dropped rather than grow the process while the disk lags).
    prompt_disk(std::string folder, slot_file_identity id, uint64_t capacity_bytes, uint64_t max_pending_bytes);
    ~prompt_disk() override;  // finishes the writes already queued
    prompt_disk(const prompt_disk &) = delete;
    prompt_disk &operator=(const prompt_disk &) = delete;

    uint64_t capacity() const override { return capacity_; }
    uint64_t bytes() const override;
    void store(prompt_cache::entry e) override;
    size_t longest_common(std::span<const int32_t> prompt) const override;
    std::optional<prompt_cache::entry> load(std::span<const int32_t> prompt) override;

    size_t size() const;
    // Waits until every queued write and deletion is done.
    void flush();

    // What start-up found in the folder.
    struct scan_result {
        size_t n_reused = 0, n_skipped = 0, n_evicted = 0;
        uint64_t n_tokens = 0;
    };
    const scan_result &scanned() const { return scanned_; }

private:
    struct file {
        std::string name;
        std::vector<int32_t> tokens;
        uint64_t bytes = 0;
        std::shared_ptr<const slot_snapshot> pending;  // set until the writer has written it
    };
    struct op {
        std::string name;
        std::shared_ptr<const slot_snapshot> data;  // null: delete the file
        uint64_t bytes = 0;
    };
    void scan();
    void write_loop();
    // Takes the file out of the index and queues its deletion. Under mutex_.
    void drop(std::list<file>::iterator it);
    std::list<file>::iterator find(const std::string &name);
    std::string path(const std::string &name) const;

    std::string folder_;
    slot_file_identity id_;
    uint64_t capacity_ = 0, max_pending_ = 0;
    scan_result scanned_;

    mutable std::mutex mutex_;
    std::condition_variable wake_, idle_;
    std::list<file> files_;  // most recently used first
    std::deque<op> ops_;
    uint64_t bytes_ = 0, pending_bytes_ = 0;
    bool busy_ = false, stopping_ = false;
    std::thread writer_;
};

}  // namespace tandem::server
