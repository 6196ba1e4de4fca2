// src/engine/slot_table.h - what every backend shares of the engine contract: the slot and
// context options it accepts, how long each slot's cached sequence is, and the checks on the rows
// of a call (identical errors on every backend).
#pragma once

#include "tandem/engine.h"

#include <span>
#include <vector>

namespace tandem {

class slot_table {
public:
    // Checks n_slots (1..1024) and n_ctx (1..n_ctx_train); throws error(config) naming the value.
    slot_table(const engine_options &options, const model_hparams &hp);

    int32_t n_slots() const { return int32_t(len_.size()); }
    int32_t n_ctx() const { return n_ctx_; }
    int32_t length(int32_t slot) const;            // throws invalid_request for a bad slot
    void truncate(int32_t slot, int32_t n_keep);   // keeps the first n_keep positions
    // Moving K/V (engine::slot_export, slot_import, slot_copy): the slot must hold n_tokens and
    // out_bytes be their blob's size; an imported blob must be whole tokens that fit the context
    // (returns its tokens). Throw invalid_request / too_large naming the value.
    void check_export(int32_t slot, int32_t n_tokens, size_t out_bytes, uint64_t token_bytes) const;
    int32_t check_import(int32_t slot, size_t in_bytes, uint64_t token_bytes) const;
    // After an import or copy: the slot holds exactly n_tokens.
    void set_length(int32_t slot, int32_t n_tokens);
    // Rows must name valid slots and tokens, continue each slot's sequence in order and fit the
    // context; throws invalid_request / too_large naming the row.
    void validate(std::span<const engine_row> rows) const;
    // After a successful call: each slot holds up to its last row's position.
    void advance(std::span<const engine_row> rows);

private:
    std::vector<int32_t> len_;
    int32_t n_ctx_ = 0;
    int32_t n_vocab_ = 0;
};

}  // namespace tandem
