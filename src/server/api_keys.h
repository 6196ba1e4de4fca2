// src/server/api_keys.h - the API keys a server accepts, each with a name for logs and metrics:
// reading a key file (one key a line, optionally `name:key`) and matching a presented key against
// all of them in constant time.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::server {

struct api_key {
    std::string name;  // who holds it: logs and metrics carry this, never the key
    std::string key;
};

// Reads `path`: one key a line, `name:key` or a bare key (named `<file name>:<line>`); blank lines
// and lines starting with `#` are skipped. Throws error(config) naming the file and line of a
// malformed entry (a bad name, whitespace inside a key, a duplicate) or a file without keys.
std::vector<api_key> api_keys_read_file(const std::string &path);

// Keys given as --api-key flags, named `flag-1`, `flag-2`, ... in the order given.
std::vector<api_key> api_keys_from_flags(const std::vector<std::string> &keys);

// Appends `more` to `keys`; throws error(config) when a key or a name appears twice.
void api_keys_merge(std::vector<api_key> &keys, std::vector<api_key> more);

// The name of the key equal to `presented`, or nothing. Every key is compared over its whole
// length whatever matches, so the time taken says nothing about which key is close.
std::optional<std::string> api_keys_match(const std::vector<api_key> &keys, std::string_view presented);

}  // namespace tandem::server
