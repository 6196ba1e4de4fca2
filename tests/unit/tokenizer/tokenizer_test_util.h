// tests/unit/tokenizer/tokenizer_test_util.h - what several tokenizer tests share: a pre-tokenizer's
// pieces of a text (checked to tile it) and ids shown with their token texts for failure messages.
#pragma once

#include "src/tokenizer/pre_tokenizer.h"
#include "tandem/tokenizer.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

inline std::vector<std::string> split_with(const pre_tokenizer &p, const std::string &text) {
    std::vector<std::pair<size_t, size_t>> ranges;
    p.split(text, ranges);
    std::vector<std::string> out;
    size_t expect_begin = 0;
    for (auto [b, e] : ranges) {
        REQUIRE(b == expect_begin);  // pieces tile the text
        REQUIRE(e > b);
        out.push_back(text.substr(b, e - b));
        expect_begin = e;
    }
    REQUIRE(expect_begin == text.size());
    return out;
}

inline std::string show(const tokenizer &tok, const std::vector<int32_t> &ids) {
    std::ostringstream s;
    for (int32_t id : ids) {
        s << id;
        if (id >= 0 && id < tok.n_vocab()) s << "'" << tok.token_text(id) << "'";
        s << " ";
    }
    return s.str();
}

}  // namespace tandem::test
