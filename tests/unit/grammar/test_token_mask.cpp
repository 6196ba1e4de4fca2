// tests/unit/grammar/test_token_mask.cpp - token masks against brute force: at states reached by
// random generations, a token's bit is set iff a fresh matcher fed the same text accepts the
// token's bytes; end-of-generation exactly when complete; special tokens never. Also snapshots,
// rollback, shared constraints, and tokens that end inside a UTF-8 character.
#include "grammar_test_util.h"
#include "grammar_walk.h"
#include "synth_vocab.h"

#include "tandem/error.h"
#include "tandem/grammar.h"

#include <catch2/catch.hpp>

#include <random>
#include <set>

using namespace tandem;

namespace {

bool bit(const std::vector<uint32_t> &mask, int32_t id) { return (mask[size_t(id) >> 5] >> (id & 31)) & 1; }

// Pieces JSON-like grammars care about, in whole and cut UTF-8 forms, glued into tokens.
grammar_test::synth_vocab fragment_vocab(uint64_t seed, size_t n_tokens) {
    static const char *pieces[] = {"{", "}", "[", "]", "\"", ":", ",", " ", "  ", "\n", "\t", "\\", "\\n", "\\\"", "u", "00",
                                   "e9", "0", "1", "7", "-", ".", "e", "+", "a", "b", "x", "id", "name", "true", "false",
                                   "null", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xC3", "\xE4\xB8", "\xAD",
                                   "\x9F\x98", "\xFF", "(", ")", "ab", "cat", "dog", "s"};
    std::mt19937_64 rng(seed);
    grammar_test::synth_vocab v;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, char(b)));
    std::set<std::string> seen(v.tokens.begin(), v.tokens.end());
    while (v.tokens.size() < n_tokens) {
        std::string s;
        const size_t n = 1 + rng() % 4;
        for (size_t i = 0; i < n; ++i) s += pieces[rng() % std::size(pieces)];
        if (seen.insert(s).second) v.tokens.push_back(s);
    }
    v.tokens.push_back("");  // an unused entry: never allowed
    v.special_ids.push_back(int32_t(v.tokens.size()));
    v.tokens.push_back("{");  // a special token whose text is also ordinary text
    v.eog_ids.push_back(int32_t(v.tokens.size()));
    v.tokens.push_back("</s>");
    return v;
}

// Compares the mask with brute force at the matcher's current state (reached by `text`): an
// oracle matcher of its own constraint, fed the text byte by byte, tries each token's bytes.
void check_mask(grammar_matcher &m, const grammar &g, const grammar_constraint &c, const grammar_test::synth_vocab &v,
                const std::string &text) {
    std::vector<uint32_t> mask(size_t(c.vocab().n_mask_words()));
    m.fill_mask(mask);
    INFO("after " << text.size() << " bytes: " << text);
    const grammar_constraint own(g, c.vocab());
    grammar_matcher oracle(own);
    for (char b : text) REQUIRE(oracle.accept_bytes(std::string_view(&b, 1)));
    for (int32_t id = 0; id < int32_t(v.tokens.size()); ++id) {
        const bool eog = std::find(v.eog_ids.begin(), v.eog_ids.end(), id) != v.eog_ids.end();
        const bool special = std::find(v.special_ids.begin(), v.special_ids.end(), id) != v.special_ids.end();
        bool expect;
        if (eog) {
            expect = oracle.is_complete();
        } else if (special || v.tokens[size_t(id)].empty()) {
            expect = false;
        } else {
            const grammar_snapshot s = oracle.snapshot();
            expect = oracle.accept_bytes(v.tokens[size_t(id)]);
            oracle.restore(s);
        }
        INFO("token " << id << " '" << v.tokens[size_t(id)] << "'");
        REQUIRE(bit(mask, id) == expect);
    }
    for (int32_t id = int32_t(v.tokens.size()); id < int32_t(mask.size() * 32); ++id) REQUIRE_FALSE(bit(mask, id));
}

// Walks `n_walks` random generations, checking the mask at every step of each.
void check_walks(const grammar &g, const grammar_test::synth_vocab &v, int n_walks, uint64_t seed) {
    const grammar_vocab vocab(v.tokens, v.special_ids, v.eog_ids);
    const grammar_constraint c(g, vocab);
    std::mt19937_64 rng(seed);
    for (int w = 0; w < n_walks; ++w) {
        grammar_matcher m(c);
        std::vector<uint32_t> mask(size_t(vocab.n_mask_words()));
        std::string text;
        for (size_t step = 0; !m.is_terminated(); ++step) {
            check_mask(m, g, c, v, text);
            m.fill_mask(mask);
            const std::vector<int32_t> allowed = grammar_test::mask_ids(mask, vocab.n_vocab());
            REQUIRE_FALSE(allowed.empty());
            const int32_t id = step >= 12 ? grammar_test::progress_token(m, allowed, v.tokens, v.eog_ids, rng)
                                          : allowed[size_t(rng() % allowed.size())];
            REQUIRE(m.accept_token(id));
            if (!m.is_terminated()) text += v.tokens[size_t(id)];
            REQUIRE(step < 400);
        }
    }
}

}  // namespace

TEST_CASE("masks equal brute force on GBNF grammars", "[grammar][mask]") {
    const grammar_test::synth_vocab v = fragment_vocab(5, 1500);
    const char *grammars[] = {
        R"g(root ::= "(" root ")" root | "")g",                                  // recursion, empty root
        R"g(root ::= ("cat" | "dog") "s"? ("," " "? ("cat" | "dog") "s"?)*)g",    // words and separators
        "root ::= [^\"\\\\]* \"\\\"\" [0-9]{2,5}",                               // a wide loop, then a count
        "root ::= \"\xE4\xB8\xAD\" [\xC3\xA0-\xC3\xBF]+ \"\xF0\x9F\x98\x80\"?", // multi-byte text
        "root ::= item (\",\" item)*\nitem ::= \"{\" ws \"\\\"id\\\"\" ws \":\" ws [0-9]+ ws \"}\"\nws ::= [ \\n]*",
    };
    uint64_t seed = 1;
    for (const char *text : grammars) {
        INFO(text);
        check_walks(grammar::from_gbnf(text), v, 3, seed++);
    }
}

TEST_CASE("masks equal brute force on JSON schemas", "[grammar][mask]") {
    const grammar_test::synth_vocab v = fragment_vocab(9, 1500);
    const char *schemas[] = {
        R"({"type":"object","properties":{"id":{"type":"integer","minimum":-5,"maximum":70},"name":{"type":"string"},
            "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},"required":["id"]})",
        R"({"type":"array","items":{"anyOf":[{"type":"number"},{"type":"null"},{"type":"boolean"}]}})",
        R"({"type":"object","additionalProperties":{"type":"string","pattern":"^(ab|x)+$"}})",
        R"({"$defs":{"n":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["k"]}},"$ref":"#/$defs/n"})",
    };
    uint64_t seed = 11;
    for (const char *text : schemas) {
        INFO(text);
        check_walks(grammar::from_json_schema_text(text), v, 3, seed++);
        check_walks(grammar::from_json_schema_text(text, json_schema_options{json_whitespace::compact}), v, 2, seed++);
    }
    check_walks(grammar::json_object(), v, 3, seed++);
}

TEST_CASE("masks equal brute force through long counted repetitions", "[grammar][mask]") {
    // Copies further from the end than the longest token share token sets; near the end they
    // must not. Masks are checked at every prefix of a text that runs through all copies (tokens
    // here are at most 16 bytes).
    grammar_test::synth_vocab v = fragment_vocab(13, 1200);
    // Runs of every length up to the longest token, so a miscounted copy shows in some mask.
    std::vector<std::string> runs;
    for (size_t n = 2; n <= 24; ++n) {
        std::string letters, digits, abs, text;
        for (size_t i = 0; i < n; ++i) {
            letters += char('a' + i % 26), digits += char('0' + i % 10), abs += "ab7"[i % 3];
            text += i % 3 ? "x" : "\xC3\xA9";
        }
        runs.insert(runs.end(), {letters, digits, abs, "\"" + letters.substr(1)});
        if (n <= 16) runs.push_back(text);  // the longest tokens stay one byte a character
    }
    v.tokens.insert(v.tokens.end(), runs.begin(), runs.end());
    const grammar_vocab vocab(v.tokens, v.special_ids, v.eog_ids);
    std::string digits30;
    for (int i = 0; i < 30; ++i) digits30 += char('0' + i % 10);
    std::string nested = "ab" + digits30;
    for (int i = 0; i < 38; ++i) nested += "ab7";
    nested += "ab" + digits30.substr(1) + ".";
    std::string letters;
    for (int i = 0; i < 60; ++i) letters += char('a' + i % 26);
    std::string quoted = "\"";
    for (int i = 0; i < 25; ++i) quoted += i % 3 ? "x" : "\xC3\xA9\xE4\xB8\xAD";
    quoted += "\"123";
    const std::pair<std::string, std::string> cases[] = {
        {R"g(root ::= [a-z]{0,60} "!")g", letters + "!"},
        {R"g(root ::= ("ab" [0-9]{0,30}){20,40} ".")g", nested},
        {R"g(root ::= "\"" [^"]{25,50} "\"" [0-9]{3})g", quoted},
    };
    for (const auto &[text, sentence] : cases) {
        INFO(text);
        const grammar g = grammar::from_gbnf(text);
        REQUIRE(grammar_test::matches(g, sentence));
        const grammar_constraint c(g, vocab);
        for (size_t cut = 0; cut <= sentence.size(); ++cut) {
            grammar_matcher m(c);
            REQUIRE(m.accept_bytes(sentence.substr(0, cut)));
            check_mask(m, g, c, v, sentence.substr(0, cut));
        }
    }
    const grammar s = grammar::from_json_schema_text(R"({"type":"string","minLength":20,"maxLength":45})");
    check_walks(s, v, 3, 77);
}

TEST_CASE("masks over a Qwen-sized vocabulary equal brute force", "[grammar][mask][slow]") {
    const grammar_test::synth_vocab v = grammar_test::make_synth_vocab(151643, 293);
    const grammar_vocab vocab(v.tokens, v.special_ids, v.eog_ids);
    const grammar g = grammar::from_json_schema_text(
        R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["name","n"]})");
    const grammar_constraint c(g, vocab);
    grammar_matcher m(c);
    std::vector<uint32_t> mask(size_t(vocab.n_mask_words()));
    // A fixed text through structure, a string with multi-byte characters, a number.
    const std::string text = "{\"name\": \"ab\xE4\xB8\xAD cd\", \"n\": 12}";
    for (size_t cut : {size_t(0), size_t(1), size_t(2), size_t(9), size_t(12), size_t(13), size_t(17), size_t(21), text.size() - 1,
                       text.size()}) {
        grammar_matcher at(c);
        REQUIRE(at.accept_bytes(text.substr(0, cut)));
        at.fill_mask(mask);
        size_t n_allowed = 0;
        for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
            const tandem::grammar_snapshot s = at.snapshot();
            const bool ok = at.accept_token(id);
            at.restore(s);
            INFO("cut " << cut << " token " << id);
            REQUIRE(bit(mask, id) == ok);
            n_allowed += ok;
        }
        // Inside the string almost every token fits; elsewhere few do.
        if (cut == 12) CHECK(n_allowed > 100000);
        if (cut == 0) CHECK(n_allowed < 100);
    }
}

TEST_CASE("end of generation exactly when complete; terminated matchers allow nothing", "[grammar][mask]") {
    const grammar_test::synth_vocab v = fragment_vocab(3, 600);
    const grammar_vocab vocab(v.tokens, v.special_ids, v.eog_ids);
    const grammar_constraint c(grammar::from_gbnf(R"(root ::= "a" "b"?)"), vocab);
    grammar_matcher m(c);
    const int32_t eog = v.eog_ids[0];
    std::vector<uint32_t> mask(size_t(vocab.n_mask_words()));
    m.fill_mask(mask);
    CHECK_FALSE(bit(mask, eog));
    CHECK_FALSE(m.accept_token(eog));
    REQUIRE(m.accept_bytes("a"));
    CHECK(m.is_complete());
    CHECK(m.can_continue());
    m.fill_mask(mask);
    CHECK(bit(mask, eog));
    REQUIRE(m.accept_bytes("b"));
    CHECK_FALSE(m.can_continue());
    m.fill_mask(mask);
    CHECK(grammar_test::mask_ids(mask, vocab.n_vocab()) == std::vector<int32_t>{eog});
    REQUIRE(m.accept_token(eog));
    CHECK(m.is_terminated());
    m.fill_mask(mask);
    CHECK(grammar_test::mask_ids(mask, vocab.n_vocab()).empty());
    CHECK_FALSE(m.accept_bytes("b"));
    m.rollback(1);
    CHECK_FALSE(m.is_terminated());
    CHECK(m.is_complete());
}

TEST_CASE("tokens may end and start inside a UTF-8 character", "[grammar][mask]") {
    // U+4E2D U+6587 is E4 B8 AD E6 96 87.
    const std::vector<std::string> tokens = {"\xE4", "\xB8\xAD\xE6", "\x96\x87", "\xE4\xB8\xAD", "\xE6\x96\x87", "\xAD",
                                             "\xE4\xB8\xAD\xE6\x96\x87", "x", "</s>"};
    const std::vector<int32_t> eog{8};
    const grammar_vocab vocab(tokens, {}, eog);
    const grammar_constraint c(grammar::from_gbnf("root ::= \"\xE4\xB8\xAD\xE6\x96\x87\""), vocab);
    std::vector<uint32_t> mask(size_t(vocab.n_mask_words()));
    grammar_matcher m(c);
    m.fill_mask(mask);
    CHECK(grammar_test::mask_ids(mask, vocab.n_vocab()) == std::vector<int32_t>{0, 3, 6});
    REQUIRE(m.accept_token(0));
    m.fill_mask(mask);
    CHECK(grammar_test::mask_ids(mask, vocab.n_vocab()) == std::vector<int32_t>{1});
    REQUIRE(m.accept_token(1));
    m.fill_mask(mask);
    CHECK(grammar_test::mask_ids(mask, vocab.n_vocab()) == std::vector<int32_t>{2});
    REQUIRE(m.accept_token(2));
    m.fill_mask(mask);
    CHECK(grammar_test::mask_ids(mask, vocab.n_vocab()) == std::vector<int32_t>{8});
}

TEST_CASE("snapshots, rollback and shared constraints give the same masks", "[grammar][mask]") {
    const grammar_test::synth_vocab v = fragment_vocab(21, 1200);
    const grammar_vocab vocab(v.tokens, v.special_ids, v.eog_ids);
    const grammar g = grammar::from_json_schema_text(
        R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"string"}},"required":["a","b"]})");
    const grammar_constraint shared(g, vocab);
    std::mt19937_64 rng(4);
    for (int walk = 0; walk < 4; ++walk) {
        grammar_matcher m(shared);
        std::vector<uint32_t> mask(size_t(vocab.n_mask_words())), again(mask.size()), fresh_mask(mask.size());
        std::vector<int32_t> ids;
        while (!m.is_terminated() && ids.size() < 60) {
            m.fill_mask(mask);
            const std::vector<int32_t> allowed = grammar_test::mask_ids(mask, vocab.n_vocab());
            const int32_t id = ids.size() >= 16 ? grammar_test::progress_token(m, allowed, v.tokens, v.eog_ids, rng)
                                                : allowed[size_t(rng() % allowed.size())];
            REQUIRE(m.accept_token(id));
            ids.push_back(id);
        }
        // Any earlier state, restored or rolled back to, gives the mask a fresh matcher (with a
        // constraint of its own) computes after the same tokens.
        for (int k = 0; k < 6; ++k) {
            const size_t at = size_t(rng() % ids.size());
            grammar_matcher replay(shared);
            std::vector<grammar_snapshot> snaps;
            for (size_t i = 0; i < ids.size(); ++i) {
                snaps.push_back(replay.snapshot());
                REQUIRE(replay.accept_token(ids[i]));
            }
            if (k % 2) {
                replay.rollback(int32_t(ids.size() - at));
            } else {
                replay.restore(snaps[at]);
            }
            REQUIRE(replay.n_tokens() == int32_t(at));
            replay.fill_mask(mask);
            const grammar_constraint own(g, vocab);
            grammar_matcher fresh(own);
            for (size_t i = 0; i < at; ++i) REQUIRE(fresh.accept_token(ids[i]));
            fresh.fill_mask(fresh_mask);
            REQUIRE(mask == fresh_mask);
            REQUIRE(replay.bytes_to_complete() == fresh.bytes_to_complete());
            REQUIRE(replay.is_complete() == fresh.is_complete());
            // Forward again from the restored state: the same tokens are accepted.
            for (size_t i = at; i < ids.size(); ++i) REQUIRE(replay.accept_token(ids[i]));
            replay.fill_mask(again);
            m.fill_mask(mask);
            REQUIRE(mask == again);
        }
    }
    CHECK(shared.n_cached_states() > 0);
}

TEST_CASE("bytes_to_complete is the shortest completion", "[grammar][mask]") {
    const grammar g = grammar::from_gbnf("root ::= \"abc\" | \"de\" x\nx ::= \"f\"{3}");
    const grammar_constraint c(g, grammar_test::byte_vocab());
    grammar_matcher m(c);
    CHECK(m.bytes_to_complete() == 3);
    REQUIRE(m.accept_bytes("d"));
    CHECK(m.bytes_to_complete() == 4);
    REQUIRE(m.accept_bytes("ef"));
    CHECK(m.bytes_to_complete() == 2);
    REQUIRE(m.accept_bytes("ff"));
    CHECK(m.bytes_to_complete() == 0);
    CHECK(m.is_complete());
}

TEST_CASE("vocabulary errors are request errors", "[grammar][mask]") {
    const std::vector<std::string> tokens = {"a", "b"};
    const std::vector<int32_t> bad{2}, none;
    CHECK_THROWS_AS(grammar_vocab(tokens, bad, none), error);
    CHECK_THROWS_AS(grammar_vocab(tokens, none, bad), error);
    CHECK_THROWS_AS(grammar_vocab(std::vector<std::string>{}, none, none), error);
    const std::vector<int32_t> neg{-1};
    CHECK_THROWS_AS(grammar_vocab(tokens, neg, none), error);
}
