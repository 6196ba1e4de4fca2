// src/server/response_store.cpp - a bounded map of response ids to conversations, oldest evicted.
#include "src/server/response_store.h"

namespace tandem::server {

void response_store::put(const std::string &id, nlohmann::ordered_json messages) {
    const size_t bytes = messages.dump().size() + id.size();
    if (bytes > max_bytes_ || max_entries_ == 0) return;
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(id); it != entries_.end()) {
        bytes_ -= it->second.bytes;
        ages_.erase(it->second.age);
        entries_.erase(it);
    }
    ages_.push_back(id);
    entries_[id] = {std::move(messages), bytes, std::prev(ages_.end())};
    bytes_ += bytes;
    evict_locked();
}

std::optional<nlohmann::ordered_json> response_store::get(const std::string &id) const {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    return it->second.messages;
}

size_t response_store::size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
}

void response_store::evict_locked() {
    while (!ages_.empty() && (entries_.size() > max_entries_ || bytes_ > max_bytes_)) {
        const auto it = entries_.find(ages_.front());
        bytes_ -= it->second.bytes;
        entries_.erase(it);
        ages_.pop_front();
    }
}

}  // namespace tandem::server
