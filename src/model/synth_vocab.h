// src/model/synth_vocab.h - a valid byte-level BPE vocabulary for synthetic models.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct synth_vocab {
    std::vector<std::string> tokens;   // byte-level symbols (GPT-2 alphabet)
    std::vector<int32_t> types;        // ggml token types
    std::vector<std::string> merges;   // "left right", rank order
    int32_t endoftext = -1, im_start = -1, im_end = -1;
};

// n_vocab entries: 256 byte symbols, merges learned from a built-in text, then random merges of
// existing tokens until the normal vocabulary is full, then the special tokens.
synth_vocab synth_vocab_build(int32_t n_vocab, uint64_t seed);

}  // namespace tandem
