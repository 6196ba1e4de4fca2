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

TEST_CASE("the host arena hands out page runs first-fit, merges freed neighbours and refuses what does not fit",
          "[prompt_cache][host_arena]") {
    constexpr size_t page = host_arena::page;
    std::shared_ptr<uint8_t> memory(new uint8_t[8 * page], std::default_delete<uint8_t[]>());
    host_arena arena(memory, 8 * page + 100);  // a tail short of a page is not used
    CHECK(arena.capacity() == 8 * page);
    uint8_t *a = arena.allocate(1);            // one page
    uint8_t *b = arena.allocate(2 * page + 1);  // three
    uint8_t *c = arena.allocate(2 * page);     // two
    REQUIRE((a && b && c));
    CHECK(a == memory.get());
    CHECK(b == a + page);
    CHECK(c == b + 3 * page);
    CHECK(arena.bytes_used() == 6 * page);
    CHECK(arena.allocate(3 * page) == nullptr);  // two pages left
    CHECK_FALSE(arena.release(a + 1));           // not the start of a run
    uint8_t outside = 0;
    CHECK_FALSE(arena.release(&outside));
    CHECK(arena.release(b));
    CHECK(arena.allocate(4 * page) == nullptr);  // three free pages here, two at the end: not joined
    CHECK(arena.release(a));                     // joins b's run: four pages from the start
    uint8_t *d = arena.allocate(4 * page);
    CHECK(d == memory.get());
    CHECK(arena.release(c));                     // joins the tail: four pages
    CHECK(arena.allocate(4 * page) == memory.get() + 4 * page);
    CHECK(arena.bytes_used() == 8 * page);
    CHECK_FALSE(arena.release(c + page));
}

TEST_CASE("KV blobs live in the arena while it has room, on the heap after, and copies on the heap", "[prompt_cache][host_arena]") {
    constexpr size_t page = host_arena::page;
    std::shared_ptr<uint8_t> memory(new uint8_t[4 * page], std::default_delete<uint8_t[]>());
    auto arena = std::make_shared<host_arena>(memory, 4 * page);
    auto in_arena = [&](const kv_bytes &v) { return v.data() >= memory.get() && v.data() < memory.get() + 4 * page; };
    kv_bytes a{kv_allocator<uint8_t>(arena)};
    a.resize(3 * page);
    CHECK(in_arena(a));
    kv_bytes b{kv_allocator<uint8_t>(arena)};
    b.resize(2 * page);  // one page left: the heap
    CHECK_FALSE(in_arena(b));
    a.assign(3 * page, 7);
    kv_bytes copy = a;
    CHECK_FALSE(in_arena(copy));
    CHECK(copy == a);
    kv_bytes moved = std::move(a);  // the run moves with it
    CHECK(in_arena(moved));
    CHECK(arena->bytes_used() == 3 * page);
    moved = kv_bytes();  // frees the run
    CHECK(arena->bytes_used() == 0);
}
