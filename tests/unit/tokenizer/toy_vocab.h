// tests/unit/tokenizer/toy_vocab.h - a small hand-made byte-level BPE vocab for the tests:
// the 256 byte symbols (id = byte), a few merges, control, user-defined and padding entries.
#pragma once

#include "src/tokenizer/byte_level.h"
#include "tandem/tokenizer.h"

#include <string>
#include <vector>

namespace tandem::test {

// Byte-level text of raw bytes ("Ġ" for a space), to write expected tokens readably.
inline std::string bl(std::string_view raw) {
    std::string out;
    for (char c : raw) out += byte_level::get().text[static_cast<uint8_t>(c)];
    return out;
}

inline tokenizer_vocab toy_vocab() {
    tokenizer_vocab v;
    v.pre = "qwen2";
    for (int b = 0; b < 256; ++b) {
        v.tokens.push_back(byte_level::get().text[b]);
        v.types.push_back(token_type::normal);
    }
    // Merges in rank order, written as raw text pairs; each result is added as a token.
    const std::vector<std::pair<std::string, std::string>> merges = {
        {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {"in", "g"}, {"l", "l"}, {"e", "r"},
        {" ", "w"}, {"o", "r"}, {" w", "or"}, {"l", "d"}, {" wor", "ld"}, {"'", "s"},
        {"b", "c"}, {"a", "b"}, {"ab", "c"},  // "abc" must come out as a + bc (rank order)
        {"a", "a"}, {"aa", "a"},              // overlapping pairs: "aaaa" -> aa aa
        {"\n", "\n"}, {" ", " "}, {"1", "2"},  // "12" is a token but digits are split first
        {"H", "e"}, {"He", "ll"}, {"Hell", "o"},
    };
    for (const auto &[l, r] : merges) {
        v.merges.push_back(bl(l) + " " + bl(r));
        const std::string joined = bl(l + r);
        bool known = false;
        for (const auto &t : v.tokens) known |= t == joined;
        if (!known) {
            v.tokens.push_back(joined);
            v.types.push_back(token_type::normal);
        }
    }
    for (const char *t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        v.tokens.push_back(t);
        v.types.push_back(token_type::control);
    }
    for (const char *t : {"<think>", "</think>", "[a]", "a][b]"}) {
        v.tokens.push_back(t);
        v.types.push_back(token_type::user_defined);
    }
    for (int i = 0; i < 3; ++i) {  // padding as llama.cpp writes it; its text must never match
        v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
        v.types.push_back(token_type::unused);
    }
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        if (v.tokens[i] == "<|im_end|>") v.eos_id = static_cast<int32_t>(i);
        if (v.tokens[i] == "<|endoftext|>") v.bos_id = v.pad_id = static_cast<int32_t>(i);
    }
    return v;
}

// Token texts of ids, for readable comparisons.
inline std::vector<std::string> texts(const tokenizer &tok, const std::vector<int32_t> &ids) {
    std::vector<std::string> out;
    for (int32_t id : ids) out.push_back(tok.token_text(id));
    return out;
}

}  // namespace tandem::test
