// tests/unit/jinja/test_jinja_corpus.cpp - replays the fuzz seed corpus (tests/fuzz/corpus_jinja)
// and the published templates through the fuzz target's body, so every build runs it without
// libFuzzer; the published templates must also parse.
#include "tandem/jinja.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

std::string read_all(const std::filesystem::path &path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("jinja: the fuzz seed corpus and the published templates replay through the fuzz body", "[jinja]") {
    const std::filesystem::path root(TANDEM_SOURCE_DIR);
    size_t n_corpus = 0, n_templates = 0;
    for (const auto &dir : {root / "tests/fuzz/corpus_jinja", root / "tests/fixtures/templates"}) {
        for (const auto &entry : std::filesystem::directory_iterator(dir)) {
            if (entry.path().extension() != ".jinja") continue;
            INFO("seed " << entry.path().filename().string());
            const std::string data = read_all(entry.path());
            CHECK(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(data.data()), data.size()) == 0);
            if (dir.filename() == "templates") {
                ++n_templates;
                CHECK_NOTHROW(tandem::jinja_template::parse(data));
            } else {
                ++n_corpus;
            }
        }
    }
    CHECK(n_corpus >= 10);
    CHECK(n_templates >= 7);
}
