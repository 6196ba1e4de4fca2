// tests/unit/gguf/test_gguf_roundtrip.cpp - the writer's files read back exactly (every value
// type, array kind and several tensor types), match a hand-encoded layout byte for byte, and a
// failed write leaves no file behind.
#include "gguf_test_bytes.h"

#include "tandem/gguf.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>

using tandem::gguf_array;
using tandem::gguf_file;
using tandem::gguf_type;
using tandem::gguf_value;
using tandem::gguf_writer;

namespace {

std::string out_path(const char *name) { return std::string(TANDEM_BINARY_DIR) + "/" + name; }

std::vector<uint8_t> read_all(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

gguf_value ints(gguf_type type, std::vector<int64_t> v) {
    gguf_array a;
    a.type = type;
    a.ints = std::move(v);
    return {gguf_type::array, std::move(a)};
}

gguf_value floats(gguf_type type, std::vector<double> v) {
    gguf_array a;
    a.type = type;
    a.floats = std::move(v);
    return {gguf_type::array, std::move(a)};
}

bool same_value(const gguf_value &a, const gguf_value &b) {
    if (a.type != b.type || a.data.index() != b.data.index()) return false;
    if (const auto *x = std::get_if<int64_t>(&a.data)) return *x == std::get<int64_t>(b.data);
    if (const auto *x = std::get_if<double>(&a.data)) return *x == std::get<double>(b.data);
    if (const auto *x = std::get_if<bool>(&a.data)) return *x == std::get<bool>(b.data);
    if (const auto *x = std::get_if<std::string>(&a.data)) return *x == std::get<std::string>(b.data);
    const auto &x = std::get<gguf_array>(a.data);
    const auto &y = std::get<gguf_array>(b.data);
    return x.type == y.type && x.ints == y.ints && x.floats == y.floats && x.strings == y.strings;
}

struct expected_tensor {
    std::string name;
    tandem::ggml_type type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
};

}  // namespace

TEST_CASE("gguf: writer round trip of every value type and several tensor types", "[gguf]") {
    const uint64_t seed = Catch::rngSeed() + 17;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);

    // Values at the edges of each type; floats that are exact in their type.
    const std::string binary("nul\0byte \xe4\xb8\xad \xff", 15);
    std::vector<std::pair<std::string, gguf_value>> kvs = {
        {"x.u8", {gguf_type::u8, int64_t{255}}},
        {"x.i8", {gguf_type::i8, int64_t{-128}}},
        {"x.u16", {gguf_type::u16, int64_t{65535}}},
        {"x.i16", {gguf_type::i16, int64_t{-32768}}},
        {"x.u32", {gguf_type::u32, int64_t{4294967295}}},
        {"x.i32", {gguf_type::i32, int64_t{std::numeric_limits<int32_t>::min()}}},
        {"x.u64", {gguf_type::u64, int64_t{-1}}},  // UINT64_MAX kept bit-exact
        {"x.i64", {gguf_type::i64, std::numeric_limits<int64_t>::min()}},
        {"x.f32", {gguf_type::f32, double{0.1f}}},
        {"x.f64", {gguf_type::f64, 1.0 / 3.0}},
        {"x.true", {gguf_type::boolean, true}},
        {"x.false", {gguf_type::boolean, false}},
        {"x.str", {gguf_type::string, binary}},
        {"x.empty_str", {gguf_type::string, std::string()}},
        {"x.arr.u8", ints(gguf_type::u8, {0, 1, 255})},
        {"x.arr.i8", ints(gguf_type::i8, {-128, 0, 127})},
        {"x.arr.u16", ints(gguf_type::u16, {0, 65535})},
        {"x.arr.i16", ints(gguf_type::i16, {-32768, 32767})},
        {"x.arr.u32", ints(gguf_type::u32, {0, 4294967295})},
        {"x.arr.i32", ints(gguf_type::i32, {std::numeric_limits<int32_t>::min(), -1, 7})},
        {"x.arr.u64", ints(gguf_type::u64, {0, -1, std::numeric_limits<int64_t>::max()})},
        {"x.arr.i64", ints(gguf_type::i64, {std::numeric_limits<int64_t>::min(), 5})},
        {"x.arr.bool", ints(gguf_type::boolean, {1, 0, 1})},
        {"x.arr.f32", floats(gguf_type::f32, {0.5, -2.25, double{1e-30f}})},
        {"x.arr.f64", floats(gguf_type::f64, {1e300, -0.0, 1.0 / 7.0})},
        {"x.arr.empty", ints(gguf_type::i32, {})},
    };
    {
        gguf_array s;
        s.type = gguf_type::string;
        s.strings = {"", "a", binary, std::string(1000, 'z')};
        kvs.push_back({"x.arr.str", {gguf_type::array, std::move(s)}});
    }

    gguf_writer w;
    w.set_u32("x.replaced", 1);  // replaced below: keeps this first position with the new value
    for (const auto &[key, value] : kvs) w.set_value(key, value);
    w.set_u32("x.replaced", 2);
    // The typed setters produce the same values as set_value.
    w.set_i32("y.i32", -5);
    w.set_u64("y.u64", uint64_t{1} << 63);
    w.set_f32("y.f32", 3.5f);
    w.set_bool("y.bool", true);
    w.set_string("y.str", "qwen3moe");
    w.set_array_string("y.strs", {"<|im_start|>", "Ġthe"});
    w.set_array_i32("y.i32s", {1, -2, 3});
    w.set_array_f32("y.f32s", {0.25f, -8.0f});
    std::vector<std::pair<std::string, gguf_value>> all = {{"x.replaced", {gguf_type::u32, int64_t{2}}}};
    all.insert(all.end(), kvs.begin(), kvs.end());
    all.push_back({"y.i32", {gguf_type::i32, int64_t{-5}}});
    all.push_back({"y.u64", {gguf_type::u64, std::numeric_limits<int64_t>::min()}});
    all.push_back({"y.f32", {gguf_type::f32, 3.5}});
    all.push_back({"y.bool", {gguf_type::boolean, true}});
    all.push_back({"y.str", {gguf_type::string, std::string("qwen3moe")}});
    {
        gguf_array s;
        s.type = gguf_type::string;
        s.strings = {"<|im_start|>", "Ġthe"};
        all.push_back({"y.strs", {gguf_type::array, std::move(s)}});
    }
    all.push_back({"y.i32s", ints(gguf_type::i32, {1, -2, 3})});
    all.push_back({"y.f32s", floats(gguf_type::f32, {0.25, -8.0})});

    // Byte sizes from ggml's block layouts: f32 4, f16/bf16 2, q8_0 34 per 32, q4_K 144 per 256,
    // q6_K 210 per 256, i8 1.
    using tandem::ggml_type;
    std::vector<expected_tensor> tensors = {
        {"token_embd.weight", ggml_type::f32, {7, 5}, std::vector<uint8_t>(7 * 5 * 4)},
        {"f16", ggml_type::f16, {3}, std::vector<uint8_t>(6)},
        {"blk.0.q8", ggml_type::q8_0, {64, 3}, std::vector<uint8_t>(2 * 3 * 34)},
        {"blk.0.q4k", ggml_type::q4_k, {256, 2}, std::vector<uint8_t>(2 * 144)},
        {"q6k", ggml_type::q6_k, {512, 1, 2}, std::vector<uint8_t>(2 * 2 * 210)},
        {"bf16", ggml_type::bf16, {5, 3, 2, 1}, std::vector<uint8_t>(30 * 2)},
        {"i8", ggml_type::i8, {13}, std::vector<uint8_t>(13)},
    };
    for (auto &t : tensors) {
        for (auto &b : t.bytes) b = static_cast<uint8_t>(rng());
        const std::vector<uint8_t> *src = &t.bytes;
        w.add_tensor(t.name, t.type, t.ne, [src](uint8_t *dst) { std::memcpy(dst, src->data(), src->size()); });
    }

    const std::string path = out_path("test_gguf_roundtrip.gguf");
    w.write(path, 3);
    const auto f = gguf_file::open(path);
    CHECK(f->version() == 3);
    CHECK(f->alignment() == 32);

    REQUIRE(f->kvs().size() == all.size());
    for (size_t i = 0; i < all.size(); ++i) {
        INFO("key " << all[i].first);
        CHECK(f->kvs()[i].key == all[i].first);
        CHECK(same_value(f->kvs()[i].value, all[i].second));
    }
    CHECK(f->get_int("x.replaced") == 2);
    CHECK(f->get_string("x.str") == binary);
    CHECK(f->get_array("x.arr.str").size() == 4);

    REQUIRE(f->tensors().size() == tensors.size());
    const uint8_t *base = f->tensors()[0].data - f->tensors()[0].offset;  // start of the data section
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto &got = f->tensors()[i];
        const auto &want = tensors[i];
        INFO("tensor " << want.name);
        CHECK(got.name == want.name);
        CHECK(got.type == want.type);
        CHECK(got.ne == want.ne);
        REQUIRE(got.n_bytes == want.bytes.size());
        CHECK(got.n_bytes == tandem::ggml_row_bytes(want.type, want.ne[0]) * static_cast<size_t>(got.n_rows()));
        CHECK(got.offset % 32 == 0);
        CHECK(std::memcmp(got.data, want.bytes.data(), want.bytes.size()) == 0);
    }

    // Tensors follow each other in order, each padded with zeros to 32, the last one included
    // (gguf-py's layout), and the data section itself starts on a multiple of 32.
    const auto file_bytes = read_all(path);
    const size_t data_start = static_cast<size_t>(f->file_bytes()) - [&] {
        uint64_t n = 0;
        for (const auto &t : f->tensors()) n += (t.n_bytes + 31) / 32 * 32;
        return n;
    }();
    CHECK(data_start % 32 == 0);
    uint64_t expected_offset = 0;
    for (const auto &t : f->tensors()) {
        CHECK(t.offset == expected_offset);
        CHECK(t.data == base + t.offset);
        const uint64_t end = data_start + t.offset + t.n_bytes;
        expected_offset = (t.offset + t.n_bytes + 31) / 32 * 32;
        for (uint64_t p = end; p < data_start + expected_offset; ++p) CHECK(file_bytes[p] == 0);
    }
    CHECK(data_start + expected_offset == file_bytes.size());

    // Every truncation short of the last tensor's data is refused; the last tensor's trailing
    // padding is not needed (ggml's mmap loader does not need it either).
    const size_t needed = data_start + f->tensors().back().offset + f->tensors().back().n_bytes;
    for (size_t len = 0; len <= file_bytes.size(); ++len) {
        const std::vector<uint8_t> cut(file_bytes.begin(), file_bytes.begin() + static_cast<ptrdiff_t>(len));
        INFO("length " << len << " of " << file_bytes.size());
        if (len < needed) {
            REQUIRE_THROWS_AS(gguf_file::from_memory(cut), tandem::error);
        } else {
            REQUIRE(gguf_file::from_memory(cut)->tensors().size() == tensors.size());
        }
    }
    std::remove(path.c_str());
}

TEST_CASE("gguf: writer layout matches a hand-encoded file byte for byte", "[gguf]") {
    gguf_writer w;
    w.set_u32("a.u32", 5);
    w.set_string("a.name", "x");
    const std::vector<uint8_t> t0 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    std::vector<uint8_t> t1(34);
    for (size_t i = 0; i < t1.size(); ++i) t1[i] = static_cast<uint8_t>(200 + i);
    w.add_tensor("t0", tandem::ggml_type::f32, {3}, [&](uint8_t *d) { std::memcpy(d, t0.data(), t0.size()); });
    w.add_tensor("t1", tandem::ggml_type::q8_0, {32}, [&](uint8_t *d) { std::memcpy(d, t1.data(), t1.size()); });
    const std::string path = out_path("test_gguf_layout.gguf");
    w.write(path, 1);

    using namespace gguf_test;
    bytes want;
    want.u32(0x46554747).u32(3).u64(2).u64(2);
    want.append(kv_u32("a.u32", 5)).append(kv_str("a.name", "x"));
    want.append(tensor_info("t0", {3}, 0, 0)).append(tensor_info("t1", {32}, 8, 32));
    want.pad_to(32);
    want.b.insert(want.b.end(), t0.begin(), t0.end());
    want.pad_to(32);
    want.b.insert(want.b.end(), t1.begin(), t1.end());
    want.pad_to(32);
    CHECK(read_all(path) == want.b);
    std::remove(path.c_str());
}

TEST_CASE("gguf: writer output does not depend on the thread count", "[gguf]") {
    const uint64_t seed = Catch::rngSeed() + 5;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    std::vector<std::vector<uint8_t>> data;
    for (int i = 0; i < 40; ++i) {
        data.emplace_back(static_cast<size_t>(4 * (1 + rng() % 300)));
        for (auto &b : data.back()) b = static_cast<uint8_t>(rng());
    }
    auto write_with = [&](int threads) {
        gguf_writer w;
        w.set_string("general.architecture", "test");
        for (size_t i = 0; i < data.size(); ++i) {
            const auto *src = &data[i];
            w.add_tensor("t" + std::to_string(i), tandem::ggml_type::f32, {static_cast<int64_t>(src->size() / 4)},
                         [src](uint8_t *d) { std::memcpy(d, src->data(), src->size()); });
        }
        const std::string path = out_path("test_gguf_threads.gguf");
        w.write(path, threads);
        auto bytes = read_all(path);
        std::remove(path.c_str());
        return bytes;
    };
    const auto one = write_with(1);
    CHECK(write_with(4) == one);
    CHECK(write_with(0) == one);
}

TEST_CASE("gguf: writer alignment and an empty file", "[gguf]") {
    const std::string path = out_path("test_gguf_align.gguf");
    SECTION("general.alignment 64 is honoured") {
        gguf_writer w;
        w.set_u32("general.alignment", 64);
        w.add_tensor("a", tandem::ggml_type::f32, {3}, [](uint8_t *d) { std::memset(d, 0xab, 12); });
        w.add_tensor("b", tandem::ggml_type::f32, {5}, [](uint8_t *d) { std::memset(d, 0xcd, 20); });
        w.write(path);
        const auto f = gguf_file::open(path);
        CHECK(f->alignment() == 64);
        CHECK(f->tensor("b").offset == 64);
        CHECK(f->file_bytes() % 64 == 0);
        CHECK(f->tensor("b").data[19] == 0xcd);
    }
    SECTION("an alignment that is not a power of two is refused") {
        gguf_writer w;
        w.set_u32("general.alignment", 48);
        CHECK_THROWS_AS(w.write(path), tandem::error);
        CHECK_FALSE(std::filesystem::exists(path));
    }
    SECTION("no tensors and no keys") {
        gguf_writer w;
        w.write(path);
        const auto f = gguf_file::open(path);
        CHECK(f->file_bytes() == 24);
        CHECK(f->kvs().empty());
        CHECK(f->tensors().empty());
    }
    std::remove(path.c_str());
}

TEST_CASE("gguf: writer refuses bad tensors and values", "[gguf]") {
    using tandem::ggml_type;
    gguf_writer w;
    auto noop = [](uint8_t *) {};
    w.add_tensor("w", ggml_type::f32, {4}, noop);
    auto kind_of = [](auto &&fn) {
        try {
            fn();
        } catch (const tandem::error &e) {
            return e.kind();
        }
        return tandem::error_kind::internal;  // "did not throw"
    };
    const auto ff = tandem::error_kind::file_format;
    CHECK(kind_of([&] { w.add_tensor("w", ggml_type::f32, {4}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor("q", ggml_type::q4_k, {100}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor("q", ggml_type::q8_0, {31, 2}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor("e", ggml_type::f32, {}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor("z", ggml_type::f32, {4, 0}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor("big", ggml_type::f32, {int64_t{1} << 40, int64_t{1} << 40}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor(std::string(64, 'n'), ggml_type::f32, {4}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor("", ggml_type::f32, {4}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor("x", static_cast<ggml_type>(4), {32}, noop); }) == ff);
    CHECK(kind_of([&] { w.add_tensor("nofill", ggml_type::f32, {4}, nullptr); }) == ff);
    CHECK(kind_of([&] { w.set_value("v", {gguf_type::u8, int64_t{256}}); }) == ff);
    CHECK(kind_of([&] { w.set_value("v", {gguf_type::f32, std::string("no")}); }) == ff);
    CHECK(kind_of([&] { w.set_value("v", ints(gguf_type::array, {})); }) == ff);
    CHECK(kind_of([&] { w.set_value("v", ints(gguf_type::i8, {1, 128})); }) == ff);
    CHECK(kind_of([&] { w.set_value("v", ints(gguf_type::f32, {1})); }) == ff);
    CHECK(kind_of([&] { w.set_value("", {gguf_type::u8, int64_t{1}}); }) == ff);
}

TEST_CASE("gguf: a failed write leaves no partial file and keeps the old one", "[gguf]") {
    const std::string path = out_path("test_gguf_fail.gguf");
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << "old"; }
    gguf_writer w;
    w.set_string("general.architecture", "test");
    for (int i = 0; i < 8; ++i)
        w.add_tensor("t" + std::to_string(i), tandem::ggml_type::f32, {64}, [i](uint8_t *d) {
            if (i == 5) throw std::runtime_error("fill failed");
            std::memset(d, 1, 256);
        });
    try {
        w.write(path, 4);
        FAIL("write did not throw");
    } catch (const std::runtime_error &e) {
        CHECK(std::string(e.what()) == "fill failed");
    }
    CHECK(read_all(path) == std::vector<uint8_t>{'o', 'l', 'd'});
    for (const auto &entry : std::filesystem::directory_iterator(TANDEM_BINARY_DIR))
        CHECK(entry.path().filename().string().find("test_gguf_fail.gguf.partial") == std::string::npos);
    std::remove(path.c_str());
}
