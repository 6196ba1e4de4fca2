// tests/unit/tokenizer/test_streamer.cpp - streaming detokenization never splits a UTF-8
// sequence; ill-formed bytes become U+FFFD per maximal subpart (Unicode ch. 3, table 3-8).
#include "toy_vocab.h"

#include "src/tokenizer/utf8.h"

#include <catch2/catch.hpp>

#include <random>

using namespace tandem;

namespace {

const std::string fffd = "\xEF\xBF\xBD";

const tokenizer &toy() {
    static const tokenizer tok = tokenizer::from_vocab(test::toy_vocab());
    return tok;
}

bool valid(const std::string &s) { return utf8::first_invalid(s) == std::string::npos; }

}  // namespace

TEST_CASE("utf8_sanitize replaces maximal subparts", "[tokenizer][utf8]") {
    // Unicode 15 ch. 3, "U+FFFD Substitution of Maximal Subparts" example:
    // 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
    CHECK(utf8_sanitize("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64") ==
          "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d");
    CHECK(utf8_sanitize("\xFF") == fffd);
    CHECK(utf8_sanitize("\xE2\x82" "A") == fffd + "A");              // truncated 3-byte: one FFFD
    CHECK(utf8_sanitize("\xF0\x80\x80") == fffd + fffd + fffd);       // overlong lead F0 80
    CHECK(utf8_sanitize("\xED\xA0\x80") == fffd + fffd + fffd);       // surrogate D800
    CHECK(utf8_sanitize("\xC0\xAF") == fffd + fffd);                  // overlong '/'
    CHECK(utf8_sanitize("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // > U+10FFFF
    CHECK(utf8_sanitize("ok \xE2\x82\xAC") == "ok \xE2\x82\xAC");     // valid stays
    CHECK(utf8_sanitize("\xF1\x80\x80") == fffd);                     // incomplete at the end
}

TEST_CASE("streamer holds back incomplete sequences and replaces invalid ones", "[tokenizer][stream]") {
    token_streamer s(toy());
    CHECK(s.push_bytes("\xE2") == "");
    CHECK(s.push_bytes("\x82") == "");
    CHECK(s.push_bytes("\xAC!") == "\xE2\x82\xAC!");
    CHECK(s.push_bytes("\xE2\x82") == "");
    CHECK(s.push_bytes("A") == fffd + "A");  // the held prefix turned out to be ill-formed
    CHECK(s.push_bytes("\xFF" "b") == fffd + "b");
    CHECK(s.push_bytes("\xF0\x9F") == "");
    CHECK(s.flush() == fffd);
    CHECK(s.flush() == "");
}

TEST_CASE("streamer split at every byte boundary of multi-byte text", "[tokenizer][stream]") {
    // é, €, 世界, 👋🏽, Hangul, combining mark: 1 to 4 byte sequences next to each other.
    const std::string text = "h\xC3\xA9 \xE2\x82\xAC \xE4\xB8\x96\xE7\x95\x8C\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD"
                             "\xEA\xB0\x80q\xCC\x81!";
    for (size_t cut = 0; cut <= text.size(); ++cut) {
        for (size_t cut2 = cut; cut2 <= text.size(); ++cut2) {
            INFO("cuts at " << cut << ", " << cut2);
            token_streamer s(toy());
            const std::string a = s.push_bytes(text.substr(0, cut));
            const std::string b = s.push_bytes(text.substr(cut, cut2 - cut));
            const std::string c = s.push_bytes(text.substr(cut2));
            REQUIRE(valid(a));
            REQUIRE(valid(b));
            REQUIRE(valid(c));
            REQUIRE(a + b + c + s.flush() == text);
        }
    }
}

TEST_CASE("streaming token ids equals sanitized decode", "[tokenizer][stream]") {
    const tokenizer &tok = toy();
    std::vector<int32_t> normal;
    for (int32_t id = 0; id < tok.n_vocab(); ++id)
        if (tok.type(id) != token_type::unused) normal.push_back(id);
    for (uint32_t seed = 1; seed <= 200; ++seed) {
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        // Random ids: mostly single bytes, so sequences are split across tokens and often
        // ill-formed (a continuation byte alone, a lead byte followed by ASCII, ...).
        std::vector<int32_t> ids(1 + rng() % 30);
        for (auto &id : ids) id = normal[rng() % normal.size()];
        token_streamer s(tok);
        std::string streamed;
        for (int32_t id : ids) {
            const std::string out = s.push(id);
            REQUIRE(valid(out));
            streamed += out;
        }
        streamed += s.flush();
        REQUIRE(streamed == utf8_sanitize(tok.decode(ids)));
    }
}

TEST_CASE("streaming the encoding of valid text gives the text back", "[tokenizer][stream]") {
    const tokenizer &tok = toy();
    const std::string text = "<|im_start|>assistant\n\xE4\xBD\xA0\xE5\xA5\xBD, world \xF0\x9F\x98\x80<|im_end|>";
    const auto ids = tok.encode(text, true);
    token_streamer s(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += s.push(id);
    CHECK(s.flush().empty());
    CHECK(streamed == text);
}
