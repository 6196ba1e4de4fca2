// tests/unit/grammar/test_gbnf.cpp - placeholder
#include "tandem/grammar.h"
#include <catch2/catch.hpp>
TEST_CASE("gbnf smoke", "[grammar]") {
    auto g = tandem::grammar::from_gbnf("root ::= \"a\"+");
    REQUIRE(g.n_rules() == 1);
}
