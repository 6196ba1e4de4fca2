// tests/model/fixtures_main.cpp - the Catch2 runner of the fixture tests: `--needs-fixtures a,b`
// exits with the code ctest reports as Skipped when a named tests/fixtures folder is not there yet
// (fixtures that the script beside them writes on a machine with transformers).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace {

// The names in `list` (comma-separated) whose folder has no config.json.
std::vector<std::string> missing_fixtures(const std::string &list) {
    std::vector<std::string> missing;
    std::stringstream in(list);
    for (std::string name; std::getline(in, name, ',');)
        if (!std::filesystem::exists(std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/" + name + "/config.json"))
            missing.push_back(name);
    return missing;
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<char *> args{argv[0]};
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) != "--needs-fixtures") {
            args.push_back(argv[i]);
            continue;
        }
        if (i + 1 == argc) {
            std::fprintf(stderr, "--needs-fixtures wants a comma-separated list of fixture names\n");
            return 2;
        }
        const std::vector<std::string> missing = missing_fixtures(argv[++i]);
        for (const std::string &name : missing)
            std::printf("tests/fixtures/%s is missing (tests/fixtures/README.md says how to write it): skipped\n",
                        name.c_str());
        if (!missing.empty()) return TANDEM_SKIP_RETURN_CODE;
    }
    return Catch::Session().run(int(args.size()), args.data());
}
