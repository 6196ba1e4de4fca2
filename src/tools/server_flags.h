// src/tools/server_flags.h - tandem-server's command line: every flag, llama-server's names for
// the same settings, and two more sources for each, the environment (TANDEM_<FLAG>) and a TOML
// file (--config); a flag wins over the environment, which wins over the file.
#pragma once

#include "src/server/server_config.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace tandem::tools {

// What the flags fill before it becomes a server_config.
struct server_flags {
    server::server_config cfg;
    std::vector<std::string> api_keys;  // --api-key, repeatable
    std::string api_key_file;
    std::string gpu_devices = "auto";
    std::string cpu_arithmetic;
    std::string config_file;
    std::string log_format = "text";
    std::string log_level;
    std::string n_gpu_layers;  // llama-server's -ngl: accepted, noted, ignored
    double body_limit_mib = 0.0;
    int32_t timeout_s = 0;
};

// Adds the server's flags to `app`, each bound to `f`.
void server_flags_add(CLI::App &app, server_flags &f);

// Names each of `app`'s options' environment variable, TANDEM_<FIRST LONG NAME>; called once every
// flag is added.
void server_flags_bind_env(CLI::App &app);

// argv with llama-server's multi-letter short flags (-np, -ngl), which CLI11 cannot name, spelled
// as their long forms.
std::vector<std::string> server_flags_normalize(int argc, char **argv);

// After app.parse(): every setting of the TOML file `path` that neither a flag nor the
// environment gave. Throws error(config) with file:line for a malformed file, an unknown key or a
// value its flag refuses.
void server_flags_apply_config(CLI::App &app, const std::string &path);

// The server's configuration from the parsed flags: keys read, devices parsed, the log set up.
// Throws error(config).
server::server_config server_flags_resolve(server_flags &f);

}  // namespace tandem::tools
