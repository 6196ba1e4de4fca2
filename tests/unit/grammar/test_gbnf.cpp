// tests/unit/grammar/test_gbnf.cpp - GBNF as llama.cpp writes it: every construct accepts exactly
// the strings the syntax guide says it does, and malformed grammars fail with line and column.
#include "grammar_test_util.h"

#include "tandem/error.h"
#include "tandem/grammar.h"

#include <catch2/catch.hpp>

#include <random>

using namespace tandem;
using grammar_test::gbnf_matches;
using Catch::Matchers::Contains;

namespace {

// The error message of a grammar that must not compile (and the kind must be a 400).
std::string gbnf_error(std::string_view text) {
    try {
        grammar::from_gbnf(text);
    } catch (const error &e) {
        REQUIRE(e.kind() == error_kind::invalid_request);
        return e.what();
    }
    FAIL("grammar compiled: " << text);
    return "";
}

}  // namespace

TEST_CASE("gbnf string literals and their escapes", "[grammar][gbnf]") {
    CHECK(gbnf_matches(R"(root ::= "abc")", "abc"));
    CHECK_FALSE(gbnf_matches(R"(root ::= "abc")", "ab"));
    CHECK_FALSE(gbnf_matches(R"(root ::= "abc")", "abcd"));
    CHECK(gbnf_matches(R"(root ::= "a\nb\tc\rd")", "a\nb\tc\rd"));
    CHECK(gbnf_matches(R"(root ::= "q\"b\\e")", "q\"b\\e"));
    CHECK(gbnf_matches(R"(root ::= "\[\]")", "[]"));
    // \x, \u and \U name code points, written as UTF-8.
    CHECK(gbnf_matches(R"(root ::= "\x41\xe9")", "A\xC3\xA9"));
    CHECK(gbnf_matches(R"(root ::= "\u00e9\u4e2d")", "\xC3\xA9\xE4\xB8\xAD"));
    CHECK(gbnf_matches(R"(root ::= "\U0001F600")", "\xF0\x9F\x98\x80"));
    CHECK(gbnf_matches("root ::= \"h\xC3\xA9\xE4\xB8\xAD\"", "h\xC3\xA9\xE4\xB8\xAD"));
    CHECK(gbnf_matches(R"(root ::= "")", ""));
}

TEST_CASE("gbnf character classes", "[grammar][gbnf]") {
    CHECK(gbnf_matches("root ::= [a-c]", "b"));
    CHECK_FALSE(gbnf_matches("root ::= [a-c]", "d"));
    CHECK(gbnf_matches("root ::= [a-cx-z_]", "_"));
    CHECK(gbnf_matches("root ::= [a-cx-z_]", "y"));
    CHECK_FALSE(gbnf_matches("root ::= [a-cx-z_]", "m"));
    CHECK(gbnf_matches("root ::= [^a-c]", "d"));
    CHECK_FALSE(gbnf_matches("root ::= [^a-c]", "a"));
    // A negated class matches any other code point, multi-byte ones included.
    CHECK(gbnf_matches("root ::= [^a]", "\xE4\xB8\xAD"));
    CHECK(gbnf_matches("root ::= [^a]", "\xF0\x9F\x98\x80"));
    CHECK_FALSE(gbnf_matches("root ::= [^a]", "\xE4\xB8"));
    CHECK(gbnf_matches(R"(root ::= [\]\[\\])", "]"));
    CHECK(gbnf_matches(R"(root ::= [\]\[\\])", "\\"));
    CHECK(gbnf_matches(R"(root ::= [a-])", "-"));
    CHECK(gbnf_matches(R"(root ::= [\x00-\x1F])", std::string(1, '\x1F')));
    CHECK(gbnf_matches(R"(root ::= [\u4e00-\u9fff])", "\xE4\xB8\xAD"));
    CHECK_FALSE(gbnf_matches(R"(root ::= [\u4e00-\u9fff])", "\xE3\x81\x82"));  // U+3042 is below the range
    CHECK(gbnf_matches("root ::= [\xC3\xA0-\xC3\xBF]", "\xC3\xA9"));             // raw UTF-8 range ends
}

TEST_CASE("gbnf dot matches one code point, never ill-formed UTF-8", "[grammar][gbnf]") {
    const grammar g = grammar::from_gbnf("root ::= .");
    for (const char *ok : {"a", "\n", "\xC3\xA9", "\xE4\xB8\xAD", "\xEF\xBF\xBF", "\xF4\x8F\xBF\xBF"}) {
        INFO(ok);
        CHECK(grammar_test::matches(g, ok));
    }
    // Overlong, surrogate, beyond U+10FFFF, lone continuation, truncated, two characters.
    for (const char *bad : {"\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xE4\xB8", "ab", "\xFF"}) {
        INFO(bad);
        CHECK_FALSE(grammar_test::matches(g, bad));
    }
}

TEST_CASE("gbnf sequences, alternatives, grouping and rules", "[grammar][gbnf]") {
    const char *g = R"g(
root ::= greeting " " name ("!" | "?")
greeting ::= "hi" | "hello"
name ::= [A-Z] [a-z]*
)g";
    CHECK(gbnf_matches(g, "hi Bob!"));
    CHECK(gbnf_matches(g, "hello Al?"));
    CHECK(gbnf_matches(g, "hi X!"));
    CHECK_FALSE(gbnf_matches(g, "hi bob!"));
    CHECK_FALSE(gbnf_matches(g, "hey Bob!"));
    CHECK_FALSE(gbnf_matches(g, "hi Bob"));
    // An empty alternative, and alternatives continued on the next line after `|`.
    CHECK(gbnf_matches("root ::= \"a\" | \n  \"b\" |", ""));
    CHECK(gbnf_matches("root ::= \"a\" | \n  \"b\" |", "b"));
    // Rules may be used before they are defined; newlines inside parentheses.
    CHECK(gbnf_matches("root ::= (\n  x\n  y\n)\nx ::= \"1\"\ny ::= \"2\"", "12"));
}

TEST_CASE("gbnf repetition operators count exactly", "[grammar][gbnf]") {
    const auto count_ok = [](const char *op, int n) {
        return gbnf_matches(std::string("root ::= \"a\"") + op, std::string(size_t(n), 'a'));
    };
    for (int n = 0; n <= 6; ++n) {
        INFO("n = " << n);
        CHECK(count_ok("*", n));
        CHECK(count_ok("+", n) == (n >= 1));
        CHECK(count_ok("?", n) == (n <= 1));
        CHECK(count_ok("{3}", n) == (n == 3));
        CHECK(count_ok("{2,}", n) == (n >= 2));
        CHECK(count_ok("{2,4}", n) == (n >= 2 && n <= 4));
        CHECK(count_ok("{0,2}", n) == (n <= 2));
        CHECK(count_ok("{ 1 , 3 }", n) == (n >= 1 && n <= 3));
    }
    // Repetition of a group, and of a rule.
    CHECK(gbnf_matches(R"g(root ::= ("ab" | "c"){2,3})g", "abcab"));
    CHECK_FALSE(gbnf_matches(R"g(root ::= ("ab" | "c"){2,3})g", "ab"));
    CHECK(gbnf_matches("root ::= item+\nitem ::= [0-9] \",\"", "1,2,3,"));
}

TEST_CASE("gbnf comments and recursion", "[grammar][gbnf]") {
    const char *g = R"gbnf(# balanced parentheses
root ::= pair*   # any number of them
pair ::= "(" root ")"
)gbnf";
    CHECK(gbnf_matches(g, ""));
    CHECK(gbnf_matches(g, "()(())"));
    CHECK(gbnf_matches(g, "((()()))"));
    CHECK_FALSE(gbnf_matches(g, "(()"));
    CHECK_FALSE(gbnf_matches(g, "())"));
    CHECK(grammar_test::viable_prefix(grammar::from_gbnf(g), "((("));
    CHECK(gbnf_matches("root ::= x\nx ::= \"a\" x | \"b\"", "aaab"));  // right recursion
}

TEST_CASE("gbnf nullable repetitions terminate", "[grammar][gbnf]") {
    // A starred item that may be empty loops on epsilon; expansion must still end.
    CHECK(gbnf_matches(R"g(root ::= ("a"?)* "b")g", "aab"));
    CHECK(gbnf_matches(R"g(root ::= ("a"? | "c")* "b")g", "b"));
    CHECK(gbnf_matches("root ::= x* \"b\"\nx ::= \"a\"?", "aaab"));
}

TEST_CASE("gbnf errors name line and column", "[grammar][gbnf]") {
    CHECK_THAT(gbnf_error("root ::= \"a\"\nfoo ::= bar"), Contains("line 2, column 9") && Contains("undefined rule 'bar'"));
    CHECK_THAT(gbnf_error("start ::= \"a\""), Contains("no rule named 'root'"));
    CHECK_THAT(gbnf_error("root ::= \"abc"), Contains("line 1, column 10") && Contains("unterminated string"));
    CHECK_THAT(gbnf_error("root ::= [abc"), Contains("unterminated character class"));
    CHECK_THAT(gbnf_error("root ::= (\"a\""), Contains("never closed"));
    CHECK_THAT(gbnf_error("root ::= \"a\")"), Contains("')' without a matching '('"));
    CHECK_THAT(gbnf_error("root = \"a\""), Contains("line 1, column 6") && Contains("expected '::='"));
    CHECK_THAT(gbnf_error("root ::= \"\\q\""), Contains("unknown escape '\\q'"));
    CHECK_THAT(gbnf_error("root ::= \"\\x4\""), Contains("\\x needs 2 hex digits"));
    CHECK_THAT(gbnf_error("root ::= \"\\uD800\""), Contains("surrogate"));
    CHECK_THAT(gbnf_error("root ::= \"\\U00110000\""), Contains("beyond U+10FFFF"));
    CHECK_THAT(gbnf_error("root ::= [z-a]"), Contains("ends before it starts"));
    CHECK_THAT(gbnf_error("root ::= \"a\"{3,2}"), Contains("maximum below its minimum"));
    CHECK_THAT(gbnf_error("root ::= \"a\"{1,20000}"), Contains("above the limit of 10000"));
    CHECK_THAT(gbnf_error("root ::= \"a\"{x}"), Contains("expected a number"));
    CHECK_THAT(gbnf_error("root ::= \"a\"**"), Contains("second repetition operator"));
    CHECK_THAT(gbnf_error("root ::= \"a\"\nroot ::= \"b\""), Contains("line 2, column 1") && Contains("defined twice"));
    CHECK_THAT(gbnf_error("root ::= <think> \"a\""), Contains("token references"));
    CHECK_THAT(gbnf_error("root ::= \"a\" b ::= \"c\""), Contains("new rule must start on its own line"));
    CHECK_THAT(gbnf_error("root ::= \"a\" @"), Contains("unexpected '@'"));
    CHECK_THAT(gbnf_error("root ::= \"\xC3\""), Contains("invalid UTF-8"));
    CHECK_THAT(gbnf_error(std::string("root ::= ") + std::string(120, '(') + "\"a\"" + std::string(120, ')')),
               Contains("nested deeper than 100"));
    CHECK_THAT(gbnf_error("root ::= \"" + std::string((1 << 20) + 1, 'a') + "\""), Contains("larger than"));
}

TEST_CASE("gbnf refuses left recursion and rules that never complete", "[grammar][gbnf]") {
    CHECK_THAT(gbnf_error("root ::= root \"a\" | \"b\""), Contains("left-recursive") && Contains("'root' -> 'root'"));
    CHECK_THAT(gbnf_error("root ::= x\nx ::= y \"a\" | \"b\"\ny ::= \"\" | x"), Contains("left-recursive"));
    // Through a nullable prefix: z may match nothing, so x reaches itself before any text.
    CHECK_THAT(gbnf_error("root ::= x\nx ::= z x \"a\" | \"b\"\nz ::= \"c\"?"), Contains("left-recursive"));
    CHECK_THAT(gbnf_error("root ::= \"a\" x\nx ::= \"b\" x"), Contains("line 2") && Contains("'x' can never complete"));
    CHECK_THAT(gbnf_error("root ::= []"), Contains("'root' can never complete"));
    // A dead alternative next to a live one is allowed (and never offered).
    CHECK(gbnf_matches("root ::= \"a\" [] | \"b\"", "b"));
    CHECK_FALSE(grammar_test::viable_prefix(grammar::from_gbnf("root ::= \"a\" [] | \"b\""), "a"));
}

TEST_CASE("gbnf repetition bounds expand within the state limit", "[grammar][gbnf]") {
    // 10000 copies of a small item fit; a large item repeated 10000 times times 1000 does not.
    CHECK(grammar::from_gbnf("root ::= [a-z]{0,10000}").n_states() > 10000);
    CHECK_THAT(gbnf_error("root ::= ([a-z]{0,1000}){0,10000}"), Contains("automaton states"));
}

TEST_CASE("mangled grammars and schemas compile or fail with a request error", "[grammar][gbnf]") {
    // Deterministic mutations (bytes replaced, inserted, deleted, spans duplicated) of valid
    // inputs: anything but success or tandem::error (a crash, another exception) fails the test.
    const std::string seeds[] = {
        "root ::= (\"a\" | [b-d]+ x)* \"\\u00e9\"{2,3} .?\nx ::= \"(\" root \")\" # c\n",
        R"({"type":"object","properties":{"a":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":3},)"
        R"("b":{"type":"string","pattern":"^(x|y{2,})[^z]$"},"c":{"anyOf":[{"type":"integer","minimum":-3},{"enum":[1,"q"]}]}},)"
        R"("required":["a"],"$defs":{"n":{"type":["number","null"],"maximum":9}}})",
    };
    const char alphabet[] = "()[]{}|*+?.\"\\^$-,:#\n ax0{}\xC3\xA9";
    std::mt19937_64 rng(99);
    int compiled = 0, refused = 0;
    for (int i = 0; i < 3000; ++i) {
        std::string s = seeds[i % 2];
        for (int edits = 1 + int(rng() % 4); edits > 0; --edits) {
            const size_t at = rng() % (s.size() + 1);
            switch (rng() % 4) {
            case 0: if (at < s.size()) s[at] = alphabet[rng() % (sizeof(alphabet) - 1)]; break;
            case 1: s.insert(at, 1, alphabet[rng() % (sizeof(alphabet) - 1)]); break;
            case 2: if (at < s.size()) s.erase(at, 1 + rng() % 3); break;
            default: s.insert(at, s.substr(rng() % s.size(), rng() % 12)); break;
            }
        }
        INFO(s);
        try {
            const grammar g = i % 2 ? grammar::from_json_schema_text(s) : grammar::from_gbnf(s);
            ++compiled;
            grammar_test::viable_prefix(g, "{\"a\":[1");
        } catch (const error &e) {
            REQUIRE(e.kind() == error_kind::invalid_request);
            ++refused;
        }
    }
    CHECK(compiled > 100);
    CHECK(refused > 100);
}
