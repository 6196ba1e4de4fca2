// src/gguf/gguf_format.h - constants and small functions shared by the GGUF reader and writer.
#pragma once

#include "tandem/gguf.h"

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::gguf_format {

static_assert(std::endian::native == std::endian::little,
              "GGUF is read and written by memcpy of little-endian fields");

constexpr uint32_t magic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t version_written = 3;
constexpr uint64_t default_alignment = 32;
// ggml keeps names in char[64] with a terminating NUL, so the longest name it loads is 63 bytes.
constexpr size_t max_tensor_name = 63;
constexpr uint32_t max_dims = 4;
constexpr std::string_view alignment_key = "general.alignment";

// Bytes of one scalar of a fixed-size type; 0 for string and array (variable size) and unknown ids.
size_t scalar_bytes(uint32_t type);
bool is_integer(gguf_type type);
bool is_known(uint32_t type);

// A name from a file made safe to print in an error: non-printable bytes as \xNN, cut at 96.
std::string printable(std::string_view name);

inline uint64_t align_up(uint64_t offset, uint64_t alignment) {
    return (offset + alignment - 1) / alignment * alignment;
}

}  // namespace tandem::gguf_format
