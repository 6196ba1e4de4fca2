// placement/json_util.h - strict JSON field readers shared by the topology and traffic parsers:
// every failure is a config error naming the file and the entry.
#pragma once

#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>

namespace tandem {

// Reads a whole text file; throws config naming `what` and the path when it cannot be opened.
std::string placement_read_text(const std::string &path, const char *what);

namespace placement_json {

inline nlohmann::json parse(std::string_view text, std::string_view source) {
    try {
        return nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::parse_error &e) {
        fail(error_kind::config, "{}: not valid JSON ({})", source, e.what());
    }
}

inline void require_object(const nlohmann::json &j, const std::string &where) {
    if (!j.is_object()) fail(error_kind::config, "{}: expected a JSON object", where);
}

inline void reject_unknown_keys(const nlohmann::json &j, std::initializer_list<std::string_view> known,
                                const std::string &where) {
    for (auto it = j.begin(); it != j.end(); ++it) {
        bool ok = false;
        for (std::string_view k : known) ok = ok || it.key() == k;
        if (!ok) fail(error_kind::config, "{}: unknown key \"{}\"", where, it.key());
    }
}

inline int32_t get_int(const nlohmann::json &j, const char *key, const std::string &where, int64_t lo, int64_t hi) {
    if (!j.contains(key)) fail(error_kind::config, "{}: missing \"{}\"", where, key);
    const nlohmann::json &v = j[key];
    if (!v.is_number_integer()) fail(error_kind::config, "{}: \"{}\" must be an integer", where, key);
    const int64_t x = v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(hi) + 1))
                                             : v.get<int64_t>();
    if (x < lo || x > hi) fail(error_kind::config, "{}: \"{}\" = {} is out of range ({}..{})", where, key, x, lo, hi);
    return static_cast<int32_t>(x);
}

inline double get_number(const nlohmann::json &j, const char *key, const std::string &where) {
    if (!j.contains(key)) fail(error_kind::config, "{}: missing \"{}\"", where, key);
    const nlohmann::json &v = j[key];
    if (!v.is_number()) fail(error_kind::config, "{}: \"{}\" must be a number", where, key);
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail(error_kind::config, "{}: \"{}\" must be finite", where, key);
    return x;
}

inline std::string get_string(const nlohmann::json &j, const char *key, const std::string &where) {
    if (!j.contains(key)) fail(error_kind::config, "{}: missing \"{}\"", where, key);
    if (!j[key].is_string()) fail(error_kind::config, "{}: \"{}\" must be a string", where, key);
    return j[key].get<std::string>();
}

}  // namespace placement_json
}  // namespace tandem
