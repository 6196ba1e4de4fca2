// tandem/tokenizer.h - byte-level BPE (GPT-2 style; Qwen2 and DeepSeek pre-tokenizers) built from a GGUF vocab.
// Output is identical to Hugging Face `tokenizers` for the same tokenizer.json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class gguf_file;

// ggml's token types (tokenizer.ggml.token_type).
enum class token_type : int32_t {
    undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

// The vocabulary as GGUF stores it (tokenizer.ggml.*), independent of the file reader.
struct tokenizer_vocab {
    std::string model = "gpt2";        // tokenizer.ggml.model; only "gpt2" (byte-level BPE)
    std::string pre;                   // tokenizer.ggml.pre: "qwen2", "deepseek-v3", "deepseek-llm";
                                       // "" or "default": GPT-2 regex
    std::vector<std::string> tokens;   // byte-level text of normal tokens, raw text of specials
    std::vector<token_type> types;     // one per token; empty means all normal
    std::vector<std::string> merges;   // "left right", rank = index
    int32_t bos_id = -1, eos_id = -1, pad_id = -1, eot_id = -1, eom_id = -1;  // -1: absent
    bool add_bos = false;
};

// A stretch of text to encode, and whether control-token texts inside it are those tokens.
struct text_piece {
    std::string_view text;
    bool parse_special = false;
};

class tokenizer {
public:
    // Validates the vocab (types length, ids in range, merges naming known symbols, all 256
    // byte symbols present); throws error(file_format) naming the entry, or error(unsupported)
    // naming the model/pre value this build cannot run.
    static tokenizer from_vocab(tokenizer_vocab vocab);
    // Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,*_token_id,add_bos_token}.
    // Throws file_format/unsupported naming the key when the vocab is missing or not gpt2 BPE.
    static tokenizer from_gguf(const gguf_file &file);

    // Special tokens written in the text are split out first (leftmost, longest match):
    // user-defined tokens (e.g. Qwen3's "<think>") always, control tokens ("<|im_start|>") only
    // with parse_special; otherwise a control token's text is tokenized as plain text. This is
    // llama.cpp's convention (HF always splits every added token: equal to parse_special=true).
    // add_special prepends bos_id() when the vocab says add_bos (never for Qwen).
    // Throws error(invalid_request) when the text is not valid UTF-8.
    std::vector<int32_t> encode(std::string_view text, bool parse_special, bool add_special = false) const;
    // As encode() of the pieces' joined text, except that a control token is split out only where
    // its text lies wholly inside a run of parse_special pieces (user-defined tokens everywhere).
    // The text between special tokens is tokenized across piece boundaries as in the joined text,
    // so pieces without forged markers give exactly encode(joined, true). A budget: once more than
    // max_tokens ids are made, encoding stops and the first max_tokens + 1 are returned (a prompt
    // that cannot fit a context costs no more BPE work than one that just does not).
    std::vector<int32_t> encode(std::span<const text_piece> pieces, bool add_special = false,
                                size_t max_tokens = SIZE_MAX) const;

    // The raw bytes a token stands for (byte-level decoded; control and user-defined tokens as
    // their text; unused padding entries as ""). Throws invalid_request for an id out of range.
    const std::string &token_bytes(int32_t id) const;
    // Concatenated bytes of the ids (may end inside a UTF-8 sequence).
    std::string decode(std::span<const int32_t> ids) const;

    int32_t n_vocab() const;
    const std::string &token_text(int32_t id) const;  // the vocab entry as stored
    token_type type(int32_t id) const;
    std::optional<int32_t> find(std::string_view token_text) const;  // unused padding is not found

    int32_t bos_id() const;  // -1 when absent
    int32_t eos_id() const;
    int32_t pad_id() const;
    bool add_bos() const;
    // End of generation: eos, eot, eom and the end-of-turn control tokens (<|im_end|>,
    // <|endoftext|>, <|eot_id|>, ... as llama.cpp lists them).
    bool is_eog(int32_t id) const;
    const std::vector<int32_t> &eog_ids() const;
    const std::string &pre() const;

private:
    struct impl;
    explicit tokenizer(std::shared_ptr<const impl> p) : impl_(std::move(p)) {}
    std::shared_ptr<const impl> impl_;  // immutable after load (the piece cache locks itself)
};

// Replaces every ill-formed UTF-8 subsequence with U+FFFD, one per maximal subpart (the
// Unicode / WHATWG practice, same as Python's errors="replace").
std::string utf8_sanitize(std::string_view bytes);

// Turns a stream of token ids into text that never splits a UTF-8 sequence: push() returns the
// completed characters so far (ill-formed bytes already replaced by U+FFFD), flush() whatever is
// left (an incomplete tail becomes U+FFFD). push()s followed by flush() equal
// utf8_sanitize(decode(ids)).
class token_streamer {
public:
    explicit token_streamer(const tokenizer &tok) : tok_(&tok) {}
    std::string push(int32_t id);
    // Same for raw bytes (tests, text that does not come from token ids).
    std::string push_bytes(std::string_view bytes);
    std::string flush();

private:
    const tokenizer *tok_;
    std::string pending_;  // an incomplete but so far well-formed UTF-8 tail (at most 3 bytes)
};

}  // namespace tandem
