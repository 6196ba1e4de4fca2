// src/tools/commands.h - the registry of `tandem` subcommands; each lives in cmd_<name>.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace tandem::tools {

// Declares the subcommand's options on `sub` (binding them to state the function owns) and
// returns the action to run when the subcommand is chosen; the action returns the exit code.
using command_setup = std::function<std::function<int()>(CLI::App &sub)>;

struct command {
    const char *name;
    const char *help;
    command_setup setup;
};

bool command_register(const command &cmd);

}  // namespace tandem::tools

// In a cmd_<name>.cpp: TANDEM_COMMAND(info, "Print ...", [](CLI::App &sub) { ...; return [=] { ... }; });
// Variadic so that braces and commas inside the setup lambda need no extra parentheses.
#define TANDEM_COMMAND(name_, help_, ...) \
    static const bool tandem_command_##name_ = ::tandem::tools::command_register({#name_, help_, __VA_ARGS__})
