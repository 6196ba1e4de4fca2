// tests/unit/grammar/test_json_schema.cpp - the JSON Schema compiler per construct: which JSON
// texts each schema's grammar accepts (expectations from the JSON Schema and JSON specs, and
// arithmetic for numeric bounds), the documented narrowing (property order, no extra keys, bounded
// whitespace), and errors that name the schema location.
#include "grammar_test_util.h"

#include "tandem/error.h"
#include "tandem/grammar.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

grammar schema(std::string_view text, json_whitespace ws = json_whitespace::flexible) {
    return grammar::from_json_schema_text(text, json_schema_options{ws});
}

bool accepts(std::string_view schema_text, std::string_view json) { return grammar_test::matches(schema(schema_text), json); }

std::string schema_error(std::string_view text) {
    try {
        schema(text);
    } catch (const error &e) {
        REQUIRE(e.kind() == error_kind::invalid_request);
        return e.what();
    }
    FAIL("schema compiled: " << text);
    return "";
}

}  // namespace

TEST_CASE("schema scalar types", "[grammar][schema]") {
    CHECK(accepts(R"({"type":"null"})", "null"));
    CHECK_FALSE(accepts(R"({"type":"null"})", "nul"));
    CHECK(accepts(R"({"type":"boolean"})", "true"));
    CHECK(accepts(R"({"type":"boolean"})", "false"));
    CHECK_FALSE(accepts(R"({"type":"boolean"})", "1"));
    CHECK(accepts(R"({"type":["string","null"]})", "null"));
    CHECK(accepts(R"({"type":["string","null"]})", R"("x")"));
    CHECK_FALSE(accepts(R"({"type":["string","null"]})", "1"));
    for (const char *ok : {"0", "-0", "7", "-12", "3.25", "-0.5", "1e10", "1E-3", "2.5e+7"}) {
        INFO(ok);
        CHECK(accepts(R"({"type":"number"})", ok));
    }
    for (const char *bad : {"01", "1.", ".5", "+1", "1e", "NaN", "--1", "1.5.2", "0x10", ""}) {
        INFO(bad);
        CHECK_FALSE(accepts(R"({"type":"number"})", bad));
    }
    CHECK(accepts(R"({"type":"integer"})", "-42"));
    CHECK_FALSE(accepts(R"({"type":"integer"})", "4.0"));
    CHECK_FALSE(accepts(R"({"type":"integer"})", "1e3"));
    // Digits are bounded (16 for integers) so a model cannot spin on them.
    CHECK(accepts(R"({"type":"integer"})", "9999999999999999"));
    CHECK_FALSE(accepts(R"({"type":"integer"})", "10000000000000000"));
}

TEST_CASE("schema strings: escapes and lengths in code points", "[grammar][schema]") {
    const char *s = R"({"type":"string"})";
    for (const char *ok : {R"("")", R"("abc")", R"("a\"b")", R"("\\")", R"("\/")", R"("\n\t\r\b\f")", R"("\u00e9\u4E2D")",
                           "\"h\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\""}) {
        INFO(ok);
        CHECK(accepts(s, ok));
    }
    // Raw control characters, a bare quote, unknown escapes, lone surrogate escapes, bad UTF-8.
    for (const char *bad : {"\"a\nb\"", R"("a"b")", R"("\x41")", R"("\ud800")", R"("\u12")", "\"\xC3\"", "abc"}) {
        INFO(bad);
        CHECK_FALSE(accepts(s, bad));
    }
    const char *len = R"({"type":"string","minLength":2,"maxLength":3})";
    CHECK_FALSE(accepts(len, R"("a")"));
    CHECK(accepts(len, R"("ab")"));
    CHECK(accepts(len, "\"\xC3\xA9\xE4\xB8\xAD\\n\""));  // three code points, one of them escaped
    CHECK_FALSE(accepts(len, R"("abcd")"));
    CHECK_FALSE(accepts(len, "\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\""));
    CHECK(accepts(R"({"type":"string","minLength":2})", R"("abcdefgh")"));
}

TEST_CASE("schema integer bounds are exact", "[grammar][schema]") {
    struct bounds_case {
        const char *schema;
        int64_t lo, hi;
    };
    const bounds_case cases[] = {
        {R"({"type":"integer","minimum":-13,"maximum":127})", -13, 127},
        {R"({"type":"integer","minimum":0,"maximum":0})", 0, 0},
        {R"({"type":"integer","exclusiveMinimum":-1,"exclusiveMaximum":100})", 0, 99},
        {R"({"type":"integer","minimum":-250,"maximum":-7})", -250, -7},
        {R"({"type":"integer","minimum":1.5,"maximum":9.5})", 2, 9},
        {R"({"type":"integer","minimum":5,"exclusiveMinimum":true,"maximum":20,"exclusiveMaximum":true})", 6, 19},
        {R"({"type":"integer","minimum":95})", 95, 9999999999999999},
        {R"({"type":"integer","maximum":-95})", -9999999999999999, -95},
    };
    for (const bounds_case &c : cases) {
        const grammar g = schema(c.schema);
        INFO(c.schema);
        for (int64_t v = -400; v <= 400; ++v) {
            INFO(v);
            CHECK(grammar_test::matches(g, std::to_string(v)) == (v >= c.lo && v <= c.hi));
        }
    }
    // Random ranges against arithmetic, values near both ends and across digit counts.
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
        const int64_t a = int64_t(rng() % 2000001) - 1000000, b = int64_t(rng() % 2000001) - 1000000;
        const int64_t lo = std::min(a, b), hi = std::max(a, b);
        const grammar g = schema(fmt::format(R"({{"type":"integer","minimum":{},"maximum":{}}})", lo, hi));
        for (int k = 0; k < 60; ++k) {
            const int64_t base = k % 3 == 0 ? lo : k % 3 == 1 ? hi : int64_t(rng() % 2000001) - 1000000;
            const int64_t v = base + int64_t(rng() % 21) - 10;
            INFO("range [" << lo << ", " << hi << "] value " << v);
            CHECK(grammar_test::matches(g, std::to_string(v)) == (v >= lo && v <= hi));
        }
    }
    CHECK_THAT(schema_error(R"({"type":"integer","minimum":3,"maximum":2})"), Contains("no integer"));
}

TEST_CASE("schema number bounds: accepted values always lie inside", "[grammar][schema]") {
    // Bounds are rounded inwards to integers: every accepted value is valid, and every value
    // between the rounded bounds is accepted.
    const grammar g = schema(R"({"type":"number","minimum":-2.5,"maximum":3})");
    std::mt19937_64 rng(3);
    for (int k = 0; k < 400; ++k) {
        const double v = double(int64_t(rng() % 20001) - 10000) / 1000.0;
        const std::string text = fmt::format("{}", v);
        const bool ok = grammar_test::matches(g, text);
        INFO(text);
        if (ok) CHECK((v >= -2.5 && v <= 3.0));
        if (v >= -2.0 && v <= 3.0) CHECK(ok);
    }
    CHECK(accepts(R"({"type":"number","exclusiveMinimum":0})", "1.5"));
    CHECK_FALSE(accepts(R"({"type":"number","exclusiveMinimum":0})", "0"));
    CHECK_FALSE(accepts(R"({"type":"number","exclusiveMinimum":0})", "-1"));
    CHECK_FALSE(accepts(R"({"type":"number","minimum":0,"maximum":1})", "1.5"));
    CHECK(accepts(R"({"type":"number","minimum":0,"maximum":1})", "0.999"));
    CHECK_THAT(schema_error(R"({"type":"number","minimum":0.2,"maximum":0.8})"), Contains("no integer"));
}

TEST_CASE("schema enum and const", "[grammar][schema]") {
    const char *e = R"({"enum":["red","green",7,null,{"a":[1,2]},"\u00e9\"q"]})";
    for (const char *ok : {R"("red")", R"("green")", "7", "null", R"({"a":[1,2]})", "\"\xC3\xA9\\\"q\""}) {
        INFO(ok);
        CHECK(accepts(e, ok));
    }
    for (const char *bad : {R"("blue")", "7.0", R"("Red")", R"({"a": [1, 2]})", "8"}) {
        INFO(bad);
        CHECK_FALSE(accepts(e, bad));
    }
    // `type` filters the enum.
    CHECK_FALSE(accepts(R"({"type":"string","enum":["a",1]})", "1"));
    CHECK(accepts(R"({"type":"string","enum":["a",1]})", R"("a")"));
    CHECK(accepts(R"({"const":"fixed"})", R"("fixed")"));
    CHECK_FALSE(accepts(R"({"const":"fixed"})", R"("other")"));
    CHECK_THAT(schema_error(R"({"type":"string","enum":[1,2]})"), Contains("#/enum") && Contains("no value matches"));
}

TEST_CASE("schema objects: schema order, optional properties, additional properties", "[grammar][schema]") {
    const char *o = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                        "required":["a","c"]})";
    CHECK(accepts(o, R"({"a":1,"b":"x","c":true})"));
    CHECK(accepts(o, R"({"a":1,"c":false})"));
    CHECK_FALSE(accepts(o, R"({"a":1,"b":"x"})"));             // c is required
    CHECK_FALSE(accepts(o, R"({"c":true,"a":1})"));            // properties come in the schema's order
    CHECK_FALSE(accepts(o, R"({"a":1,"c":true,"d":2})"));      // no keys beyond the declared ones by default
    CHECK_FALSE(accepts(o, R"({"a":"1","c":true})"));
    CHECK_FALSE(accepts(o, R"({"a":1,,"c":true})"));
    const char *opt = R"({"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}}})";
    for (const char *ok : {"{}", R"({"x":1})", R"({"y":2})", R"({"x":1,"y":2})"}) {
        INFO(ok);
        CHECK(accepts(opt, ok));
    }
    CHECK_FALSE(accepts(opt, R"({,"y":2})"));
    CHECK_FALSE(accepts(opt, R"({"x":1,})"));
    // additionalProperties: true allows other keys (never a declared one again); a schema types them.
    const char *more = R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":true})";
    CHECK(accepts(more, R"({"id":1,"extra":[true,null],"i":"x"})"));
    CHECK_FALSE(accepts(more, R"({"id":1,"id":"dup"})"));
    CHECK(accepts(more, R"({"id":1,"idx":2})"));
    const char *typed = R"({"type":"object","additionalProperties":{"type":"integer"}})";
    CHECK(accepts(typed, R"({"k":1,"j":2})"));
    CHECK_FALSE(accepts(typed, R"({"k":"v"})"));
    // No properties declared: any object.
    CHECK(accepts(R"({"type":"object"})", R"({"q":{"r":[1,"s"]}})"));
    // Required names without a property schema take any value.
    CHECK(accepts(R"({"type":"object","required":["z"],"additionalProperties":false})", R"({"z":[1]})"));
    CHECK_FALSE(accepts(R"({"type":"object","required":["z"],"additionalProperties":false})", "{}"));
    // Keys with characters JSON escapes.
    CHECK(accepts(R"({"type":"object","properties":{"a\"b\\c\u00e9":{"type":"null"}},"required":["a\"b\\c\u00e9"]})",
                  "{\"a\\\"b\\\\c\xC3\xA9\":null}"));
}

TEST_CASE("schema arrays: items, counts, prefixItems", "[grammar][schema]") {
    const char *a = R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":4})";
    CHECK_FALSE(accepts(a, "[1]"));
    CHECK(accepts(a, "[1,2]"));
    CHECK(accepts(a, "[1,2,3,4]"));
    CHECK_FALSE(accepts(a, "[1,2,3,4,5]"));
    CHECK_FALSE(accepts(a, R"([1,"2"])"));
    CHECK(accepts(R"({"type":"array"})", R"([1,"a",[null],{}])"));
    CHECK(accepts(R"({"type":"array","items":{"type":"string"}})", "[]"));
    const char *t = R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})";
    CHECK(accepts(t, R"(["a",1])"));
    CHECK_FALSE(accepts(t, R"(["a",1,2])"));
    CHECK_FALSE(accepts(t, R"([1,"a"])"));
    const char *t2 = R"({"type":"array","prefixItems":[{"const":0}],"items":{"type":"boolean"},"maxItems":3})";
    CHECK(accepts(t2, "[0,true,false]"));
    CHECK_FALSE(accepts(t2, "[0,true,false,true]"));
    CHECK(accepts(R"({"type":"array","items":[{"type":"null"}],"additionalItems":false})", "[null]"));
    CHECK(accepts(R"({"type":"array","items":{"type":"array","items":{"type":"integer"}}})", "[[1,2],[],[3]]"));
    CHECK_THAT(schema_error(R"({"type":"array","minItems":3,"maxItems":2})"), Contains("minItems is above maxItems"));
    CHECK_THAT(schema_error(R"({"type":"array","maxItems":-1})"), Contains("#/maxItems") && Contains("non-negative"));
}

TEST_CASE("schema anyOf, oneOf, allOf, $ref and recursion", "[grammar][schema]") {
    const char *any = R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"k":{"const":1}},"required":["k"]}]})";
    CHECK(accepts(any, "5"));
    CHECK(accepts(any, R"({"k":1})"));
    CHECK_FALSE(accepts(any, R"("s")"));
    CHECK(accepts(R"({"oneOf":[{"type":"string"},{"type":"boolean"}]})", "true"));
    CHECK(accepts(R"({"allOf":[{"type":"string"}]})", R"("s")"));
    const char *tree = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                            "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"]}},
                           "$ref":"#/$defs/node"})";
    CHECK(accepts(tree, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
    CHECK_FALSE(accepts(tree, R"({"v":1,"kids":[{"v":2}]})"));
    const char *root_rec = R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})";
    CHECK(accepts(root_rec, R"({"next":{"next":{"next":null}}})"));
    CHECK(accepts(R"({"definitions":{"x":{"type":"boolean"}},"items":{"$ref":"#/definitions/x"}})", "[true]"));
    CHECK(accepts(R"({"$defs":{"a/b":{"type":"null"}},"$ref":"#/$defs/a~1b"})", "null"));
}

TEST_CASE("schema formats: date, time, date-time, uuid enforced; others ignored", "[grammar][schema]") {
    const char *d = R"({"type":"string","format":"date"})";
    CHECK(accepts(d, R"("2024-02-28")"));
    CHECK(accepts(d, R"("1999-12-31")"));
    CHECK_FALSE(accepts(d, R"("2024-02-30")"));
    CHECK_FALSE(accepts(d, R"("2024-04-31")"));
    CHECK_FALSE(accepts(d, R"("2024-13-01")"));
    CHECK_FALSE(accepts(d, R"("24-01-01")"));
    CHECK(accepts(R"({"type":"string","format":"time"})", R"("23:59:59.123Z")"));
    CHECK(accepts(R"({"type":"string","format":"time"})", R"("08:00:00+05:30")"));
    CHECK_FALSE(accepts(R"({"type":"string","format":"time"})", R"("24:00:00Z")"));
    CHECK(accepts(R"({"type":"string","format":"date-time"})", R"("2020-01-02T03:04:05Z")"));
    CHECK(accepts(R"({"type":"string","format":"uuid"})", R"("123e4567-e89b-12d3-a456-426614174000")"));
    CHECK_FALSE(accepts(R"({"type":"string","format":"uuid"})", R"("123e4567e89b12d3a456426614174000")"));
    CHECK(accepts(R"({"type":"string","format":"email"})", R"("not checked")"));
}

TEST_CASE("schema patterns", "[grammar][schema]") {
    const auto p = [](const char *pattern, const char *json) {
        return accepts(fmt::format(R"({{"type":"string","pattern":{}}})", nlohmann::json(pattern).dump()), json);
    };
    CHECK(p("^[a-z]+$", R"("abc")"));
    CHECK_FALSE(p("^[a-z]+$", R"("abC")"));
    CHECK(p("ab", R"("xxabyy")"));  // unanchored: a match anywhere
    CHECK_FALSE(p("ab", R"("xxbayy")"));
    CHECK(p("^\\d{3}-\\d{4}$", R"("555-1234")"));
    CHECK_FALSE(p("^\\d{3}-\\d{4}$", R"("5555-1234")"));
    CHECK(p("^(cat|dog)s?$", R"("dogs")"));
    CHECK(p("^a\"b\\\\c$", R"("a\"b\\c")"));  // characters JSON escapes, in their escaped form
    CHECK(p("^\\n$", R"("\n")"));
    CHECK(p("^.{2}$", "\"\xE4\xB8\xAD\xC3\xA9\""));
    CHECK_FALSE(p("^.$", R"("\n")"));
    CHECK(p("^[^a]+$", "\"\xE4\xB8\xAD\""));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"(a)\\1"})"), Contains("#/pattern") && Contains("backreferences"));
    CHECK_THAT(schema_error(R"j({"type":"string","pattern":"a(?=b)"})j"), Contains("lookaround"));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"\\bword"})"), Contains("word boundaries"));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"a^b"})"), Contains("'^' is only supported"));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"a$b"})"), Contains("'$' is only supported"));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"(ab"})"), Contains("never closed"));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"*a"})"), Contains("nothing to repeat"));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"\\p{L}"})"), Contains("Unicode property"));
    CHECK_THAT(schema_error(R"({"type":"string","pattern":"a","maxLength":3})"), Contains("not supported"));
}

TEST_CASE("schema whitespace: bounded in flexible mode, none in compact mode", "[grammar][schema]") {
    const char *o = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})";
    const grammar flex = schema(o), compact = schema(o, json_whitespace::compact);
    const char *pretty = "{\n  \"a\": [\n    1,\n    2\n  ]\n}";
    CHECK(grammar_test::matches(flex, pretty));
    CHECK(grammar_test::matches(flex, R"({ "a" : [ 1 , 2 ] })"));
    CHECK_FALSE(grammar_test::matches(flex, R"({  "a":[]})"));  // two spaces in one place
    CHECK(grammar_test::matches(flex, "{\n" + std::string(20, ' ') + "\"a\":[]}"));
    CHECK_FALSE(grammar_test::matches(flex, "{\n" + std::string(21, ' ') + "\"a\":[]}"));
    CHECK_FALSE(grammar_test::matches(flex, " {\"a\":[]}"));  // nothing before the value
    CHECK_FALSE(grammar_test::matches(flex, "{\"a\":[]} "));  // or after it
    CHECK(grammar_test::matches(compact, R"({"a":[1,2]})"));
    CHECK_FALSE(grammar_test::matches(compact, R"({"a": [1,2]})"));
    CHECK_FALSE(grammar_test::matches(compact, pretty));
}

TEST_CASE("json_object and json_value grammars", "[grammar][schema]") {
    const grammar obj = grammar::json_object(), val = grammar::json_value();
    for (const char *ok : {"{}", R"({"a":{"b":[1,2.5,-3e2,true,false,null,"x\u00e9"]}})", R"({"a":1,"a":2})"}) {
        INFO(ok);
        CHECK(grammar_test::matches(obj, ok));
        CHECK(grammar_test::matches(val, ok));
    }
    for (const char *other : {"[]", "1", R"("s")", "null"}) {
        INFO(other);
        CHECK_FALSE(grammar_test::matches(obj, other));
        CHECK(grammar_test::matches(val, other));
    }
    for (const char *bad : {"{", R"({"a"})", R"({"a":})", R"({'a':1})", R"({"a":1,})", "[1,]", "tru"}) {
        INFO(bad);
        CHECK_FALSE(grammar_test::matches(val, bad));
    }
}

TEST_CASE("schema errors name the location and the problem", "[grammar][schema]") {
    CHECK_THAT(schema_error(R"({"properties":{"a":{"type":"strng"}}})"), Contains("#/properties/a/type") && Contains("unknown type 'strng'"));
    CHECK_THAT(schema_error(R"({"type":"object","properties":{"a/b":{"not":{}}}})"), Contains("#/properties/a~1b/not") && Contains("not supported"));
    CHECK_THAT(schema_error(R"({"type":"array","uniqueItems":true})"), Contains("#/uniqueItems"));
    CHECK_THAT(schema_error(R"({"$ref":"#/$defs/missing"})"), Contains("#/$ref") && Contains("does not resolve"));
    CHECK_THAT(schema_error(R"({"$ref":"https://example.com/s.json"})"), Contains("only references inside the schema"));
    CHECK_THAT(schema_error(R"({"items":false,"type":"array","minItems":1})"), Contains("asks for more items"));
    CHECK_THAT(schema_error(R"(false)"), Contains("accepts no value"));
    CHECK_THAT(schema_error(R"({"allOf":[{"type":"string"},{"minLength":2}]})"), Contains("#/allOf") && Contains("one schema"));
    CHECK_THAT(schema_error(R"({"type":"object","anyOf":[{"required":["a"]}]})"), Contains("beside 'anyOf'"));
    CHECK_THAT(schema_error(R"({"type":"string","minLength":-1})"), Contains("#/minLength"));
    CHECK_THAT(schema_error(R"({"type":"string","maxLength":100000})"), Contains("limit"));
    CHECK_THAT(schema_error(R"({"required":"a"})"), Contains("#/required"));
    CHECK_THAT(schema_error(R"([1,2])"), Contains("must be an object or a boolean"));
    CHECK_THAT(schema_error(R"({"type":)"), Contains("not valid JSON"));
    CHECK_THAT(schema_error(R"({"$ref":"#"})"), Contains("json schema") && Contains("'ref-root' can never complete"));
    CHECK_THAT(schema_error(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})"),
               Contains("json schema") && Contains("left-recursive"));
    std::string deep = R"({"type":"string"})";
    for (int i = 0; i < 120; ++i) deep = R"({"type":"array","items":)" + deep + "}";
    CHECK_THAT(schema_error(deep), Contains("nested deeper than 100"));
}

TEST_CASE("schema gbnf is valid GBNF on its own", "[grammar][schema]") {
    const char *s = R"({"type":"object","properties":{"n":{"type":"integer","minimum":-5,"maximum":5},"s":{"type":"string","pattern":"^x+$"}},"required":["n"]})";
    const std::string text = json_schema_to_gbnf(nlohmann::ordered_json::parse(s));
    const grammar g = grammar::from_gbnf(text);
    CHECK(g.gbnf() == text);
    CHECK(grammar_test::matches(g, R"({"n":-5,"s":"xx"})"));
    CHECK_FALSE(grammar_test::matches(g, R"({"n":6})"));
}
