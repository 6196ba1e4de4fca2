// tests/unit/jinja/oracle_main.cpp - main of test_jinja_oracle: reports Skipped (exit 77) when
// Debian's python3-jinja2 is missing, since every test here compares with it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "jinja_test_util.h"

#include <cstdio>

int main(int argc, char **argv) {
    if (!jinja_test::oracle_available()) {
        std::fprintf(stderr, "SKIPPED: /usr/bin/python3 cannot import jinja2 (Debian package python3-jinja2)\n");
        return 77;
    }
    return Catch::Session().run(argc, argv);
}
