// src/tools/tandem_main.cpp - `tandem`: dispatches to the registered subcommands; turns errors
// into a message and an exit code (2 for configuration and usage errors, 1 otherwise).
#include "commands.h"
#include "version.h"

#include "tandem/error.h"
#include "tandem/log.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace tandem::tools {

static std::vector<command> &registry() {
    static std::vector<command> commands;
    return commands;
}

bool command_register(const command &cmd) {
    registry().push_back(cmd);
    return true;
}

}  // namespace tandem::tools

int main(int argc, char **argv) {
    using namespace tandem;
    CLI::App app{"tandem: serve and inspect Mixture-of-Experts models from GGUF files"};
    app.set_version_flag("--version", tools::version_line("tandem"));
    app.require_subcommand(1);
    auto commands = tools::registry();
    std::sort(commands.begin(), commands.end(),
              [](const tools::command &a, const tools::command &b) { return std::string(a.name) < b.name; });
    std::vector<std::pair<CLI::App *, std::function<int()>>> actions;
    for (const auto &cmd : commands) {
        CLI::App *sub = app.add_subcommand(cmd.name, cmd.help);
        actions.emplace_back(sub, cmd.setup(*sub));
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    try {
        for (auto &[sub, action] : actions)
            if (sub->parsed()) return action();
    } catch (const error &e) {
        std::fprintf(stderr, "tandem: error: %s\n", e.what());
        return e.kind() == error_kind::config || e.kind() == error_kind::invalid_request ? 2 : 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tandem: error: %s\n", e.what());
        return 1;
    }
    return 2;
}
