// tests/unit/gguf/test_gguf_malformed.cpp - the reader refuses every malformed file with a
// file_format error naming the key or tensor, and never reads past the end.
#include "gguf_test_bytes.h"

#include "tandem/gguf.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <limits>

using namespace gguf_test;
using tandem::gguf_file;

namespace {

constexpr uint32_t ggml_f32 = 0, ggml_q8_0 = 8;

// One KV and two tensors: "a" f32 [8, 2] (64 bytes at 0) and "b" q8_0 [32, 3] (3 blocks of 34
// bytes = 102 at 64). The data section ends exactly at the end of the file.
std::vector<uint8_t> good_file(uint32_t version = 3) {
    bytes infos = tensor_info("a", {8, 2}, ggml_f32, 0);
    infos.append(tensor_info("b", {32, 3}, ggml_q8_0, 64));
    return file(1, kv_str("general.architecture", "test"), 2, infos, 64 + 102, version);
}

std::vector<uint8_t> one_tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t offset,
                                size_t data_bytes) {
    return file(0, {}, 1, tensor_info(name, std::move(ne), type, offset), data_bytes);
}

}  // namespace

TEST_CASE("gguf: the hand-built base file is valid", "[gguf]") {
    for (uint32_t version : {2u, 3u}) {
        const auto data = good_file(version);
        const auto f = gguf_file::from_memory(data);
        CHECK(f->version() == version);
        CHECK(f->get_string("general.architecture") == "test");
        REQUIRE(f->tensors().size() == 2);
        const auto &b = f->tensor("b");
        CHECK(b.type == tandem::ggml_type::q8_0);
        CHECK(b.n_bytes == 102);
        CHECK(b.n_rows() == 3);
        CHECK(b.data == data.data() + (data.size() - 102));
        CHECK(f->tensor("a").n_elements() == 16);
    }
}

TEST_CASE("gguf: every truncation of a valid file is refused without reading past the end", "[gguf]") {
    const auto data = good_file();
    for (size_t len = 0; len < data.size(); ++len) {
        INFO("length " << len << " of " << data.size());
        const std::vector<uint8_t> cut(data.begin(), data.begin() + static_cast<ptrdiff_t>(len));
        try {
            gguf_file::from_memory(cut);
            FAIL("a truncated file was accepted");
        } catch (const tandem::error &e) {
            REQUIRE(e.kind() == tandem::error_kind::file_format);
        }
    }
}

TEST_CASE("gguf: header errors", "[gguf]") {
    auto data = good_file();
    SECTION("bad magic") {
        data[0] = 'G', data[1] = 'G', data[2] = 'M', data[3] = 'L';
        require_format_error(data, "not a GGUF file");
    }
    SECTION("version 1") { require_format_error(good_file(1), "version 1"); }
    SECTION("version 0 and 4") {
        require_format_error(good_file(0), "unsupported GGUF version 0");
        require_format_error(good_file(4), "unsupported GGUF version 4");
    }
    SECTION("byte-swapped version 3") { require_format_error(good_file(0x03000000), "byte-swapped"); }
    SECTION("huge tensor count") {
        const uint64_t huge = uint64_t{1} << 60;
        std::memcpy(data.data() + 8, &huge, 8);
        require_format_error(data, "header claims");
    }
    SECTION("huge key count") {
        const uint64_t huge = std::numeric_limits<uint64_t>::max();
        std::memcpy(data.data() + 16, &huge, 8);
        require_format_error(data, "header claims");
    }
    SECTION("empty input") { require_format_error({}, "truncated"); }
}

TEST_CASE("gguf: key/value errors", "[gguf]") {
    SECTION("duplicate keys") {
        bytes kvs = kv_u32("x.count", 1);
        kvs.append(kv_u32("x.count", 2));
        require_format_error(file(2, kvs, 0, {}, 0), "duplicate key 'x.count'");
    }
    SECTION("empty key") { require_format_error(file(1, kv_u32("", 1), 0, {}, 0), "empty name"); }
    SECTION("key name length past the end") {
        bytes kvs;
        kvs.u64(1000).zeros(20);  // claims 1000 bytes of name, has 20
        require_format_error(file(1, kvs, 0, {}, 0), "key #0 name needs 1000 bytes");
    }
    SECTION("string value length past the end") {
        bytes kvs;
        kvs.str("tokenizer.chat_template").u32(t_str).u64(uint64_t{1} << 62).zeros(8);
        require_format_error(file(1, kvs, 0, {}, 0), "key 'tokenizer.chat_template'");
    }
    SECTION("unknown value type") {
        bytes kvs;
        kvs.str("x.weird").u32(13).u32(0);
        require_format_error(file(1, kvs, 0, {}, 0), "key 'x.weird' has unknown value type id 13");
    }
    SECTION("nested array") {
        bytes kvs;
        kvs.str("x.nested").u32(t_arr).u32(t_arr).u64(1).u32(t_u8).u64(1).u8(0);
        require_format_error(file(1, kvs, 0, {}, 0), "key 'x.nested' is an array of arrays");
    }
    SECTION("huge array count in a tiny file") {
        for (uint32_t element : {t_u8, t_u64, t_str}) {
            bytes kvs;
            kvs.str("x.big").u32(t_arr).u32(element).u64(uint64_t{1} << 61).zeros(16);
            require_format_error(file(1, kvs, 0, {}, 0), "key 'x.big' claims 2305843009213693952");
        }
    }
    SECTION("array element type unknown") {
        bytes kvs;
        kvs.str("x.arr").u32(t_arr).u32(99).u64(0);
        require_format_error(file(1, kvs, 0, {}, 0), "unknown value type id 99");
    }
    SECTION("alignment must be a u32 power of two") {
        bytes kvs;
        kvs.str("general.alignment").u32(t_u64).u64(32);
        require_format_error(file(1, kvs, 0, {}, 0), "must be u32");
        require_format_error(file(1, kv_u32("general.alignment", 24), 0, {}, 0), "not a power of two");
        require_format_error(file(1, kv_u32("general.alignment", 0), 0, {}, 0), "not a power of two");
    }
    SECTION("non-printable key bytes are escaped in the message") {
        bytes kvs = kv_u32(std::string_view("k\x01\xff", 3), 1);
        kvs.append(kv_u32(std::string_view("k\x01\xff", 3), 2));
        require_format_error(file(2, kvs, 0, {}, 0), "duplicate key 'k\\x01\\xff'");
    }
}

TEST_CASE("gguf: a custom alignment is honoured", "[gguf]") {
    // With alignment 64 the data section starts at the next multiple of 64, and offsets must be
    // multiples of 64 (32 is refused).
    const bytes kvs = kv_u32("general.alignment", 64);
    bytes infos = tensor_info("a", {8}, ggml_f32, 0);
    infos.append(tensor_info("b", {8}, ggml_f32, 64));
    const auto data = file(1, kvs, 2, infos, 64 + 32, 3, 64);
    const auto f = gguf_file::from_memory(data);
    CHECK(f->alignment() == 64);
    CHECK(f->tensor("b").data == data.data() + data.size() - 32);
    CHECK(static_cast<size_t>(f->tensor("a").data - data.data()) % 64 == 0);

    bytes bad = tensor_info("a", {8}, ggml_f32, 0);
    bad.append(tensor_info("b", {8}, ggml_f32, 32));
    require_format_error(file(1, kvs, 2, bad, 64, 3, 64), "tensor 'b' offset 32 is not a multiple of the alignment 64");
}

TEST_CASE("gguf: tensor info errors", "[gguf]") {
    SECTION("absurd dimension counts") {
        require_format_error(one_tensor("t", {}, ggml_f32, 0, 0), "tensor 't' has 0 dimensions");
        require_format_error(one_tensor("t", {1, 1, 1, 1, 1}, ggml_f32, 0, 4), "tensor 't' has 5 dimensions");
        bytes info;
        info.str("t").u32(0xffffffff).zeros(64);
        require_format_error(file(0, {}, 1, info, 0), "has 4294967295 dimensions");
    }
    SECTION("zero and negative dimensions") {
        require_format_error(one_tensor("t", {4, 0}, ggml_f32, 0, 0), "tensor 't' dimension 1 is 0");
        require_format_error(one_tensor("t", {-4}, ggml_f32, 0, 0), "tensor 't' dimension 0 is -4");
    }
    SECTION("element count overflow") {
        const int64_t big = int64_t{1} << 40;
        require_format_error(one_tensor("t", {big, big}, ggml_f32, 0, 64), "tensor 't' element count overflows");
        require_format_error(one_tensor("t", {2, big, big, big}, ggml_f32, 0, 64), "element count overflows");
    }
    SECTION("byte size overflow") {
        // 2^62 f32 elements fit in int64 but take 2^64 bytes.
        require_format_error(one_tensor("t", {int64_t{1} << 62}, ggml_f32, 0, 64), "tensor 't' byte size overflows");
    }
    SECTION("unknown tensor type ids") {
        for (uint32_t id : {4u, 5u, 31u, 36u, 1000u}) {
            INFO("id " << id);
            require_format_error(one_tensor("blk.0.w", {32}, id, 0, 64),
                                 "tensor 'blk.0.w' has unknown ggml type id " + std::to_string(id));
        }
    }
    SECTION("row length not a multiple of the block") {
        require_format_error(one_tensor("t", {100, 2}, 12 /* q4_K */, 0, 4096), "not a multiple of the q4_K block size 256");
    }
    SECTION("names") {
        require_format_error(one_tensor("", {4}, ggml_f32, 0, 16), "tensor #0 has an empty name");
        const std::string n64(64, 'x'), n63(63, 'y');
        require_format_error(one_tensor(n64, {4}, ggml_f32, 0, 16), "name of 64 bytes");
        CHECK(gguf_file::from_memory(one_tensor(n63, {4}, ggml_f32, 0, 16))->find_tensor(n63) != nullptr);
        bytes info;
        info.u64(uint64_t{1} << 63).zeros(40);
        require_format_error(file(0, {}, 1, info, 0), "tensor #0 name needs 9223372036854775808 bytes");
    }
    SECTION("duplicate tensor names") {
        bytes infos = tensor_info("w", {8}, ggml_f32, 0);
        infos.append(tensor_info("w", {8}, ggml_f32, 32));
        require_format_error(file(0, {}, 2, infos, 64), "duplicate tensor name 'w'");
    }
}

TEST_CASE("gguf: tensor data errors", "[gguf]") {
    SECTION("offset past the end") {
        require_format_error(one_tensor("t", {8}, ggml_f32, 64, 32), "tensor 't' data [64, +32) runs past the end");
        require_format_error(one_tensor("t", {8}, ggml_f32, 0, 31), "tensor 't' data [0, +32) runs past the end");
    }
    SECTION("offset that would wrap around") {
        const uint64_t near_max = std::numeric_limits<uint64_t>::max() - 31;  // a multiple of 32
        require_format_error(one_tensor("t", {8}, ggml_f32, near_max, 32), "runs past the end");
    }
    SECTION("misaligned offset") {
        require_format_error(one_tensor("t", {4}, ggml_f32, 16, 64), "tensor 't' offset 16 is not a multiple of the alignment 32");
    }
    SECTION("overlapping tensors") {
        bytes infos = tensor_info("first", {16}, ggml_f32, 0);    // [0, 64)
        infos.append(tensor_info("second", {8}, ggml_f32, 32));  // [32, 64)
        require_format_error(file(0, {}, 2, infos, 64), "tensors 'first' [0, +64) and 'second' [32, +32) overlap");
    }
    SECTION("tensors in any order that do not overlap are fine") {
        bytes infos = tensor_info("late", {8}, ggml_f32, 64);
        infos.append(tensor_info("early", {8}, ggml_f32, 0));
        const auto data = file(0, {}, 2, infos, 96);
        const auto f = gguf_file::from_memory(data);
        CHECK(f->tensor("late").data - f->tensor("early").data == 64);
    }
    SECTION("data section start past the end") {
        // Tensor infos end mid-block, and the file ends before the padding does.
        auto data = one_tensor("t", {1}, ggml_f32, 0, 0);
        while (data.size() % 32 == 0) data.pop_back();
        require_format_error(data, "past the end");
    }
}

TEST_CASE("gguf: getters check types and presence", "[gguf]") {
    bytes kvs = kv_u32("x.u32", 7);
    kvs.append(kv_str("x.str", "hello"));
    kvs.append(std::move(bytes{}.str("x.big").u32(t_u64).u64(std::numeric_limits<uint64_t>::max())));
    kvs.append(std::move(bytes{}.str("x.f").u32(t_f32).put<float>(0.5f)));
    kvs.append(std::move(bytes{}.str("x.b").u32(t_bool).u8(2)));  // any non-zero byte is true, as in ggml
    const auto data = file(5, kvs, 0, {}, 0);
    const auto f = gguf_file::from_memory(data);
    CHECK(f->get_int("x.u32") == 7);
    CHECK(f->get_int("x.missing", -3) == -3);
    CHECK(f->get_float("x.f") == 0.5);
    CHECK(f->get_float("x.u32") == 7.0);
    CHECK(f->get_float("x.missing", 1.5) == 1.5);
    CHECK(f->get_float("x.big") == 18446744073709551615.0);
    CHECK(f->get_bool("x.b", false));
    CHECK(f->get_bool("x.missing", true));
    CHECK(f->get_string("x.str") == "hello");
    CHECK(f->get_string("x.missing", "fb") == "fb");
    auto kind_of = [](auto &&fn) {
        try {
            fn();
        } catch (const tandem::error &e) {
            return e.kind();
        }
        return tandem::error_kind::internal;  // "did not throw"
    };
    using tandem::error_kind;
    CHECK(kind_of([&] { f->get_int("x.missing"); }) == error_kind::file_format);
    CHECK(kind_of([&] { f->get_int("x.big"); }) == error_kind::file_format);  // above INT64_MAX
    CHECK(kind_of([&] { f->get_int("x.str"); }) == error_kind::file_format);
    CHECK(kind_of([&] { f->get_int("x.f"); }) == error_kind::file_format);
    CHECK(kind_of([&] { f->get_float("x.str"); }) == error_kind::file_format);
    CHECK(kind_of([&] { f->get_bool("x.u32", false); }) == error_kind::file_format);
    CHECK(kind_of([&] { f->get_string("x.u32"); }) == error_kind::file_format);
    CHECK(kind_of([&] { f->get_string("x.u32", "fb"); }) == error_kind::file_format);
    CHECK(kind_of([&] { f->get_array("x.u32"); }) == error_kind::file_format);
    CHECK(kind_of([&] { f->tensor("nothing"); }) == error_kind::file_format);
    CHECK(f->find_tensor("nothing") == nullptr);
}

TEST_CASE("gguf: open() maps files and refuses what is not one", "[gguf]") {
    const std::string dir = TANDEM_BINARY_DIR;
    const std::string path = dir + "/test_gguf_open.gguf";
    const auto data = good_file();
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char *>(data.data()), static_cast<std::streamsize>(data.size()));
    }
    {
        const auto f = gguf_file::open(path);
        CHECK(f->path() == path);
        CHECK(f->file_bytes() == data.size());
        const auto &b = f->tensor("b");
        CHECK(std::memcmp(b.data, data.data() + data.size() - 102, 102) == 0);
    }
    auto open_error = [](const std::string &p) -> std::string {
        try {
            gguf_file::open(p);
        } catch (const tandem::error &e) {
            CHECK(e.kind() == tandem::error_kind::file_format);
            return e.what();
        }
        return "did not throw";
    };
    CHECK_THAT(open_error(dir + "/no_such_file.gguf"), Catch::Contains("no_such_file.gguf: cannot open"));
    CHECK_THAT(open_error(dir), Catch::Contains("not a regular file"));
    { std::ofstream(path, std::ios::binary | std::ios::trunc); }
    CHECK_THAT(open_error(path), Catch::Contains("truncated"));
    std::remove(path.c_str());
}
