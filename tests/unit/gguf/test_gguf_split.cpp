// tests/unit/gguf/test_gguf_split.cpp - llama.cpp's split format: the writer's parts read back as
// one model with the same tensors and bytes as the unsplit file; a missing part, a part of
// another set, a part named instead of the first, and bad --split-max-size texts are refused.
#include "tandem/error.h"
#include "tandem/gguf.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

using namespace tandem;
namespace fs = std::filesystem;

namespace {

std::string dir_for(const char *name) {
    const std::string d = std::string(TANDEM_BINARY_DIR) + "/split_" + name;
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

// Seven f32 tensors of 100 KB each with distinct contents, and some metadata.
gguf_writer seven_tensors() {
    gguf_writer w;
    w.set_string("general.architecture", "test");
    w.set_string("general.name", "split test");
    w.set_u32("test.value", 7);
    for (int t = 0; t < 7; ++t)
        w.add_tensor("t" + std::to_string(t), ggml_type::f32, {25000}, [t](uint8_t *dst) {
            for (int i = 0; i < 25000; ++i) {
                const float v = static_cast<float>(t * 100000 + i);
                std::memcpy(dst + 4 * i, &v, 4);
            }
        });
    return w;
}

}  // namespace

TEST_CASE("split: parts of at most the limit read back as the unsplit model", "[gguf][split]") {
    const std::string d = dir_for("roundtrip");
    const gguf_writer w = seven_tensors();
    REQUIRE(w.write(d + "/whole.gguf").size() == 1);
    // 250 KB parts hold two 100 KB tensors each: 4 parts.
    const auto paths = w.write(d + "/model.gguf", 2, 250000);
    REQUIRE(paths.size() == 4);
    CHECK(paths[0] == d + "/model-00001-of-00004.gguf");
    CHECK(paths[3] == d + "/model-00004-of-00004.gguf");
    auto whole = gguf_file::open(d + "/whole.gguf");
    auto split = gguf_file::open(paths[0]);
    CHECK(split->n_parts() == 4);
    CHECK(split->get_int("test.value") == 7);
    CHECK(split->get_int("split.count") == 4);
    CHECK(split->get_int("split.tensors.count") == 7);
    REQUIRE(split->tensors().size() == whole->tensors().size());
    for (const gguf_tensor_info &t : whole->tensors()) {
        const gguf_tensor_info &s = split->tensor(t.name);
        CAPTURE(t.name);
        CHECK(s.ne == t.ne);
        CHECK(s.type == t.type);
        CHECK(std::memcmp(s.data, t.data, t.n_bytes) == 0);
    }
}

TEST_CASE("split: a set that is incomplete or mixed is refused naming the file", "[gguf][split]") {
    const std::string d = dir_for("bad");
    const gguf_writer w = seven_tensors();
    const auto paths = w.write(d + "/m.gguf", 1, 250000);
    REQUIRE(paths.size() == 4);
    SECTION("a part opened instead of the first") {
        CHECK_THROWS_WITH(gguf_file::open(paths[1]), Catch::Contains("open its first part"));
    }
    SECTION("a missing part") {
        fs::remove(paths[2]);
        CHECK_THROWS_WITH(gguf_file::open(paths[0]), Catch::Contains("m-00003-of-00004.gguf") && Catch::Contains("missing"));
    }
    SECTION("a part of another split model") {
        // The same name pattern, but a set split into 3: its split.count differs.
        const auto other = w.write(d + "/o.gguf", 1, 350000);
        REQUIRE(other.size() == 3);
        fs::copy_file(other[1], paths[1], fs::copy_options::overwrite_existing);
        CHECK_THROWS_WITH(gguf_file::open(paths[0]), Catch::Contains("another split model"));
    }
}

TEST_CASE("split: --split-max-size texts", "[gguf][split]") {
    CHECK(gguf_parse_split_size("500M") == 500000000ull);
    CHECK(gguf_parse_split_size("5G") == 5000000000ull);
    for (const char *bad : {"", "5", "G", "0M", "1.5G", "-1G", "5K", "5g"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(gguf_parse_split_size(bad), tandem::error);
    }
}
