// src/engine/step_split.h - how the rows of one engine call become device steps: decode rows and
// prompt rows apart (engine_row::prompt: their kernels differ), each kind cut into steps within
// the row limits, and where each step's logits rows go in the call's output.
// Owns: that partition (pure: testable without a device). Does not own: running the steps.
#pragma once

#include "tandem/engine.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

struct engine_step {
    bool prompt = false;
    std::vector<size_t> rows;  // indices into the call's rows, in the order the step runs them
    std::vector<size_t> out;   // for each of its rows that wants logits, in order: the output row
};

struct step_limits {
    size_t decode_rows = 1;  // rows of a decode step
    size_t prompt_rows = 1;  // rows of a prompt step
    size_t logit_rows = 1;   // rows wanting logits in any step
};

// Decode rows first, then prompt rows, each kind in call order, when that keeps every slot's rows
// in order (no slot has a prompt row before one of its decode rows); otherwise maximal runs of
// one kind in call order. Slots must already be validated (0 <= slot < n_slots).
std::vector<engine_step> engine_steps_split(std::span<const engine_row> rows, int32_t n_slots, const step_limits &limits);

}  // namespace tandem
