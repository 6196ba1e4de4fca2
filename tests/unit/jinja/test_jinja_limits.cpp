// tests/unit/jinja/test_jinja_limits.cpp - the sandbox's bounds: a hostile template that loops,
// grows strings or lists, recurses or nests fails with a limit error naming the bound, instead of
// hanging, exhausting memory or overflowing the stack.
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

#include <string>

using json = nlohmann::ordered_json;
using tandem::jinja_error_kind;

namespace {

// Small bounds keep each hostile case fast; each case would run far past them.
tandem::jinja_limits small_limits() {
    tandem::jinja_limits l;
    l.max_steps = 200'000;
    l.max_output_bytes = 1u << 20;
    l.max_alloc_bytes = 16u << 20;
    l.max_call_depth = 20;
    return l;
}

jinja_test::result run(const std::string &tmpl, const tandem::jinja_limits &limits = small_limits()) {
    return jinja_test::engine_render(tmpl, json::object(), jinja_test::fixed_now, false, limits);
}

void require_limit(const std::string &tmpl, const std::string &names, const tandem::jinja_limits &limits = small_limits()) {
    const auto r = run(tmpl, limits);
    INFO(tmpl << " -> " << (r.ok ? "rendered " + std::to_string(r.output.size()) + " bytes" : r.error_type + ": " + r.error));
    REQUIRE_FALSE(r.ok);
    CHECK(r.error_type == "limit");
    CHECK(r.error.find(names) != std::string::npos);
}

}  // namespace

TEST_CASE("jinja limits: evaluation steps stop loops that would run for ever", "[jinja]") {
    require_limit("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "max_steps");
    require_limit("{% for a in range(100000) %}{{ a }}{% endfor %}", "max_steps");
    require_limit("{% set ns = namespace(n=0) %}{% for a in range(100000) %}{% for b in range(100000) if ns.n >= 0 %}"
                  "{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}",
                  "max_steps");
}

TEST_CASE("jinja limits: output and string sizes", "[jinja]") {
    require_limit("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "max_output_bytes");
    require_limit("{{ 'x' * 1000000000 }}", "max_output_bytes");
    require_limit("{{ 'ab'.center(1000000000) }}", "max_output_bytes");
    require_limit("{{ 'ab'|indent(1000000000) }}", "max_output_bytes");
    require_limit("{{ '%1000000000s'|format('x') }}", "max_output_bytes");
    require_limit("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "max_output_bytes");
}

TEST_CASE("jinja limits: cumulative allocation stops quadratic growth", "[jinja]") {
    require_limit("{% set ns = namespace(l=[]) %}{% for i in range(50000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
                  "max_alloc_bytes");
    require_limit("{{ [0] * 100000000 }}", "max_alloc_bytes");
}

TEST_CASE("jinja limits: range size is the sandbox's MAX_RANGE", "[jinja]") {
    require_limit("{{ range(100001)|length }}", "MAX_RANGE");
    require_limit("{{ range(-9223372036854775807, 9223372036854775807)|length }}", "MAX_RANGE");
    const auto ok = run("{{ range(100000)|length }}", tandem::jinja_limits{});
    REQUIRE(ok.ok);
    CHECK(ok.output == "100000");
}

TEST_CASE("jinja limits: recursion and nesting depth", "[jinja]") {
    require_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "max_call_depth");
    require_limit("{% macro f() %}{% call f() %}{{ caller() }}{% endcall %}{% endmacro %}{{ f() }}", "max_call_depth");
    // Values nested deeper than anything a request carries.
    require_limit("{% set ns = namespace(x=[]) %}{% for i in range(3000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
                  "nested deeper");
    require_limit("{% set ns = namespace(x=[]) %}{% for i in range(3000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}",
                  "nested deeper");
    require_limit("{% set ns = namespace(x=[]) %}{% for i in range(3000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x == ns.x }}",
                  "nested deeper");
    // Dropping such a value, or a long chain of namespaces, must not recurse through the stack.
    tandem::jinja_limits roomy = small_limits();
    roomy.max_steps = 5'000'000;
    roomy.max_alloc_bytes = 256u << 20;
    const auto dropped = run("{% set ns = namespace(x=[], head=namespace(n=none)) %}{% set ns.tail = ns.head %}"
                          "{% for i in range(100000) %}{% set ns.x = [ns.x, {'k': ns.x}] %}"
                          "{% set t = namespace(n=none) %}{% set cur = ns.tail %}{% set cur.n = t %}{% set ns.tail = t %}{% endfor %}"
                          "{% set ns.x = 0 %}done",
                          roomy);
    REQUIRE(dropped.ok);
    CHECK(dropped.output == "done");

    // Source nesting is refused when parsing.
    const std::string deep = std::string(1000, '(') + "1" + std::string(1000, ')');
    const auto parsed = jinja_test::engine_render("{{ " + deep + " }}", json::object());
    REQUIRE_FALSE(parsed.ok);
    CHECK(parsed.error_type == "syntax");
    std::string blocks;
    for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
    const auto nested = jinja_test::engine_render(blocks, json::object());
    REQUIRE_FALSE(nested.ok);
    CHECK(nested.error_type == "syntax");

    // Variables nested too deeply are refused when set.
    json v = json::array();
    for (int i = 0; i < 600; ++i) v = json::array({v});
    tandem::jinja_vars vars;
    try {
        vars.set("deep", v, true);
        FAIL("accepted");
    } catch (const tandem::jinja_error &e) {
        CHECK(e.jinja_kind() == jinja_error_kind::limit);
    }
}

TEST_CASE("jinja limits: integers stay 64-bit with a clear error, sources stay bounded", "[jinja]") {
    for (const char *t : {"{{ 9223372036854775807 + 1 }}", "{{ 2 ** 64 }}", "{{ -9223372036854775807 - 2 }}",
                          "{{ 99999999999999999999 }}", "{{ '99999999999999999999'|int }}"}) {
        const auto r = run(t);
        INFO(t);
        REQUIRE_FALSE(r.ok);
        CHECK(r.error.find("64-bit") != std::string::npos);
    }
    tandem::jinja_vars vars;
    CHECK_THROWS_AS(vars.set("big", json::parse("18446744073709551615"), false), tandem::jinja_error);
    const std::string huge(2u << 20, 'x');
    CHECK_THROWS_AS(tandem::jinja_template::parse(huge), tandem::jinja_error);
}

TEST_CASE("jinja limits: the defaults leave room for the published templates", "[jinja]") {
    // A long agent conversation through gpt-oss, the heaviest template, renders with default bounds.
    json messages = json::array();
    for (int i = 0; i < 200; ++i) {
        messages.push_back({{"role", "user"}, {"content", std::string(400, 'u')}});
        messages.push_back({{"role", "assistant"}, {"content", std::string(400, 'a')}});
    }
    const auto r = jinja_test::engine_render(
        "{% for m in messages %}{{ m.role }}: {{ m.content|trim }}{% for x in messages[loop.index:] %}{% endfor %}\n{% endfor %}",
        {{"messages", messages}});
    REQUIRE(r.ok);
    CHECK(r.output.size() > 160000);
}
