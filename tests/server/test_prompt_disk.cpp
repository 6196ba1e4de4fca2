// tests/server/test_prompt_disk.cpp - the prompt cache's disk tier on a real folder: entries written
// and read back bitwise, the LRU byte bound deleting the oldest file, extensions replacing their
// prefixes, files of an earlier run reused and foreign, truncated or corrupt ones skipped.
#include "src/server/prompt_disk.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <numeric>

using namespace tandem;
using namespace tandem::server;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t token_bytes = 6;  // odd on purpose: no alignment is assumed
const slot_file_identity identity{0x1234abcdull, "f32", token_bytes, 1000};

// n tokens counting up from `first`, KV bytes derived from both so every byte is checked.
prompt_cache::entry conversation(int32_t first, size_t n) {
    prompt_cache::entry e;
    e.tokens.resize(n);
    std::iota(e.tokens.begin(), e.tokens.end(), first);
    e.kv.resize(n * token_bytes);
    for (size_t i = 0; i < e.kv.size(); ++i) e.kv[i] = uint8_t(first * 31 + int32_t(i) * 7);
    return e;
}

std::string fresh_folder(const std::string &name) {
    const fs::path p = fs::path(TANDEM_BINARY_DIR) / "test-prompt-disk" / name;
    fs::remove_all(p);
    return p.string();
}

size_t files_in(const std::string &folder) {
    size_t n = 0;
    for (const auto &de : fs::directory_iterator(folder)) n += de.is_regular_file();
    return n;
}

constexpr uint64_t big = 1 << 20;

}  // namespace

TEST_CASE("an entry is written in the background and read back bitwise, before and after the write", "[prompt_disk]") {
    const std::string folder = fresh_folder("roundtrip");
    prompt_disk disk(folder, identity, big, big);
    const prompt_cache::entry a = conversation(10, 50);
    disk.store(a);
    std::vector<int32_t> prompt = a.tokens;
    prompt.resize(30);
    prompt.push_back(-7);
    CHECK(disk.longest_common(prompt) == 30);
    auto early = disk.load(prompt);  // perhaps still queued: served from memory
    REQUIRE(early);
    CHECK((early->tokens == a.tokens && early->kv == a.kv));
    disk.flush();
    CHECK(files_in(folder) == 1);
    CHECK(disk.bytes() == slot_file_bytes(50, token_bytes));
    CHECK(fs::file_size(fs::directory_iterator(folder)->path()) == disk.bytes());
    auto late = disk.load(prompt);
    REQUIRE(late);
    CHECK((late->tokens == a.tokens && late->kv == a.kv));
    CHECK_FALSE(disk.load(std::vector<int32_t>{-1, -2}));
}

TEST_CASE("the byte bound deletes the least recently used file", "[prompt_disk]") {
    const std::string folder = fresh_folder("bound");
    const uint64_t one = slot_file_bytes(20, token_bytes);
    prompt_disk disk(folder, identity, 3 * one, big);
    for (int32_t i = 0; i < 3; ++i) disk.store(conversation(1000 * i, 20));
    disk.flush();
    CHECK(files_in(folder) == 3);
    REQUIRE(disk.load(conversation(0, 20).tokens));  // the oldest becomes the most recent
    disk.store(conversation(5000, 20));
    disk.flush();
    CHECK(disk.size() == 3);
    CHECK(disk.bytes() == 3 * one);
    CHECK(files_in(folder) == 3);
    CHECK(disk.longest_common(conversation(1000, 20).tokens) == 0);  // the least recently used went
    CHECK(disk.longest_common(conversation(0, 20).tokens) == 20);
    CHECK(disk.longest_common(conversation(2000, 20).tokens) == 20);
    disk.store(conversation(9000, 80));  // larger than the bound: kept out
    disk.flush();
    CHECK(disk.size() == 3);
}

TEST_CASE("an extension replaces the files of its prefixes, and a prefix of a file adds nothing", "[prompt_disk]") {
    const std::string folder = fresh_folder("prefixes");
    prompt_disk disk(folder, identity, big, big);
    disk.store(conversation(0, 10));
    disk.store(conversation(0, 25));
    disk.store(conversation(0, 5));
    disk.flush();
    CHECK(disk.size() == 1);
    CHECK(files_in(folder) == 1);
    CHECK(disk.bytes() == slot_file_bytes(25, token_bytes));
    // Entries a slot could not hold, or whose KV does not match their tokens, are not kept.
    disk.store(conversation(3000, 1000));
    prompt_cache::entry odd = conversation(4000, 10);
    odd.kv.pop_back();
    disk.store(odd);
    disk.flush();
    CHECK(disk.size() == 1);
}

TEST_CASE("a later run reuses the files and skips foreign, truncated and corrupt ones", "[prompt_disk]") {
    const std::string folder = fresh_folder("restart");
    const prompt_cache::entry a = conversation(7, 40), b = conversation(500, 30);
    {
        prompt_disk disk(folder, identity, big, big);
        disk.store(a);
        disk.store(b);
    }  // the destructor finishes the writes
    REQUIRE(files_in(folder) == 2);
    std::string a_file;
    for (const auto &de : fs::directory_iterator(folder)) {
        std::ifstream in(de.path(), std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
        if (bytes.size() == slot_file_bytes(40, token_bytes)) a_file = de.path().string();
    }
    REQUIRE(!a_file.empty());
    {
        std::ifstream in(a_file, std::ios::binary);
        std::vector<char> good((std::istreambuf_iterator<char>(in)), {});
        std::ofstream(folder + "/truncated.bin", std::ios::binary).write(good.data(), std::streamsize(good.size() - 9));
        std::ofstream(folder + "/junk.bin", std::ios::binary) << "not a slot file at all";
        std::ofstream(folder + "/x.bin.partial-1-0", std::ios::binary).write(good.data(), 20);
    }
    {
        slot_file_identity other = identity;
        other.model_hash ^= 1;
        prompt_disk foreign(fresh_folder("restart-foreign"), other, big, big);
        foreign.store(conversation(900, 12));
    }
    fs::copy_file(fs::directory_iterator(fs::path(folder).parent_path() / "restart-foreign")->path(), folder + "/foreign.bin");

    prompt_disk disk(folder, identity, big, big);
    CHECK(disk.scanned().n_reused == 2);
    CHECK(disk.scanned().n_skipped == 3);
    CHECK(disk.scanned().n_tokens == 70);
    CHECK_FALSE(fs::exists(folder + "/x.bin.partial-1-0"));
    CHECK(fs::exists(folder + "/foreign.bin"));  // not this model's: left alone
    auto back = disk.load(a.tokens);
    REQUIRE(back);
    CHECK((back->tokens == a.tokens && back->kv == a.kv));

    // A file damaged after start is dropped when read, never served.
    fs::resize_file(a_file, fs::file_size(a_file) - 1);
    CHECK_FALSE(disk.load(a.tokens));
    disk.flush();
    CHECK(disk.size() == 1);
    CHECK_FALSE(fs::exists(a_file));
    auto other = disk.load(b.tokens);
    REQUIRE(other);
    CHECK(other->kv == b.kv);
}

TEST_CASE("a run with a smaller bound deletes the oldest files of the last one", "[prompt_disk]") {
    const std::string folder = fresh_folder("shrink");
    const uint64_t one = slot_file_bytes(20, token_bytes);
    {
        prompt_disk disk(folder, identity, big, big);
        for (int32_t i = 0; i < 3; ++i) {
            disk.store(conversation(100 * i, 20));
            disk.flush();
            // Distinct modification times, the first written the oldest: the order a later run sees.
            for (const auto &de : fs::directory_iterator(folder))
                fs::last_write_time(de.path(), fs::last_write_time(de.path()) - std::chrono::minutes(10));
        }
    }
    prompt_disk disk(folder, identity, 2 * one, big);
    disk.flush();
    CHECK(disk.scanned().n_evicted == 1);
    CHECK(files_in(folder) == 2);
    CHECK(disk.longest_common(conversation(0, 20).tokens) == 0);
    CHECK(disk.longest_common(conversation(200, 20).tokens) == 20);
}

TEST_CASE("a folder that cannot be made is a configuration error", "[prompt_disk]") {
    const std::string folder = fresh_folder("blocked");
    fs::create_directories(fs::path(folder).parent_path());
    std::ofstream(folder) << "a file where the folder should be";
    try {
        prompt_disk disk(folder + "/prompt-cache", identity, big, big);
        FAIL("no error");
    } catch (const error &e) {
        CHECK(e.kind() == error_kind::config);
    }
}
