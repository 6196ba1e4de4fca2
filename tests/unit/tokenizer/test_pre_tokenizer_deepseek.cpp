// tests/unit/tokenizer/test_pre_tokenizer_deepseek.cpp - the DeepSeek pre-tokenizer sequences
// (deepseek-v3, deepseek-llm) and HF Split's handling of empty matches. Every expected split is
// derived by hand from the patterns: each stage splits every piece of the stage before as a
// subject of its own; at each position the first alternative that matches wins, quantifiers are
// greedy and backtrack; matches and the gaps between them are pieces.
#include "src/tokenizer/pre_tokenizer.h"
#include "tokenizer_test_util.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace tandem;

namespace {

using pieces = std::vector<std::string>;

pieces split_with(const pre_tokenizer &p, const std::string &text) { return test::split_with(p, text); }

pieces split(const std::string &pre, const std::string &text) {
    static std::map<std::string, std::unique_ptr<pre_tokenizer>> cache;
    auto &p = cache[pre];
    if (!p) p = std::make_unique<pre_tokenizer>(pre_tokenizer_spec_for(pre).patterns);
    return split_with(*p, text);
}

}  // namespace

TEST_CASE("deepseek specs: stage counts and no NFC", "[tokenizer][pre][deepseek]") {
    const auto v3 = pre_tokenizer_spec_for("deepseek-v3"), llm = pre_tokenizer_spec_for("deepseek-llm");
    CHECK(v3.patterns.size() == 3);
    CHECK(llm.patterns.size() == 6);
    CHECK_FALSE(v3.nfc);
    CHECK_FALSE(llm.nfc);
    CHECK(pre_tokenizer_spec_for("qwen2").nfc);
}

TEST_CASE("deepseek-v3: digits in groups of at most three, from the left", "[tokenizer][pre][deepseek]") {
    // Stage 1 isolates the groups; stage 3 finds nothing to match inside a digit group.
    CHECK(split("deepseek-v3", "1234567") == pieces{"123", "456", "7"});
    CHECK(split("deepseek-v3", "abc12345def") == pieces{"abc", "123", "45", "def"});
    CHECK(split("deepseek-v3", " 1000") == pieces{" ", "100", "0"});
    CHECK(split("deepseek-v3", "3.14") == pieces{"3", ".", "14"});
    // Other \p{N}: Arabic-Indic one, two, three, four; superscript two.
    CHECK(split("deepseek-v3", "\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4\xC2\xB2") ==
          pieces{"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4\xC2\xB2"});
    // "  " is its own subject after stage 1, so \s+(?!\S) sees its end, not the digit after it.
    CHECK(split("deepseek-v3", "a  12") == pieces{"a", "  ", "12"});
}

TEST_CASE("deepseek-v3: CJK ideographs and kana runs are isolated", "[tokenizer][pre][deepseek]") {
    CHECK(split("deepseek-v3", "你好world") == pieces{"你好", "world"});
    CHECK(split("deepseek-v3", "hello世界") == pieces{"hello", "世界"});
    // Hiragana, ideographs and Katakana (with the prolonged sound mark U+30FC) form one run.
    CHECK(split("deepseek-v3", "こんにちは世界") == pieces{"こんにちは世界"});
    CHECK(split("deepseek-v3", "東京タワー") == pieces{"東京タワー"});
    // The space before a CJK run does not join it (it would under qwen2).
    CHECK(split("deepseek-v3", "a 中文") == pieces{"a", " ", "中文"});
    // U+FF0C FULLWIDTH COMMA is outside the CJK class: a punctuation run of stage 3.
    CHECK(split("deepseek-v3", "中文，你好") == pieces{"中文", "，", "你好"});
    // Hangul is not in the class: letters of stage 3, a space prefixing the second word.
    CHECK(split("deepseek-v3", "안녕 세계") == pieces{"안녕", " 세계"});
}

TEST_CASE("deepseek-v3: punctuation and letters", "[tokenizer][pre][deepseek]") {
    // One ASCII punctuation character takes the ASCII letters after it.
    CHECK(split("deepseek-v3", ".NET") == pieces{".NET"});
    CHECK(split("deepseek-v3", "x.append") == pieces{"x", ".append"});
    CHECK(split("deepseek-v3", "don't") == pieces{"don", "'t"});
    CHECK(split("deepseek-v3", "(hello)") == pieces{"(hello", ")"});
    CHECK(split("deepseek-v3", "$x = y_z") == pieces{"$x", " =", " y", "_z"});
    // Only ASCII letters follow the punctuation: é ends the first alternative.
    CHECK(split("deepseek-v3", ".abcé") == pieces{".abc", "é"});
    CHECK(split("deepseek-v3", ".été") == pieces{".", "été"});
    CHECK(split("deepseek-v3", "hello, world!") == pieces{"hello", ",", " world", "!"});
    // « » are not in the ASCII class and, being \p{P}, cannot prefix letters.
    CHECK(split("deepseek-v3", "«word»") == pieces{"«", "word", "»"});
    CHECK(split("deepseek-v3", "a ?? b") == pieces{"a", " ??", " b"});
}

TEST_CASE("deepseek-v3: marks stay with letters, emoji, gaps", "[tokenizer][pre][deepseek]") {
    // [\p{L}\p{M}]+: Devanagari vowel signs and viramas do not split words.
    CHECK(split("deepseek-v3", "नमस्ते दुनिया") == pieces{"नमस्ते", " दुनिया"});
    // No NFC: e + U+0301 stays decomposed and is one letter run.
    CHECK(split("deepseek-v3", "caf" "e\xCC\x81!") == pieces{"caf" "e\xCC\x81", "!"});
    // A leading combining mark is the optional prefix (it is not L, P or S).
    CHECK(split("deepseek-v3", "\xCC\x81x") == pieces{"\xCC\x81x"});
    // 👋 (So) and 🏽 (Sk) with "!": one symbol run taking the leading space.
    CHECK(split("deepseek-v3", "hi 👋🏽!") == pieces{"hi", " 👋🏽!"});
    // U+200D ZERO WIDTH JOINER (Cf) matches no alternative: it is left as a gap piece.
    CHECK(split("deepseek-v3", "👨\u200D👩\u200D👧") == pieces{"👨", "\u200D", "👩", "\u200D", "👧"});
}

TEST_CASE("deepseek-v3: newlines and whitespace runs", "[tokenizer][pre][deepseek]") {
    CHECK(split("deepseek-v3", "a\n\nb") == pieces{"a", "\n\n", "b"});
    CHECK(split("deepseek-v3", "a\r\nb") == pieces{"a", "\r\n", "b"});
    CHECK(split("deepseek-v3", "a \n b") == pieces{"a", " \n", " b"});
    CHECK(split("deepseek-v3", "a\n  b") == pieces{"a", "\n", " ", " b"});
    // A punctuation run absorbs the newlines after it.
    CHECK(split("deepseek-v3", "x.\n\ny") == pieces{"x", ".\n\n", "y"});
    CHECK(split("deepseek-v3", "ab   ") == pieces{"ab", "   "});
    CHECK(split("deepseek-v3", "a   b") == pieces{"a", "  ", " b"});
    // A tab is a non-letter prefix of the word after it.
    CHECK(split("deepseek-v3", "\tx") == pieces{"\tx"});
    // U+3000 IDEOGRAPHIC SPACE is \s (White_Space); the last one prefixes the letters.
    CHECK(split("deepseek-v3", "a\xE3\x80\x80\xE3\x80\x80" "b") == pieces{"a", "\xE3\x80\x80", "\xE3\x80\x80" "b"});
}

TEST_CASE("deepseek-llm: newlines one at a time, digits one at a time", "[tokenizer][pre][deepseek]") {
    CHECK(split("deepseek-llm", "a\n\nb") == pieces{"a", "\n", "\n", "b"});
    CHECK(split("deepseek-llm", "x.\r\ny") == pieces{"x", ".", "\r", "\n", "y"});
    CHECK(split("deepseek-llm", "12345") == pieces{"1", "2", "3", "4", "5"});
    CHECK(split("deepseek-llm", "abc123") == pieces{"abc", "1", "2", "3"});
    // The space before a digit is no stage's match: a gap piece.
    CHECK(split("deepseek-llm", " 42") == pieces{" ", "4", "2"});
}

TEST_CASE("deepseek-llm: cased letters, punctuation, trailing spaces", "[tokenizer][pre][deepseek]") {
    CHECK(split("deepseek-llm", "Hello world") == pieces{"Hello", " world"});
    CHECK(split("deepseek-llm", "Hello, world!") == pieces{"Hello", ",", " world", "!"});
    CHECK(split("deepseek-llm", "x.append") == pieces{"x", ".", "append"});
    CHECK(split("deepseek-llm", "$x = y_z") == pieces{"$", "x", " =", " y", "_", "z"});
    CHECK(split("deepseek-llm", "a ?? b") == pieces{"a", " ??", " b"});
    // "!!" is stage 3's; the spaces after it are stage 4's \s+$.
    CHECK(split("deepseek-llm", "ok!!  ") == pieces{"ok", "!!", "  "});
    CHECK(split("deepseek-llm", "ab   ") == pieces{"ab", "   "});
    CHECK(split("deepseek-llm", "a   b") == pieces{"a", "  ", " b"});
    CHECK(split("deepseek-llm", "Привет мир") == pieces{"Привет", " мир"});
    // Stage 3's class spans ':' to '~', ASCII letters included, so it splits the ASCII letters
    // of a stage-2 word from the others.
    CHECK(split("deepseek-llm", "café") == pieces{"caf", "é"});
    CHECK(split("deepseek-llm", " café") == pieces{" caf", "é"});
    // U+2D00 (Georgian, Ll) is not in the letter class but in stage 5's U+0800-U+4E00.
    CHECK(split("deepseek-llm", "a\u2D00b") == pieces{"a", "\u2D00", "b"});
}

TEST_CASE("deepseek-llm: CJK, Hangul and scripts outside every class", "[tokenizer][pre][deepseek]") {
    CHECK(split("deepseek-llm", "你好world") == pieces{"你好", "world"});
    CHECK(split("deepseek-llm", "中文，你好") == pieces{"中文", "，", "你好"});
    CHECK(split("deepseek-llm", "안녕 세계") == pieces{"안녕", " ", "세계"});
    // Devanagari lies in U+0800-U+4E00, marks included.
    CHECK(split("deepseek-llm", "नमस्ते दुनिया") == pieces{"नमस्ते", " ", "दुनिया"});
    // Arabic (U+0600-U+06FF) is in no class: the whole text stays one piece, space and all.
    CHECK(split("deepseek-llm", "مرحبا بالعالم") == pieces{"مرحبا بالعالم"});
    CHECK(split("deepseek-llm", "hi 👋!") == pieces{"hi", " 👋", "!"});
}

TEST_CASE("HF Split: empty matches cut gaps and make no pieces", "[tokenizer][pre]") {
    // x* matches empty at a, b, c and the end: the empty match right after "xx" is skipped and
    // the search moves one character on, as Oniguruma's iterator does.
    const pre_tokenizer p(std::string("x*"));
    CHECK(split_with(p, "abxxc") == pieces{"a", "b", "xx", "c"});
    CHECK(split_with(p, "a\xC3\xA9x") == pieces{"a", "\xC3\xA9", "x"});
    CHECK(split_with(p, "xx") == pieces{"xx"});
    // A sequence: the second pattern sees each piece of the first as its own subject, so the
    // lookahead finds the end of "aa", not the "b" after it.
    const pre_tokenizer seq(std::vector<std::string>{"b", "a+(?!b)|a"});
    CHECK(split_with(seq, "aab") == pieces{"aa", "b"});
}
