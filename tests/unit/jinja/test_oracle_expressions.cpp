// tests/unit/jinja/test_oracle_expressions.cpp - the expression language (literals, operators,
// precedence, slicing, lookups, undefined values, tests, methods, globals), each compared with
// Jinja2 set up as transformers sets it up.
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

using jinja_test::check_same;
using json = nlohmann::ordered_json;

namespace {

void all_same(const std::vector<std::string> &templates, const json &vars = json::object()) {
    for (const auto &t : templates) check_same(t, vars);
}

const json vars = {
    {"n", 7}, {"neg", -7}, {"f", 2.5}, {"zero", 0}, {"s", "Hello, World"}, {"u", "naïve café ☕ 𝄞"},
    {"xs", {3, 1, 2}}, {"nested", {{"a", {{"b", {1, 2, {{"c", "deep"}}}}}}}},
    {"d", {{"items", "key named items"}, {"name", "dee"}, {"n", 1}}},
    {"m", {{"role", "user"}, {"content", "hi"}, {"tool_calls", nullptr}}},
    {"t", true}, {"nothing", nullptr}, {"big", 9007199254740993LL}};

}  // namespace

TEST_CASE("jinja oracle: literals and arithmetic with Python semantics", "[oracle]") {
    all_same({
        "{{ 1 }} {{ -1 }} {{ 1.5 }} {{ 1e3 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 2.5e-3 }}",
        "{{ 'single' }} {{ \"double\" }} {{ 'adjacent' 'strings' }} {{ 'esc\\'aped\\n\\t\\\\' }} {{ '\\x41\\u00e9\\U0001F600' }}",
        "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}",
        "{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
        "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 / 3 }} {{ 2 ** 0.5 }} {{ 10 / 5 }} {{ 0.1 + 0.2 }}",
        "{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ (1 + 2) * 3 }} {{ 1 + 2 * 3 }} {{ 10 - 2 - 3 }}",
        "{{ n + f }} {{ n * 1.0 }} {{ true + 1 }} {{ true * 3 }} {{ -true }} {{ +n }} {{ -f }}",
        "{{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ [1, 2] * 2 }} {{ 'ab' * -1 }} {{ 'a' ~ 1 ~ none ~ true ~ 2.0 }}",
        "{{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ (1,) + (2,) }}",
        "{{ big }} {{ big + 1 }} {{ 9223372036854775807 }}",
    }, vars);
    all_same({"{{ 1 / 0 }}", "{{ 1 // 0 }}", "{{ 1 % 0 }}", "{{ 1.0 / 0 }}", "{{ 'a' + 1 }}", "{{ 1 + 'a' }}",
              "{{ [1] + (2,) }}", "{{ 'a' - 'b' }}", "{{ -'a' }}", "{{ none + 1 }}", "{{ 0.0 ** -1 }}"}, vars);
}

TEST_CASE("jinja oracle: Markup from |safe and |escape escapes the other side of +", "[oracle]") {
    all_same({
        "{{ '<' + (s|safe) }} {{ (s|safe) + '<b>' }} {{ (s|safe) ~ '<b>' }} {{ ('<i>'|safe) + ('<b>'|safe) }}",
        "{{ ('a&b'|e) + '&' }} {{ ('x'|safe) * 2 }} {{ ('x'|safe)|length }} {{ ('<x>'|safe)|string + '<' }}",
    }, vars);
}

TEST_CASE("jinja oracle: comparisons, membership and boolean operators", "[oracle]") {
    all_same({
        "{{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' == 'a' }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1} }}",
        "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 <= 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }} {{ 1 != 2 }}",
        "{{ 'ell' in s }} {{ 'x' not in s }} {{ 2 in xs }} {{ 'name' in d }} {{ 'dee' in d }} {{ 1 in missing }}",
        "{{ 0 or 'b' }} {{ 'a' or 'b' }} {{ 0 and 'b' }} {{ 'a' and 'b' }} {{ none or [] }} {{ not 0 }} {{ not xs }}",
        "{{ missing or 'fallback' }} {{ missing and 1 }} {{ not missing }}",
        "{{ 'yes' if n > 5 else 'no' }} {{ 'yes' if zero else 'no' }} [{{ 'only' if zero }}] {{ 1 if 0 else 2 if 0 else 3 }}",
        "{{ not n == 7 }} {{ not n is odd }} {{ n is odd and n > 5 or false }}",
        "{{ u < s }} {{ 'B' < 'a' }} {{ 'é' > 'z' }}",
    }, vars);
    all_same({"{{ 1 < 'a' }}", "{{ [1] < 'a' }}", "{{ 1 in 5 }}", "{{ 1 in 'abc' }}", "{{ missing < 1 }}",
              "{{ [1] in {'a': 1} }}"}, vars);
}

TEST_CASE("jinja oracle: indexing and slicing", "[oracle]") {
    all_same({
        "{{ xs[0] }} {{ xs[-1] }} {{ xs[5] }} {{ s[0] }} {{ s[-1] }} {{ u[7] }} {{ u[-1] }}",
        "{{ xs[1:] }} {{ xs[:1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2:] }} {{ xs[10:] }} {{ xs[-10:2] }}",
        "{{ s[::-1] }} {{ s[2:8:2] }} {{ s[-5:-1] }} {{ s[:100] }} {{ u[::-1] }} {{ u[2:6] }} {{ u[::3] }}",
        "{{ xs[2:0:-1] }} {{ xs[::-2] }} {{ s[5:1:-2] }} {{ xs[none:2] }}",
        "{{ (1, 2, 3)[1:] }} {{ nested.a.b[2].c }} {{ nested['a']['b'][0] }} {{ nested.a.b.1 }}",
        "{{ xs['a'] }} {{ xs[1.5] }} {{ 5[0] }} {{ nothing.x }} {{ nothing[0] }} {{ s['a'] }}",
    }, vars);
    all_same({"{{ xs[::0] }}", "{{ missing[0] }}", "{{ missing.x }}", "{{ missing[1:] }}"}, vars);
}

TEST_CASE("jinja oracle: attribute and item lookup as the sandbox does it", "[oracle]") {
    all_same({
        "{{ d.name }} {{ d['name'] }} {{ d.missing }} {{ d['missing'] }} {{ d.n }}",
        "{{ d['items'] }} {{ d.items()|list }} {{ d.get('name') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}",
        "{{ m.content }} {{ m.tool_calls }} {{ m.tool_calls is none }} {{ m.nope is defined }} {{ m.tool_calls is defined }}",
        "{{ s.upper() }} {{ s['upper']() }} {{ d.keys()|list }} {{ d.values()|list }}",
        "{{ d.__class__ }} {{ s.__len__ }} {{ d._private }}",
        "{{ xs.count(1) }} {{ xs.index(2) }} {{ (1, 2, 2).count(2) }}",
        "{% set l = [1, 2, 3] %}{{ l.pop() }}{{ l }}{{ l.pop(0) }}{{ l }}",
        "{% set l = [1, 2, 3] %}{{ l.copy() }}{{ d.copy() }}",
    }, vars);
    // The immutable sandbox refuses methods that modify a list or dict.
    all_same({"{{ xs.append(4) }}", "{% set _ = xs.append(4) %}", "{{ xs.sort() }}", "{{ d.update({'a': 1}) }}",
              "{{ d.pop('n') }}", "{{ d.setdefault('q', 1) }}", "{{ xs.insert(0, 1) }}", "{{ xs.append }}",
              "{{ d.clear() }}"}, vars);
}

TEST_CASE("jinja oracle: undefined values behave as jinja2's default Undefined", "[oracle]") {
    all_same({
        "[{{ missing }}] [{{ missing ~ 'x' }}] {{ missing is defined }} {{ missing is undefined }} {{ missing|default('d') }}",
        "{{ missing|length }} {{ missing|list }} {{ missing|join(',') }} {{ missing|string }} {{ missing|trim }} {{ missing|upper }}",
        "{{ missing == missing }} {{ missing == none }} {{ missing != 1 }} {{ missing is none }} {{ missing is iterable }}",
        "{{ missing|first }} {{ missing|items|list }} {{ missing is sequence }} {{ missing is callable }}",
        "{{ xs[99] is defined }} {{ d.zz|default('x', true) }} {{ ''|default('e', true) }} {{ none|default('n') }}",
    }, vars);
    all_same({"{{ missing.attr }}", "{{ missing + 1 }}", "{{ missing() }}", "{{ missing|int }}", "{{ missing|tojson }}",
              "{{ missing|float }}", "{{ d.zz.yy }}", "{{ missing|dictsort }}", "{{ -missing }}"}, vars);
}

TEST_CASE("jinja oracle: tests", "[oracle]") {
    all_same({
        "{{ n is odd }} {{ n is even }} {{ 6 is divisibleby 3 }} {{ 6 is divisibleby(4) }} {{ 2.0 is even }}",
        "{{ n is number }} {{ f is number }} {{ t is number }} {{ n is integer }} {{ t is integer }} {{ f is float }} {{ n is float }}",
        "{{ t is boolean }} {{ t is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ nothing is none }}",
        "{{ s is string }} {{ xs is string }} {{ d is mapping }} {{ xs is mapping }} {{ xs is sequence }} {{ s is sequence }}",
        "{{ d is sequence }} {{ n is sequence }} {{ d is iterable }} {{ n is iterable }} {{ s is iterable }}",
        "{{ n is eq 7 }} {{ n is equalto 7 }} {{ n is == 7 }} {{ n is ne 7 }} {{ n is lt 8 }} {{ n is lessthan 8 }}",
        "{{ n is gt 8 }} {{ n is greaterthan 6 }} {{ n is ge 7 }} {{ n is le 6 }} {{ n is in xs }} {{ 3 is in xs }}",
        "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '123' is upper }} {{ 'ÉCOLE' is upper }}",
        "{{ none is sameas none }} {{ t is sameas true }} {{ 1 is sameas 1 }} {{ xs is sameas xs }} {{ [] is sameas [] }}",
        "{{ s.upper is callable }} {{ range is callable }} {{ n is callable }} {{ 'upper' is filter }} {{ 'odd' is test }}",
        "{{ 'nope' is filter }} {{ s is not string }} {{ xs|select('odd')|list }} {{ xs|reject('even')|list }}",
        "{{ 'x'|safe is escaped }} {{ 'x' is escaped }} {{ 'a<b'|e is escaped }}",
    }, vars);
    all_same({"{{ s is odd }}", "{{ n is divisibleby 0 }}"}, vars);
}

TEST_CASE("jinja oracle: str methods", "[oracle]") {
    all_same({
        "{{ s.startswith('Hell') }} {{ s.startswith(('x', 'He')) }} {{ s.endswith('ld') }} {{ s.startswith('World', 7) }}",
        "{{ s.split(', ') }} {{ '  a  b c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ''.split() }}",
        "{{ 'a,b,c'.rsplit(',', 1) }} {{ '  a b  c '.rsplit(none, 1) }} {{ '  a b  c '.split(none, 1) }} {{ 'a b'.split(maxsplit=0) }}",
        "[{{ '  pad  '.strip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ '\\n\\thi \\u3000'.lstrip() }}] [{{ 'hi!!'.rstrip('!') }}]",
        "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ 'abc'.replace('', '-') }} {{ 'abc'.replace('', '-', 2) }}",
        "{{ s.upper() }} {{ s.lower() }} {{ 'hello wORLD'.title() }} {{ 'hello wORLD'.capitalize() }} {{ u.upper() }} {{ 'ß'.upper() }}",
        "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ u.find('☕') }} {{ s.count('l') }} {{ s.index('W') }}",
        "{{ ', '.join(['a', 'b']) }} {{ '-'.join('abc') }} {{ ''.join([]) }}",
        "{{ 'x'.center(7, '*') }} {{ 'ab'.center(7) }} {{ 'ab'.ljust(5, '.') }} {{ 'ab'.rjust(5) }} {{ '-42'.zfill(6) }}",
        "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }} {{ 'k=v=w'.partition('=') }} {{ 'k=v=w'.rpartition('=') }}",
        "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.json'.removesuffix('.json') }} {{ 'abc'.removeprefix('z') }}",
        "{{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ ' '.isspace() }} {{ ''.isalpha() }} {{ 'a1'.isalnum() }} {{ 'Ab'.istitle() }}",
        "{{ '{} and {}'.format('x', 'y') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='n') }} {{ '{{}}'.format() }}",
        "{{ 'aBc'.swapcase() }} {{ 'abc'.isidentifier() }} {{ 'abc'.isascii() }} {{ u.isascii() }}",
    }, vars);
    all_same({"{{ s.split('') }}", "{{ s.index('zzz') }}", "{{ ','.join([1, 2]) }}", "{{ s.startswith(1) }}",
              "{{ s.nosuchmethod() }}", "{{ '{0}'.format() }}"}, vars);
}

TEST_CASE("jinja oracle: global functions", "[oracle]") {
    all_same({
        "{{ range(5)|list }} {{ range(2, 5)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }} {{ range(3)|length }}",
        "{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }} {{ dict([('k', 'v')]) }}",
        "{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}",
        "{% set j = joiner(' | ') %}{% for x in xs %}{{ j() }}{{ x }}{% endfor %}",
        "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{% set _ = c.reset() %}{{ c.next() }}",
        "{{ raise_exception is defined }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j %y %b %a %p %I %%') }}",
        "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%f|%z|%Z') }}",
    }, vars);
    all_same({"{{ range(100001)|length }}", "{{ range(1, 2, 0) }}", "{{ range('a') }}", "{{ raise_exception('custom message: ' ~ n) }}",
              "{{ strftime_now(5) }}", "{{ dict(1) }}"}, vars);
}
