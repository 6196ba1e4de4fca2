// src/server/slot_files.cpp - the slot file format: a fixed little-endian header (magic, version,
// model hash, KV type, bytes per token, token count), the tokens as int32, then the KV blob.
#include "src/server/slot_files.h"

#include "tandem/error.h"
#include "tandem/gguf.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace tandem::server {

namespace {

static_assert(std::endian::native == std::endian::little, "slot files are written in the host's little-endian order");

constexpr std::array<char, 8> slot_magic{'T', 'N', 'D', 'M', 'S', 'L', 'O', 'T'};
constexpr uint32_t slot_version = 1;

struct slot_header {
    std::array<char, 8> magic = slot_magic;
    uint32_t version = slot_version;
    uint32_t n_tokens = 0;
    uint64_t model_hash = 0;
    uint64_t kv_token_bytes = 0;
    std::array<char, 8> kv_type{};  // NUL-padded name
};
static_assert(sizeof(slot_header) == 40, "the header is written as its bytes");

void fnv_mix(uint64_t &h, const void *data, size_t n) {
    const auto *p = static_cast<const uint8_t *>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
}

std::string kv_type_of(const slot_header &h) { return std::string(h.kv_type.data(), strnlen(h.kv_type.data(), h.kv_type.size())); }

}  // namespace

// The tensor table alone would not tell two random-weight files of one shape apart; a tensor's
// first bytes do, without reading gigabytes.
uint64_t slot_file_model_hash(const gguf_file &file) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const gguf_tensor_info &t : file.tensors()) {
        fnv_mix(h, t.name.data(), t.name.size());
        fnv_mix(h, &t.type, sizeof(t.type));
        for (int64_t d : t.ne) fnv_mix(h, &d, sizeof(d));
        if (t.data) fnv_mix(h, t.data, size_t(std::min<uint64_t>(t.n_bytes, 64)));
    }
    return h;
}

std::string slot_file_path(const std::string &folder, const std::string &name) {
    if (name.empty()) fail(error_kind::invalid_request, "'filename' is empty");
    if (name.size() > 255) fail(error_kind::invalid_request, "'filename' is longer than 255 bytes");
    if (name == "." || name == ".." || name.find("..") != std::string::npos)
        fail(error_kind::invalid_request, "'filename' may not contain '..'");
    for (unsigned char c : name) {
        if (c == '/' || c == '\\') fail(error_kind::invalid_request, "'filename' must be a plain file name, without path separators");
        if (c < 0x20 || c == 0x7f) fail(error_kind::invalid_request, "'filename' contains a control character");
    }
    return (std::filesystem::path(folder) / name).string();
}

uint64_t slot_file_write(const std::string &path, const slot_file_identity &id, const slot_snapshot &snapshot) {
    slot_header h;
    h.n_tokens = static_cast<uint32_t>(snapshot.tokens.size());
    h.model_hash = id.model_hash;
    h.kv_token_bytes = id.kv_token_bytes;
    std::memcpy(h.kv_type.data(), id.kv_type.data(), std::min(id.kv_type.size(), h.kv_type.size()));
    // A name of its own per writer: two saves to one name must not write one temporary file.
    static std::atomic<uint64_t> n_writes{0};
    const std::string tmp = fmt::format("{}.partial-{}-{}", path, getpid(), n_writes.fetch_add(1));
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char *>(&h), sizeof(h));
        out.write(reinterpret_cast<const char *>(snapshot.tokens.data()), std::streamsize(snapshot.tokens.size() * sizeof(int32_t)));
        out.write(reinterpret_cast<const char *>(snapshot.kv.data()), std::streamsize(snapshot.kv.size()));
        out.flush();
        if (!out) {
            std::error_code ec;
            std::filesystem::remove(tmp, ec);
            fail(error_kind::internal, "cannot write the slot file {}", path);
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) fail(error_kind::internal, "cannot write the slot file {}: {}", path, ec.message());
    return sizeof(h) + snapshot.tokens.size() * sizeof(int32_t) + snapshot.kv.size();
}

namespace {

// Opens a slot file and checks its header against the server's identity and the file's size;
// leaves `in` at the tokens.
slot_header slot_file_open(const std::string &path, const slot_file_identity &id, std::ifstream &in, uint64_t &size) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) fail(error_kind::not_found, "no slot file named {}", std::filesystem::path(path).filename().string());
    size = std::filesystem::file_size(path, ec);
    in.open(path, std::ios::binary);
    slot_header h;
    if (ec || size < sizeof(h) || !in.read(reinterpret_cast<char *>(&h), sizeof(h)) || h.magic != slot_magic)
        fail(error_kind::invalid_request, "not a tandem slot file");
    if (h.version != slot_version)
        fail(error_kind::invalid_request, "the slot file has format version {}; this server reads version {}", h.version, slot_version);
    if (h.model_hash != id.model_hash) fail(error_kind::invalid_request, "the slot file was saved from another model");
    if (kv_type_of(h) != id.kv_type || h.kv_token_bytes != id.kv_token_bytes)
        fail(error_kind::invalid_request, "the slot file holds a {} KV cache of {} bytes a token; this server's is {} of {}",
             kv_type_of(h), h.kv_token_bytes, id.kv_type, id.kv_token_bytes);
    if (h.n_tokens >= uint32_t(id.n_ctx))
        fail(error_kind::invalid_request, "the slot file holds {} tokens; a slot holds {}", h.n_tokens, id.n_ctx);
    const uint64_t expected = slot_file_bytes(h.n_tokens, h.kv_token_bytes);
    if (size != expected)
        fail(error_kind::invalid_request, "the slot file is {}: {} bytes where its header promises {}",
             size < expected ? "truncated" : "longer than its header says", size, expected);
    return h;
}

}  // namespace

uint64_t slot_file_bytes(uint64_t n_tokens, uint64_t token_bytes) { return sizeof(slot_header) + n_tokens * (sizeof(int32_t) + token_bytes); }

slot_snapshot slot_file_read(const std::string &path, const slot_file_identity &id, uint64_t &bytes_read) {
    std::ifstream in;
    uint64_t size = 0;
    const slot_header h = slot_file_open(path, id, in, size);
    slot_snapshot s;
    s.tokens.resize(h.n_tokens);
    s.kv.resize(size_t(h.n_tokens) * size_t(h.kv_token_bytes));
    in.read(reinterpret_cast<char *>(s.tokens.data()), std::streamsize(s.tokens.size() * sizeof(int32_t)));
    in.read(reinterpret_cast<char *>(s.kv.data()), std::streamsize(s.kv.size()));
    if (!in) fail(error_kind::invalid_request, "the slot file could not be read to its end");
    bytes_read = size;
    return s;
}

std::vector<int32_t> slot_file_tokens(const std::string &path, const slot_file_identity &id, uint64_t &file_bytes) {
    std::ifstream in;
    const slot_header h = slot_file_open(path, id, in, file_bytes);
    std::vector<int32_t> tokens(h.n_tokens);
    if (!in.read(reinterpret_cast<char *>(tokens.data()), std::streamsize(tokens.size() * sizeof(int32_t))))
        fail(error_kind::invalid_request, "the slot file could not be read to its end");
    return tokens;
}

}  // namespace tandem::server
