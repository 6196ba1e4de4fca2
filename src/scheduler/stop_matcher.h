// src/scheduler/stop_matcher.h - finds stop strings in streamed text without leaking a partial
// match: text that could still become a stop string is held back until it cannot.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class stop_matcher {
public:
    explicit stop_matcher(std::vector<std::string> stops);

    // Adds text; returns what is safe to release. After a match, returns the text before the
    // earliest stop string and matched() is true; further input is ignored.
    std::string feed(std::string_view text);
    // Releases whatever is held (end of generation without a match).
    std::string flush();

    bool matched() const { return matched_; }
    const std::string &matched_stop() const { return matched_stop_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool matched_ = false;
    std::string matched_stop_;
};

}  // namespace tandem
