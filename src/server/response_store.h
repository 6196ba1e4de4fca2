// src/server/response_store.h - the Responses API's memory of finished responses, so a request can
// continue one by previous_response_id: each stored response keeps its conversation (OpenAI chat
// messages, its own output last). Bounded by count and bytes; the oldest go first.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace tandem::server {

class response_store {
public:
    response_store(size_t max_entries, size_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

    // Keeps a response's conversation (a larger one than max_bytes is not kept).
    void put(const std::string &id, nlohmann::ordered_json messages);
    std::optional<nlohmann::ordered_json> get(const std::string &id) const;
    size_t size() const;

private:
    struct entry {
        nlohmann::ordered_json messages;
        size_t bytes = 0;
        std::list<std::string>::iterator age;
    };
    void evict_locked();

    size_t max_entries_, max_bytes_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, entry> entries_;
    std::list<std::string> ages_;  // oldest first
    size_t bytes_ = 0;
};

}  // namespace tandem::server
