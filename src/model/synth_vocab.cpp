// src/model/synth_vocab.cpp - builds a byte-level BPE vocab: a small BPE training run on a
// built-in text, then random merges (valid: both parts exist, the result is new) to fill it.
#include "synth_vocab.h"

#include "tandem/error.h"

#include <map>
#include <random>
#include <unordered_set>

namespace tandem {

namespace {

// GPT-2's reversible byte -> printable code point mapping, as UTF-8 strings.
std::vector<std::string> byte_symbols() {
    std::vector<std::string> out(256);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        const int cp = printable ? b : next++;
        std::string s;
        if (cp < 0x80) {
            s += char(cp);
        } else {
            s += char(0xC0 | (cp >> 6));
            s += char(0x80 | (cp & 0x3F));
        }
        out[b] = s;
    }
    return out;
}

constexpr const char *training_text =
    "Tandem serves mixture of experts language models to many users at once. The quick brown fox "
    "jumps over the lazy dog. In the beginning there was the word, and the word was with the model. "
    "int main(int argc, char **argv) { return 0; } for (size_t i = 0; i < n; ++i) sum += x[i]; "
    "Hello, world! How are you today? I'm fine, thanks. We're going to the station; they've left. "
    "Numbers like 12345 and 2026 appear often, as do dates such as 2026-11-29 and times like 13:31. "
    "Les modeles de langage apprennent des textes. Die Sprache ist schoen. El modelo responde rapido. "
    "def forward(self, x):\n    return self.proj(torch.relu(x))\n\nclass Engine:\n    pass\n";

}  // namespace

synth_vocab synth_vocab_build(int32_t n_vocab, uint64_t seed) {
    const std::vector<std::string> special = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    const int32_t n_normal = n_vocab - int32_t(special.size());
    if (n_normal < 256) fail(error_kind::config, "a vocabulary needs at least {} tokens, got {}", 256 + special.size(), n_vocab);
    synth_vocab v;
    const std::vector<std::string> sym = byte_symbols();
    v.tokens = sym;
    std::unordered_set<std::string> known(sym.begin(), sym.end());

    // Words of the text (a space sticks to the word after it), as symbol sequences.
    std::vector<std::vector<std::string>> words;
    std::vector<std::string> cur;
    for (const char *p = training_text; *p; ++p) {
        const unsigned char c = static_cast<unsigned char>(*p);
        const bool alnum = std::isalnum(c) != 0;
        if (!cur.empty() && (!alnum || c == ' ')) {
            const bool prev_alnum = std::isalnum(static_cast<unsigned char>(p[-1])) != 0;
            if (!(alnum && prev_alnum)) {
                words.push_back(cur);
                cur.clear();
            }
        }
        cur.push_back(sym[c]);
    }
    if (!cur.empty()) words.push_back(cur);

    // A few hundred rounds of "merge the most frequent adjacent pair" (ties: smallest string).
    while (int32_t(v.tokens.size()) < n_normal) {
        std::map<std::pair<std::string, std::string>, int> counts;
        for (const auto &w : words)
            for (size_t i = 0; i + 1 < w.size(); ++i) ++counts[{w[i], w[i + 1]}];
        std::pair<std::string, std::string> best;
        int best_count = 1;
        for (const auto &[pair, count] : counts)
            if (count > best_count) {
                best = pair;
                best_count = count;
            }
        if (best_count < 2) break;
        const std::string merged = best.first + best.second;
        v.merges.push_back(best.first + " " + best.second);
        if (known.insert(merged).second) v.tokens.push_back(merged);
        for (auto &w : words) {
            std::vector<std::string> next;
            for (size_t i = 0; i < w.size(); ++i) {
                if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) {
                    next.push_back(merged);
                    ++i;
                } else {
                    next.push_back(w[i]);
                }
            }
            w.swap(next);
        }
    }

    // Fill with random merges of existing tokens (bounded length keeps strings realistic).
    std::mt19937_64 rng(seed);
    while (int32_t(v.tokens.size()) < n_normal) {
        const std::string &a = v.tokens[rng() % v.tokens.size()];
        const std::string &b = v.tokens[rng() % v.tokens.size()];
        if (a.size() + b.size() > 24) continue;
        std::string merged = a + b;
        if (!known.insert(merged).second) continue;
        v.merges.push_back(a + " " + b);
        v.tokens.push_back(std::move(merged));
    }
    v.types.assign(v.tokens.size(), 1);  // normal
    for (const std::string &s : special) {
        const bool control = s.rfind("<|", 0) == 0;
        v.tokens.push_back(s);
        v.types.push_back(control ? 3 : 4);
    }
    v.endoftext = n_normal;
    v.im_start = n_normal + 1;
    v.im_end = n_normal + 2;
    return v;
}

}  // namespace tandem
