// tests/unit/grammar/grammar_test_util.h - a byte vocabulary (one token per byte, plus an
// end-of-generation token) and whole-string matching, for tests that reason about text.
#pragma once

#include "tandem/grammar.h"

#include <string>
#include <string_view>
#include <vector>

namespace grammar_test {

inline const tandem::grammar_vocab &byte_vocab() {
    static const tandem::grammar_vocab v = [] {
        std::vector<std::string> tokens;
        for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
        tokens.push_back("</s>");
        const std::vector<int32_t> eog{256};
        return tandem::grammar_vocab(tokens, {}, eog);
    }();
    return v;
}

// The whole text is a sentence of the grammar.
inline bool matches(const tandem::grammar &g, std::string_view text) {
    const tandem::grammar_constraint c(g, byte_vocab());
    tandem::grammar_matcher m(c);
    return m.accept_bytes(text) && m.is_complete();
}

// The text can be continued into a sentence of the grammar.
inline bool viable_prefix(const tandem::grammar &g, std::string_view text) {
    const tandem::grammar_constraint c(g, byte_vocab());
    tandem::grammar_matcher m(c);
    return m.accept_bytes(text);
}

inline bool gbnf_matches(std::string_view gbnf, std::string_view text) {
    return matches(tandem::grammar::from_gbnf(gbnf), text);
}

}  // namespace grammar_test
