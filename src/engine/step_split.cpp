// src/engine/step_split.cpp - the partition of an engine call's rows into device steps.
#include "step_split.h"

#include "tandem/error.h"

namespace tandem {

std::vector<engine_step> engine_steps_split(std::span<const engine_row> rows, int32_t n_slots, const step_limits &limits) {
    TANDEM_ASSERT(limits.decode_rows >= 1 && limits.prompt_rows >= 1 && limits.logit_rows >= 1, "step limits must be >= 1");
    std::vector<size_t> out_index(rows.size(), 0);  // each wanted row's place in the output
    size_t n_wanted = 0;
    for (size_t i = 0; i < rows.size(); ++i) out_index[i] = rows[i].want != row_output::none ? n_wanted++ : 0;

    // The kinds' runs: two (decode, then prompt) when that keeps each slot's rows in order.
    std::vector<std::vector<size_t>> runs;
    std::vector<bool> run_prompt;
    std::vector<bool> slot_prompt_seen(size_t(n_slots), false);
    bool reorder_ok = true;
    for (const engine_row &r : rows) {
        TANDEM_ASSERT(r.slot >= 0 && r.slot < n_slots, "row slot {} outside 0..{}", r.slot, n_slots - 1);
        if (r.prompt) slot_prompt_seen[size_t(r.slot)] = true;
        else if (slot_prompt_seen[size_t(r.slot)]) reorder_ok = false;
    }
    if (reorder_ok) {
        for (bool kind : {false, true}) {
            std::vector<size_t> idx;
            for (size_t i = 0; i < rows.size(); ++i)
                if (rows[i].prompt == kind) idx.push_back(i);
            if (!idx.empty()) {
                runs.push_back(std::move(idx));
                run_prompt.push_back(kind);
            }
        }
    } else {
        for (size_t i = 0; i < rows.size(); ++i) {
            if (runs.empty() || run_prompt.back() != rows[i].prompt) {
                runs.emplace_back();
                run_prompt.push_back(rows[i].prompt);
            }
            runs.back().push_back(i);
        }
    }

    // Each run in steps: at most the kind's rows, and at most logit_rows rows that want logits.
    std::vector<engine_step> steps;
    for (size_t k = 0; k < runs.size(); ++k) {
        const std::vector<size_t> &idx = runs[k];
        const size_t limit = run_prompt[k] ? limits.prompt_rows : limits.decode_rows;
        for (size_t begin = 0; begin < idx.size();) {
            engine_step s;
            s.prompt = run_prompt[k];
            size_t end = begin;
            for (; end < idx.size() && end - begin < limit; ++end) {
                if (rows[idx[end]].want != row_output::none) {
                    if (s.out.size() == limits.logit_rows) break;
                    s.out.push_back(out_index[idx[end]]);
                }
                s.rows.push_back(idx[end]);
            }
            begin = end;
            steps.push_back(std::move(s));
        }
    }
    return steps;
}

}  // namespace tandem
