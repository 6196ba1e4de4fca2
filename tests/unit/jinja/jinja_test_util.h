// tests/unit/jinja/jinja_test_util.h - rendering through the engine and through the Jinja2 oracle
// (tests/unit/jinja/jinja_oracle.py on Debian's python3-jinja2), and the comparison of the two.
#pragma once

#include "tandem/jinja.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace jinja_test {

// strftime_now's clock on both sides: 2024-02-29 13:45:07 UTC.
constexpr int64_t fixed_now = 1709214307;

struct result {
    bool ok = false;
    std::string output;
    std::string error_type;  // oracle: the Python exception's class; engine: the jinja_error kind
    std::string error;
    std::vector<tandem::jinja_range> marked;
};

// Whether /usr/bin/python3 can import jinja2.
bool oracle_available();
result oracle_render(const std::string &tmpl, const nlohmann::ordered_json &vars, int64_t now = fixed_now);
// Strings of `vars` are marked when `marked`.
result engine_render(const std::string &tmpl, const nlohmann::ordered_json &vars, int64_t now = fixed_now,
                     bool marked = false, const tandem::jinja_limits &limits = {});

// Renders with both and checks they agree: the same output, or both fail (a raise_exception with
// the same message). Returns the engine's result.
result check_same(const std::string &tmpl, const nlohmann::ordered_json &vars = nlohmann::ordered_json::object());

}  // namespace jinja_test
