// src/scheduler/prompt_cache.h - the host-memory prompt cache: conversations' tokens and their KV
// blobs (engine::slot_export) kept after their slot was given to someone else, least recently
// used first out, bounded in bytes.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <vector>

namespace tandem {

class prompt_cache {
public:
    struct entry {
        std::vector<int32_t> tokens;
        std::vector<uint8_t> kv;  // tokens.size() tokens of the engine's blob
        uint64_t bytes() const { return kv.size() + tokens.size() * sizeof(int32_t); }
    };
    struct match {
        const entry *hit = nullptr;  // null: no entry shares a token with the prompt
        size_t n_common = 0;         // leading tokens the entry and the prompt share
    };

    explicit prompt_cache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

    // The entry sharing the longest prefix with the prompt, made the most recently used. The
    // pointer holds until the next insert.
    match longest_prefix(std::span<const int32_t> prompt);
    // The longest prefix any entry shares with the prompt, without touching the LRU order.
    size_t longest_common(std::span<const int32_t> prompt) const;
    // Whether an entry already holds these tokens as its prefix (storing them would add nothing).
    bool covers(std::span<const int32_t> tokens) const;
    // Stores a conversation as the most recently used entry: entries that are its prefixes go (it
    // holds them), then the least recently used until it fits. False, storing nothing, when it is
    // covered or larger than the whole cache.
    bool insert(entry e);

    uint64_t bytes() const { return bytes_; }
    uint64_t capacity() const { return capacity_; }
    size_t size() const { return entries_.size(); }

private:
    std::list<entry> entries_;  // most recently used first
    uint64_t capacity_ = 0, bytes_ = 0;
};

}  // namespace tandem
