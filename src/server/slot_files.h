// src/server/slot_files.h - slot files (POST /slots/{id}?action=save|restore): a slot's tokens and
// KV in a folder the operator names (--slot-save-path), with a versioned header saying which
// model and KV type wrote them, so a file from anything else is refused with the reason.
#pragma once

#include "src/scheduler/scheduler.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {
class gguf_file;
}

namespace tandem::server {

// What a slot file must match to be restored: the model (a hash of its tensor table and the first
// bytes of every tensor) and the cache's element type and bytes per token.
struct slot_file_identity {
    uint64_t model_hash = 0;
    std::string kv_type;       // "f32", "f16"
    uint64_t kv_token_bytes = 0;
    int32_t n_ctx = 0;         // a file of this many tokens or more cannot fit a slot
};
uint64_t slot_file_model_hash(const gguf_file &file);

// `name` inside `folder`: a plain file name (no separators, not . or .., no control characters,
// at most 255 bytes); throws invalid_request naming what is wrong.
std::string slot_file_path(const std::string &folder, const std::string &name);

// Writes the snapshot (through a temporary file renamed into place); returns the bytes written.
// Throws internal when the file cannot be written.
uint64_t slot_file_write(const std::string &path, const slot_file_identity &id, const slot_snapshot &snapshot);
// Reads a snapshot; throws not_found for a missing file and invalid_request naming why a file is
// refused (not a slot file, another version, model or KV type, more tokens than a slot holds,
// truncated or too long), before reading more than its header.
slot_snapshot slot_file_read(const std::string &path, const slot_file_identity &id, uint64_t &bytes_read);
// The tokens of a slot file, its header and size checked as slot_file_read checks them, without
// reading its KV; file_bytes: the file's size. Throws as slot_file_read does.
std::vector<int32_t> slot_file_tokens(const std::string &path, const slot_file_identity &id, uint64_t &file_bytes);
// The size of a slot file of n_tokens tokens of token_bytes KV bytes each.
uint64_t slot_file_bytes(uint64_t n_tokens, uint64_t token_bytes);

}  // namespace tandem::server
