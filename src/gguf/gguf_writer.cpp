// src/gguf/gguf_writer.cpp - the GGUF v3 writer: collects metadata and tensors, lays the file out
// like gguf-py's GGUFWriter and lets each tensor's fill callback write in place, in parallel.
#include "gguf_format.h"

#include "tandem/error.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>
#include <numeric>
#include <thread>

namespace tandem {
namespace {

namespace fmtc = gguf_format;

// Writer misuse means the file would be malformed, so it is reported like a malformed file.
template <class... Args>
[[noreturn]] void writer_fail(fmt::format_string<Args...> format, Args &&...args) {
    throw error(error_kind::file_format, "gguf writer: " + fmt::format(format, std::forward<Args>(args)...));
}

bool int_fits(gguf_type type, int64_t v) {
    switch (type) {
    case gguf_type::u8: return v >= 0 && v <= UINT8_MAX;
    case gguf_type::i8: return v >= INT8_MIN && v <= INT8_MAX;
    case gguf_type::u16: return v >= 0 && v <= UINT16_MAX;
    case gguf_type::i16: return v >= INT16_MIN && v <= INT16_MAX;
    case gguf_type::u32: return v >= 0 && v <= UINT32_MAX;
    case gguf_type::i32: return v >= INT32_MIN && v <= INT32_MAX;
    case gguf_type::boolean: return v == 0 || v == 1;
    default: return true;  // i64, and u64 kept bit-exact in int64_t
    }
}

// Checks that a value's variant matches its declared type and that integers fit it, so write()
// can encode without surprises.
void check_value(const std::string &key, const gguf_value &v) {
    if (!fmtc::is_known(static_cast<uint32_t>(v.type)))
        writer_fail("key '{}' has unknown type id {}", key, static_cast<uint32_t>(v.type));
    auto expect = [&](bool ok, std::string_view held) {
        if (!ok) writer_fail("key '{}' is declared {} but holds {}", key, gguf_type_name(v.type), held);
    };
    switch (v.type) {
    case gguf_type::f32:
    case gguf_type::f64: expect(std::holds_alternative<double>(v.data), "something other than a float"); break;
    case gguf_type::boolean: expect(std::holds_alternative<bool>(v.data), "something other than a bool"); break;
    case gguf_type::string: expect(std::holds_alternative<std::string>(v.data), "something other than a string"); break;
    case gguf_type::array: {
        expect(std::holds_alternative<gguf_array>(v.data), "something other than an array");
        const gguf_array &a = std::get<gguf_array>(v.data);
        if (!fmtc::is_known(static_cast<uint32_t>(a.type)) || a.type == gguf_type::array)
            writer_fail("key '{}' has an array of {}, which GGUF does not allow", key, gguf_type_name(a.type));
        const bool is_float = a.type == gguf_type::f32 || a.type == gguf_type::f64;
        const bool is_string = a.type == gguf_type::string;
        // Elements must sit in the vector that matches the element type (gguf.h) and nowhere else.
        if ((!is_float && !a.floats.empty()) || (!is_string && !a.strings.empty()) ||
            ((is_float || is_string) && !a.ints.empty()))
            writer_fail("key '{}' is an array of {} with elements in another type's vector", key,
                        gguf_type_name(a.type));
        for (size_t i = 0; i < a.ints.size(); ++i)
            if (!int_fits(a.type, a.ints[i]))
                writer_fail("key '{}' element {} = {} does not fit {}", key, i, a.ints[i], gguf_type_name(a.type));
        break;
    }
    default:
        expect(std::holds_alternative<int64_t>(v.data), "something other than an integer");
        if (!int_fits(v.type, std::get<int64_t>(v.data)))
            writer_fail("key '{}' = {} does not fit {}", key, std::get<int64_t>(v.data), gguf_type_name(v.type));
    }
}

// Appends little-endian fields to the metadata block.
class byte_sink {
public:
    template <class T>
    void put(T v) {
        const size_t at = bytes_.size();
        bytes_.resize(at + sizeof(T));
        std::memcpy(bytes_.data() + at, &v, sizeof(T));
    }
    void put_string(std::string_view s) {
        put<uint64_t>(s.size());
        bytes_.insert(bytes_.end(), s.begin(), s.end());
    }
    void put_int(gguf_type type, int64_t v) {
        switch (type) {
        case gguf_type::u8:
        case gguf_type::boolean: put<uint8_t>(static_cast<uint8_t>(v)); break;
        case gguf_type::i8: put<int8_t>(static_cast<int8_t>(v)); break;
        case gguf_type::u16: put<uint16_t>(static_cast<uint16_t>(v)); break;
        case gguf_type::i16: put<int16_t>(static_cast<int16_t>(v)); break;
        case gguf_type::u32: put<uint32_t>(static_cast<uint32_t>(v)); break;
        case gguf_type::i32: put<int32_t>(static_cast<int32_t>(v)); break;
        default: put<int64_t>(v); break;  // u64 and i64: same 8 bytes
        }
    }
    void put_float(gguf_type type, double v) {
        if (type == gguf_type::f32) put<float>(static_cast<float>(v));
        else put<double>(v);
    }
    void put_value(const gguf_value &v) {
        put<uint32_t>(static_cast<uint32_t>(v.type));
        switch (v.type) {
        case gguf_type::f32:
        case gguf_type::f64: put_float(v.type, std::get<double>(v.data)); break;
        case gguf_type::boolean: put<uint8_t>(std::get<bool>(v.data) ? 1 : 0); break;
        case gguf_type::string: put_string(std::get<std::string>(v.data)); break;
        case gguf_type::array: {
            const gguf_array &a = std::get<gguf_array>(v.data);
            put<uint32_t>(static_cast<uint32_t>(a.type));
            put<uint64_t>(a.size());
            for (const std::string &s : a.strings) put_string(s);
            for (double f : a.floats) put_float(a.type, f);
            for (int64_t i : a.ints) put_int(a.type, i);
            break;
        }
        default: put_int(v.type, std::get<int64_t>(v.data)); break;
        }
    }
    const std::vector<uint8_t> &bytes() const { return bytes_; }

private:
    std::vector<uint8_t> bytes_;
};

uint64_t tensor_bytes(ggml_type type, const std::vector<int64_t> &ne) {
    uint64_t n_rows = 1;
    for (size_t d = 1; d < ne.size(); ++d) n_rows *= static_cast<uint64_t>(ne[d]);  // checked in add_tensor
    return n_rows * ggml_row_bytes(type, ne[0]);
}

// Owns the file being written until it is complete: on destruction without commit() it unmaps,
// closes and removes the partial file, so a failed write leaves nothing behind.
class partial_file {
public:
    explicit partial_file(std::string final_path)
        : final_(std::move(final_path)), temp_(fmt::format("{}.partial-{}", final_, ::getpid())) {}
    ~partial_file() {
        if (map_) ::munmap(map_, size_);
        if (fd_ >= 0) ::close(fd_);
        if (created_) ::unlink(temp_.c_str());
    }

    uint8_t *create(uint64_t size) {
        // O_TRUNC, not O_EXCL: a leftover temp with our pid can only come from a dead process
        // (pids repeat in containers), and it must not block this write.
        fd_ = ::open(temp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd_ < 0) writer_fail("cannot create {}: {}", temp_, std::strerror(errno));
        created_ = true;
        size_ = size;
        // A fresh file extended by ftruncate reads as zeros, which makes every padding byte zero.
        if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
            writer_fail("cannot size {} to {} bytes: {}", temp_, size, std::strerror(errno));
        // Reserve the blocks now: a full disk then fails here with ENOSPC instead of raising SIGBUS
        // when a fill callback touches a page that cannot be backed. Filesystems without
        // fallocate (EOPNOTSUPP/EINVAL) keep the sparse file.
        const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(size));
        if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
            writer_fail("cannot reserve {} bytes for {}: {}", size, temp_, std::strerror(rc));
        void *map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
        if (map == MAP_FAILED) writer_fail("cannot map {} ({} bytes): {}", temp_, size, std::strerror(errno));
        map_ = map;
        return static_cast<uint8_t *>(map);
    }

    void commit() {
        // Start write-back and drop the mapping; the data is in the page cache, so readers see
        // the whole file at once after the rename. Durability across power loss is not a goal:
        // a model file can be written again.
        if (::msync(map_, size_, MS_ASYNC) != 0) writer_fail("msync {}: {}", temp_, std::strerror(errno));
        ::munmap(map_, size_);
        map_ = nullptr;
        if (::close(fd_) != 0) {
            fd_ = -1;
            writer_fail("close {}: {}", temp_, std::strerror(errno));
        }
        fd_ = -1;
        if (::rename(temp_.c_str(), final_.c_str()) != 0)
            writer_fail("cannot rename {} to {}: {}", temp_, final_, std::strerror(errno));
        created_ = false;
    }

private:
    std::string final_, temp_;
    int fd_ = -1;
    bool created_ = false;
    void *map_ = nullptr;
    uint64_t size_ = 0;
};

}  // namespace

void gguf_writer::set_value(const std::string &key, gguf_value v) {
    if (key.empty()) writer_fail("empty key");
    check_value(key, v);
    for (gguf_kv &kv : kvs_)
        if (kv.key == key) {
            kv.value = std::move(v);  // replaced in place: keeps the order of first insertion
            return;
        }
    kvs_.push_back(gguf_kv{key, std::move(v)});
}

void gguf_writer::set_u32(const std::string &key, uint32_t v) { set_value(key, {gguf_type::u32, int64_t{v}}); }
void gguf_writer::set_i32(const std::string &key, int32_t v) { set_value(key, {gguf_type::i32, int64_t{v}}); }
void gguf_writer::set_u64(const std::string &key, uint64_t v) {
    set_value(key, {gguf_type::u64, static_cast<int64_t>(v)});
}
void gguf_writer::set_f32(const std::string &key, float v) { set_value(key, {gguf_type::f32, double{v}}); }
void gguf_writer::set_bool(const std::string &key, bool v) { set_value(key, {gguf_type::boolean, v}); }
void gguf_writer::set_string(const std::string &key, const std::string &v) {
    set_value(key, {gguf_type::string, v});
}

void gguf_writer::set_array_string(const std::string &key, std::vector<std::string> v) {
    gguf_array a;
    a.type = gguf_type::string;
    a.strings = std::move(v);
    set_value(key, {gguf_type::array, std::move(a)});
}

void gguf_writer::set_array_i32(const std::string &key, std::vector<int32_t> v) {
    gguf_array a;
    a.type = gguf_type::i32;
    a.ints.assign(v.begin(), v.end());
    set_value(key, {gguf_type::array, std::move(a)});
}

void gguf_writer::set_array_f32(const std::string &key, std::vector<float> v) {
    gguf_array a;
    a.type = gguf_type::f32;
    a.floats.assign(v.begin(), v.end());
    set_value(key, {gguf_type::array, std::move(a)});
}

void gguf_writer::add_tensor(const std::string &name, ggml_type type, std::vector<int64_t> ne, fill_fn fill) {
    if (name.empty()) writer_fail("empty tensor name");
    if (name.size() > fmtc::max_tensor_name)
        writer_fail("tensor name '{}' has {} bytes; ggml allows at most {}", name, name.size(), fmtc::max_tensor_name);
    for (const pending_tensor &t : tensors_)
        if (t.name == name) writer_fail("duplicate tensor name '{}'", name);
    const auto traits = ggml_type_info(static_cast<uint32_t>(type));
    if (!traits) writer_fail("tensor '{}' has unknown ggml type id {}", name, static_cast<uint32_t>(type));
    if (ne.empty() || ne.size() > fmtc::max_dims)
        writer_fail("tensor '{}' has {} dimensions; 1 to {} are allowed", name, ne.size(), fmtc::max_dims);
    uint64_t n_elements = 1;
    for (size_t d = 0; d < ne.size(); ++d) {
        if (ne[d] < 1) writer_fail("tensor '{}' dimension {} is {}; must be at least 1", name, d, ne[d]);
        if (__builtin_mul_overflow(n_elements, static_cast<uint64_t>(ne[d]), &n_elements) ||
            n_elements > static_cast<uint64_t>(INT64_MAX))
            writer_fail("tensor '{}' element count overflows", name);
    }
    if (ne[0] % traits->block_elems != 0)
        writer_fail("tensor '{}' rows of {} elements are not a multiple of the {} block size {}", name, ne[0],
                    traits->name, traits->block_elems);
    uint64_t n_bytes = 0;
    if (__builtin_mul_overflow(n_elements / traits->block_elems, static_cast<uint64_t>(traits->block_bytes), &n_bytes))
        writer_fail("tensor '{}' byte size overflows", name);
    if (!fill) writer_fail("tensor '{}' has no fill callback", name);
    tensors_.push_back(pending_tensor{name, type, std::move(ne), std::move(fill)});
}

std::vector<std::string> gguf_writer::write(const std::string &path, int n_threads, uint64_t max_split_bytes) const {
    std::vector<size_t> all(tensors_.size());
    std::iota(all.begin(), all.end(), size_t{0});
    std::vector<std::vector<size_t>> parts;
    if (max_split_bytes > 0) {
        // gguf-split's rule: a new part when the next tensor would push this one past the limit.
        uint64_t part_bytes = 0;
        for (size_t i = 0; i < tensors_.size(); ++i) {
            const uint64_t n = tensor_bytes(tensors_[i].type, tensors_[i].ne);
            if (parts.empty() || (!parts.back().empty() && part_bytes + n > max_split_bytes)) {
                parts.emplace_back();
                part_bytes = 0;
            }
            parts.back().push_back(i);
            part_bytes += n;
        }
    }
    if (parts.size() <= 1) {
        write_part(path, kvs_, all, n_threads);
        return {path};
    }
    if (parts.size() > 99999) writer_fail("{} parts: at most 99999 are allowed", parts.size());
    const std::string prefix = path.ends_with(".gguf") ? path.substr(0, path.size() - 5) : path;
    const int count = static_cast<int>(parts.size());
    auto split_keys = [&](int no) {
        return std::vector<gguf_kv>{{"split.no", {gguf_type::u16, int64_t{no}}},
                                    {"split.count", {gguf_type::u16, int64_t{count}}},
                                    {"split.tensors.count", {gguf_type::i32, static_cast<int64_t>(tensors_.size())}}};
    };
    std::vector<std::string> paths;
    for (int no = 0; no < count; ++no) {
        std::vector<gguf_kv> kvs = no == 0 ? kvs_ : std::vector<gguf_kv>{};
        const std::vector<gguf_kv> keys = split_keys(no);
        // The first part's metadata: llama.cpp's split keys right after general.*, like gguf-split.
        if (no == 0) {
            size_t at = 0;
            while (at < kvs.size() && kvs[at].key.starts_with("general.")) ++at;
            kvs.insert(kvs.begin() + static_cast<std::ptrdiff_t>(at), keys.begin(), keys.end());
        } else {
            kvs = keys;
        }
        paths.push_back(gguf_split_path(prefix, no, count));
        write_part(paths.back(), kvs, parts[static_cast<size_t>(no)], n_threads);
    }
    return paths;
}

void gguf_writer::write_part(const std::string &path, const std::vector<gguf_kv> &kvs, const std::vector<size_t> &tensors,
                             int n_threads) const {
    uint64_t alignment = fmtc::default_alignment;
    for (const gguf_kv &kv : kvs)
        if (kv.key == fmtc::alignment_key) {
            const auto a = static_cast<uint64_t>(kv.value.type == gguf_type::u32 ? std::get<int64_t>(kv.value.data) : 0);
            if (a == 0 || (a & (a - 1)) != 0) writer_fail("'{}' must be a u32 power of two", fmtc::alignment_key);
            alignment = a;
        }

    // ---- layout: header, KVs, tensor infos, padding, then each tensor padded to the alignment ----
    byte_sink meta;
    meta.put<uint32_t>(fmtc::magic);
    meta.put<uint32_t>(fmtc::version_written);
    meta.put<uint64_t>(tensors.size());
    meta.put<uint64_t>(kvs.size());
    for (const gguf_kv &kv : kvs) {
        meta.put_string(kv.key);
        meta.put_value(kv.value);
    }
    std::vector<uint64_t> offsets(tensors_.size());
    uint64_t data_size = 0;
    for (size_t i : tensors) {
        const pending_tensor &t = tensors_[i];
        meta.put_string(t.name);
        meta.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
        for (int64_t d : t.ne) meta.put<uint64_t>(static_cast<uint64_t>(d));
        meta.put<uint32_t>(static_cast<uint32_t>(t.type));
        meta.put<uint64_t>(data_size);
        offsets[i] = data_size;
        // gguf-py pads after every tensor, the last one included; ggml's reader counts that
        // padding in the data section size when it loads the data into memory.
        const uint64_t padded = fmtc::align_up(tensor_bytes(t.type, t.ne), alignment);
        if (__builtin_add_overflow(data_size, padded, &data_size)) writer_fail("file size overflows");
    }
    const uint64_t data_start = tensors.empty() ? meta.bytes().size() : fmtc::align_up(meta.bytes().size(), alignment);
    uint64_t total = 0;
    if (__builtin_add_overflow(data_start, data_size, &total)) writer_fail("file size overflows");

    // ---- the file: sized, mapped, metadata copied, tensors filled in parallel ----
    partial_file file(path);
    uint8_t *base = file.create(total);
    std::memcpy(base, meta.bytes().data(), meta.bytes().size());

    // Largest tensors first, so a few big ones do not end up alone at the tail.
    std::vector<size_t> order = tensors;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return tensor_bytes(tensors_[a].type, tensors_[a].ne) > tensor_bytes(tensors_[b].type, tensors_[b].ne);
    });
    int threads = n_threads > 0 ? n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<size_t>(tensors.size(), 1))));

    // Exceptions must not leave an OpenMP region: the first one is kept and rethrown after it.
    std::exception_ptr first_error;
    std::atomic<bool> failed{false};
    const auto n_tensors = static_cast<int64_t>(order.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t k = 0; k < n_tensors; ++k) {
        if (failed.load(std::memory_order_relaxed)) continue;
        const size_t i = order[static_cast<size_t>(k)];
        try {
            tensors_[i].fill(base + data_start + offsets[i]);
        } catch (...) {
#pragma omp critical(tandem_gguf_writer_error)
            {
                if (!first_error) first_error = std::current_exception();
            }
            failed.store(true, std::memory_order_relaxed);
        }
    }
    if (first_error) std::rethrow_exception(first_error);
    file.commit();
}

}  // namespace tandem
