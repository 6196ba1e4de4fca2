// tests/unit/jinja/test_oracle_statements.cpp - every statement and jinja2's whitespace rules,
// each template rendered by the engine and by Jinja2 (as transformers sets it up) and compared.
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

using jinja_test::check_same;
using json = nlohmann::ordered_json;

namespace {

void all_same(const std::vector<std::string> &templates, const json &vars = json::object()) {
    for (const auto &t : templates) check_same(t, vars);
}

const json items = {{"xs", {1, 2, 3, 4, 5}},
                    {"words", {"alpha", "Beta", "gamma"}},
                    {"d", {{"b", 2}, {"a", 1}, {"c", 3}}},
                    {"msgs", {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "U1"}},
                              {{"role", "assistant"}, {"content", "A1"}}, {{"role", "user"}, {"content", "U2"}}}},
                    {"empty", json::array()}};

}  // namespace

TEST_CASE("jinja oracle: whitespace control, trim_blocks and lstrip_blocks", "[oracle]") {
    all_same({
        "a\n{% if true %}\nb\n{% endif %}\nc\n",
        "  {% if true %}\n  x\n  {% endif %}\n",
        "a  {% if true %}b{% endif %}  c",
        "a\n    {%- if true -%}\n   b   \n   {%- endif -%}   \nc",
        "a\n  {%+ if true %}b{% endif %}\n",
        "a\n  {% if true +%}\nb{% endif %}\n",
        "x  {{- 'y' -}}  z\n",
        "x  {{ 'y' }}  \n  z",
        "  {# comment #}\nline\n",
        "a {#- comment -#} b",
        "a\n\t\t{# tabbed comment #}\nb",
        "{% for x in xs %}\n  {{ x }}\n{% endfor %}\n",
        "{% for x in xs -%}\n  {{ x }}\n{%- endfor %}",
        "{%- for x in xs %}{{ x }},{% endfor -%}\n\n",
        "line one\r\nline two\r\n{% if true %}\r\nthree\r\n{% endif %}\r\n",
        "trailing newline kept once?\n\n",
        "no newline at end",
        "{% raw %}{{ not parsed }} {% if %}{% endraw %}",
        "  {% raw -%}\n  {{ x }}  \n  {%- endraw %}\nafter",
        "a\n  {% raw %}\n  b\n  {% endraw %}\nc",
        "{{ 'a' }}\n{{ 'b' }}\n",
        "  {%- set x = 1 %}\n{{ x }}",
        "\u00a0 {%- if true %}x{% endif %}",
        "{% if true %}   \n{% endif %}y",
    }, items);
}

TEST_CASE("jinja oracle: if, elif, else and conditional truth", "[oracle]") {
    all_same({
        "{% if xs %}yes{% else %}no{% endif %}",
        "{% if empty %}yes{% elif words %}elif{% else %}no{% endif %}",
        "{% if none %}a{% elif 0 %}b{% elif '' %}c{% elif {} %}d{% else %}e{% endif %}",
        "{% if missing %}a{% else %}b{% endif %}",
        "{% if missing is defined and missing.x %}a{% endif %}ok",
        "{% if xs, 0 %}tuple is truthy{% endif %}",
        "{% if not xs %}a{% elif xs|length > 3 %}b{% endif %}",
    }, items);
}

TEST_CASE("jinja oracle: for loops, loop variables, else, filters and unpacking", "[oracle]") {
    all_same({
        "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/"
        "{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
        "{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}",
        "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
        "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
        "{% for x in empty %}{{ x }}{% else %}nothing{% endfor %}",
        "{% for x in xs if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }}/{{ loop.last }} {% else %}none{% endfor %}",
        "{% for x in xs if x > 10 %}{{ x }}{% else %}filtered away{% endfor %}",
        "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
        "{% for k in d %}{{ k }}{% endfor %}",
        "{% for c in 'héllo' %}{{ c }}-{% endfor %}",
        "{% for x in missing %}{{ x }}{% else %}undefined iterates as empty{% endfor %}",
        "{% for (a, b) in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}",
        "{% for a, b in ['xy', 'zw'] %}{{ b }}{{ a }}{% endfor %}",
        "{% for x in xs %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}",
        "{% for x in xs %}{% if x is even %}{% continue %}{% endif %}{{ x }}{% endfor %}",
        "{% for row in [[1, 2], [3, 4]] %}{% for x in row %}{{ loop.index }}{{ x }}{% endfor %}|{% endfor %}",
        "{% for m in msgs %}{% set outer = loop %}{% for c in m.content %}{{ outer.index }}{{ c }}{% endfor %}{% endfor %}",
        "{% for m in msgs[::-1] %}{{ m.role }}{% endfor %}",
        "{% for x in xs %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}",
        "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{% endfor %}",
        // The loop filter runs lazily: only loop.last, nextitem and length look ahead.
        "{% set ns = namespace(on=true) %}{% for x in xs if ns.on %}{{ x }}{% set ns.on = x < 2 %}{% endfor %}",
        "{% set ns = namespace(on=true) %}{% for x in xs if ns.on %}{{ x }}{{ loop.last }}{% set ns.on = x < 2 %}{% endfor %}",
        "{% set ns = namespace(on=true) %}{% for x in xs if ns.on %}{{ x }}/{{ loop.length }}{% set ns.on = false %}{% endfor %}",
    }, items);
    // Errors: unpacking the wrong count, iterating a number.
    all_same({"{% for a, b in [1, 2] %}{% endfor %}", "{% for a, b in [(1, 2, 3)] %}{% endfor %}",
              "{% for x in 5 %}{% endfor %}", "{% for x in none %}{% endfor %}"}, items);
}

TEST_CASE("jinja oracle: set, scoping and namespaces", "[oracle]") {
    all_same({
        "{% set x = 1 %}{% for i in xs %}{% set x = i %}{% endfor %}{{ x }}",
        "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}",
        "{% set ns = namespace(total=0, seen=[]) %}{% for i in xs %}{% set ns.total = ns.total + i %}{% endfor %}"
        "{{ ns.total }}{{ ns.seen }}",
        "{% set ns = namespace(d) %}{{ ns.a }}{{ ns.c }}{{ ns.z }}",
        "{% set a, b = 1, 2 %}{{ b }}{{ a }}",
        "{% set a, b = 'xy' %}{{ a }}-{{ b }}",
        "{% set block %}Hello {{ words[0] }}!{% endset %}[{{ block }}]",
        "{% set block | upper | trim %}  shout {{ 1 + 1 }}  {% endset %}[{{ block }}]",
        "{% for i in xs %}{% set y = i * 2 %}{% endfor %}{{ y is defined }}",
        "{% set x = 5 %}{% for i in [1] %}{{ x }}{% set x = 6 %}{{ x }}{% endfor %}{{ x }}",
        "{% set t = (1, 2) %}{{ t }}",
        "{% set x = 'outer' %}{% with x = 'inner', y = x %}{{ x }} {{ y }}{% endwith %} {{ x }}",
        "{% with %}{% set z = 1 %}{{ z }}{% endwith %}{{ z is defined }}",
    }, items);
    all_same({"{% set x = 1 %}{% set x.attr = 2 %}", "{% set none = 1 %}"}, items);
}

TEST_CASE("jinja oracle: macros, caller, varargs and kwargs", "[oracle]") {
    all_same({
        "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
        "{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }}",
        "{% macro m(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}",
        "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}",
        "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
        "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
        "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
        "{% call wrap('b') %}bold {{ words[1] }}{% endcall %}",
        "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% endmacro %}"
        "{% call(item, n) each(words) %}{{ n }}:{{ item }} {% endcall %}",
        "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}",
        "{% macro m(x, y=x * 2) %}{{ x }},{{ y }}{% endmacro %}{{ m(3) }}",
        "{% set g = 'global' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'changed' %}{{ m() }}",
        "{% macro m() %}{{ i }}{% endmacro %}{% for i in [1, 2] %}{{ m() }}{% endfor %}",
        "{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}",
        "{% macro m(a) %}{{ a }}{% endmacro %}{{ m }} {{ m.name }}",
        "{% macro m() %}x{% endmacro %}{% call m() %}body{% endcall %}",
        "{% macro m(x) %}{% set x = x ~ '!' %}{{ x }}{% endmacro %}{{ m('a') }}{{ m('b') }}",
        "{% macro outer() %}{% macro inner() %}in{% endmacro %}{{ inner() }}{% endmacro %}{{ outer() }}",
        "{% macro render(v) %}{% if v is mapping %}{% for k, x in v.items() %}{{ k }}:{{ render(x) }};{% endfor %}"
        "{% else %}{{ v }}{% endif %}{% endmacro %}{{ render({'a': {'b': 1, 'c': {'d': 2}}}) }}",
    }, items);
}

TEST_CASE("jinja oracle: filter blocks, generation blocks and loop controls", "[oracle]") {
    all_same({
        "{% filter upper %}shout {{ words|join(' ') }}{% endfilter %}",
        "{% filter indent(2, true) | trim %}\na\nb\n{% endfilter %}",
        "{% filter replace('a', 'o') %}banana{% endfilter %}",
        "{% generation %}kept {{ xs|length }}{% endgeneration %}",
        "{% for x in xs %}{% generation %}{{ x }}{% endgeneration %}{% endfor %}",
        "{% set x = 1 %}{% generation %}{% set x = 2 %}{{ x }}{% endgeneration %}{{ x }}",
        "{% for x in xs %}{% generation %}{% break %}{% endgeneration %}{% endfor %}",
        "{% for x in xs %}{% for y in xs %}{% if y > 2 %}{% break %}{% endif %}{{ y }}{% endfor %};{% endfor %}",
        "{% for x in xs %}{{ x }}{% for y in empty %}{% else %}{% if x > 1 %}{% break %}{% endif %}{% endfor %}{% endfor %}",
        "{% for x in xs %}{% for y in empty %}{% else %}{% continue %}{% endfor %}{{ x }}{% endfor %}",
    }, items);
}

TEST_CASE("jinja oracle: syntax errors and refused statements fail on both sides", "[oracle]") {
    all_same({
        "{% if x %}unclosed",
        "{% for %}{% endfor %}",
        "{% endif %}",
        "{% include 'other.jinja' %}",
        "{% import 'macros.jinja' as m %}",
        "{% extends 'base.jinja' %}",
        "{% break %}",
        "{{ 1 + }}",
        "{{ x | nosuchfilter }}",
        "{{ x is nosuchtest }}",
        "{% macro m(a=1, b) %}{% endmacro %}",
        "{% do xs.append(1) %}",
        "{{ 'unterminated }}",
        "{# unterminated comment",
        "{% raw %}never ends",
        "{{ (1, 2 }}",
        "{% set x %}no end",
        "{% call x %}{% endcall %}",
        "{{ a is is defined }}",
    });
}
