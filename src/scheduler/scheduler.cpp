// src/scheduler/scheduler.cpp - the engine loop: FIFO admission, longest-prefix slot choice,
// decode-first steps with a prefill share sized by step time (prefill_budget.h), prompt-lookup
// drafts checked by the session's own sampler (draft_lookup.h), sampling, stop conditions, stats
// for /metrics.
#include "src/scheduler/scheduler.h"

#include "src/scheduler/stop_matcher.h"
#include "tandem/error.h"
#include "tandem/log.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <utility>

namespace tandem {

using clock_type = std::chrono::steady_clock;

// Most drafted tokens a session may feed in one step: 16 slots of 1 + 16 rows stay well inside any
// backend's decode step.
constexpr int32_t max_draft = 16;

// Threads that draw from whole logits rows at once (one session each at a time).
constexpr size_t max_pick_threads = 8;

static double ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

const char *finish_reason_name(finish_reason reason) {
    switch (reason) {
    case finish_reason::none: return "none";
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::cancelled: return "cancelled";
    case finish_reason::error: return "error";
    }
    return "none";
}

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
    stop_matcher stops{{}};
    gen_event pending;         // delta being built this step
    clock_type::time_point t_arrived, t_admit, t_first, t_last;
};

scheduler::scheduler(engine &eng, const scheduler_options &options, scheduler_hooks hooks)
    : engine_(eng), options_(options), hooks_(std::move(hooks)), budget_(options.prefill_yield, options.itl_budget) {
    if (options_.prefill_chunk < 1) fail(error_kind::config, "--prefill-chunk must be >= 1, got {}", options_.prefill_chunk);
    if (options_.max_queue < 0) fail(error_kind::config, "--max-queue must be >= 0, got {}", options_.max_queue);
    if (options_.draft.n_max < 0 || options_.draft.n_max > max_draft)
        fail(error_kind::config, "--draft must be between 0 and {}, got {}", max_draft, options_.draft.n_max);
    if (options_.draft.n_max > 0) {
        if (options_.draft_step_rows < 2)
            fail(error_kind::config, "--draft-step-rows must be >= 2 when drafting, got {}", options_.draft_step_rows);
        draft_lookup check(options_.draft);  // rejects bad n-gram lengths now, not at the first request
    }
    TANDEM_ASSERT(hooks_.is_eog && hooks_.make_text_stream && hooks_.make_picker);
    slots_.resize(static_cast<size_t>(engine_.n_slots()));
    for (int32_t s = 0; s < engine_.n_slots(); ++s) {
        // Start from what the engine holds (normally nothing).
        if (engine_.slot_length(s) != 0) engine_.slot_truncate(s, 0);
    }
    stats_.n_slots = engine_.n_slots();
    stats_.prefill_budget = options_.prefill_yield;
    publish();
}

scheduler::~scheduler() { shutdown(std::chrono::milliseconds(0)); }

void scheduler::start() {
    TANDEM_ASSERT(!thread_.joinable());
    thread_ = std::thread([this] { run(); });
}

void scheduler::run() {
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !cancels_.empty() || !active_.empty(); });
            if (stopping_ && queue_.empty() && active_.empty()) return;
        }
        // step() handles the engine's and the samplers' failures itself; anything else escaping
        // it must not end the thread (and with it the process): the requests in flight fail.
        step_started_ns_ = std::max<int64_t>(1, clock_type::now().time_since_epoch() / std::chrono::nanoseconds(1));
        try {
            step();
        } catch (const std::exception &e) {
            log_error("scheduler step failed: {}", e.what());
            abandon_active(std::string("internal error: ") + e.what());
        }
        step_started_ns_ = 0;
    }
}

bool scheduler::turning(std::chrono::steady_clock::duration limit) const {
    const int64_t started = step_started_ns_;
    if (started == 0) return true;
    const int64_t now = clock_type::now().time_since_epoch() / std::chrono::nanoseconds(1);
    return now - started < limit / std::chrono::nanoseconds(1);
}

// The KV of the active slots is unknown after a failed step: forget it and fail their requests.
void scheduler::abandon_active(const std::string &why) {
    for (auto &a : active_) {
        engine_.slot_truncate(a->slot, 0);
        slots_[a->slot].tokens.clear();
        finish(*a, finish_reason::error, why);
    }
    active_.clear();
    publish();
}

uint64_t scheduler::submit(gen_request request) {
    if (request.prompt.empty()) fail(error_kind::invalid_request, "the prompt is empty");
    if (static_cast<int64_t>(request.prompt.size()) >= engine_.n_ctx())
        fail(error_kind::too_large, "the prompt has {} tokens; the context holds {}", request.prompt.size(), engine_.n_ctx());
    if (request.max_tokens < 1) fail(error_kind::invalid_request, "max_tokens must be >= 1, got {}", request.max_tokens);
    TANDEM_ASSERT(request.sink != nullptr);
    std::lock_guard lock(mutex_);
    if (stopping_) {
        ++stats_.requests_rejected;
        fail(error_kind::unavailable, "the server is shutting down");
    }
    // --max-queue counts requests that must wait: those a free slot will take at the next step
    // do not (so --max-queue 0 still serves up to n_slots requests at once).
    if (static_cast<int64_t>(queue_.size()) >= static_cast<int64_t>(options_.max_queue) + n_free_) {
        ++stats_.requests_rejected;
        fail(error_kind::unavailable, "the request queue is full ({} waiting); retry later", queue_.size());
    }
    uint64_t id = next_id_++;
    queue_.push_back({id, std::move(request), clock_type::now()});
    ++stats_.requests_total;
    stats_.queue_depth = static_cast<int32_t>(queue_.size());
    wake_.notify_one();
    return id;
}

void scheduler::cancel(uint64_t id) {
    std::shared_ptr<gen_sink> sink;
    {
        std::lock_guard lock(mutex_);
        auto it = std::find_if(queue_.begin(), queue_.end(), [&](const queued &q) { return q.id == id; });
        if (it != queue_.end()) {
            sink = std::move(it->request.sink);
            queue_.erase(it);
            stats_.queue_depth = static_cast<int32_t>(queue_.size());
            ++stats_.requests_cancelled;
        } else {
            cancels_.push_back(id);
            wake_.notify_one();
        }
    }
    if (sink) {
        gen_event ev;
        ev.type = gen_event::kind::done;
        ev.finish = finish_reason::cancelled;
        ev.error = "cancelled while queued";
        sink->on_event(std::move(ev));
    }
}

void scheduler::shutdown(std::chrono::milliseconds grace) {
    std::deque<queued> dropped;
    {
        std::lock_guard lock(mutex_);
        if (!stopping_) {
            stopping_ = true;
            deadline_ = clock_type::now() + grace;
        }
        dropped.swap(queue_);
        stats_.queue_depth = 0;
        wake_.notify_all();
    }
    for (auto &q : dropped) {
        gen_event ev;
        ev.type = gen_event::kind::done;
        ev.finish = finish_reason::cancelled;
        ev.error = "the server is shutting down";
        q.request.sink->on_event(std::move(ev));
    }
    if (thread_.joinable()) {
        thread_.join();
    } else {
        // Driven by hand (tests): cancel what is active right away.
        for (auto &a : active_)
            if (!a->finished) finish(*a, finish_reason::cancelled, "the server is shutting down");
        active_.clear();
        publish();
    }
}

void scheduler::admit() {
    std::vector<queued> taken;
    {
        std::lock_guard lock(mutex_);
        int32_t n_free = 0;
        for (const auto &s : slots_) n_free += s.owner == nullptr;
        while (n_free > 0 && !queue_.empty()) {
            taken.push_back(std::move(queue_.front()));
            queue_.pop_front();
            --n_free;
        }
        n_free_ = n_free;
        stats_.queue_depth = static_cast<int32_t>(queue_.size());
    }
    for (auto &q : taken) {
        // The free slot sharing the longest token prefix with the prompt; ties go to the least
        // recently used slot, so other sessions' caches survive longest.
        int32_t best = -1;
        size_t best_common = 0;
        for (int32_t s = 0; s < static_cast<int32_t>(slots_.size()); ++s) {
            const auto &st = slots_[s];
            if (st.owner) continue;
            const auto &p = q.request.prompt;
            size_t n = std::min(st.tokens.size(), p.size());
            size_t common = static_cast<size_t>(std::mismatch(st.tokens.begin(), st.tokens.begin() + n, p.begin()).first -
                                                st.tokens.begin());
            if (best < 0 || common > best_common ||
                (common == best_common && st.last_used < slots_[best].last_used)) {
                best = s;
                best_common = common;
            }
        }
        TANDEM_ASSERT(best >= 0);
        auto a = std::make_unique<active>();
        a->id = q.id;
        a->req = std::move(q.request);
        a->slot = best;
        // Recompute at least the last prompt token: its logits pick the first output token.
        int32_t n_keep = static_cast<int32_t>(std::min(best_common, a->req.prompt.size() - 1));
        auto &st = slots_[best];
        engine_.slot_truncate(best, n_keep);
        st.tokens.resize(static_cast<size_t>(n_keep));
        st.owner = a.get();
        st.last_used = ++use_clock_;
        a->n_past = n_keep;
        a->n_cached = n_keep;
        {
            std::lock_guard lock(mutex_);
            stats_.cached_prompt_tokens += static_cast<uint64_t>(n_keep);
        }
        a->text = hooks_.make_text_stream();
        a->picker = hooks_.make_picker(a->req.sampling);
        a->stops = stop_matcher(a->req.stop);
        if (options_.draft.n_max > 0) {
            a->drafts = std::make_unique<draft_lookup>(options_.draft);
            a->drafts->append(a->req.prompt);
            a->draft_len = draft_length(options_.draft.n_max);
        }
        a->t_admit = clock_type::now();
        a->t_arrived = q.arrived;
        a->pending.slot = best;
        active_.push_back(std::move(a));
    }
}

void scheduler::drain_cancels() {
    std::vector<uint64_t> ids;
    {
        std::lock_guard lock(mutex_);
        ids.swap(cancels_);
    }
    bool expired = false;
    {
        std::lock_guard lock(mutex_);
        expired = stopping_ && clock_type::now() >= deadline_;
    }
    for (auto &a : active_) {
        if (a->finished) continue;
        if (expired) {
            finish(*a, finish_reason::cancelled, "the server is shutting down");
        } else if (std::find(ids.begin(), ids.end(), a->id) != ids.end()) {
            finish(*a, finish_reason::cancelled, "cancelled");
            std::lock_guard lock(mutex_);
            ++stats_.requests_cancelled;
        }
    }
}

void scheduler::finish(active &a, finish_reason reason, const std::string &error) {
    if (a.finished) return;
    a.finished = true;
    if (reason == finish_reason::stop || reason == finish_reason::length) {
        // Release the text held back by the UTF-8 streamer and the stop matcher.
        if (!a.stops.matched()) {
            a.pending.text += a.stops.feed(a.text->flush());
            if (!a.stops.matched()) a.pending.text += a.stops.flush();
        }
    }
    if (!a.pending.text.empty() || !a.pending.tokens.empty()) {
        a.pending.type = gen_event::kind::delta;
        a.req.sink->on_event(std::move(a.pending));
    }
    gen_event done;
    done.type = gen_event::kind::done;
    done.finish = reason;
    done.error = error;
    done.stop_matched = a.stops.matched() ? a.stops.matched_stop() : std::string();
    done.n_prompt = static_cast<int32_t>(a.req.prompt.size());
    done.n_generated = a.n_generated;
    done.slot = a.slot;
    done.queue_ms = ms_between(a.t_arrived, a.t_admit);
    done.timings.cache_n = a.n_cached;
    done.timings.prompt_n = a.n_past - a.n_cached;
    if (a.n_generated > 0) {
        done.timings.prompt_ms = ms_between(a.t_admit, a.t_first);
        done.timings.predicted_n = a.n_generated;
        done.timings.predicted_ms = ms_between(a.t_first, a.t_last);
    } else {
        done.timings.prompt_ms = ms_between(a.t_admit, clock_type::now());
    }
    a.req.sink->on_event(std::move(done));
    slots_[a.slot].owner = nullptr;
}

// Drafts session a may feed this step: its draft length, and no more rows than can still be kept
// (every kept row emits a token; the last row's draw is one more) or than the context holds past
// the next token's row.
int32_t scheduler::draft_room(const active &a) const {
    const int64_t next_pos = static_cast<int64_t>(slots_[a.slot].tokens.size()) - 1;  // next_token's row
    const int64_t by_ctx = static_cast<int64_t>(engine_.n_ctx()) - 1 - next_pos;
    const int64_t by_tokens = static_cast<int64_t>(a.req.max_tokens) - a.n_generated - 1;
    return static_cast<int32_t>(std::max<int64_t>(0, std::min({static_cast<int64_t>(a.draft_len.next()), by_ctx, by_tokens})));
}

void scheduler::emit_token(active &a, const sample_result &r, bool &done) {
    auto now = clock_type::now();
    if (a.n_generated == 0) a.t_first = now;
    a.t_last = now;
    ++a.n_generated;
    if (a.drafts) a.drafts->append(r.id);
    if (hooks_.is_eog(r.id)) {
        // Counted in n_generated but not shown: the end-of-generation token is not output.
        finish(a, finish_reason::stop, "");
        done = true;
        return;
    }
    a.pending.tokens.push_back({r.id, r.logprob, r.top});
    a.pending.text += a.stops.feed(a.text->push(r.id));
    if (a.stops.matched()) {
        finish(a, finish_reason::stop, "");
        done = true;
        return;
    }
    // The next decode row needs a free position in the slot.
    bool ctx_full = static_cast<int64_t>(slots_[a.slot].tokens.size()) >= engine_.n_ctx();
    if (a.n_generated >= a.req.max_tokens || ctx_full) {
        finish(a, finish_reason::length, "");
        done = true;
        return;
    }
    a.next_token = r.id;
    a.decoding = true;
}

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

bool scheduler::step() {
    admit();
    drain_cancels();
    std::erase_if(active_, [](const std::unique_ptr<active> &a) { return a->finished; });
    if (active_.empty()) {
        publish();
        return false;
    }
    step_plan plan;
    plan_decode_rows(plan);
    plan_prompt_rows(plan);
    plan_outputs(plan);
    auto t0 = clock_type::now();
    try {
        engine_.forward(plan.rows, outputs_);
    } catch (const std::exception &e) {
        log_error("engine forward failed ({} rows): {}", plan.rows.size(), e.what());
        abandon_active(std::string("engine error: ") + e.what());
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

void scheduler::publish() {
    std::vector<slot_info> view(slots_.size());
    int64_t kv = 0;
    int32_t in_use = 0;
    auto now = clock_type::now();
    for (size_t s = 0; s < slots_.size(); ++s) {
        const auto &st = slots_[s];
        auto &v = view[s];
        v.id = static_cast<int32_t>(s);
        v.n_ctx = engine_.n_ctx();
        v.n_cached = static_cast<int32_t>(st.tokens.size());
        kv += v.n_cached;
        if (st.owner && !st.owner->finished) {
            const active &a = *st.owner;
            ++in_use;
            v.processing = true;
            v.request_id = a.id;
            v.n_prompt = static_cast<int32_t>(a.req.prompt.size());
            v.n_prompt_done = a.n_past;
            v.n_decoded = a.n_generated;
            v.age_s = std::chrono::duration<double>(now - a.t_admit).count();
            double prompt_s = std::chrono::duration<double>((a.n_generated ? a.t_first : now) - a.t_admit).count();
            if (prompt_s > 0) v.prompt_per_second = (a.n_past - a.n_cached) / prompt_s;
            double pred_s = a.n_generated > 1 ? std::chrono::duration<double>(a.t_last - a.t_first).count() : 0.0;
            if (pred_s > 0) v.predicted_per_second = (a.n_generated - 1) / pred_s;
        }
    }
    std::lock_guard lock(mutex_);
    n_free_ = static_cast<int32_t>(slots_.size()) - in_use;
    slot_view_ = std::move(view);
    stats_.kv_tokens = kv;
    stats_.slots_in_use = in_use;
}

scheduler_stats scheduler::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

std::vector<slot_info> scheduler::slots() const {
    std::lock_guard lock(mutex_);
    return slot_view_;
}

}  // namespace tandem
