// src/scheduler/scheduler_step.cpp - one step of the engine loop: decode rows first (with
// prompt-lookup drafts), a prefill share sized by step time, what each output row needs back and
// its logit rules, one engine call, then each session's picks, checked drafts and events.
#include "src/scheduler/scheduler_state.h"

#include "tandem/error.h"
#include "tandem/log.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <utility>

namespace tandem {

bool scheduler::step() {
    run_tasks();
    admit();
    drain_cancels();
    std::erase_if(active_, [](const std::unique_ptr<active> &a) { return a->finished; });
    if (active_.empty()) {
        publish();
        // Nothing to compute while the queue's front waits for the disk tier: sleep on the read.
        if (disk_read_) disk_read_->result.wait_for(std::chrono::milliseconds(10));
        return false;
    }
    step_plan plan;
    plan_decode_rows(plan);
    plan_prompt_rows(plan);
    plan_outputs(plan);
    plan_rules(plan);
    auto t0 = clock_type::now();
    try {
        engine_.forward(plan.rows, outputs_);
    } catch (const std::exception &e) {
        log_error("engine forward failed ({} rows): {}", plan.rows.size(), e.what());
        // A lost host (error_kind::unavailable) is the service's state, not a bug: 503.
        const auto *typed = dynamic_cast<const tandem::error *>(&e);
        abandon_active(std::string("engine error: ") + e.what(),
                       typed && typed->kind() == error_kind::unavailable ? 503 : 0);
        return true;
    }
    const double dt = std::chrono::duration<double>(clock_type::now() - t0).count();
    budget_.record(plan.n_decode, plan.n_prefill, dt);
    log_debug("step: {} decode rows, {} prompt rows (share {}), {:.3f} ms", plan.n_decode, plan.n_prefill, plan.budget,
              dt * 1e3);
    TANDEM_ASSERT(outputs_.top.size() == plan.owner.size(), "engine returned {} summaries for {} rows", outputs_.top.size(),
                  plan.owner.size());
    if (plan.whole_rows)
        TANDEM_ASSERT(outputs_.logits.size() >= plan.owner.size() * size_t(engine_.hparams().n_vocab),
                      "engine returned {} logits for {} rows", outputs_.logits.size(), plan.owner.size());
    std::vector<session_picks> picks = pick_tokens(plan);
    const auto [n_decode_tokens, n_accepted] = apply_picks(picks);
    send_events();
    std::erase_if(active_, [](const std::unique_ptr<active> &a) { return a->finished; });
    record_step(plan, dt, n_decode_tokens, n_accepted);
    publish();
    return true;
}

// Decode rows first: every generating session, one row each, in one call; then, with --draft,
// each session's drafted tokens as more decode rows of its slot (in admission order, while the
// step's decode rows stay within --draft-step-rows).
void scheduler::plan_decode_rows(step_plan &plan) {
    int32_t n_sessions_decoding = 0;
    for (auto &a : active_) n_sessions_decoding += a->decoding ? 1 : 0;
    int32_t spare_rows = options_.draft.n_max > 0 ? std::max(0, options_.draft_step_rows - n_sessions_decoding) : 0;
    for (auto &a : active_) {
        if (!a->decoding) continue;
        auto &st = slots_[a->slot];
        plan.rows.push_back({a->slot, static_cast<int32_t>(st.tokens.size()), a->next_token, row_output::summary});
        st.tokens.push_back(a->next_token);
        plan.owner.push_back(a.get());
        ++plan.n_decode;
        a->draft.clear();
        if (!a->drafts || spare_rows <= 0) continue;
        // The history ends with next_token (emit_token appended it).
        a->draft = a->drafts->propose(std::min(spare_rows, draft_room(*a)));
        for (int32_t d : a->draft) {
            plan.rows.push_back({a->slot, static_cast<int32_t>(st.tokens.size()), d, row_output::summary});
            st.tokens.push_back(d);
            plan.owner.push_back(a.get());
        }
        spare_rows -= static_cast<int32_t>(a->draft.size());
        plan.n_decode += static_cast<int32_t>(a->draft.size());
        plan.n_drafted += a->draft.size();
    }
}

// Then prefill, FIFO, within this step's budget: while anyone decodes, as many prompt tokens as
// keep the step within --itl-budget x a decode-only step, at most --prefill-yield.
void scheduler::plan_prompt_rows(step_plan &plan) {
    int32_t n_waiting = 0;  // sessions with a slot still prefilling
    for (auto &a : active_) n_waiting += a->decoding ? 0 : 1;
    plan.budget = plan.n_decode > 0 ? budget_.tokens(plan.n_decode, n_waiting) : options_.prefill_chunk;
    int32_t budget = plan.budget;
    for (auto &a : active_) {
        if (a->decoding) continue;
        const int32_t left = static_cast<int32_t>(a->req.prompt.size()) - a->n_past;
        if (budget <= 0) {
            plan.yielded = plan.yielded || plan.n_decode > 0;
            continue;
        }
        const int32_t n = std::min(budget, left);
        if (n < left && plan.n_decode > 0) plan.yielded = true;
        auto &st = slots_[a->slot];
        for (int32_t i = 0; i < n; ++i) {
            const int32_t tok = a->req.prompt[static_cast<size_t>(a->n_past + i)];
            const bool last = a->n_past + i + 1 == static_cast<int32_t>(a->req.prompt.size());
            plan.rows.push_back(
                {a->slot, static_cast<int32_t>(st.tokens.size()), tok, last ? row_output::summary : row_output::none, true});
            st.tokens.push_back(tok);
            if (last) plan.owner.push_back(a.get());
        }
        a->n_past += n;
        budget -= n;
        plan.n_prefill += n;
    }
}

// What each output row needs back, as its session's picker says: its whole row for a draw the
// summary cannot decide (a temperature draw with a top_k over 64), its best token alone for rows
// without logprobs (greedy, or drawn by the engine: one launch on CUDA instead of the summaries'
// two), else its 64 best tokens; with the exact draw the picker asks the engine for (a session's
// row j draws with the uniform number j draws ahead: a draw is made for row j only after the j
// before it).
void scheduler::plan_outputs(step_plan &plan) {
    size_t out = 0, j = 0;
    for (engine_row &r : plan.rows) {
        if (r.want == row_output::none) continue;
        const active &a = *plan.owner[out];
        j = out > 0 && plan.owner[out - 1] == &a ? j + 1 : 0;  // a session's rows are adjacent
        ++out;
        if (!a.picker->picks_from_top()) {
            r.want = row_output::logits;
            plan.whole_rows = true;
            continue;
        }
        r.want = a.picker->needs_best_only() ? row_output::best : row_output::summary;
        r.draw = a.picker->draw_request(j);
    }
}

// The logit rules of each output row whose session has them, made from the session's state before
// the row's pick (ruled sessions feed no drafts, so that is one row a session). Masks of several
// constrained sessions are filled on several threads (each session's rules are its own); a session
// whose rules fail (its grammar allows no token, or outgrew its bounds) ends with the error at the
// pick, its row computed without them.
void scheduler::plan_rules(step_plan &plan) {
    std::vector<std::pair<engine_row *, active *>> ruled;
    size_t out = 0;
    for (engine_row &r : plan.rows) {
        if (r.want == row_output::none) continue;
        active *a = plan.owner[out++];
        if (a->rules) ruled.emplace_back(&r, a);
    }
    if (ruled.empty()) return;
    auto make = [&](size_t k) {
        active &a = *ruled[k].second;
        // Picks left before the length limit: max_tokens, or the slot's last position.
        const int64_t by_ctx = int64_t(engine_.n_ctx()) - int64_t(slots_[a.slot].tokens.size()) + 1;
        const int64_t left = std::min<int64_t>(int64_t(a.req.max_tokens) - a.n_generated, by_ctx);
        try {
            ruled[k].first->rules = a.rules->next_row(left);
        } catch (const std::exception &e) {
            a.rules_error = e.what();
        }
    };
    size_t n_constrained = 0;
    for (const auto &[row, a] : ruled) n_constrained += a->rules->constraint_active() ? 1 : 0;
    const size_t n_workers = std::min<size_t>(n_constrained, max_pick_threads);
    if (n_workers <= 1) {
        for (size_t k = 0; k < ruled.size(); ++k) make(k);
        return;
    }
    std::vector<std::thread> workers;
    std::atomic<size_t> next{0};
    for (size_t w = 0; w < n_workers; ++w)
        workers.emplace_back([&] {
            for (size_t k; (k = next.fetch_add(1)) < ruled.size();) make(k);
        });
    for (auto &t : workers) t.join();
}

// The picked token through the session's rules (its window and grammar); false once the session
// has ended with the error of a pick its grammar refuses.
bool scheduler::rules_accept(active &a, int32_t id) {
    if (!a.rules) return true;
    std::string why = "the output left its grammar";
    try {
        if (a.rules->accept(id)) return true;
    } catch (const std::exception &e) {
        why = e.what();
    }
    log_error("slot {}: token {}: {}", a.slot, id, why);
    finish(a, finish_reason::error, "constrained decoding failed: " + why);
    return false;
}

// A session's rows come together: its next token's row, then one a draft. The draw from row j is
// kept only while every earlier draw equalled the draft fed after it, and draws are made in row
// order and stop at the first miss, so the sampler's random stream advances exactly as it would one
// token a step: the output does not depend on the drafts. Sessions that pick from whole rows do so
// on several threads (~1 ms each for a 150k vocabulary; the sessions' samplers are independent). A
// draw that throws (NaN logits: a broken model file or kernel) ends its own request with the error;
// the step's other sessions go on.
std::vector<scheduler::session_picks> scheduler::pick_tokens(const step_plan &plan) {
    const size_t n_vocab = static_cast<size_t>(engine_.hparams().n_vocab);
    const std::vector<logits_top> &tops = outputs_.top;
    const std::vector<float> &logits = outputs_.logits;
    std::vector<session_picks> picks;
    for (size_t i = 0; i < plan.owner.size(); i += 1 + plan.owner[i]->draft.size())
        picks.push_back({plan.owner[i], i, i < static_cast<size_t>(plan.n_decode), {}, {}});
    auto pick_session = [&](session_picks &d) {
        active &a = *d.a;
        if (!a.rules_error.empty()) {
            d.error = a.rules_error;
            return;
        }
        try {
            for (size_t j = 0; j <= a.draft.size(); ++j) {
                const size_t row = d.first_row + j;
                d.picks.push_back(a.picker->picks_from_top()
                                      ? a.picker->pick_top(tops[row])
                                      : a.picker->pick(std::span<const float>(logits.data() + row * n_vocab, n_vocab), &tops[row]));
                if (j == a.draft.size() || d.picks.back().id != a.draft[j]) break;
            }
        } catch (const std::exception &e) {
            d.error = e.what();
        }
    };
    const size_t n_workers = plan.whole_rows ? std::min<size_t>(picks.size(), max_pick_threads) : 1;
    if (n_workers <= 1) {
        for (auto &d : picks) pick_session(d);
        return picks;
    }
    std::vector<std::thread> workers;
    std::atomic<size_t> next{0};
    for (size_t w = 0; w < n_workers; ++w)
        workers.emplace_back([&] {
            for (size_t k; (k = next.fetch_add(1)) < picks.size();) pick_session(picks[k]);
        });
    for (auto &t : workers) t.join();
    return picks;
}

// In row order, the tokens each session's picks emit; a draft's row stands while the pick before
// it equalled it, and the slot forgets the rows past the last that stands. A pick past a token
// that ends the session is dropped with its sampler. Returns (decode tokens emitted, drafts kept).
std::pair<uint64_t, uint64_t> scheduler::apply_picks(std::vector<session_picks> &picks) {
    uint64_t n_accepted = 0, n_decode_tokens = 0;
    for (session_picks &d : picks) {
        active &a = *d.a;
        auto &st = slots_[a.slot];
        const size_t held = st.tokens.size();
        st.tokens.resize(held - a.draft.size());  // drafts come back as they are kept
        if (!d.error.empty()) {
            // The cache keeps what the slot's tokens say (the drafts' rows go): a later request
            // may still reuse the prefix.
            if (st.tokens.size() < held) engine_.slot_truncate(a.slot, static_cast<int32_t>(st.tokens.size()));
            a.draft.clear();
            log_error("slot {}: sampling failed: {}", a.slot, d.error);
            finish(a, finish_reason::error, "sampling failed: " + d.error);
            continue;
        }
        size_t kept = 0;
        for (size_t j = 0; j < d.picks.size(); ++j) {
            bool done = false;
            if (!rules_accept(a, d.picks[j].id)) break;
            emit_token(a, d.picks[j], done);
            n_decode_tokens += d.decode ? 1 : 0;
            if (done || j + 1 == d.picks.size()) break;
            st.tokens.push_back(a.draft[j]);  // picks[j] equalled it: row j + 1 stands
            ++kept;
        }
        if (!a.draft.empty()) {
            if (st.tokens.size() < held) engine_.slot_truncate(a.slot, static_cast<int32_t>(st.tokens.size()));
            a.draft_len.record(a.draft.size(), kept);
            n_accepted += kept;
            a.draft.clear();
        }
    }
    return {n_decode_tokens, n_accepted};
}

// Each session's new text and tokens since the last step, or its prefill progress.
void scheduler::send_events() {
    for (auto &a : active_) {
        if (a->finished) continue;
        if (!a->pending.text.empty() || !a->pending.tokens.empty()) {
            gen_event ev = std::exchange(a->pending, gen_event{});
            ev.type = gen_event::kind::delta;
            ev.slot = a->slot;
            a->req.sink->on_event(std::move(ev));
        } else if (!a->decoding) {
            gen_event ev;
            ev.type = gen_event::kind::progress;
            ev.prefill_done = a->n_past;
            ev.prefill_total = static_cast<int32_t>(a->req.prompt.size());
            ev.slot = a->slot;
            a->req.sink->on_event(std::move(ev));
        }
    }
}

void scheduler::record_step(const step_plan &plan, double dt, uint64_t n_decode_tokens, uint64_t n_accepted) {
    std::vector<int32_t> in_call;
    for (const auto &r : plan.rows) in_call.push_back(r.slot);
    std::sort(in_call.begin(), in_call.end());
    const auto busy = static_cast<uint64_t>(std::unique(in_call.begin(), in_call.end()) - in_call.begin());
    const double n_rows = static_cast<double>(plan.rows.size());
    std::lock_guard lock(mutex_);
    stats_.n_steps += 1;
    stats_.busy_slot_steps += busy;
    stats_.prompt_tokens += static_cast<uint64_t>(plan.n_prefill);
    stats_.predicted_tokens += n_decode_tokens;
    stats_.draft_tokens += plan.n_drafted;
    stats_.draft_accepted += n_accepted;
    // A mixed call's time is split between prompt and decode by rows.
    stats_.prompt_seconds += n_rows > 0 ? dt * plan.n_prefill / n_rows : 0.0;
    stats_.predicted_seconds += n_rows > 0 ? dt * plan.n_decode / n_rows : 0.0;
    if (plan.n_decode > 0) {
        stats_.decode_steps += 1;
        stats_.decode_rows += static_cast<uint64_t>(plan.n_decode);
        stats_.max_rows_per_decode = std::max(stats_.max_rows_per_decode, plan.n_decode);
        stats_.prefill_budget = plan.budget;
    }
    if (plan.yielded) stats_.prefill_yields += 1;
}

}  // namespace tandem
