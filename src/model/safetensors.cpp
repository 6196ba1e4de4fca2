// src/model/safetensors.cpp - reads safetensors checkpoints: one file or an indexed set of shards,
// mapped read-only, every header entry validated against the file before any data is touched.
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
// then the data; offsets are relative to the end of the header.
#include "tandem/convert.h"

#include "tandem/error.h"
#include "tandem/quant.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

namespace tandem {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char *st_dtype_name(st_dtype dtype) {
    switch (dtype) {
    case st_dtype::f32: return "F32";
    case st_dtype::f16: return "F16";
    case st_dtype::bf16: return "BF16";
    case st_dtype::f8_e4m3: return "F8_E4M3";
    }
    return "?";
}

size_t st_dtype_bytes(st_dtype dtype) {
    switch (dtype) {
    case st_dtype::f32: return 4;
    case st_dtype::f16: case st_dtype::bf16: return 2;
    case st_dtype::f8_e4m3: return 1;
    }
    return 0;
}

int64_t st_tensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // validated on open: no overflow
    return n;
}

namespace {

// A dimension beyond 2^40 elements is not a real checkpoint; the bound keeps products checkable.
constexpr int64_t max_dim = int64_t(1) << 40;

st_dtype parse_dtype(const std::string &path, const std::string &name, const json &v) {
    if (!v.is_string()) fail(error_kind::file_format, "{}: tensor '{}': dtype is not a string", path, name);
    const std::string s = v.get<std::string>();
    if (s == "F32") return st_dtype::f32;
    if (s == "F16") return st_dtype::f16;
    if (s == "BF16") return st_dtype::bf16;
    if (s == "F8_E4M3") return st_dtype::f8_e4m3;
    fail(error_kind::unsupported, "{}: tensor '{}' has dtype {}; the converter reads F32, F16, BF16 and F8_E4M3",
         path, name, s);
}

// A non-negative integer from the header (shape entries, offsets), rejecting floats and negatives.
uint64_t parse_index(const std::string &path, const std::string &name, const char *what, const json &v,
                     uint64_t max) {
    if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0))
        fail(error_kind::file_format, "{}: tensor '{}': {} must be non-negative integers", path, name, what);
    const uint64_t u = v.get<uint64_t>();
    if (u > max) fail(error_kind::file_format, "{}: tensor '{}': {} value {} is too large", path, name, what, u);
    return u;
}

// OCP E4M3FN: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
float fp8_e4m3_to_fp32(uint8_t v) {
    const int exponent = (v >> 3) & 0xf, mantissa = v & 0x7;
    const float sign = (v & 0x80) ? -1.0f : 1.0f;
    if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
    if (exponent == 0) return sign * std::ldexp(float(mantissa), -9);  // subnormal: m/8 * 2^-6
    return sign * std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
}

}  // namespace

std::unique_ptr<safetensors_file> safetensors_file::open(const std::string &path) {
    std::unique_ptr<safetensors_file> f(new safetensors_file());
    f->path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(error_kind::file_format, "{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        fail(error_kind::file_format, "{}: cannot stat: {}", path, std::strerror(e));
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < 8) {
        ::close(fd);
        fail(error_kind::file_format, "{}: {} bytes, shorter than the 8-byte header length", path, size);
    }
    void *map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) fail(error_kind::file_format, "{}: cannot map: {}", path, std::strerror(errno));
    f->map_ = map;
    f->map_bytes_ = size;
    const auto *base = static_cast<const uint8_t *>(map);

    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian
    if (header_len > size - 8)
        fail(error_kind::file_format, "{}: header of {} bytes runs past the end of the file ({} bytes)", path,
             header_len, size);
    const uint8_t *data = base + 8 + header_len;
    const uint64_t data_bytes = size - 8 - header_len;

    json header;
    try {
        header = json::parse(base + 8, base + 8 + header_len);
    } catch (const json::exception &e) {
        fail(error_kind::file_format, "{}: header is not valid JSON: {}", path, e.what());
    }
    if (!header.is_object()) fail(error_kind::file_format, "{}: header is not a JSON object", path);

    for (const auto &[name, v] : header.items()) {
        if (name == "__metadata__") continue;  // free-form string map ("format": "pt")
        if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
            fail(error_kind::file_format, "{}: tensor '{}' needs dtype, shape and data_offsets", path, name);
        st_tensor t;
        t.name = name;
        t.file = path;
        t.dtype = parse_dtype(path, name, v["dtype"]);
        const json &shape = v["shape"];
        if (!shape.is_array() || shape.size() > 8)
            fail(error_kind::file_format, "{}: tensor '{}': shape must be an array of at most 8 dims", path, name);
        uint64_t n = 1;
        for (const json &d : shape) {
            const uint64_t dim = parse_index(path, name, "shape", d, max_dim);
            t.shape.push_back(static_cast<int64_t>(dim));
            if (__builtin_mul_overflow(n, dim, &n) || n > uint64_t(max_dim))
                fail(error_kind::file_format, "{}: tensor '{}': shape has too many elements", path, name);
        }
        const json &off = v["data_offsets"];
        if (!off.is_array() || off.size() != 2)
            fail(error_kind::file_format, "{}: tensor '{}': data_offsets must be [begin, end]", path, name);
        const uint64_t begin = parse_index(path, name, "data_offsets", off[0], std::numeric_limits<uint64_t>::max());
        const uint64_t end = parse_index(path, name, "data_offsets", off[1], std::numeric_limits<uint64_t>::max());
        if (begin > end || end > data_bytes)
            fail(error_kind::file_format,
                 "{}: tensor '{}': data_offsets [{}, {}] lie outside the {} data bytes of the file", path, name,
                 begin, end, data_bytes);
        const uint64_t want = n * st_dtype_bytes(t.dtype);  // n <= 2^40: no overflow
        if (end - begin != want)
            fail(error_kind::file_format, "{}: tensor '{}': {} {} elements need {} bytes, data_offsets give {}",
                 path, name, n, st_dtype_name(t.dtype), want, end - begin);
        t.data = data + begin;
        t.n_bytes = want;
        f->tensors_.push_back(std::move(t));
    }
    return f;
}

safetensors_file::~safetensors_file() {
    if (map_) ::munmap(map_, map_bytes_);
}

namespace {

json read_index(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(error_kind::file_format, "{}: cannot open", path);
    try {
        return json::parse(in);
    } catch (const json::exception &e) {
        fail(error_kind::file_format, "{}: not valid JSON: {}", path, e.what());
    }
}

}  // namespace

safetensors_set safetensors_set::open_dir(const std::string &dir) {
    safetensors_set set;
    const fs::path root(dir);
    const fs::path index_path = root / "model.safetensors.index.json";
    std::map<std::string, std::string> weight_map;  // tensor -> shard file name
    std::vector<std::string> files;

    if (fs::exists(index_path)) {
        const json index = read_index(index_path.string());
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
            fail(error_kind::file_format, "{}: no weight_map object", index_path.string());
        std::set<std::string> seen;
        for (const auto &[name, file] : index["weight_map"].items()) {
            if (!file.is_string())
                fail(error_kind::file_format, "{}: weight_map['{}'] is not a file name", index_path.string(), name);
            const std::string fname = file.get<std::string>();
            // Shards live beside the index; a path that climbs out of the folder is not a checkpoint.
            if (fname.empty() || fname.find("..") != std::string::npos || fname.front() == '/')
                fail(error_kind::file_format, "{}: weight_map['{}'] names an invalid file '{}'",
                     index_path.string(), name, fname);
            weight_map[name] = fname;
            if (seen.insert(fname).second) files.push_back(fname);
        }
        if (files.empty()) fail(error_kind::file_format, "{}: weight_map is empty", index_path.string());
    } else if (fs::exists(root / "model.safetensors")) {
        files.push_back("model.safetensors");
    } else {
        if (!fs::is_directory(root)) fail(error_kind::file_format, "{}: not a folder", dir);
        for (const auto &entry : fs::directory_iterator(root))
            if (entry.path().extension() == ".safetensors") files.push_back(entry.path().filename().string());
        std::sort(files.begin(), files.end());
        if (files.empty())
            fail(error_kind::file_format, "{}: no model.safetensors, model.safetensors.index.json or *.safetensors",
                 dir);
    }

    for (const std::string &fname : files) {
        const fs::path p = root / fname;
        if (!fs::exists(p)) fail(error_kind::file_format, "{}: shard named by the index is missing", p.string());
        std::shared_ptr<safetensors_file> f = safetensors_file::open(p.string());
        for (const st_tensor &t : f->tensors()) {
            auto [it, inserted] = set.by_name_.emplace(t.name, &t);
            if (!inserted)
                fail(error_kind::file_format, "tensor '{}' is in both {} and {}", t.name, it->second->file, t.file);
            auto w = weight_map.find(t.name);
            if (!weight_map.empty() && w != weight_map.end() && w->second != fname)
                fail(error_kind::file_format, "tensor '{}' is in {} but the index puts it in {}", t.name, p.string(),
                     w->second);
        }
        set.files_.push_back(std::move(f));
    }
    for (const auto &[name, fname] : weight_map)
        if (!set.by_name_.count(name))
            fail(error_kind::file_format, "{}: the index puts tensor '{}' there but the file does not hold it",
                 (root / fname).string(), name);
    return set;
}

const st_tensor *safetensors_set::find(const std::string &name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
}

const st_tensor &safetensors_set::require(const std::string &name, const std::vector<int64_t> &shape) const {
    const st_tensor *t = find(name);
    if (!t) fail(error_kind::file_format, "checkpoint is missing tensor '{}'", name);
    if (t->shape != shape)
        fail(error_kind::file_format, "{}: tensor '{}' has shape [{}], expected [{}]", t->file, name,
             fmt::join(t->shape, ", "), fmt::join(shape, ", "));
    return *t;
}

void st_read_f32(const st_tensor &t, int64_t first, int64_t n, float *dst) {
    TANDEM_ASSERT(first >= 0 && n >= 0 && first + n <= t.n_elements(), "read past tensor '{}'", t.name);
    const size_t eb = st_dtype_bytes(t.dtype);
    const uint8_t *src = t.data + size_t(first) * eb;
    // Offsets in safetensors are not aligned to the element size: copy through memcpy.
    switch (t.dtype) {
    case st_dtype::f32: std::memcpy(dst, src, size_t(n) * 4); break;
    case st_dtype::f16:
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            dst[i] = fp16_to_fp32(h);
        }
        break;
    case st_dtype::bf16:
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            dst[i] = bf16_to_fp32(h);
        }
        break;
    case st_dtype::f8_e4m3:
        for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_fp32(src[i]);
        break;
    }
}

}  // namespace tandem
