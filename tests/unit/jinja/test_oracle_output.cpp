// tests/unit/jinja/test_oracle_output.cpp - how values print, exactly as Python's str() and
// repr() write them (floats, containers, quotes, escapes, Unicode), compared with Jinja2.
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

using jinja_test::check_same;
using json = nlohmann::ordered_json;

TEST_CASE("jinja oracle: floats print as Python's repr", "[oracle]") {
    for (const char *t : {"{{ 1.0 }} {{ 0.1 }} {{ 1e-05 }} {{ 0.0001 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e300 }} {{ 5e-324 }}",
                          "{{ 123456789012345678.0 }} {{ 0.000123 }} {{ -0.0 }} {{ 2.0 ** 0.5 }} {{ 1 / 3 * 3 }} {{ 100.0 }}",
                          "{{ 'nan'|float }} {{ 'inf'|float }} {{ -('inf'|float) }} {{ 9999999999999998.0 }} {{ 1.7976931348623157e308 }}",
                          "{{ [0.5, 2.0] }} {{ {'f': 3.14} }} {{ 7 / 7 }} {{ 10 ** 15 / 3 }}"})
        check_same(t);
    check_same("{{ a }} {{ b }} {{ c }} {{ d }}", {{"a", 0.30000000000000004}, {"b", 1e22}, {"c", 2.5e-7}, {"d", 1.0}});
}

TEST_CASE("jinja oracle: containers print as Python's repr", "[oracle]") {
    const json vars = {{"l", {1, "two", nullptr, true, 2.5, {"nested"}}},
                       {"d", {{"k", "v"}, {"n", nullptr}, {"list", {1}}}},
                       {"q", {"it's", "say \"hi\"", "both ' and \"", "back\\slash", "tab\there\nnew", "ctrl\u0001\u007f"}},
                       {"uni", {"café", "日本語", "emoji 😀", "zero\u200bwidth", "nbsp\u00a0x", "line\u2028sep", "bom\ufeff"}}};
    for (const char *t : {"{{ l }}", "{{ d }}", "{{ q }}", "{{ uni }}", "{{ (1,) }} {{ () }} {{ (1, 'a') }}", "{{ [] }} {{ {} }}",
                          "{{ d.items()|list }}", "{{ [l, d] }}", "{{ l|string }}", "{{ {1: 2, (1, 2): 'tuple key'} }}",
                          "{{ ['x'|safe] }}", "{% set ns = namespace(a=1, b='x') %}{{ ns }}"})
        check_same(t, vars);
}

TEST_CASE("jinja oracle: scalars and Unicode print as Python's str", "[oracle]") {
    check_same("{{ t }} {{ f }} {{ n }} {{ i }} {{ neg }} {{ s }}",
               {{"t", true}, {"f", false}, {"n", nullptr}, {"i", 42}, {"neg", -9223372036854775807LL}, {"s", "ünï ☃ 😀"}});
    check_same("{{ x }}", {{"x", "raw \u0001 control and \t tab kept"}});
}
