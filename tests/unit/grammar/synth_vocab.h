// tests/unit/grammar/synth_vocab.h - a deterministic byte-level BPE-like vocabulary for grammar
// tests and the benchmark: Qwen's size and mix (all 256 bytes; English-like words with and
// without a leading space and capitalised; code and JSON punctuation; indentation runs; CJK,
// Cyrillic, Hangul, kana and emoji pieces; tokens that end or start inside a UTF-8 character),
// followed by special tokens. Qwen2/3 has 151,643 regular and 293 special/unused ids (151,936).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

namespace grammar_test {

struct synth_vocab {
    std::vector<std::string> tokens;   // [n_vocab] raw bytes
    std::vector<int32_t> special_ids;  // never allowed inside a constraint
    std::vector<int32_t> eog_ids;      // end of generation
};

inline void synth_append_utf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(char(cp));
    } else if (cp < 0x800) {
        out.push_back(char(0xC0 | (cp >> 6)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(char(0xE0 | (cp >> 12)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(char(0xF0 | (cp >> 18)));
        out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    }
}

// n_text regular tokens then n_special specials; the first two specials are end-of-generation.
// Uses only mt19937_64's raw output (its sequence is fixed by the standard), so every platform
// builds the same vocabulary.
inline synth_vocab make_synth_vocab(size_t n_text, size_t n_special, uint64_t seed = 1) {
    std::mt19937_64 rng(seed);
    const auto pick = [&](size_t n) { return size_t(rng() % n); };
    const auto chance = [&](unsigned percent) { return rng() % 100 < percent; };
    static const char *onsets[] = {"", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
                                   "w", "y", "z", "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th",
                                   "tr", "str", "sp", "qu"};
    static const char *nuclei[] = {"a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "ou", "y"};
    static const char *codas[] = {"", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "nt", "rs", "st", "ck", "tion", "ed", "er", "ing"};
    static const char *puncts[] = {"{", "}", "[", "]", "(", ")", "\"", "'", ":", ";", ",", ".", "!", "?", "=", "-", "+",
                                   "*", "/", "\\", "|", "&", "%", "$", "#", "@", "_", "~", "<", ">", "`", "\n", " "};
    synth_vocab v;
    std::unordered_set<std::string> seen;
    const auto add = [&](std::string s) {
        if (v.tokens.size() < n_text && !s.empty() && seen.insert(s).second) v.tokens.push_back(std::move(s));
    };
    for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
    for (const char *s : {"{\"", "\":", "\",", "\"}", "\":\"", "\",\"", "\"]", "[\"", " {\"", "{\n", "},\n", "\"\n",
                          "\": ", "\", \"", "\": \"", "\"},", "\"}]", "}]", "]}", "true", "false", "null", " true",
                          " false", " null", "\\n", "\\\"", "\\\\", "\\u", "\",\n", "\":[", "\":{", "},{", "}}", "]]"}) {
        add(s);
    }
    for (int n = 1; n <= 64; ++n) add(std::string(size_t(n), ' ')), add("\n" + std::string(size_t(n), ' '));
    for (int n = 1; n <= 8; ++n) add(std::string(size_t(n), '\t')), add("\n" + std::string(size_t(n), '\t'));
    while (v.tokens.size() < n_text) {
        const unsigned kind = unsigned(rng() % 100);
        std::string s;
        if (kind < 58) {  // words: 1-4 syllables, maybe a leading space, maybe capitalised
            const size_t syllables = 1 + pick(chance(30) ? 4 : 2);
            for (size_t i = 0; i < syllables; ++i) {
                s += onsets[pick(std::size(onsets))];
                s += nuclei[pick(std::size(nuclei))];
                s += codas[pick(std::size(codas))];
            }
            if (chance(25)) s[0] = char(s[0] - 'a' + 'A');
            if (chance(55)) s = " " + s;
        } else if (kind < 66) {  // code and punctuation runs, sometimes around a word piece
            const size_t n = 1 + pick(4);
            for (size_t i = 0; i < n; ++i) s += puncts[pick(std::size(puncts))];
            if (chance(30)) s += onsets[1 + pick(std::size(onsets) - 1)];
        } else if (kind < 84) {  // CJK, one to three characters, sometimes after a space
            if (chance(10)) s = " ";
            const size_t n = 1 + pick(chance(50) ? 1 : 3);
            for (size_t i = 0; i < n; ++i) synth_append_utf8(s, uint32_t(0x4E00 + pick(0x5200)));
        } else if (kind < 92) {  // Cyrillic words (two-byte characters)
            if (chance(50)) s = " ";
            const size_t n = 2 + pick(7);
            for (size_t i = 0; i < n; ++i) synth_append_utf8(s, uint32_t(0x430 + pick(32)));
        } else if (kind < 96) {  // Hangul syllables and kana
            const size_t n = 1 + pick(2);
            for (size_t i = 0; i < n; ++i) {
                synth_append_utf8(s, chance(60) ? uint32_t(0xAC00 + pick(11172)) : uint32_t(0x3041 + pick(0x5E)));
            }
        } else if (kind < 98) {  // emoji
            synth_append_utf8(s, uint32_t(0x1F300 + pick(0x300)));
        } else {  // pieces of characters: a lead byte and some continuations, or continuations only
            std::string c;
            synth_append_utf8(c, uint32_t(0x4E00 + pick(0x5200)));
            s = chance(50) ? c.substr(0, 1 + pick(2)) : c.substr(1 + pick(2));
            if (chance(40)) s += onsets[1 + pick(std::size(onsets) - 1)];
        }
        add(std::move(s));
    }
    for (size_t i = 0; i < n_special; ++i) {
        static const char *named[] = {"<|endoftext|>", "<|im_end|>", "<|im_start|>", "<think>", "</think>"};
        v.special_ids.push_back(int32_t(v.tokens.size()));
        v.tokens.push_back(i < std::size(named) ? std::string(named[i]) : "<|extra_" + std::to_string(i) + "|>");
    }
    if (n_special >= 2) v.eog_ids = {int32_t(n_text), int32_t(n_text + 1)};
    return v;
}

}  // namespace grammar_test
