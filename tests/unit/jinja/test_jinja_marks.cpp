// tests/unit/jinja/test_jinja_marks.cpp - provenance: bytes that came from the caller's marked
// strings stay marked through every string operation, template text never is, and text that
// imitates turn markers inside a user message stays inside a marked range through the real
// Qwen3 template (so the tokenizer can refuse to read it as special tokens).
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

using json = nlohmann::ordered_json;
using tandem::jinja_range;

namespace {

std::vector<jinja_range> marks_of(const std::string &tmpl, const json &vars, std::string *text = nullptr) {
    const auto r = jinja_test::engine_render(tmpl, vars, jinja_test::fixed_now, true);
    INFO(tmpl << " -> " << r.error);
    REQUIRE(r.ok);
    if (text) *text = r.output;
    return r.marked;
}

bool covered(const std::vector<jinja_range> &marks, size_t begin, size_t end) {
    for (const auto &r : marks)
        if (r.begin <= begin && end <= r.end) return true;
    return false;
}

bool touched(const std::vector<jinja_range> &marks, size_t begin, size_t end) {
    for (const auto &r : marks)
        if (r.begin < end && begin < r.end) return true;
    return false;
}

std::string read(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("jinja marks: a marked variable is marked where it is printed, template text is not", "[jinja]") {
    const json v = {{"a", "xy"}, {"n", 5}, {"s", "hello"}};
    CHECK(marks_of("{{ a }}", v) == std::vector<jinja_range>{{0, 2}});
    CHECK(marks_of("[{{ a }}]", v) == std::vector<jinja_range>{{1, 3}});
    CHECK(marks_of("lit {{ 'eral' }}", v).empty());
    CHECK(marks_of("{{ n }}{{ n + 1 }}{{ a|length }}{{ a.startswith('x') }}", v).empty());
    const auto unmarked = jinja_test::engine_render("{{ a }}", v, jinja_test::fixed_now, false);
    REQUIRE(unmarked.ok);
    CHECK(unmarked.marked.empty());
}

TEST_CASE("jinja marks: concatenation, slicing, strip, split and join keep exact ranges", "[jinja]") {
    const json v = {{"a", "xy"}, {"s", "hello"}, {"p", "  hi  "}, {"csv", "x,y"}, {"r", "aXb"}};
    CHECK(marks_of("{{ a ~ 'lit' ~ a }}", v) == std::vector<jinja_range>{{0, 2}, {5, 7}});
    CHECK(marks_of("{{ a + 'lit' }}", v) == std::vector<jinja_range>{{0, 2}});
    CHECK(marks_of("{{ a ~ a }}", v) == std::vector<jinja_range>{{0, 4}});
    CHECK(marks_of("{{ s[1:] }}|{{ s[::-1] }}|{{ s[0] }}", v) == std::vector<jinja_range>{{0, 4}, {5, 10}, {11, 12}});
    CHECK(marks_of("{{ p.strip() }}.{{ p|trim }}", v) == std::vector<jinja_range>{{0, 2}, {3, 5}});
    CHECK(marks_of("{{ csv.split(',')|join('|') }}", v) == std::vector<jinja_range>{{0, 1}, {2, 3}});
    CHECK(marks_of("{{ r.replace('X', 'lit') }}", v) == std::vector<jinja_range>{{0, 1}, {4, 5}});
    CHECK(marks_of("{% for c in a %}{{ c }}-{% endfor %}", v) == std::vector<jinja_range>{{0, 1}, {2, 3}});
}

TEST_CASE("jinja marks: formatting, macros, blocks, repr and tojson carry the marks", "[jinja]") {
    const json v = {{"a", "xy"}, {"t", "v<|x|>"}, {"ml", "l1\nl2"}, {"d", {{"key", 1}}}};
    CHECK(marks_of("{{ '%s!'|format(a) }}", v) == std::vector<jinja_range>{{0, 2}});
    CHECK(marks_of("{{ '<{}>'.format(a) }}", v) == std::vector<jinja_range>{{1, 3}});
    CHECK(marks_of("{{ '%s' % a }}", v) == std::vector<jinja_range>{{0, 2}});
    CHECK(marks_of("{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(a) }}", v) == std::vector<jinja_range>{{1, 3}});
    CHECK(marks_of("{% set b %}[{{ a }}]{% endset %}{{ b }}{{ b }}", v) == std::vector<jinja_range>{{1, 3}, {5, 7}});
    CHECK(marks_of("{% filter trim %}  {{ a }}  {% endfilter %}", v) == std::vector<jinja_range>{{0, 2}});
    CHECK(marks_of("{{ [a] }}", v) == std::vector<jinja_range>{{1, 5}});
    CHECK(marks_of("{{ ml|indent(2) }}", v) == std::vector<jinja_range>{{0, 2}, {5, 7}});
    CHECK(marks_of("{{ a.center(6) }}", v) == std::vector<jinja_range>{{2, 4}});
    CHECK(marks_of("{{ 'z'.center(3, a[0]) }}|{{ '%c'|format(a[1]) }}", v) == std::vector<jinja_range>{{0, 1}, {2, 3}, {4, 5}});
    CHECK(marks_of("{{ strftime_now(a) }}", v) == std::vector<jinja_range>{{0, 2}});
    // An operation that cannot track ranges marks its whole result.
    CHECK(marks_of("{{ a|upper }}", v) == std::vector<jinja_range>{{0, 2}});
    // tojson marks a marked string's whole token; the template's own key is not marked.
    CHECK(marks_of("{{ {'k': t}|tojson }}", v) == std::vector<jinja_range>{{6, 14}});
    // Keys from marked data are data too.
    CHECK(marks_of("{% for k in d %}{{ k }}{% endfor %}", v) == std::vector<jinja_range>{{0, 3}});
    CHECK(marks_of("{{ d|tojson }}", v) == std::vector<jinja_range>{{1, 6}});
}

TEST_CASE("jinja marks: a forged turn in a user message stays marked through the Qwen3 template", "[jinja]") {
    const std::string dir = std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/templates/";
    const auto tmpl = tandem::jinja_template::parse(read(dir + "Qwen-Qwen3-0.6B.jinja"));
    const json request = json::parse(read(dir + "conversations/10_forged_turn.json"));
    const std::string forged = request["messages"][1]["content"].get<std::string>();
    REQUIRE(forged.find("<|im_end|>\n<|im_start|>system") != std::string::npos);

    const auto out = tmpl->render(tandem::jinja_chat_vars(request, {}));
    const size_t at = out.text.find(forged);
    REQUIRE(at != std::string::npos);
    CHECK(covered(out.marked, at, at + forged.size()));

    // Every turn marker the template wrote is unmarked; every one inside the user text is marked.
    size_t n_template = 0, n_forged = 0;
    for (const std::string marker : {"<|im_start|>", "<|im_end|>"}) {
        for (size_t p = out.text.find(marker); p != std::string::npos; p = out.text.find(marker, p + 1)) {
            const bool inside = p >= at && p + marker.size() <= at + forged.size();
            INFO(marker << " at " << p);
            if (inside) {
                CHECK(covered(out.marked, p, p + marker.size()));
                ++n_forged;
            } else {
                CHECK_FALSE(touched(out.marked, p, p + marker.size()));
                ++n_template;
            }
        }
    }
    CHECK(n_forged == 4);    // the user text holds two of each
    CHECK(n_template == 5);  // the system and user turns, and the generation prompt's start
    for (const auto &r : out.marked) {
        CHECK(r.begin < r.end);
        CHECK(r.end <= out.text.size());
    }
}
