// tandem/tokenizer.h - byte-level BPE (GPT-2 style, Qwen2 pre-tokenizer) built from a GGUF vocab.
// Output is identical to Hugging Face `tokenizers` for the same tokenizer.json.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem {

class gguf_file;

// ggml's token types (tokenizer.ggml.token_type).
enum class token_type : int32_t {
    undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

class tokenizer {
public:
    // Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,*_token_id,add_bos_token}.
    // Throws file_format/unsupported naming the key when the vocab is missing or not gpt2 BPE.
    static tokenizer from_gguf(const gguf_file &file);

    // With parse_special, control and user-defined tokens written in the text ("<|im_start|>")
    // become their ids; without it they are tokenized as plain text.
    std::vector<int32_t> encode(std::string_view text, bool parse_special) const;

    // The raw bytes a token stands for (byte-level decoded; special tokens as their text).
    const std::string &token_bytes(int32_t id) const;
    // Concatenated bytes of the ids (may end inside a UTF-8 sequence).
    std::string decode(std::span<const int32_t> ids) const;

    int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
    const std::string &token_text(int32_t id) const;  // the vocab entry as stored
    token_type type(int32_t id) const;
    std::optional<int32_t> find(std::string_view token_text) const;

    int32_t bos_id() const { return bos_; }  // -1 when absent
    int32_t eos_id() const { return eos_; }
    int32_t pad_id() const { return pad_; }
    bool add_bos() const { return add_bos_; }
    // End of generation: eos, eot and the template's end-of-turn tokens (<|im_end|>, <|endoftext|>).
    bool is_eog(int32_t id) const;
    const std::string &pre() const { return pre_; }

private:
    struct impl;
    std::vector<std::string> texts_;   // vocab entries as stored in the GGUF
    std::vector<std::string> bytes_;   // decoded bytes per id
    std::vector<token_type> types_;
    std::unordered_map<std::string, int32_t> ids_;          // vocab entry -> id
    std::unordered_map<std::string, int32_t> merge_ranks_;  // "left right" -> rank
    std::vector<int32_t> specials_;    // control/user-defined ids, longest text first
    std::vector<int32_t> eog_;
    std::string pre_;
    int32_t bos_ = -1, eos_ = -1, pad_ = -1;
    bool add_bos_ = false;
};

// Turns a stream of token ids into text that never splits a UTF-8 sequence: push() returns the
// completed characters so far, flush() whatever is left (invalid bytes become U+FFFD).
class token_streamer {
public:
    explicit token_streamer(const tokenizer &tok) : tok_(&tok) {}
    std::string push(int32_t id);
    std::string flush();

private:
    const tokenizer *tok_;
    std::string pending_;
};

}  // namespace tandem
