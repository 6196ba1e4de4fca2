// tests/server/api_test_util.h - helpers for the API mapping tests: a response context, scheduler
// events, and SSE text split into (event, data) pairs.
#pragma once

#include "src/server/api_anthropic.h"
#include "src/server/api_openai.h"
#include "src/server/api_responses.h"

#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::server::test {

inline error_kind kind_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const error &e) {
        return e.kind();
    }
    return error_kind::internal;  // "did not throw"
}

// The message of the error f throws ("" when it does not throw).
inline std::string message_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const error &e) {
        return e.what();
    }
    return "";
}

inline response_context test_context(chat_parse_options parse = {}) {
    response_context c;
    c.id = "id-1";
    c.model = "tiny";
    c.created = 1700000000;
    c.token_text = [](int32_t id) { return "<" + std::to_string(id) + ">"; };
    c.parse = std::move(parse);
    c.n_prompt = 7;
    return c;
}

inline gen_event delta(std::string text, std::vector<int32_t> ids) {
    gen_event ev;
    ev.type = gen_event::kind::delta;
    ev.text = std::move(text);
    for (int32_t id : ids) ev.tokens.push_back({id, -0.5f, {{id, -0.5f}, {id + 1, -1.5f}}});
    return ev;
}

inline gen_event done_event(finish_reason f, std::string stop = "") {
    gen_event ev;
    ev.type = gen_event::kind::done;
    ev.finish = f;
    ev.stop_matched = std::move(stop);
    ev.n_prompt = 7;
    ev.n_generated = 3;
    ev.timings.prompt_n = 7;
    ev.timings.prompt_ms = 14.0;
    ev.timings.predicted_n = 3;
    ev.timings.predicted_ms = 6.0;
    ev.error = f == finish_reason::cancelled ? "the server is shutting down" : "";
    return ev;
}

// Splits SSE text into (event name, data JSON) pairs; comment lines are skipped.
inline std::vector<std::pair<std::string, std::string>> sse_events(const std::string &text) {
    std::vector<std::pair<std::string, std::string>> out;
    std::string event;
    size_t at = 0;
    while (at < text.size()) {
        size_t nl = text.find('\n', at);
        std::string line = text.substr(at, nl - at);
        at = nl == std::string::npos ? text.size() : nl + 1;
        if (line.rfind("event: ", 0) == 0) event = line.substr(7);
        else if (line.rfind("data: ", 0) == 0) {
            out.emplace_back(event, line.substr(6));
            event.clear();
        }
    }
    return out;
}

}  // namespace tandem::server::test
