// tests/unit/tokenizer/test_pre_tokenizer.cpp - the Qwen2 and GPT-2 regex splits and NFC.
// Every expected split below is derived by hand from the pattern: at each position the first
// alternative that matches wins, quantifiers are greedy and backtrack.
#include "src/tokenizer/pre_tokenizer.h"
#include "tokenizer_test_util.h"
#include "tandem/error.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace tandem;

namespace {

std::vector<std::string> split(std::string_view pre, const std::string &text) {
    static const pre_tokenizer qwen2(pre_tokenizer_spec_for("qwen2").patterns);
    static const pre_tokenizer gpt2(pre_tokenizer_spec_for("default").patterns);
    const pre_tokenizer &p = pre == "qwen2" ? qwen2 : gpt2;
    return test::split_with(p, text);
}

using pieces = std::vector<std::string>;

}  // namespace

TEST_CASE("qwen2 split: words take one leading non-letter", "[tokenizer][pre]") {
    CHECK(split("qwen2", "Hello world") == pieces{"Hello", " world"});
    // '(' is the optional prefix of the letter run; ')' is a punctuation run.
    CHECK(split("qwen2", "(hello)") == pieces{"(hello", ")"});
    CHECK(split("qwen2", "$x = y_z") == pieces{"$x", " =", " y", "_z"});
}

TEST_CASE("qwen2 split: contractions, case-insensitive, tried first", "[tokenizer][pre]") {
    CHECK(split("qwen2", "I'm don't WE'LL") == pieces{"I", "'m", " don", "'t", " WE", "'LL"});
    CHECK(split("qwen2", "it's they're I've he'd") ==
          pieces{"it", "'s", " they", "'re", " I", "'ve", " he", "'d"});
    // "'s" wins over the letter run even at the start of a word.
    CHECK(split("qwen2", "'sup") == pieces{"'s", "up"});
    // A quote before a non-contraction is the one-character prefix of the letters.
    CHECK(split("qwen2", "'hello'") == pieces{"'hello", "'"});
}

TEST_CASE("qwen2 split: digits one at a time", "[tokenizer][pre]") {
    CHECK(split("qwen2", "12345") == pieces{"1", "2", "3", "4", "5"});
    CHECK(split("qwen2", "abc123") == pieces{"abc", "1", "2", "3"});
    // The space before a digit cannot join it (no alternative allows " \p{N}"), and \s+(?!\S)
    // fails before the digit, so the plain \s+ takes the space alone.
    CHECK(split("qwen2", "x 42") == pieces{"x", " ", "4", "2"});
    CHECK(split("qwen2", "3.14") == pieces{"3", ".", "1", "4"});
    // Other Unicode numbers are \p{N} as well: Arabic-Indic digits, superscript two.
    CHECK(split("qwen2", "\xD9\xA1\xD9\xA2\xC2\xB2") == pieces{"\xD9\xA1", "\xD9\xA2", "\xC2\xB2"});
}

TEST_CASE("qwen2 split: whitespace runs", "[tokenizer][pre]") {
    // \s+(?!\S) backs off one space so the last one prefixes the next word.
    CHECK(split("qwen2", "a   b") == pieces{"a", "  ", " b"});
    CHECK(split("qwen2", "a  ") == pieces{"a", "  "});
    CHECK(split("qwen2", "   ") == pieces{"   "});
    CHECK(split("qwen2", "\tx") == pieces{"\tx"});  // tab is a non-letter prefix too
    CHECK(split("qwen2", "a\t\tb") == pieces{"a", "\t", "\tb"});
}

TEST_CASE("qwen2 split: newlines", "[tokenizer][pre]") {
    CHECK(split("qwen2", "a\n\nb") == pieces{"a", "\n\n", "b"});
    CHECK(split("qwen2", "a\r\nb") == pieces{"a", "\r\n", "b"});
    // \s*[\r\n]+ ends at the last newline; the space after it prefixes the word.
    CHECK(split("qwen2", "a \n b") == pieces{"a", " \n", " b"});
    CHECK(split("qwen2", "a\n  \n\n  b") == pieces{"a", "\n  \n\n", " ", " b"});
    // A newline cannot be the prefix of letters.
    CHECK(split("qwen2", "\nb") == pieces{"\n", "b"});
}

TEST_CASE("qwen2 split: punctuation runs absorb trailing newlines", "[tokenizer][pre]") {
    CHECK(split("qwen2", "Hello, world!!!") == pieces{"Hello", ",", " world", "!!!"});
    CHECK(split("qwen2", "x...\n\ny") == pieces{"x", "...\n\n", "y"});
    CHECK(split("qwen2", "a ?? b") == pieces{"a", " ??", " b"});
    // ' "' cannot prefix letters (only one prefix character), so it is a punctuation run.
    CHECK(split("qwen2", "{\n  \"k\": 1}") == pieces{"{\n", " ", " \"", "k", "\":", " ", "1", "}"});
}

TEST_CASE("qwen2 split: CJK, emoji, other scripts", "[tokenizer][pre]") {
    CHECK(split("qwen2", "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C") ==  // 你好世界: one letter run
          pieces{"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C"});
    CHECK(split("qwen2", "\xE6\x97\xA5\xE6\x9C\xAC" "42") == pieces{"\xE6\x97\xA5\xE6\x9C\xAC", "4", "2"});
    // 👋🏽 are symbols (So, Sk): a punctuation-like run with its leading space.
    CHECK(split("qwen2", "hi \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!") == pieces{"hi", " \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!"});
    // Привет мир; Latin and Cyrillic letters in one run stay together.
    CHECK(split("qwen2", "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80") ==
          pieces{"\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", " \xD0\xBC\xD0\xB8\xD1\x80"});
    CHECK(split("qwen2", "ab\xD0\x9F\xD1\x80") == pieces{"ab\xD0\x9F\xD1\x80"});
    // A combining mark (Mn, not \p{L}) that NFC cannot compose acts as the prefix of letters.
    CHECK(split("qwen2", "q\xCC\x81x") == pieces{"q", "\xCC\x81x"});
    // «word»: Pi/Pf punctuation.
    CHECK(split("qwen2", "\xC2\xABword\xC2\xBB") == pieces{"\xC2\xABword", "\xC2\xBB"});
}

TEST_CASE("qwen2 split: \\s is Unicode White_Space", "[tokenizer][pre]") {
    // U+3000 IDEOGRAPHIC SPACE is White_Space: it behaves like a space run.
    CHECK(split("qwen2", "a\xE3\x80\x80\xE3\x80\x80" "b") == pieces{"a", "\xE3\x80\x80", "\xE3\x80\x80" "b"});
    // U+00A0 NO-BREAK SPACE too.
    CHECK(split("qwen2", "a\xC2\xA0\xC2\xA0" "b") == pieces{"a", "\xC2\xA0", "\xC2\xA0" "b"});
    // U+180E MONGOLIAN VOWEL SEPARATOR is Cf and not White_Space (Oniguruma, which HF uses),
    // though PCRE2's UCP \s would include it: here it is a punctuation-like run.
    CHECK(split("qwen2", "a\xE1\xA0\x8E\xE1\xA0\x8E" "b") == pieces{"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b"});
}

TEST_CASE("gpt2 (default) split joins digit runs and spaces before them", "[tokenizer][pre]") {
    CHECK(split("default", "abc 123 4") == pieces{"abc", " 123", " 4"});
    CHECK(split("default", "I'm  ok!!") == pieces{"I", "'m", " ", " ok", "!!"});
    // The GPT-2 pattern is case-sensitive: "'LL" is not a contraction.
    CHECK(split("default", "WE'LL") == pieces{"WE", "'", "LL"});
}

TEST_CASE("unknown pre-tokenizer names are unsupported", "[tokenizer][pre]") {
    try {
        pre_tokenizer_spec_for("llama-bpe");
        FAIL("no error");
    } catch (const error &e) {
        CHECK(e.kind() == error_kind::unsupported);
        CHECK(std::string(e.what()).find("llama-bpe") != std::string::npos);
    }
}

TEST_CASE("NFC composes and reorders", "[tokenizer][nfc]") {
    CHECK(nfc("caf" "e\xCC\x81") == "caf\xC3\xA9");                 // e + U+0301 -> U+00E9
    CHECK(nfc("\xE1\x84\x80\xE1\x85\xA1") == "\xEA\xB0\x80");         // Hangul jamo G + A -> U+AC00
    CHECK(nfc("\xE2\x84\xAB") == "\xC3\x85");                         // U+212B ANGSTROM -> U+00C5
    CHECK(nfc("q\xCC\x81") == "q\xCC\x81");                           // nothing to compose
    CHECK(nfc("plain ascii") == "plain ascii");
    // Canonical ordering: U+0323 (ccc 220) sorts before U+0307 (ccc 230); then s + dot below
    // + dot above composes to U+1E69.
    CHECK(nfc("s\xCC\x87\xCC\xA3") == "\xE1\xB9\xA9");
}
