// tandem/gguf.h - GGUF v3 files: a validating mmap reader and a parallel writer.
// Format: llama.cpp's gguf (magic "GGUF", version 3, little-endian, KV pairs, tensor infos,
// data section aligned to general.alignment, default 32).
#pragma once

#include "tandem/types.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace tandem {

enum class gguf_type : uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
    string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view gguf_type_name(gguf_type type);

// An array value: element type plus the elements, widened (all integers to int64_t except u64
// kept bit-exact in int64_t, floats to double). Nested arrays are rejected by the reader.
struct gguf_array {
    gguf_type type = gguf_type::u8;
    std::vector<int64_t> ints;         // u8..i64, bool
    std::vector<double> floats;        // f32, f64
    std::vector<std::string> strings;  // string
    size_t size() const;
};

struct gguf_value {
    gguf_type type = gguf_type::u8;
    std::variant<int64_t, double, bool, std::string, gguf_array> data;
};

struct gguf_kv {
    std::string key;
    gguf_value value;
};

struct gguf_tensor_info {
    std::string name;
    ggml_type type = ggml_type::f32;
    std::vector<int64_t> ne;     // ggml order: ne[0] is the row length (contiguous), up to 4 dims
    uint64_t offset = 0;         // relative to the start of the data section
    uint64_t n_bytes = 0;        // exact size of the tensor data
    const uint8_t *data = nullptr;  // into the mapping (reader only)

    int64_t n_elements() const;
    int64_t n_rows() const { return ne.empty() ? 0 : n_elements() / ne[0]; }
};

// A validated, read-only GGUF file. The tensor data stays in the mapping (or the given buffer).
class gguf_file {
public:
    // Opens and validates; throws tandem::error(file_format) naming the bad key or tensor.
    // A split model (llama.cpp's gguf-split: split.no, split.count, split.tensors.count; files
    // PREFIX-00001-of-0000N.gguf ...) is opened by naming its first file: the others are found
    // beside it, each mapped and validated, and checked to belong to the same set; the result
    // holds the first file's metadata and every part's tensors.
    static std::shared_ptr<const gguf_file> open(const std::string &path);
    // Validates a file held in memory (fuzzing, tests); `bytes` must outlive the result.
    static std::shared_ptr<const gguf_file> from_memory(std::span<const uint8_t> bytes);

    ~gguf_file();
    gguf_file(const gguf_file &) = delete;
    gguf_file &operator=(const gguf_file &) = delete;

    const std::string &path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t file_bytes() const;                 // all parts of a split model
    size_t n_parts() const { return parts_.size() + 1; }
    const std::vector<gguf_kv> &kvs() const { return kvs_; }
    const std::vector<gguf_tensor_info> &tensors() const { return tensors_; }

    const gguf_value *find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // Typed getters: throw file_format naming the key when missing or of another type.
    // Integer getters accept any integer type whose value fits.
    int64_t get_int(std::string_view key) const;
    int64_t get_int(std::string_view key, int64_t fallback) const;
    double get_float(std::string_view key) const;   // f32/f64 (and integers)
    double get_float(std::string_view key, double fallback) const;
    bool get_bool(std::string_view key, bool fallback) const;
    const std::string &get_string(std::string_view key) const;
    std::string get_string(std::string_view key, const std::string &fallback) const;
    const gguf_array &get_array(std::string_view key) const;

    const gguf_tensor_info *find_tensor(std::string_view name) const;
    const gguf_tensor_info &tensor(std::string_view name) const;  // throws naming it

private:
    gguf_file() = default;
    void parse();
    static std::shared_ptr<gguf_file> open_one(const std::string &path);
    void join_parts();

    std::string path_;
    std::span<const uint8_t> bytes_;
    void *map_ = nullptr;       // mmap base when opened from a path
    size_t map_bytes_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    std::vector<gguf_kv> kvs_;
    std::vector<gguf_tensor_info> tensors_;
    // Lookups by name; the views point into kvs_ / tensors_, which never change after parse().
    std::unordered_map<std::string_view, size_t> kv_index_;
    std::unordered_map<std::string_view, size_t> tensor_index_;
    std::vector<std::shared_ptr<const gguf_file>> parts_;  // the other files of a split model, in order
};

// llama.cpp's split file names: PREFIX-00002-of-00005.gguf for split_no 1 of 5.
std::string gguf_split_path(const std::string &prefix, int split_no, int split_count);
// llama-gguf-split's --split-max-size: a whole number with M (10^6 bytes) or G (10^9 bytes).
// Throws error(config) naming the text otherwise.
uint64_t gguf_parse_split_size(const std::string &text);

// Writes a GGUF v3 file. Metadata and tensor infos are collected first; write() lays out the
// file, sizes it, maps it and lets every tensor's fill callback write its bytes in place, in
// parallel across tensors (so a 17 GB synthetic model is written at memory speed).
class gguf_writer {
public:
    // Receives the destination of exactly ggml_row_bytes(type, ne[0]) * n_rows bytes.
    using fill_fn = std::function<void(uint8_t *dst)>;

    void set_u32(const std::string &key, uint32_t v);
    void set_i32(const std::string &key, int32_t v);
    void set_u64(const std::string &key, uint64_t v);
    void set_f32(const std::string &key, float v);
    void set_bool(const std::string &key, bool v);
    void set_string(const std::string &key, const std::string &v);
    void set_array_string(const std::string &key, std::vector<std::string> v);
    void set_array_i32(const std::string &key, std::vector<int32_t> v);
    void set_array_f32(const std::string &key, std::vector<float> v);
    void set_value(const std::string &key, gguf_value v);  // any value (copying metadata)

    // ne in ggml order (ne[0] = row length). Throws on a duplicate name or a row length that is
    // not a multiple of the type's block size.
    void add_tensor(const std::string &name, ggml_type type, std::vector<int64_t> ne, fill_fn fill);

    // n_threads <= 0: hardware concurrency. max_split_bytes > 0 writes llama.cpp's split format
    // when the tensors do not fit one part of that many bytes: parts filled in tensor order (a
    // tensor larger than the limit gets a part of its own), named gguf_split_path(path without
    // ".gguf", i, n); the first holds all metadata, every part split.no/count/tensors.count.
    // Returns the paths written.
    std::vector<std::string> write(const std::string &path, int n_threads = 0, uint64_t max_split_bytes = 0) const;

private:
    struct pending_tensor {
        std::string name;
        ggml_type type;
        std::vector<int64_t> ne;
        fill_fn fill;
    };
    void write_part(const std::string &path, const std::vector<gguf_kv> &kvs, const std::vector<size_t> &tensors,
                    int n_threads) const;
    std::vector<gguf_kv> kvs_;
    std::vector<pending_tensor> tensors_;
};

}  // namespace tandem
