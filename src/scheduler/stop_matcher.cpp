// src/scheduler/stop_matcher.cpp - stop strings over streamed text (see stop_matcher.h).
#include "src/scheduler/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace tandem {

stop_matcher::stop_matcher(std::vector<std::string> stops) {
    for (auto &s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));  // an empty stop would match everywhere
}

std::string stop_matcher::feed(std::string_view text) {
    if (matched_) return {};
    held_.append(text);
    if (stops_.empty()) return std::exchange(held_, {});

    // Earliest full match wins; among matches at the same position, the longest.
    size_t best = std::string::npos;
    for (const auto &s : stops_) {
        size_t at = held_.find(s);
        if (at == std::string::npos) continue;
        if (best == std::string::npos || at < best ||
            (at == best && s.size() > matched_stop_.size())) {
            best = at;
            matched_stop_ = s;
        }
    }
    if (best != std::string::npos) {
        matched_ = true;
        std::string out = held_.substr(0, best);
        held_.clear();
        return out;
    }

    // Hold back the longest suffix that is a proper prefix of some stop string. Such a suffix
    // starts where a stop string starts, so it never splits a UTF-8 character of valid text.
    size_t keep = 0;
    for (const auto &s : stops_) {
        size_t max_len = std::min(s.size() - 1, held_.size());
        for (size_t len = max_len; len > keep; --len) {
            if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
                keep = len;
                break;
            }
        }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string stop_matcher::flush() {
    if (matched_) return {};
    return std::exchange(held_, {});
}

}  // namespace tandem
