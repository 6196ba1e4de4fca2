// tests/server/test_session_rules.cpp - a session's logit rules (src/scheduler/session_rules.h)
// against their definitions: the penalties' window over prompt and output, logit_bias merged in,
// the grammar's mask, steering near the length limit, the constraint that starts after a text, and
// grammars bound once per text.
#include "src/scheduler/session_rules.h"

#include "tandem/error.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

using namespace tandem;

namespace {

// One token per byte, then an end-of-generation token (256) and a control token (257).
struct byte_tokens {
    std::vector<std::string> bytes;
    std::shared_ptr<const grammar_vocab> vocab;
    byte_tokens() {
        for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
        bytes.push_back("</s>");
        bytes.push_back("<|ctl|>");
        const std::vector<int32_t> special{257}, eog{256};
        vocab = std::make_shared<const grammar_vocab>(bytes, special, eog);
    }
    int32_t n() const { return int32_t(bytes.size()); }
};

const byte_tokens &tokens() {
    static const byte_tokens t;
    return t;
}

std::map<int32_t, token_adjust> by_id(const row_rules *r) {
    std::map<int32_t, token_adjust> out;
    if (r) for (const token_adjust &a : r->adjust) out[a.id] = a;
    return out;
}

std::vector<int32_t> allowed_ids(const row_rules *r) {
    std::vector<int32_t> ids;
    for (int32_t id = 0; r && id < int32_t(r->allowed.size()) * 32; ++id)
        if (token_allowed(r->allowed.data(), id)) ids.push_back(id);
    return ids;
}

int32_t byte_id(char c) { return int32_t(uint8_t(c)); }

session_constraint under(std::shared_ptr<const grammar_constraint> c, std::string after = {}, token_bytes_fn bytes = nullptr) {
    session_constraint s;
    s.constraint = std::move(c);
    s.after = std::move(after);
    s.token_bytes = std::move(bytes);
    return s;
}

}  // namespace

TEST_CASE("the penalties count the last repeat_last_n tokens of prompt and output", "[rules]") {
    sampling_params p;
    p.presence_penalty = 1.5f;
    p.frequency_penalty = 0.25f;
    p.repeat_penalty = 1.1f;
    p.repeat_last_n = 4;
    const std::vector<int32_t> prompt = {9, 5, 3, 5, 7};  // the window: 5 3 5 7
    session_rules s(p, prompt, 100);
    auto a = by_id(s.next_row(50));
    REQUIRE(a.size() == 3);
    CHECK(a.count(9) == 0);
    CHECK(a[5].subtract == 2.0f * 0.25f + 1.5f);
    CHECK(a[3].subtract == 1.0f * 0.25f + 1.5f);
    CHECK(a[7].repeat == 1.1f);
    CHECK(a[5].bias == 0.0f);

    REQUIRE(s.accept(11));  // the window: 3 5 7 11
    a = by_id(s.next_row(49));
    CHECK(a[5].subtract == 1.0f * 0.25f + 1.5f);
    CHECK(a.count(11) == 1);
    REQUIRE(s.accept(11));  // 5 7 11 11
    a = by_id(s.next_row(48));
    CHECK(a.count(3) == 0);
    CHECK(a[11].subtract == 2.0f * 0.25f + 1.5f);
}

TEST_CASE("repeat_last_n -1 counts every token, 0 none", "[rules]") {
    sampling_params p;
    p.presence_penalty = 0.5f;
    p.repeat_last_n = -1;
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    session_rules all(p, prompt, 16);
    CHECK(by_id(all.next_row(10)).size() == 8);
    p.repeat_last_n = 0;
    CHECK_FALSE(session_rules::wanted(p, false));
    session_rules none(p, prompt, 16);
    CHECK(none.next_row(10) == nullptr);
}

TEST_CASE("logit_bias merges with the window, each id once, neutral entries left out", "[rules]") {
    sampling_params p;
    p.presence_penalty = 1.0f;
    p.repeat_last_n = 8;
    p.logit_bias = {{2, 5.0f}, {4, -100.0f}, {7, 0.0f}};
    session_rules s(p, std::vector<int32_t>{4, 6}, 10);
    const row_rules *r = s.next_row(5);
    REQUIRE(r);
    std::vector<int32_t> ids;
    for (const token_adjust &a : r->adjust) ids.push_back(a.id);
    CHECK(ids == std::vector<int32_t>{2, 4, 6});  // ascending; token 7's zero bias adds nothing
    auto a = by_id(r);
    CHECK(a[4].bias == -100.0f);
    CHECK(a[4].subtract == 1.0f);
    CHECK(a[2].subtract == 0.0f);
    CHECK(r->allowed.empty());

    sampling_params only_bias;
    only_bias.logit_bias = {{3, 1.0f}};
    CHECK(session_rules::wanted(only_bias, false));
    CHECK_THROWS_AS(session_rules(only_bias, std::vector<int32_t>{1}, 3), error);  // id 3 of a 3-token vocabulary
}

TEST_CASE("a grammar's mask allows what continues it, the end token only once it is complete", "[rules][grammar]") {
    constraint_table table(tokens().vocab);
    const grammar g = grammar::from_gbnf(R"(root ::= "ab" | "abc")");
    session_rules s({}, std::vector<int32_t>{1}, tokens().n(), under(table.bind(g)));
    CHECK(allowed_ids(s.next_row(100)) == std::vector<int32_t>{byte_id('a')});
    REQUIRE(s.accept(byte_id('a')));
    CHECK(allowed_ids(s.next_row(99)) == std::vector<int32_t>{byte_id('b')});
    CHECK_FALSE(s.accept(byte_id('x')));  // refused, state unchanged
    REQUIRE(s.accept(byte_id('b')));
    CHECK(allowed_ids(s.next_row(98)) == std::vector<int32_t>{byte_id('c'), 256});
    CHECK(s.complete());
}

TEST_CASE("near the length limit a constrained session takes only tokens that leave room to finish", "[rules][grammar]") {
    constraint_table table(tokens().vocab);
    session_rules s({}, std::vector<int32_t>{1}, tokens().n(), under(table.bind(grammar::from_gbnf(R"(root ::= "{" [a-z]* "}")"))));
    REQUIRE(s.accept(byte_id('{')));
    // One byte ("}") from complete: with 3 picks left, anything the grammar allows.
    CHECK(allowed_ids(s.next_row(3)).size() == 27);
    // With 2 left ("}" then the end token), only the closing brace.
    CHECK(allowed_ids(s.next_row(2)) == std::vector<int32_t>{byte_id('}')});
    REQUIRE(s.accept(byte_id('}')));
    CHECK(allowed_ids(s.next_row(1)) == std::vector<int32_t>{256});

    // A token that takes the output further from complete is refused once it would not fit.
    session_rules n({}, std::vector<int32_t>{1}, tokens().n(), under(table.bind(grammar::from_gbnf(R"g(root ::= "(" root ")" | "()")g"))));
    REQUIRE(n.accept(byte_id('(')));  // ")" from complete
    CHECK(allowed_ids(n.next_row(4)) == std::vector<int32_t>{byte_id('('), byte_id(')')});
    CHECK(allowed_ids(n.next_row(3)) == std::vector<int32_t>{byte_id(')')});  // "((" would need "))" and the end: 3 picks
    CHECK(allowed_ids(n.next_row(40)) == std::vector<int32_t>{byte_id('('), byte_id(')')});  // far from the limit
}

TEST_CASE("a constraint after a text starts once the output holds it, across token boundaries", "[rules][grammar]") {
    constraint_table table(tokens().vocab);
    const grammar g = grammar::from_gbnf(R"(root ::= "yes" | "no")");
    const auto bytes = [](int32_t id) -> const std::string & { return tokens().bytes[size_t(id)]; };
    session_rules s({}, std::vector<int32_t>{1}, tokens().n(), under(table.bind(g), "</t>", bytes));
    CHECK(s.next_row(50) == nullptr);  // free text first
    for (char c : std::string("think</")) REQUIRE(s.accept(byte_id(c)));
    CHECK_FALSE(s.constraint_active());
    for (char c : std::string("t>")) REQUIRE(s.accept(byte_id(c)));
    CHECK(s.constraint_active());
    CHECK(allowed_ids(s.next_row(40)) == std::vector<int32_t>{byte_id('n'), byte_id('y')});
}

TEST_CASE("the bytes after the start text in the same token are the grammar's first", "[rules][grammar]") {
    std::vector<std::string> bytes = tokens().bytes;
    bytes.push_back("</t>n");  // 258: the end of the start text and the first byte of the answer
    bytes.push_back("</t>x");  // 259: ... and a byte the grammar refuses
    const std::vector<int32_t> special{257}, eog{256};
    auto vocab = std::make_shared<const grammar_vocab>(bytes, special, eog);
    constraint_table table(vocab);
    const grammar g = grammar::from_gbnf(R"(root ::= "yes" | "no")");
    const auto token_bytes = [&bytes](int32_t id) -> const std::string & { return bytes[size_t(id)]; };
    session_rules ok({}, std::vector<int32_t>{1}, int32_t(bytes.size()), under(table.bind(g), "</t>", token_bytes));
    REQUIRE(ok.accept(258));
    CHECK(allowed_ids(ok.next_row(10)) == std::vector<int32_t>{byte_id('o')});
    session_rules bad({}, std::vector<int32_t>{1}, int32_t(bytes.size()), under(table.bind(g), "</t>", token_bytes));
    CHECK_FALSE(bad.accept(259));
}

TEST_CASE("sessions under one grammar text share one constraint", "[rules][grammar]") {
    constraint_table table(tokens().vocab, 2);
    const grammar a = grammar::from_gbnf(R"(root ::= "a")"), a2 = grammar::from_gbnf(R"(root ::= "a")");
    const grammar b = grammar::from_gbnf(R"(root ::= "b")"), c = grammar::from_gbnf(R"(root ::= "c")");
    const auto first = table.bind(a);
    CHECK(table.bind(a2) == first);
    CHECK(table.bind(b) != first);
    table.bind(c);  // capacity 2: the least recently used ("a") goes
    CHECK(table.bind(a) != first);
}

TEST_CASE("a grammar the vocabulary cannot spell is an error, not an empty mask", "[rules][grammar]") {
    // A vocabulary without the byte 'z'.
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(b == 'z' ? std::string() : std::string(1, char(b)));
    auto vocab = std::make_shared<const grammar_vocab>(bytes, std::vector<int32_t>{}, std::vector<int32_t>{});
    constraint_table table(vocab);
    session_rules s({}, std::vector<int32_t>{1}, 256, under(table.bind(grammar::from_gbnf(R"(root ::= "z")"))));
    CHECK_THROWS_WITH(s.next_row(10), Catch::Contains("allows no token"));
}
