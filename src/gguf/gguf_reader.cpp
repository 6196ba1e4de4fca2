// src/gguf/gguf_reader.cpp - the validating GGUF reader: mmap, parse and check every field,
// typed getters. Owns the rule that nothing from a file is used before it is bounds-checked.
#include "gguf_format.h"

#include "tandem/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

namespace tandem {
namespace {

namespace fmtc = gguf_format;

// The smallest encodings of one KV pair (key length, a 1-byte key, type, a u8 value) and one
// tensor info (name length, a 1-byte name, n_dims, one dimension, type, offset). Counts that
// the remaining bytes could not hold are refused before anything is reserved, so a header that
// claims 2^60 entries fails at once instead of allocating.
constexpr uint64_t min_kv_bytes = 8 + 1 + 4 + 1;
constexpr uint64_t min_tensor_info_bytes = 8 + 1 + 4 + 8 + 4 + 8;

// Reads little-endian fields; every read is bounds-checked and a short one names the file, the
// item (key or tensor) and the field.
class cursor {
public:
    cursor(std::span<const uint8_t> bytes, const std::string &file) : bytes_(bytes), file_(file) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return bytes_.size() - pos_; }

    void need(uint64_t n, std::string_view item, std::string_view field) const {
        if (n > remaining())
            fail(error_kind::file_format, "{}: truncated: {} {} needs {} bytes at offset {}, the file has {} left",
                 file_, item, field, n, pos_, remaining());
    }

    template <class T>
    T read(std::string_view item, std::string_view field) {
        need(sizeof(T), item, field);
        T value;
        std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return value;
    }

    std::string read_string(std::string_view item, std::string_view field) {
        const auto n = read<uint64_t>(item, field);
        need(n, item, field);  // a length past the end fails here, before the copy
        std::string s(reinterpret_cast<const char *>(bytes_.data() + pos_), static_cast<size_t>(n));
        pos_ += n;
        return s;
    }

private:
    std::span<const uint8_t> bytes_;
    const std::string &file_;
    uint64_t pos_ = 0;
};

int64_t read_integer(cursor &c, gguf_type type, std::string_view item, std::string_view field) {
    switch (type) {
    case gguf_type::u8: return c.read<uint8_t>(item, field);
    case gguf_type::i8: return c.read<int8_t>(item, field);
    case gguf_type::u16: return c.read<uint16_t>(item, field);
    case gguf_type::i16: return c.read<int16_t>(item, field);
    case gguf_type::u32: return c.read<uint32_t>(item, field);
    case gguf_type::i32: return c.read<int32_t>(item, field);
    case gguf_type::i64: return c.read<int64_t>(item, field);
    // u64 is kept bit-exact in int64_t (gguf.h); get_int refuses values above INT64_MAX.
    case gguf_type::u64: return static_cast<int64_t>(c.read<uint64_t>(item, field));
    default: break;
    }
    TANDEM_ASSERT(false, "read_integer called with {}", gguf_type_name(type));
}

double read_float(cursor &c, gguf_type type, std::string_view item, std::string_view field) {
    if (type == gguf_type::f32) return c.read<float>(item, field);
    return c.read<double>(item, field);
}

gguf_array read_array(cursor &c, const std::string &file, std::string_view item) {
    gguf_array array;
    const auto element_id = c.read<uint32_t>(item, "array element type");
    if (!fmtc::is_known(element_id))
        fail(error_kind::file_format, "{}: {} has an array of unknown value type id {}", file, item, element_id);
    array.type = static_cast<gguf_type>(element_id);
    if (array.type == gguf_type::array)
        fail(error_kind::file_format, "{}: {} is an array of arrays, which GGUF does not allow", file, item);

    const auto n = c.read<uint64_t>(item, "array count");
    // A string element takes at least its 8-byte length.
    const uint64_t min_element = array.type == gguf_type::string ? 8 : fmtc::scalar_bytes(element_id);
    if (n > c.remaining() / min_element)
        fail(error_kind::file_format, "{}: {} claims {} {} elements (at least {} bytes each) but only {} bytes are left",
             file, item, n, gguf_type_name(array.type), min_element, c.remaining());

    if (array.type == gguf_type::string) {
        array.strings.reserve(n);
        for (uint64_t i = 0; i < n; ++i) array.strings.push_back(c.read_string(item, "array string"));
    } else if (array.type == gguf_type::f32 || array.type == gguf_type::f64) {
        array.floats.reserve(n);
        for (uint64_t i = 0; i < n; ++i) array.floats.push_back(read_float(c, array.type, item, "array element"));
    } else if (array.type == gguf_type::boolean) {
        array.ints.reserve(n);
        for (uint64_t i = 0; i < n; ++i) array.ints.push_back(c.read<uint8_t>(item, "array element") != 0);
    } else {
        array.ints.reserve(n);
        for (uint64_t i = 0; i < n; ++i) array.ints.push_back(read_integer(c, array.type, item, "array element"));
    }
    return array;
}

gguf_value read_value(cursor &c, const std::string &file, std::string_view item) {
    const auto type_id = c.read<uint32_t>(item, "value type");
    if (!fmtc::is_known(type_id))
        fail(error_kind::file_format, "{}: {} has unknown value type id {}", file, item, type_id);
    gguf_value value;
    value.type = static_cast<gguf_type>(type_id);
    switch (value.type) {
    case gguf_type::f32:
    case gguf_type::f64: value.data = read_float(c, value.type, item, "value"); break;
    // ggml reads a bool as a byte and treats any non-zero byte as true; so do we.
    case gguf_type::boolean: value.data = c.read<uint8_t>(item, "value") != 0; break;
    case gguf_type::string: value.data = c.read_string(item, "value"); break;
    case gguf_type::array: value.data = read_array(c, file, item); break;
    default: value.data = read_integer(c, value.type, item, "value"); break;
    }
    return value;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

std::shared_ptr<const gguf_file> gguf_file::open(const std::string &path) {
    std::shared_ptr<gguf_file> file = open_one(path);
    file->join_parts();
    return file;
}

std::shared_ptr<gguf_file> gguf_file::open_one(const std::string &path) {
    std::shared_ptr<gguf_file> file(new gguf_file());
    file->path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(error_kind::file_format, "{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        fail(error_kind::file_format, "{}: cannot stat: {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(error_kind::file_format, "{}: not a regular file", path);
    }
    const auto size = static_cast<size_t>(st.st_size);
    if (size > 0) {
        void *map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        const int err = errno;
        ::close(fd);  // the mapping keeps the file alive
        if (map == MAP_FAILED) fail(error_kind::file_format, "{}: cannot map {} bytes: {}", path, size, std::strerror(err));
        file->map_ = map;
        file->map_bytes_ = size;
        file->bytes_ = std::span<const uint8_t>(static_cast<const uint8_t *>(map), size);
    } else {
        ::close(fd);  // an empty file fails in parse() as truncated
    }
    file->parse();
    return file;
}

uint64_t gguf_file::file_bytes() const {
    uint64_t total = bytes_.size();
    for (const auto &part : parts_) total += part->file_bytes();
    return total;
}

std::string gguf_split_path(const std::string &prefix, int split_no, int split_count) {
    return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, split_no + 1, split_count);
}

uint64_t gguf_parse_split_size(const std::string &text) {
    const auto bad = [&] {
        fail(error_kind::config, "split size '{}': use a whole number of M (10^6 bytes) or G (10^9 bytes), e.g. 500M or 5G",
             text);
    };
    if (text.size() < 2) bad();
    const char unit = text.back();
    if (unit != 'M' && unit != 'G') bad();
    uint64_t n = 0;
    for (size_t i = 0; i + 1 < text.size(); ++i) {
        if (text[i] < '0' || text[i] > '9' || n > 1000000000ull) bad();
        n = n * 10 + static_cast<uint64_t>(text[i] - '0');
    }
    if (n == 0) bad();
    return n * (unit == 'M' ? 1000000ull : 1000000000ull);
}

// A split model's first file names the set; the other parts are opened beside it and joined:
// their tensors (data pointing into their own mappings) follow the first file's, in part order.
void gguf_file::join_parts() {
    const gguf_value *count_value = find("split.count");
    if (!count_value) return;
    const int64_t count = get_int("split.count");
    const int64_t no = get_int("split.no", 0);
    if (count < 1 || count > 99999)
        fail(error_kind::file_format, "{}: split.count is {}; 1 to 99999 parts are allowed", path_, count);
    if (count == 1) return;
    const std::string suffix = gguf_split_path("", 0, static_cast<int>(count));  // "-00001-of-0000N.gguf"
    if (no != 0 || path_.size() <= suffix.size() || path_.compare(path_.size() - suffix.size(), suffix.size(), suffix) != 0)
        fail(error_kind::file_format, "{}: part {} of a model split in {}; open its first part, PREFIX{}", path_, no + 1,
             count, suffix);
    const std::string prefix = path_.substr(0, path_.size() - suffix.size());
    const int64_t n_total = get_int("split.tensors.count");
    uint64_t n_seen = tensors_.size();
    for (int64_t i = 1; i < count; ++i) {
        const std::string part_path = gguf_split_path(prefix, static_cast<int>(i), static_cast<int>(count));
        struct stat st {};
        if (::stat(part_path.c_str(), &st) != 0)
            fail(error_kind::file_format, "{}: part {} of {} of this split model is missing ({})", part_path, i + 1,
                 count, std::strerror(errno));
        std::shared_ptr<gguf_file> part = open_one(part_path);
        const auto mismatch = [&](std::string_view key, int64_t want) {
            const int64_t got = part->get_int(key, -1);
            if (got != want)
                fail(error_kind::file_format, "{}: {} is {} where {} expects {}: the file belongs to another split model",
                     part_path, key, got, path_, want);
        };
        mismatch("split.no", i);
        mismatch("split.count", count);
        mismatch("split.tensors.count", n_total);
        n_seen += part->tensors_.size();
        parts_.push_back(part);
    }
    if (n_seen != static_cast<uint64_t>(n_total))
        fail(error_kind::file_format, "{}: the {} parts hold {} tensors but split.tensors.count is {}", path_, count,
             n_seen, n_total);
    for (const auto &part : parts_)
        for (const gguf_tensor_info &t : part->tensors_) tensors_.push_back(t);
    tensor_index_.clear();
    for (size_t i = 0; i < tensors_.size(); ++i)
        if (!tensor_index_.emplace(tensors_[i].name, i).second)
            fail(error_kind::file_format, "{}: tensor '{}' appears in more than one part", path_,
                 fmtc::printable(tensors_[i].name));
}

std::shared_ptr<const gguf_file> gguf_file::from_memory(std::span<const uint8_t> bytes) {
    std::shared_ptr<gguf_file> file(new gguf_file());
    file->path_ = "<memory>";
    file->bytes_ = bytes;
    file->parse();
    return file;
}

gguf_file::~gguf_file() {
    if (map_) ::munmap(map_, map_bytes_);
}

void gguf_file::parse() {
    const std::string &file = path_;
    cursor c(bytes_, file);

    // ---- header ----
    const auto magic = c.read<uint32_t>("header", "magic");
    if (magic != fmtc::magic) {
        std::string_view got(reinterpret_cast<const char *>(bytes_.data()), 4);
        fail(error_kind::file_format, "{}: not a GGUF file: magic is '{}', expected 'GGUF'", file, fmtc::printable(got));
    }
    version_ = c.read<uint32_t>("header", "version");
    // A byte-swapped (big-endian) v2/v3 file reads as 0x02000000 / 0x03000000.
    if (version_ != 0 && (version_ & 0xffff) == 0)
        fail(error_kind::file_format, "{}: GGUF version {:#x} looks byte-swapped: big-endian files are not supported",
             file, version_);
    if (version_ == 1)
        fail(error_kind::file_format, "{}: GGUF version 1 is not supported (32-bit counts); re-convert the model", file);
    if (version_ < 2 || version_ > 3)
        fail(error_kind::file_format, "{}: unsupported GGUF version {} (supported: 2 and 3)", file, version_);

    const auto n_tensors = c.read<uint64_t>("header", "tensor count");
    const auto n_kv = c.read<uint64_t>("header", "key count");
    if (n_kv > c.remaining() / min_kv_bytes || n_tensors > c.remaining() / min_tensor_info_bytes ||
        n_kv * min_kv_bytes + n_tensors * min_tensor_info_bytes > c.remaining())
        fail(error_kind::file_format, "{}: header claims {} keys and {} tensors but only {} bytes follow", file, n_kv,
             n_tensors, c.remaining());

    // ---- key/value pairs ----
    kvs_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
        gguf_kv kv;
        kv.key = c.read_string(fmt::format("key #{}", i), "name");
        if (kv.key.empty()) fail(error_kind::file_format, "{}: key #{} has an empty name", file, i);
        kv.value = read_value(c, file, fmt::format("key '{}'", fmtc::printable(kv.key)));
        kvs_.push_back(std::move(kv));
    }
    for (size_t i = 0; i < kvs_.size(); ++i)
        if (!kv_index_.emplace(kvs_[i].key, i).second)
            fail(error_kind::file_format, "{}: duplicate key '{}'", file, fmtc::printable(kvs_[i].key));

    if (const gguf_value *v = find(fmtc::alignment_key)) {
        if (v->type != gguf_type::u32)
            fail(error_kind::file_format, "{}: key '{}' must be u32, not {}", file, fmtc::alignment_key,
                 gguf_type_name(v->type));
        const auto a = static_cast<uint64_t>(std::get<int64_t>(v->data));
        if (a == 0 || (a & (a - 1)) != 0)
            fail(error_kind::file_format, "{}: key '{}' is {}, not a power of two", file, fmtc::alignment_key, a);
        alignment_ = a;
    }

    // ---- tensor infos ----
    tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        gguf_tensor_info t;
        t.name = c.read_string(fmt::format("tensor #{}", i), "name");
        if (t.name.empty()) fail(error_kind::file_format, "{}: tensor #{} has an empty name", file, i);
        const std::string item = fmt::format("tensor '{}'", fmtc::printable(t.name));
        if (t.name.size() > fmtc::max_tensor_name)
            fail(error_kind::file_format, "{}: {} has a name of {} bytes; ggml allows at most {}", file, item,
                 t.name.size(), fmtc::max_tensor_name);

        const auto n_dims = c.read<uint32_t>(item, "n_dims");
        if (n_dims < 1 || n_dims > fmtc::max_dims)
            fail(error_kind::file_format, "{}: {} has {} dimensions; 1 to {} are allowed", file, item, n_dims,
                 fmtc::max_dims);
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const auto ne = c.read<int64_t>(item, "dimension");
            // ggml also loads empty (0-element) tensors; no model tensor is empty and a row count
            // of ne / ne[0] needs ne[0] > 0, so Tandem refuses them.
            if (ne < 1)
                fail(error_kind::file_format, "{}: {} dimension {} is {}; every dimension must be at least 1", file,
                     item, d, ne);
            if (mul_overflows(n_elements, static_cast<uint64_t>(ne), &n_elements) ||
                n_elements > static_cast<uint64_t>(INT64_MAX))
                fail(error_kind::file_format, "{}: {} element count overflows at dimension {} ({})", file, item, d, ne);
            t.ne.push_back(ne);
        }

        const auto type_id = c.read<uint32_t>(item, "type");
        const auto traits = ggml_type_info(type_id);
        if (!traits) fail(error_kind::file_format, "{}: {} has unknown ggml type id {}", file, item, type_id);
        t.type = static_cast<ggml_type>(type_id);
        if (t.ne[0] % traits->block_elems != 0)
            fail(error_kind::file_format, "{}: {} rows of {} elements are not a multiple of the {} block size {}", file,
                 item, t.ne[0], traits->name, traits->block_elems);
        // Whole rows are whole blocks, so the element count divides by the block size exactly.
        if (mul_overflows(n_elements / traits->block_elems, static_cast<uint64_t>(traits->block_bytes), &t.n_bytes))
            fail(error_kind::file_format, "{}: {} byte size overflows", file, item);

        t.offset = c.read<uint64_t>(item, "offset");
        tensors_.push_back(std::move(t));
    }
    for (size_t i = 0; i < tensors_.size(); ++i)
        if (!tensor_index_.emplace(tensors_[i].name, i).second)
            fail(error_kind::file_format, "{}: duplicate tensor name '{}'", file, fmtc::printable(tensors_[i].name));

    if (tensors_.empty()) return;

    // ---- tensor data ----
    // The data section starts at the next multiple of the alignment after the tensor infos.
    const uint64_t data_start = fmtc::align_up(c.pos(), alignment_);
    if (data_start > bytes_.size())
        fail(error_kind::file_format, "{}: the data section would start at {}, past the end of the file ({} bytes)",
             file, data_start, bytes_.size());
    const uint64_t data_bytes = bytes_.size() - data_start;
    for (gguf_tensor_info &t : tensors_) {
        if (t.offset % alignment_ != 0)
            fail(error_kind::file_format, "{}: tensor '{}' offset {} is not a multiple of the alignment {}", file,
                 fmtc::printable(t.name), t.offset, alignment_);
        if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset)
            fail(error_kind::file_format,
                 "{}: tensor '{}' data [{}, +{}) runs past the end of the data section ({} bytes from offset {})", file,
                 fmtc::printable(t.name), t.offset, t.n_bytes, data_bytes, data_start);
        t.data = bytes_.data() + data_start + t.offset;
    }
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
        const gguf_tensor_info &a = tensors_[order[i - 1]];
        const gguf_tensor_info &b = tensors_[order[i]];
        if (a.offset + a.n_bytes > b.offset)  // both end inside the file, so the sum cannot wrap
            fail(error_kind::file_format, "{}: tensors '{}' [{}, +{}) and '{}' [{}, +{}) overlap", file,
                 fmtc::printable(a.name), a.offset, a.n_bytes, fmtc::printable(b.name), b.offset, b.n_bytes);
    }
}

// ---- getters ----

namespace {

[[noreturn]] void wrong_type(const std::string &file, std::string_view key, gguf_type type, std::string_view wanted) {
    fail(error_kind::file_format, "{}: key '{}' is {} but {} is expected", file, key, gguf_type_name(type), wanted);
}

int64_t as_int(const std::string &file, std::string_view key, const gguf_value &v) {
    if (!fmtc::is_integer(v.type)) wrong_type(file, key, v.type, "an integer");
    const int64_t x = std::get<int64_t>(v.data);
    if (v.type == gguf_type::u64 && x < 0)
        fail(error_kind::file_format, "{}: key '{}' is {} and does not fit in int64", file, key, static_cast<uint64_t>(x));
    return x;
}

double as_float(const std::string &file, std::string_view key, const gguf_value &v) {
    if (v.type == gguf_type::f32 || v.type == gguf_type::f64) return std::get<double>(v.data);
    if (v.type == gguf_type::u64) return static_cast<double>(static_cast<uint64_t>(std::get<int64_t>(v.data)));
    if (fmtc::is_integer(v.type)) return static_cast<double>(std::get<int64_t>(v.data));
    wrong_type(file, key, v.type, "a number");
}

}  // namespace

const gguf_value *gguf_file::find(std::string_view key) const {
    const auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

static const gguf_value &require(const gguf_file &f, std::string_view key) {
    const gguf_value *v = f.find(key);
    if (!v) fail(error_kind::file_format, "{}: key '{}' is missing", f.path(), key);
    return *v;
}

int64_t gguf_file::get_int(std::string_view key) const { return as_int(path_, key, require(*this, key)); }

int64_t gguf_file::get_int(std::string_view key, int64_t fallback) const {
    const gguf_value *v = find(key);
    return v ? as_int(path_, key, *v) : fallback;
}

double gguf_file::get_float(std::string_view key) const { return as_float(path_, key, require(*this, key)); }

double gguf_file::get_float(std::string_view key, double fallback) const {
    const gguf_value *v = find(key);
    return v ? as_float(path_, key, *v) : fallback;
}

bool gguf_file::get_bool(std::string_view key, bool fallback) const {
    const gguf_value *v = find(key);
    if (!v) return fallback;
    if (v->type != gguf_type::boolean) wrong_type(path_, key, v->type, "bool");
    return std::get<bool>(v->data);
}

const std::string &gguf_file::get_string(std::string_view key) const {
    const gguf_value &v = require(*this, key);
    if (v.type != gguf_type::string) wrong_type(path_, key, v.type, "a string");
    return std::get<std::string>(v.data);
}

std::string gguf_file::get_string(std::string_view key, const std::string &fallback) const {
    return has(key) ? get_string(key) : fallback;
}

const gguf_array &gguf_file::get_array(std::string_view key) const {
    const gguf_value &v = require(*this, key);
    if (v.type != gguf_type::array) wrong_type(path_, key, v.type, "an array");
    return std::get<gguf_array>(v.data);
}

const gguf_tensor_info *gguf_file::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const gguf_tensor_info &gguf_file::tensor(std::string_view name) const {
    const gguf_tensor_info *t = find_tensor(name);
    if (!t) fail(error_kind::file_format, "{}: tensor '{}' not found", path_, name);
    return *t;
}

}  // namespace tandem
