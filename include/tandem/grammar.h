// tandem/grammar.h - constrained decoding: GBNF grammars and JSON Schemas compiled to byte-level
// grammars, matched incrementally, turned into per-step token masks over a tokenizer's vocabulary.
//
// grammar            immutable compiled grammar (from GBNF, a JSON Schema, or the built-in JSON ones)
// grammar_vocab      a tokenizer's token byte strings indexed once (a trie in preorder)
// grammar_constraint a grammar bound to a vocabulary; caches token sets per grammar state and is
//                    shared by every matcher of that grammar (thread-safe)
// grammar_matcher    one generation's state: accept tokens, roll back, fill the allowed-token mask
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

namespace grammar_detail {
struct compiled_grammar;
struct vocab_index;
class constraint_cache;
}  // namespace grammar_detail

// Whitespace a JSON grammar lets the model write between tokens.
enum class json_whitespace {
    // After { [ , : and before } ] , : one optional space, or one newline followed by up to 20
    // spaces or tabs (pretty printing). Bounded, so a model can never loop on whitespace.
    flexible,
    compact,  // none at all
};

struct json_schema_options {
    json_whitespace whitespace = json_whitespace::flexible;
};

class grammar {
public:
    // llama.cpp's GBNF: `name ::= ...` rules, `|`, grouping, string literals, character classes,
    // `.`, `* + ? {m} {m,} {m,n}`, `#` comments; `root` is the start rule. Throws
    // error(invalid_request) "grammar: line L, column C: ..." for malformed grammars, left
    // recursion, rules that can never complete, and grammars over the size limits.
    static grammar from_gbnf(std::string_view text);
    // A JSON Schema (the subset json_schema_to_gbnf documents). Properties keep the order of the
    // object they come from, so pass an ordered_json (or the text) to keep the schema's order.
    // Throws error(invalid_request) "json schema at #/pointer: ..." naming the problem.
    static grammar from_json_schema(const nlohmann::ordered_json &schema, const json_schema_options &options = {});
    static grammar from_json_schema_text(std::string_view schema_text, const json_schema_options &options = {});
    static grammar json_object(const json_schema_options &options = {});  // any JSON object
    static grammar json_value(const json_schema_options &options = {});   // any JSON value

    const std::string &gbnf() const;  // the GBNF source (generated for schemas): for logs and errors
    int32_t n_rules() const;          // rules left after small ones were inlined
    int32_t n_states() const;         // byte-level automaton states over all rules

private:
    explicit grammar(std::shared_ptr<const grammar_detail::compiled_grammar> impl) : impl_(std::move(impl)) {}
    std::shared_ptr<const grammar_detail::compiled_grammar> impl_;
    friend class grammar_constraint;
};

// JSON Schema -> GBNF text. Supported: type (string, number, integer, boolean, null, object,
// array, or an array of these), enum, const, properties, required, additionalProperties,
// items, prefixItems, minItems, maxItems, minLength, maxLength, pattern (an ECMAScript subset),
// format (date, time, date-time, uuid enforced; others ignored), minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, anyOf, oneOf (as anyOf), a one-element allOf, $ref to
// "#..." pointers (recursion included), $defs and definitions. Keywords that would constrain
// values in ways the grammar cannot (not, if, uniqueItems, patternProperties, multipleOf, ...)
// are refused; annotations (title, description, default, examples, ...) are ignored.
// Outputs are always valid under the schema, sometimes a narrower set: properties come in the
// schema's order; without additionalProperties, an object that declares properties allows no
// others (one that declares none allows any); number bounds are rounded inwards to integers and
// bounded numbers take no exponent; integers have at most 16 digits; strings use no \u escape
// for surrogates; enum and const values are written exactly as in the schema (compact JSON).
std::string json_schema_to_gbnf(const nlohmann::ordered_json &schema, const json_schema_options &options = {});

class grammar_vocab {
public:
    // token_bytes: [n_vocab] each token's raw bytes (byte-level BPE decoded; may end inside a
    // UTF-8 character). special_ids: tokens never allowed inside a constraint (control tokens,
    // unused entries). eog_ids: end-of-generation tokens, allowed exactly when the grammar is
    // complete. Tokens without bytes are never allowed. Throws error(invalid_request) for ids out
    // of range or an empty vocabulary.
    grammar_vocab(std::span<const std::string> token_bytes, std::span<const int32_t> special_ids,
                  std::span<const int32_t> eog_ids);

    int32_t n_vocab() const;
    int32_t n_mask_words() const;  // (n_vocab + 31) / 32: the size of a mask in uint32 words

private:
    std::shared_ptr<const grammar_detail::vocab_index> impl_;
    friend class grammar_constraint;
};

class grammar_constraint {
public:
    grammar_constraint(const grammar &g, const grammar_vocab &vocab);

    const grammar_vocab &vocab() const { return vocab_; }
    size_t n_cached_states() const;  // grammar states whose token sets are cached so far

private:
    grammar_vocab vocab_;
    std::shared_ptr<grammar_detail::constraint_cache> cache_;
    friend class grammar_matcher;
};

// A matcher's position, for cheap restores (draft verification).
struct grammar_snapshot {
    int32_t config = -1;
    int32_t n_tokens = 0;
    bool terminated = false;
};

// Not thread-safe: one per generation. Memory grows with the distinct parser states the output
// visits and is capped; a generation past the cap throws error(invalid_request).
class grammar_matcher {
public:
    explicit grammar_matcher(const grammar_constraint &constraint);
    ~grammar_matcher();
    grammar_matcher(grammar_matcher &&) noexcept;
    grammar_matcher &operator=(grammar_matcher &&) noexcept;

    // Advances by the token's bytes, or accepts an end-of-generation token when complete. Returns
    // false and leaves the state unchanged when the token is not allowed.
    bool accept_token(int32_t id);
    // Advances by raw bytes (text forced into the output); false and unchanged when not allowed.
    bool accept_bytes(std::string_view bytes);

    bool is_complete() const;    // the output so far is a whole sentence: EOG is allowed
    bool can_continue() const;   // some further byte is allowed
    bool is_terminated() const;  // an end-of-generation token was accepted; nothing else is
    // The fewest bytes that complete the output (0 when complete): lets a generation near its
    // length limit steer towards a valid end.
    uint64_t bytes_to_complete() const;

    // words: [n_mask_words] bit (id % 32) of word (id / 32) set iff token id is allowed next
    // (words past n_mask_words are zeroed). Special tokens are never set; end-of-generation ones
    // exactly when complete. No bit set: terminated, or the vocabulary cannot spell any byte the
    // grammar allows next (a vocabulary without all 256 single bytes).
    void fill_mask(std::span<uint32_t> words);

    grammar_snapshot snapshot() const;
    // Back to a snapshot of this matcher at or before the current position, taken after the
    // last rollback or restore to a position before it; later tokens are dropped.
    void restore(const grammar_snapshot &s);
    void rollback(int32_t n_tokens);  // undoes the last n accepted tokens (or byte strings)
    int32_t n_tokens() const;         // tokens and byte strings accepted so far (EOG included)

private:
    struct state;
    std::unique_ptr<state> s_;
};

}  // namespace tandem
