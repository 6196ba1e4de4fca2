// tests/unit/jinja/test_oracle_filters.cpp - every builtin filter the engine has, with its
// arguments and edge cases, compared with Jinja2 as transformers sets it up.
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

using jinja_test::check_same;
using json = nlohmann::ordered_json;

namespace {

void all_same(const std::vector<std::string> &templates, const json &vars = json::object()) {
    for (const auto &t : templates) check_same(t, vars);
}

const json vars = {
    {"xs", {3, 1, 2, 3}}, {"fs", {1.5, -2.25, 3.0}}, {"words", {"banana", "Apple", "cherry", "apple"}},
    {"s", "  Hello World  "}, {"text", "line one\nline two\n\nline four"},
    {"users", {{{"name", "ann"}, {"age", 31}, {"tags", {"a"}}, {"admin", true}},
               {{"name", "Bob"}, {"age", 25}, {"tags", json::array()}, {"admin", false}},
               {{"name", "cy"}, {"age", 31}, {"admin", nullptr}}}},
    {"d", {{"b", 2}, {"A", 3}, {"a", 1}}}, {"html", "<a href=\"x\">Tom & 'Jerry'</a>"}};

}  // namespace

TEST_CASE("jinja oracle: string filters", "[oracle]") {
    all_same({
        "[{{ s|trim }}] [{{ 'xxhixx'|trim('x') }}] [{{ s|upper }}] [{{ s|lower }}] [{{ 'hello wORLD'|title }}] [{{ 'hELLO'|capitalize }}]",
        "{{ 'abc'|replace('b', 'B') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 123|replace('2', 'x') }} {{ 'abc'|reverse }} {{ 'ab'|center(6) }}",
        "{{ text|indent }}|{{ text|indent(2, true) }}|{{ text|indent('> ', first=true, blank=true) }}|{{ ''|indent(first=true) }}",
        "{{ 'one\\ntwo\\n'|indent(3) }}|{{ text|indent(width=1, blank=true) }}",
        "{{ html|escape }} {{ html|e }} {{ html|forceescape }} {{ html|safe }} {{ (html|safe)|e }}",
        "{{ '%s is %d years, %.2f%%'|format('ann', 31, 99.555) }} {{ '%(a)s-%(b)05.1f'|format(a='x', b=2.25) }} {{ '%5s|%-5s|'|format('r', 'l') }}",
        "{{ '%x %X %o %e %g %c %r %i'|format(255, 255, 8, 12345.678, 0.00001, 65, 'q', 3.9) }}",
        "{{ 'The quick brown fox jumps'|truncate(15) }} {{ 'The quick brown fox jumps'|truncate(15, true) }} {{ 'short'|truncate(3, leeway=0) }}",
        "{{ 'The quick brown fox'|truncate(10, end='>>', leeway=0) }} {{ 'hello world foo bar'|wordcount }} {{ 'naïve café'|wordcount }}",
        "{{ 'Hello'|string }} {{ 12|string }} {{ [1, 'a']|string }} {{ none|string }} {{ html|safe|string }}",
    }, vars);
    all_same({"{{ '%d'|format('x') }}", "{{ '%s %s'|format('only one') }}", "{{ '%s'|format('a', 'b') }}",
              "{{ 'abc'|truncate(1) }}", "{{ '%(a)s'|format(1, a=2) }}"}, vars);
}

TEST_CASE("jinja oracle: number filters", "[oracle]") {
    all_same({
        "{{ -3|abs }} {{ -2.5|abs }} {{ true|abs }} {{ 2.567|round }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }}",
        "{{ 2.567|round(1, 'floor') }} {{ 2.512|round(1, 'ceil') }} {{ 5|round }} {{ 1234.5|round(-2) }} {{ 2.675|round(2) }}",
        "{{ '42'|int }} {{ '42.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '0x1A'|int(0, 16) }} {{ 'ff'|int(base=16) }} {{ 3.99|int }}",
        "{{ ' 12 '|int }} {{ '1_000'|int }} {{ none|int }} {{ true|int }} {{ '-5'|int }}",
        "{{ '3.25'|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ 4|float }} {{ '1e3'|float }} {{ 'inf'|float }} {{ ' -2.5 '|float }}",
        "{{ xs|sum }} {{ fs|sum }} {{ users|sum(attribute='age') }} {{ xs|sum(start=10) }} {{ [[1], [2]]|sum(start=[]) }}",
        "{{ xs|max }} {{ xs|min }} {{ words|max }} {{ words|min }} {{ words|max(case_sensitive=true) }} {{ users|max(attribute='age') }}",
        "{{ []|max }} {{ fs|min }}",
    }, vars);
    all_same({"{{ 'a'|abs }}", "{{ ['a', 1]|sum }}", "{{ ['a', 'b']|sum(start='') }}", "{{ 2.5|round(0, 'bogus') }}"}, vars);
}

TEST_CASE("jinja oracle: sequence filters", "[oracle]") {
    all_same({
        "{{ xs|length }} {{ xs|count }} {{ 'héllo'|length }} {{ d|length }} {{ xs|first }} {{ xs|last }} {{ 'abc'|first }} {{ 'abc'|last }}",
        "{{ []|first }} {{ []|last }} {{ d|first }} {{ d|last }}",
        "{{ xs|list }} {{ 'abc'|list }} {{ d|list }} {{ xs|unique|list }} {{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }}",
        "{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|list }}",
        "{{ users|sort(attribute='age,name')|map(attribute='name')|list }}",
        "{{ xs|reverse|list }} {{ xs|join }} {{ xs|join(', ') }} {{ users|join('/', attribute='name') }} {{ [1, none, 'a']|join('-') }}",
        "{{ words|map('upper')|list }} {{ users|map(attribute='name')|list }} {{ users|map(attribute='tags.0', default='-')|list }}",
        "{{ xs|map('string')|join }} {{ words|map('replace', 'a', 'o')|list }} {{ users|map(attribute='missing')|list }}",
        "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|list }}",
        "{{ users|selectattr('age', 'equalto', 31)|map(attribute='name')|list }} {{ users|selectattr('admin', 'none')|list|length }}",
        "{{ xs|select('greaterthan', 1)|list }} {{ xs|select|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ xs|reject('in', [1, 2])|list }}",
        "{{ users|selectattr('name', 'in', ['ann', 'cy'])|list|length }} {{ users|selectattr('tags')|list|length }}",
        "{{ xs|batch(3)|list }} {{ xs|batch(3, 'x')|list }} {{ xs|slice(3)|list }} {{ range(10)|slice(3, 0)|list }}",
        "{{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }} {{ d|items|list }}",
        "{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %} {% for k, v in d|items %}{{ k }}{% endfor %}",
        "{{ users[0]|attr('name') }} {{ users[0]|attr('items') is defined }} {{ 'x'|attr('upper') is callable }}",
    }, vars);
    all_same({"{{ 5|length }}", "{{ none|length }}", "{{ xs|map|list }}", "{{ xs|batch(0)|list }}", "{{ [[1], [2]]|unique|list }}",
              "{{ ['a', 1]|sort }}", "{{ xs|dictsort }}", "{{ d|dictsort(by='neither') }}",
              "{{ xs|selectattr('x', 'nosuchtest')|list }}", "{{ xs|map('nosuchfilter')|list }}"}, vars);
}

TEST_CASE("jinja oracle: tojson as transformers defines it", "[oracle]") {
    all_same({
        "{{ users|tojson }}", "{{ d|tojson(indent=2) }}", "{{ d|tojson(indent=0) }}", "{{ users|tojson(indent='\\t') }}",
        "{{ d|tojson(sort_keys=true) }}", "{{ d|tojson(separators=(',', ':')) }}", "{{ d|tojson(indent=2, separators=(', ', ' = ')) }}",
        "{{ 'é ☕ 𝄞 \\u0000 \\u001f \\x7f \" \\\\ /'|tojson }}", "{{ 'é ☕ 𝄞 \\x7f'|tojson(ensure_ascii=true) }}", "{{ 'é'|tojson(true) }}",
        "{{ [1.0, 1e-05, 1e16, 123456789.123, -0.0, 0.1 + 0.2, 'nan'|float, 'inf'|float, '-inf'|float]|tojson }}",
        "{{ {1: 'int key', 2.5: 'float key', true: 'bool', none: 'null'}|tojson }}", "{{ (1, 'tuple')|tojson }}",
        "{{ []|tojson }} {{ {}|tojson }} {{ [[]]|tojson(indent=2) }} {{ {'a': {}}|tojson(indent=1) }}",
        "{{ none|tojson }} {{ true|tojson }} {{ 3|tojson }} {{ 'x'|safe|tojson }} {{ html|tojson }}",
        "{{ {'b': 1, 'a': [3, {'z': 1, 'y': 2}]}|tojson(sort_keys=true, indent=2) }}",
    }, vars);
    all_same({"{{ namespace(a=1)|tojson }}", "{{ {(1, 2): 3}|tojson }}", "{{ {1: 'a', 'b': 2}|tojson(sort_keys=true) }}",
              "{{ d|tojson(indent=2.5) }}", "{{ d|tojson(separators=',') }}", "{{ range|tojson }}"}, vars);
}
