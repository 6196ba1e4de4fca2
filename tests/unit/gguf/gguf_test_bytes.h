// tests/unit/gguf/gguf_test_bytes.h - a hand encoder of GGUF bytes for tests, written from the
// format description (not from the writer), so it can build malformed files and cross-check
// the writer's layout.
#pragma once

#include "tandem/error.h"
#include "tandem/gguf.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gguf_test {

struct bytes {
    std::vector<uint8_t> b;

    template <class T>
    bytes &put(T v) {
        const size_t at = b.size();
        b.resize(at + sizeof(T));
        std::memcpy(b.data() + at, &v, sizeof(T));
        return *this;
    }
    bytes &u8(uint8_t v) { return put(v); }
    bytes &u32(uint32_t v) { return put(v); }
    bytes &u64(uint64_t v) { return put(v); }
    bytes &i64(int64_t v) { return put(v); }
    bytes &str(std::string_view s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    bytes &append(const bytes &o) {
        b.insert(b.end(), o.b.begin(), o.b.end());
        return *this;
    }
    bytes &zeros(size_t n) {
        b.resize(b.size() + n, 0);
        return *this;
    }
    bytes &pad_to(size_t alignment) { return zeros((alignment - b.size() % alignment) % alignment); }
};

// GGUF value type ids (the file format's numbers, spelled out here on purpose).
enum : uint32_t { t_u8 = 0, t_i8, t_u16, t_i16, t_u32, t_i32, t_f32, t_bool, t_str, t_arr, t_u64, t_i64, t_f64 };

inline bytes kv_u32(std::string_view key, uint32_t v) { return std::move(bytes{}.str(key).u32(t_u32).u32(v)); }
inline bytes kv_str(std::string_view key, std::string_view v) { return std::move(bytes{}.str(key).u32(t_str).str(v)); }

inline bytes tensor_info(std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    bytes t;
    t.str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) t.i64(d);
    t.u32(type).u64(offset);
    return t;
}

// A whole file: header, the given KV and tensor-info bytes, padding to `alignment`, then
// `data_bytes` bytes of tensor data (filled with a counting pattern).
inline std::vector<uint8_t> file(uint64_t n_kv, const bytes &kvs, uint64_t n_tensors, const bytes &infos,
                                 size_t data_bytes, uint32_t version = 3, size_t alignment = 32) {
    bytes f;
    f.u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv).append(kvs).append(infos);
    if (n_tensors > 0) f.pad_to(alignment);
    for (size_t i = 0; i < data_bytes; ++i) f.u8(static_cast<uint8_t>(i * 7 + 1));
    return f.b;
}

// Parses a copy of exactly these bytes (so a sanitizer sees any read past the end) and requires a
// file_format error whose message contains `needle`.
inline void require_format_error(const std::vector<uint8_t> &data, std::string_view needle) {
    const std::vector<uint8_t> copy(data);
    try {
        tandem::gguf_file::from_memory(copy);
        FAIL("accepted a malformed file; expected an error containing '" << needle << "'");
    } catch (const tandem::error &e) {
        INFO("message: " << e.what());
        CHECK(e.kind() == tandem::error_kind::file_format);
        CHECK(std::string_view(e.what()).find(needle) != std::string_view::npos);
    }
}

}  // namespace gguf_test
