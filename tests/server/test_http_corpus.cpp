// tests/server/test_http_corpus.cpp - replays the HTTP fuzz seed corpus (tests/fuzz/corpus_http)
// through the fuzz target's body, so every build runs the request path it fuzzes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

TEST_CASE("http: the fuzz seed corpus replays through the request path", "[api][fuzz]") {
    const auto dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/fuzz/corpus_http";
    int n = 0;
    for (const auto &entry : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(entry.path(), std::ios::binary);
        const std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        INFO(entry.path().filename().string());
        CHECK(LLVMFuzzerTestOneInput(data.data(), data.size()) == 0);
        // Every prefix too: a client may stop anywhere.
        for (size_t cut = 0; cut < data.size(); cut += 7) CHECK(LLVMFuzzerTestOneInput(data.data(), cut) == 0);
        ++n;
    }
    CHECK(n >= 18);  // fewer means the corpus went missing
}
