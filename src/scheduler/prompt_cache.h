// src/scheduler/prompt_cache.h - the host-memory prompt cache: conversations' tokens and their KV
// blobs (engine::slot_export) kept after their slot was given to someone else, least recently
// used first out, bounded in bytes; and the interface of a slower tier under it (--cache-disk).
#pragma once

#include "src/scheduler/host_arena.h"

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

namespace tandem {

class prompt_cache {
public:
    struct entry {
        std::vector<int32_t> tokens;
        kv_bytes kv;  // tokens.size() tokens of the engine's blob
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
    // holds them), then the least recently used until it fits, moved into `evicted` when given.
    // False, storing nothing, when it is covered or larger than the whole cache.
    bool insert(entry e, std::vector<entry> *evicted = nullptr);

    uint64_t bytes() const { return bytes_; }
    uint64_t capacity() const { return capacity_; }
    size_t size() const { return entries_.size(); }

private:
    std::list<entry> entries_;  // most recently used first
    uint64_t capacity_ = 0, bytes_ = 0;
};

// A slower tier under the host cache: the entries the host cache evicts go there, and a prompt
// may take its prefix back from there. The engine thread makes every call.
class prompt_spill {
public:
    virtual ~prompt_spill() = default;
    // Bytes it may hold: conversations larger than the host cache go straight here when they fit.
    virtual uint64_t capacity() const = 0;
    virtual uint64_t bytes() const = 0;
    // Takes a conversation; keeps it unless it is covered by one it holds or too large.
    virtual void store(prompt_cache::entry e) = 0;
    virtual size_t longest_common(std::span<const int32_t> prompt) const = 0;
    // The entry sharing the longest prefix with the prompt, read back and made the most recently
    // used; nullopt when none shares a token or it could not be read (the tier says why).
    virtual std::optional<prompt_cache::entry> load(std::span<const int32_t> prompt) = 0;
};

}  // namespace tandem
