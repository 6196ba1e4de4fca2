// src/tokenizer/pre_tokenizer.h - NFC normalization (ICU) and the regex split into BPE pieces
// (PCRE2 with UTF and UCP), the two steps Hugging Face runs before the BPE model.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

// The PCRE2 pattern for a tokenizer.ggml.pre value; throws error(unsupported) for others.
std::string pre_tokenizer_pattern(std::string_view pre);

class pre_tokenizer {
public:
    explicit pre_tokenizer(const std::string &pattern);  // throws error(internal) if it won't compile
    ~pre_tokenizer();
    pre_tokenizer(const pre_tokenizer &) = delete;
    pre_tokenizer &operator=(const pre_tokenizer &) = delete;

    // Appends the [begin, end) byte ranges of the pieces of `text` (valid UTF-8), in order:
    // every match, and any gap between matches as its own piece (HF Split, "Isolated").
    void split(std::string_view text, std::vector<std::pair<size_t, size_t>> &pieces) const;

private:
    void *code_ = nullptr;  // pcre2_code_8 (kept opaque so pcre2.h stays out of this header)
};

// Unicode NFC of valid UTF-8 text (ICU's normalizer, as HF's NFC normalizer).
std::string nfc(std::string_view text);

}  // namespace tandem
