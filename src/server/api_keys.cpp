// src/server/api_keys.cpp - key files and constant-time matching over every key.
#include "src/server/api_keys.h"

#include "src/server/request_guard.h"
#include "tandem/error.h"

#include <cctype>
#include <filesystem>
#include <fstream>

namespace tandem::server {

namespace {

bool valid_name(std::string_view s) {
    if (s.empty() || s.size() > 64) return false;
    for (char c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '@')) return false;
    return true;
}

// Keys travel in an Authorization header: printable ASCII without spaces.
bool valid_key(std::string_view s) {
    for (char c : s)
        if (c <= ' ' || c > '~') return false;
    return !s.empty();
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

}  // namespace

std::vector<api_key> api_keys_read_file(const std::string &path) {
    std::ifstream in(path);
    if (!in) fail(error_kind::config, "--api-key-file {}: cannot read it", path);
    const std::string base = std::filesystem::path(path).filename().string();
    std::vector<api_key> keys;
    std::string raw;
    for (int line = 1; std::getline(in, raw); ++line) {
        const std::string_view text = trim(raw);
        if (text.empty() || text.front() == '#') continue;
        api_key k;
        const size_t colon = text.find(':');
        if (colon == std::string_view::npos) {
            k = {fmt::format("{}:{}", base, line), std::string(text)};
        } else {
            k = {std::string(trim(text.substr(0, colon))), std::string(trim(text.substr(colon + 1)))};
            if (!valid_name(k.name))
                fail(error_kind::config, "{}:{}: '{}' is not a key name (letters, digits, - _ . @; at most 64)", path, line, k.name);
        }
        if (!valid_key(k.key))
            fail(error_kind::config, "{}:{}: the key is empty or holds spaces or control characters", path, line);
        try {
            api_keys_merge(keys, {k});
        } catch (const error &e) {
            fail(error_kind::config, "{}:{}: {}", path, line, e.what());
        }
    }
    if (keys.empty()) fail(error_kind::config, "--api-key-file {} holds no key", path);
    return keys;
}

std::vector<api_key> api_keys_from_flags(const std::vector<std::string> &keys) {
    std::vector<api_key> out;
    for (size_t i = 0; i < keys.size(); ++i) {
        if (!valid_key(keys[i])) fail(error_kind::config, "--api-key #{} is empty or holds spaces or control characters", i + 1);
        api_keys_merge(out, {{fmt::format("flag-{}", i + 1), keys[i]}});
    }
    return out;
}

void api_keys_merge(std::vector<api_key> &keys, std::vector<api_key> more) {
    for (auto &k : more) {
        for (const auto &have : keys) {
            if (have.name == k.name) fail(error_kind::config, "the key name '{}' is given twice", k.name);
            if (have.key == k.key) fail(error_kind::config, "key '{}' repeats the key of '{}'", k.name, have.name);
        }
        keys.push_back(std::move(k));
    }
}

std::optional<std::string> api_keys_match(const std::vector<api_key> &keys, std::string_view presented) {
    const api_key *found = nullptr;
    for (const auto &k : keys)
        if (constant_time_equal(presented, k.key) && found == nullptr) found = &k;
    if (found == nullptr) return std::nullopt;
    return found->name;
}

}  // namespace tandem::server
