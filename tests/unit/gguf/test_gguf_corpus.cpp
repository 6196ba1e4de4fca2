// tests/unit/gguf/test_gguf_corpus.cpp - replays the fuzz seed corpus (tests/fuzz/corpus, written
// by make_corpus.py, an independent encoder) through the reader and the fuzz target's body.
#include "tandem/error.h"
#include "tandem/gguf.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

std::vector<uint8_t> read_all(const std::filesystem::path &path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

const std::filesystem::path corpus_dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/fuzz/corpus";

}  // namespace

TEST_CASE("gguf: the fuzz seed corpus replays: valid_* parse, bad_* are refused", "[gguf]") {
    size_t n_valid = 0, n_bad = 0;
    for (const auto &entry : std::filesystem::directory_iterator(corpus_dir)) {
        const std::string name = entry.path().filename().string();
        INFO("seed " << name);
        const auto data = read_all(entry.path());
        CHECK(LLVMFuzzerTestOneInput(data.data(), data.size()) == 0);
        if (name.rfind("valid_", 0) == 0) {
            ++n_valid;
            CHECK_NOTHROW(tandem::gguf_file::from_memory(data));
        } else if (name.rfind("bad_", 0) == 0) {
            ++n_bad;
            try {
                tandem::gguf_file::from_memory(data);
                FAIL("accepted");
            } catch (const tandem::error &e) {
                CHECK(e.kind() == tandem::error_kind::file_format);
            }
        }
    }
    // make_corpus.py writes 5 valid and 8 bad seeds; fewer means the corpus went missing.
    CHECK(n_valid >= 5);
    CHECK(n_bad >= 8);
}

TEST_CASE("gguf: values written by the independent encoder read back", "[gguf]") {
    // The inputs make_corpus.py encodes into valid_all_types.bin.
    const auto data = read_all(corpus_dir / "valid_all_types.bin");
    const auto f = tandem::gguf_file::from_memory(data);
    CHECK(f->get_string("general.architecture") == "fuzzseed");
    CHECK(f->get_int("t.u8") == 200);
    CHECK(f->get_int("t.i8") == -100);
    CHECK(f->get_int("t.u16") == 60000);
    CHECK(f->get_int("t.i16") == -30000);
    CHECK(f->get_int("t.u32") == 123456789);
    CHECK(f->get_int("t.i32") == -123456789);
    CHECK(f->get_float("t.f32") == 0.25);
    CHECK(f->get_bool("t.bool", false));
    CHECK(f->get_int("t.u64") == (int64_t{1} << 40) + 3);
    CHECK(f->get_int("t.i64") == -(int64_t{1} << 40));
    CHECK(f->get_float("t.f64") == -1.5);
    CHECK(f->get_array("t.tokens").strings == std::vector<std::string>{"<s>", "a", "\xc3\xa9"});
    CHECK(f->get_array("t.ids").ints == std::vector<int64_t>{1, -2, 3});
    CHECK(f->get_array("t.scores").floats == std::vector<double>{0.5, -1.0});
    CHECK(f->get_array("t.flags").ints == std::vector<int64_t>{1, 0});
    CHECK(f->get_array("t.empty").type == tandem::gguf_type::u64);
    CHECK(f->get_array("t.empty").size() == 0);
    REQUIRE(f->tensors().size() == 2);
    const auto &q8 = f->tensor("blk.0.q8");
    CHECK(q8.type == tandem::ggml_type::q8_0);
    CHECK(q8.n_bytes == 34);
    // make_corpus.py fills tensor i's byte j with (i * 31 + j * 7) & 0xff.
    for (uint64_t j = 0; j < q8.n_bytes; ++j) CHECK(q8.data[j] == static_cast<uint8_t>(31 + j * 7));
    const auto q = tandem::gguf_file::from_memory(read_all(corpus_dir / "valid_quant_types.bin"));
    CHECK(q->tensor("q4k").n_bytes == 2 * 144);
    CHECK(q->tensor("q6k").n_bytes == 210);
    CHECK(q->tensor("bf16").n_bytes == 32);
    CHECK(q->tensor("f16").n_bytes == 10);
}
