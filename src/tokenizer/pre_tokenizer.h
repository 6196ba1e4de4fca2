// src/tokenizer/pre_tokenizer.h - NFC normalization (ICU) and the regex splits into BPE pieces
// (PCRE2 with UTF and UCP), the two steps Hugging Face runs before the BPE model.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

// What a tokenizer.ggml.pre value stands for: the patterns of HF's Sequence of Split
// pre-tokenizers (Isolated), applied in order, and whether the tokenizer.json normalizes to NFC.
struct pre_tokenizer_spec {
    std::vector<std::string> patterns;  // PCRE2 (UTF, UCP); each one splits every piece of the last
    bool nfc = true;
};

// The spec for a tokenizer.ggml.pre value; throws error(unsupported) naming the supported ones.
pre_tokenizer_spec pre_tokenizer_spec_for(std::string_view pre);

class pre_tokenizer {
public:
    // Throws error(internal) if a pattern won't compile, or there are none.
    explicit pre_tokenizer(const std::vector<std::string> &patterns);
    explicit pre_tokenizer(const std::string &pattern) : pre_tokenizer(std::vector<std::string>{pattern}) {}
    ~pre_tokenizer();
    pre_tokenizer(const pre_tokenizer &) = delete;
    pre_tokenizer &operator=(const pre_tokenizer &) = delete;

    // Appends the [begin, end) byte ranges of the pieces of `text` (valid UTF-8), in order. Each
    // pattern in turn splits every piece the previous one made (HF Split, "Isolated"): every
    // match and every gap between matches becomes a piece; empty pieces are dropped.
    void split(std::string_view text, std::vector<std::pair<size_t, size_t>> &pieces) const;

private:
    // One pattern over text[begin, end), appending to `out`.
    void split_one(size_t stage, void *match_data, std::string_view text, size_t begin, size_t end,
                   std::vector<std::pair<size_t, size_t>> &out) const;

    std::vector<void *> codes_;  // pcre2_code_8 (kept opaque so pcre2.h stays out of this header)
};

// Unicode NFC of valid UTF-8 text (ICU's normalizer, as HF's NFC normalizer).
std::string nfc(std::string_view text);

}  // namespace tandem
