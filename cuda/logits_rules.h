// cuda/logits_rules.h - the logit rules of a step's rows (tandem/logit_rules.h: logit_bias, the
// penalties, a grammar's allowed tokens) applied to the head's logits rows on the device, in place,
// before their summaries, best tokens and draws (logits_top, logits_best, logits_draw), so that a
// ruled row still sends back only tokens.
// Owns: per row with rules, each adjusted token among the columns held here (token_adjust_apply,
// single roundings), then -infinity for every column outside the allowed mask. Rows without rules
// are not touched: their bits stay. Its CPU twin is tandem::row_rules_apply, bitwise.
// Does not own: making the rules (the scheduler), packing and uploading them (the engine).
#pragma once

#include "tandem/logit_rules.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

// One logits row's rules, as device pointers (the engine packs every row's into one upload).
struct logits_rules_row {
    const token_adjust *adjust = nullptr;  // [n_adjust] vocabulary ids ascending, each once
    const uint32_t *allowed = nullptr;     // [(n_vocab + 31) / 32] words over vocabulary ids; null: every token
    int32_t n_adjust = 0;                  // 0 and no mask: the row has no rules
    int32_t pad_ = 0;
};
static_assert(sizeof(token_adjust) == 16, "the engine packs adjustments as 16-byte records");

struct logits_rules_args {
    float *logits = nullptr;                  // [n_rows][n_cols], in place: this device's head columns
    int32_t n_rows = 0, n_cols = 0;
    int32_t first_id = 0;                     // vocabulary id of column 0 (a device's shard of the head)
    const logits_rules_row *rules = nullptr;  // [n_rows], settled before the step
};

// One launch for all n_rows; the blocks of a row without rules return at once.
void logits_rules(const logits_rules_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
