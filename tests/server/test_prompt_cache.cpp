// tests/server/test_prompt_cache.cpp - the host prompt cache's bookkeeping: longest shared prefix,
// the LRU byte bound, prefixes folded into the conversations that extend them.
#include "src/scheduler/prompt_cache.h"

#include <catch2/catch.hpp>

#include <numeric>

using namespace tandem;

namespace {

// n tokens counting up from `first`, with 4 KV bytes a token (an entry of n tokens holds 8n bytes).
prompt_cache::entry conversation(int32_t first, size_t n) {
    prompt_cache::entry e;
    e.tokens.resize(n);
    std::iota(e.tokens.begin(), e.tokens.end(), first);
    e.kv.assign(n * 4, static_cast<uint8_t>(first));
    return e;
}

std::vector<int32_t> tokens_of(const prompt_cache::entry &e, size_t n) { return {e.tokens.begin(), e.tokens.begin() + ptrdiff_t(n)}; }

}  // namespace

TEST_CASE("the entry sharing the longest prefix is found and its shared length reported", "[prompt_cache]") {
    prompt_cache cache(1 << 20);
    REQUIRE(cache.insert(conversation(0, 10)));
    REQUIRE(cache.insert(conversation(100, 20)));
    std::vector<int32_t> prompt = tokens_of(conversation(100, 20), 12);
    prompt.push_back(-1);
    const auto m = cache.longest_prefix(prompt);
    REQUIRE(m.hit != nullptr);
    CHECK(m.hit->tokens.front() == 100);
    CHECK(m.n_common == 12);
    CHECK(cache.longest_common(prompt) == 12);
    CHECK(cache.longest_prefix(std::vector<int32_t>{-5, 1}).hit == nullptr);
    CHECK(cache.bytes() == 30 * 8);
}

TEST_CASE("a full cache drops the least recently used entry, never exceeding its bound", "[prompt_cache]") {
    prompt_cache cache(3 * 80);  // three entries of 10 tokens
    for (int32_t i = 0; i < 3; ++i) REQUIRE(cache.insert(conversation(1000 * i, 10)));
    // A lookup makes the first one recent; a bare longest_common does not touch the order.
    CHECK(cache.longest_prefix(tokens_of(conversation(0, 10), 10)).n_common == 10);
    CHECK(cache.longest_common(tokens_of(conversation(1000, 10), 10)) == 10);
    REQUIRE(cache.insert(conversation(5000, 10)));
    CHECK(cache.size() == 3);
    CHECK(cache.bytes() <= cache.capacity());
    CHECK(cache.longest_common(tokens_of(conversation(1000, 10), 10)) == 0);  // the oldest went
    CHECK(cache.longest_common(tokens_of(conversation(0, 10), 10)) == 10);
    CHECK(cache.longest_common(tokens_of(conversation(2000, 10), 10)) == 10);
    CHECK_FALSE(cache.insert(conversation(9000, 31)));  // larger than the whole cache: kept out
    CHECK(cache.size() == 3);
}

TEST_CASE("a conversation replaces the entries that are its prefixes, and a prefix of one adds nothing",
          "[prompt_cache]") {
    prompt_cache cache(1 << 20);
    REQUIRE(cache.insert(conversation(0, 10)));
    REQUIRE(cache.insert(conversation(0, 25)));  // the same conversation, longer
    CHECK(cache.size() == 1);
    CHECK(cache.bytes() == 25 * 8);
    CHECK_FALSE(cache.insert(conversation(0, 7)));  // covered
    CHECK(cache.covers(tokens_of(conversation(0, 25), 25)));
    CHECK_FALSE(cache.covers(tokens_of(conversation(1, 3), 3)));
    CHECK_FALSE(cache.insert(prompt_cache::entry{}));
}
