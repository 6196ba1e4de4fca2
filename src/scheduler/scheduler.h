// src/scheduler/scheduler.h - the engine loop: the only owner of the engine, its KV slots and the
// sessions. HTTP threads submit gen_requests and receive gen_events through a gen_sink.
// Depends on engine.h and sampler.h: tokenizer and sampler come in through hooks,
// so the policy is testable with a fake engine before any backend exists.
#pragma once

#include "src/scheduler/draft_lookup.h"
#include "src/scheduler/prefill_budget.h"
#include "src/scheduler/prompt_cache.h"
#include "src/scheduler/session_rules.h"
#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/grammar.h"
#include "tandem/sampler.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tandem {

// Turns sampled ids into text that never splits a UTF-8 character (tokenizer's token_streamer).
class text_stream {
public:
    virtual ~text_stream() = default;
    virtual std::string push(int32_t id) = 0;
    virtual std::string flush() = 0;
};

// Picks the next token from one row of logits (the seeded tandem::sampler in the server).
class token_picker {
public:
    virtual ~token_picker() = default;
    // summary: the row's logits_top, when the engine made one beside the row (else null).
    virtual sample_result pick(std::span<const float> logits, const logits_top *summary = nullptr) = 0;
    // Whether pick_top can decide this picker's draws (the sampler's always can, given the draws
    // it requests): when every row of a step's pickers can, the step asks the engine for
    // summaries (row_output::summary) instead of whole rows.
    virtual bool picks_from_top() const { return false; }
    // The exact draw (draw_exact.h) the engine should make beside the row's top for this
    // picker's draw `ahead` draws from now; temperature 0 (the default): none.
    virtual row_draw draw_request(size_t ahead) const {
        (void)ahead;
        return {};
    }
    // Whether the row's best token and its draw (draw_request) decide pick_top and what it
    // reports: when every row of a step's pickers says so, the step asks the engine for those
    // alone (row_output::best).
    virtual bool needs_best_only() const { return false; }
    // The pick from the row's top; called only when picks_from_top().
    virtual sample_result pick_top(const logits_top &top) {
        (void)top;
        fail(error_kind::internal, "this token picker picks from whole rows only");
    }
};

// The seeded tandem::sampler as a token_picker (the server's, and the tests' real sampling).
std::unique_ptr<token_picker> make_sampler_picker(const sampling_params &params);

struct scheduler_hooks {
    std::function<bool(int32_t)> is_eog;
    std::function<std::unique_ptr<text_stream>()> make_text_stream;
    std::function<std::unique_ptr<token_picker>(const sampling_params &)> make_picker;
    // The tokenizer's vocabulary as grammars see it (null: constrained requests are refused), and
    // each token's bytes (for gen_request::constraint_after).
    std::shared_ptr<const grammar_vocab> vocab;
    token_bytes_fn token_bytes;
    // The prompt cache's disk tier (--cache-disk): what the host cache evicts goes there. Null:
    // none; ignored while the host cache is off.
    std::shared_ptr<prompt_spill> disk;
};

struct scheduler_options {
    int32_t prefill_chunk = 2048;  // prompt tokens per step while nobody decodes
    int32_t prefill_yield = 128;   // most prompt tokens per step while anyone decodes
    double itl_budget = 2.0;       // ... and fewer when a step would take longer than this many
                                   // times a decode-only step (prefill_budget.h)
    int32_t max_queue = 64;        // requests waiting for a slot; beyond it submit() throws 503
    // Speculative decoding by prompt lookup (draft_lookup.h): each decoding session may feed up to
    // draft.n_max guessed tokens as extra decode rows, while the step's decode rows stay within
    // draft_step_rows; only draws that the session's sampler makes anyway are kept, so the output
    // is the same as without drafts. draft.n_max 0: off. Sessions whose rows carry logit rules
    // (penalties, logit_bias, a grammar) are never drafted: a draft row's rules would depend on the
    // drafts before it being kept.
    draft_options draft;
    int32_t draft_step_rows = 16;
    // The prompt cache (--cache-ram): bytes of host memory for the KV of conversations whose slot
    // was given to another request; a new prompt takes its longest shared prefix from there or
    // from another slot (copied, not prefilled). 0: off, each prompt reuses only its own slot's
    // prefix. Engines that cannot move K/V (engine::kv_token_bytes 0) run without it.
    uint64_t prompt_cache_bytes = 0;
};

enum class finish_reason { none, stop, length, cancelled, error };
const char *finish_reason_name(finish_reason reason);

// llama.cpp's timings object, per request.
struct gen_timings {
    int32_t cache_n = 0;       // prompt tokens reused from the slot's cache
    int32_t prompt_n = 0;      // prompt tokens computed
    double prompt_ms = 0.0;
    int32_t predicted_n = 0;
    double predicted_ms = 0.0;
};

struct gen_token {
    int32_t id = 0;
    float logprob = 0.0f;
    std::vector<token_logprob> top;
};

struct gen_event {
    enum class kind { progress, delta, done };
    kind type = kind::delta;
    std::string text;               // delta: newly released text (stop strings held back)
    std::vector<gen_token> tokens;  // delta: tokens sampled since the last event (eog excluded)
    int32_t prefill_done = 0;       // progress: prompt tokens in the KV so far
    int32_t prefill_total = 0;
    finish_reason finish = finish_reason::none;  // done
    std::string stop_matched;       // done: the stop string that ended it (if any)
    std::string error;              // done with finish_reason::error or cancelled
    int32_t status = 0;             // done with an error: its HTTP status (0: 500); 503 when a host was lost
    int32_t n_prompt = 0;           // done: prompt tokens
    int32_t n_generated = 0;        // done: generated tokens (eog included)
    int32_t slot = -1;
    gen_timings timings;            // done
    double queue_ms = 0.0;          // done: from submit to admission into a slot
};

// Receives a request's events. Called on the engine thread (and, for queued requests that are
// cancelled, on the cancelling thread); must not block: queue and hand off.
class gen_sink {
public:
    virtual ~gen_sink() = default;
    virtual void on_event(gen_event &&event) = 0;
};

struct gen_request {
    std::vector<int32_t> prompt;   // non-empty, shorter than the context
    int32_t max_tokens = 16;       // >= 1; also bounded by the context
    sampling_params sampling;
    std::vector<std::string> stop; // stop strings (not part of the output)
    std::shared_ptr<gen_sink> sink;
    // The output must match this grammar (response_format, a request's grammar, a forced tool
    // call): each step masks the tokens that would leave it. Null: unconstrained.
    std::shared_ptr<const grammar> constraint;
    // The constraint applies once the output holds this text (the end of a reasoning block the
    // template opened), from the first token when empty.
    std::string constraint_after;
};

struct slot_info {
    int32_t id = 0;
    int32_t n_ctx = 0;
    bool processing = false;
    int32_t n_cached = 0;          // tokens in the slot's KV
    uint64_t request_id = 0;       // 0 when idle
    int32_t n_prompt = 0, n_prompt_done = 0, n_decoded = 0;
    double prompt_per_second = 0.0, predicted_per_second = 0.0;
    double age_s = 0.0;            // since the session was admitted (0 when idle)
};

struct scheduler_stats {
    uint64_t prompt_tokens = 0;        // prompt tokens computed (llamacpp:prompt_tokens_total)
    double prompt_seconds = 0.0;
    uint64_t predicted_tokens = 0;
    double predicted_seconds = 0.0;
    uint64_t n_steps = 0;              // engine forward calls (llamacpp:n_decode_total)
    uint64_t busy_slot_steps = 0;      // sum over steps of slots in the call
    uint64_t decode_steps = 0;         // steps with at least one decode row
    uint64_t decode_rows = 0;          // decode rows over those steps
    uint64_t prefill_yields = 0;       // steps where a prefill was capped by the prefill budget
    int32_t prefill_budget = 0;        // prompt tokens the last step with decode rows could carry
    uint64_t requests_total = 0, requests_cancelled = 0, requests_rejected = 0;
    uint64_t cached_prompt_tokens = 0; // prompt tokens reused from slot caches
    int32_t slots_in_use = 0, queue_depth = 0, n_slots = 0;
    int64_t kv_tokens = 0;             // tokens held in all slots' KV
    int32_t max_rows_per_decode = 0;
    uint64_t draft_tokens = 0;         // drafted tokens fed as decode rows
    uint64_t draft_accepted = 0;       // of which kept (each saved a step)
    uint64_t prompt_cache_bytes = 0;   // host prompt cache held now
    uint64_t prompt_cache_hits = 0;    // admissions that restored a prefix from it
    uint64_t prompt_cache_misses = 0;  // admissions (with the cache on) that did not
    uint64_t prompt_cache_restored = 0;  // prompt tokens restored from it
    uint64_t prompt_cache_disk_bytes = 0;     // the disk tier's files now
    uint64_t prompt_cache_disk_hits = 0;      // admissions that read a prefix back from disk
    uint64_t prompt_cache_disk_restored = 0;  // prompt tokens read back from disk
    uint64_t prefix_tokens_copied = 0; // prompt tokens copied from another slot
};

// A slot's conversation as slot files hold it: its tokens and their KV blob (engine.h).
struct slot_snapshot {
    std::vector<int32_t> tokens;
    kv_bytes kv;
};

class scheduler {
public:
    scheduler(engine &eng, const scheduler_options &options, scheduler_hooks hooks);
    ~scheduler();
    scheduler(const scheduler &) = delete;
    scheduler &operator=(const scheduler &) = delete;

    // Starts the engine thread. Without it, tests drive the loop with step().
    void start();
    // Queues a request; returns its id (> 0). Throws error(unavailable) when the queue is full
    // or the scheduler is stopping, error(invalid_request/too_large) for a request that cannot run.
    uint64_t submit(gen_request request);
    // Cancels from any thread: a queued request is dropped now, an active one frees its slot at
    // the next step boundary. Its sink receives done/cancelled. Unknown ids are ignored.
    void cancel(uint64_t id);
    // Stops accepting; queued requests are cancelled; active ones may run until `grace` has
    // passed, then are cancelled. Joins the engine thread.
    void shutdown(std::chrono::milliseconds grace);

    // One scheduling step (admission, one forward call, sampling). Returns false when idle.
    // Engine thread only (or the test's thread when start() was not called).
    bool step();

    // Whether the engine loop turns: it is idle, or its current step started less than `limit`
    // ago (the service watchdog's question). Any thread.
    bool turning(std::chrono::steady_clock::duration limit) const;

    scheduler_stats stats() const;
    std::vector<slot_info> slots() const;

    // Slot files (POST /slots/{id}): an idle slot's conversation out, in, or forgotten. Any thread;
    // the work runs on the engine thread between steps (the caller waits). Throw not_found for a
    // slot out of range, invalid_request for a slot that is processing a request or a snapshot
    // that does not fit, unsupported when the engine cannot move K/V.
    slot_snapshot slot_save(int32_t slot);
    void slot_restore(int32_t slot, slot_snapshot snapshot);
    void slot_erase(int32_t slot);
    // The rows routed to each expert so far ([n_layer][n_expert]; empty when the engine does not
    // record them), read on the engine thread between steps. Any thread; the caller waits.
    std::vector<std::vector<uint64_t>> expert_traffic();
    const scheduler_options &options() const { return options_; }

private:
    struct active;
    void run();
    void drain_cancels();
    void admit();
    // The prompt's prefix into the slot it was given (own_common: tokens the slot already shares
    // with it): kept, copied from another slot, restored from the host cache or read back from the
    // disk tier, whichever is longest; the slot's conversation goes to the host cache when it would be lost. Returns the
    // tokens the slot now holds.
    size_t take_prefix(int32_t slot, const std::vector<int32_t> &prompt, size_t own_common);
    // A conversation leaving its slot: into the host cache, whose evictions go to the disk tier;
    // one larger than the host cache goes to the disk tier directly.
    void keep_conversation(prompt_cache::entry e);
    struct queued;
    // With the prompt cache on: whether the prompt should stay queued because most of it is the
    // prefix of a prompt being prefilled now (or admitted with it, `taken`), which it will then
    // copy rather than compute a second time.
    // The prompt's longest prefix held now: in the host cache or a slot (faster), and on the disk tier.
    struct prefix_held {
        size_t faster = 0, disk = 0;
    };
    prefix_held prefix_now(const std::vector<int32_t> &prompt) const;
    bool waits_for_prefill(const std::vector<int32_t> &prompt, const std::vector<queued> &taken, const prefix_held &now) const;
    // Whether the queue's front waits for the disk tier: when the disk holds a longer prefix than
    // every faster source, it is read on a thread of its own (one read at a time) while the active
    // sessions go on decoding, and the request is admitted once the read is done.
    bool waits_for_disk(const std::vector<int32_t> &prompt, const prefix_held &now);
    // The finished read's entry when it was made for this prompt; else the disk read here and now.
    std::optional<prompt_cache::entry> disk_entry(const std::vector<int32_t> &prompt);
    // Runs fn on the engine thread between steps with the idle slot (checked there) and waits.
    void run_on_idle_slot(int32_t slot, std::function<void()> fn);
    // fn on the engine thread between steps; the caller waits (errors rethrown here).
    void run_between_steps(std::function<void()> fn);
    void run_tasks();
    void finish(active &a, finish_reason reason, const std::string &error, int32_t status = 0);
    void emit_token(active &a, const sample_result &r, bool &done);
    bool rules_accept(active &a, int32_t id);
    int32_t draft_room(const active &a) const;
    // The phases of step().
    struct step_plan;
    struct session_picks;
    void plan_decode_rows(step_plan &plan);
    void plan_prompt_rows(step_plan &plan);
    void plan_outputs(step_plan &plan);
    void plan_rules(step_plan &plan);
    std::vector<session_picks> pick_tokens(const step_plan &plan);
    std::pair<uint64_t, uint64_t> apply_picks(std::vector<session_picks> &picks);
    void send_events();
    void record_step(const step_plan &plan, double dt, uint64_t n_decode_tokens, uint64_t n_accepted);
    void publish();
    void abandon_active(const std::string &why, int32_t status = 0);

    engine &engine_;
    scheduler_options options_;
    scheduler_hooks hooks_;

    // Shared with other threads, under mutex_.
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    struct queued {
        uint64_t id;
        gen_request request;
        std::chrono::steady_clock::time_point arrived;
    };
    std::deque<queued> queue_;
    std::vector<uint64_t> cancels_;
    std::deque<std::packaged_task<void()>> tasks_;  // slot file work for the engine thread
    uint64_t next_id_ = 1;
    bool stopping_ = false;
    int32_t n_free_ = 0;  // free slots as of the last step (admission control in submit)
    std::chrono::steady_clock::time_point deadline_{};
    scheduler_stats stats_;
    std::vector<slot_info> slot_view_;

    // Engine thread only.
    struct slot_state {
        std::vector<int32_t> tokens;  // what the engine's KV holds for this slot
        uint64_t last_used = 0;
        active *owner = nullptr;
    };
    std::vector<slot_state> slots_;
    std::vector<std::unique_ptr<active>> active_;  // in admission order
    std::unique_ptr<constraint_table> constraints_;  // with hooks_.vocab
    std::unique_ptr<prompt_cache> cache_;            // with options.prompt_cache_bytes
    std::shared_ptr<host_arena> arena_;              // the cache's blobs, in the engine's pinned memory (if any)
    std::shared_ptr<prompt_spill> disk_;             // hooks_.disk, with cache_
    struct disk_read {
        std::vector<int32_t> prompt;
        std::future<std::optional<prompt_cache::entry>> result;
    };
    std::optional<disk_read> disk_read_;             // the read in flight or done, not yet taken
    uint64_t use_clock_ = 0;
    engine_outputs outputs_;  // the last step's output rows
    prefill_budget budget_;
    std::thread thread_;
    std::atomic<int64_t> step_started_ns_{0};  // steady-clock ns when the running step began; 0: none
};

}  // namespace tandem
