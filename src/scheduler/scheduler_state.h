// src/scheduler/scheduler_state.h - the scheduler's private state (scheduler.cpp: admission,
// requests' lifecycle; scheduler_step.cpp: the phases of a step): a session that holds a slot, and
// what a step plans and picks.
#pragma once

#include "src/scheduler/scheduler.h"
#include "src/scheduler/stop_matcher.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

using clock_type = std::chrono::steady_clock;

// Threads that draw from whole logits rows, or fill grammar masks, at once (one session each at a time).
constexpr size_t max_pick_threads = 8;

// A request that holds a slot: prefilling (n_past < prompt size) or decoding.
struct scheduler::active {
    uint64_t id = 0;
    gen_request req;
    int32_t slot = -1;
    int32_t n_past = 0;        // prompt tokens in the KV
    int32_t n_cached = 0;      // of which reused from the slot's cache
    bool decoding = false;
    bool finished = false;
    int32_t next_token = 0;    // sampled, to be fed by the next decode row
    int32_t n_generated = 0;
    std::unique_ptr<draft_lookup> drafts;  // --draft > 0: the session's history, for proposals
    draft_length draft_len{0};
    std::vector<int32_t> draft;            // this step's drafted tokens (decode rows after next_token)
    std::unique_ptr<text_stream> text;
    std::unique_ptr<token_picker> picker;
    std::unique_ptr<session_rules> rules;  // null: its rows carry no logit rules
    std::string rules_error;               // this step's rules could not be made: the session fails
    stop_matcher stops{{}};
    gen_event pending;         // delta being built this step
    clock_type::time_point t_arrived, t_admit, t_first, t_last;
};

// One step's rows and what they are for, built by the plan_* phases of step().
struct scheduler::step_plan {
    std::vector<engine_row> rows;
    std::vector<active *> owner;  // the session of each output row (want != none), in row order
    int32_t n_decode = 0;         // decode rows (drafts included)
    int32_t n_prefill = 0;        // prompt rows
    int32_t budget = 0;           // prompt tokens the step could carry
    uint64_t n_drafted = 0;
    bool yielded = false;         // a prefill was held back for the decoders
    bool whole_rows = false;      // some output row wants its whole logits
};

// One session's picks from its output rows of a step (its next token's row, then one a draft).
struct scheduler::session_picks {
    active *a;
    size_t first_row;
    bool decode;
    std::vector<sample_result> picks;
    std::string error;
};

}  // namespace tandem
