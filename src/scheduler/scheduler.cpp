// src/scheduler/scheduler.cpp - the engine loop's sessions: FIFO admission, longest-prefix slot
// choice, each session's sampler, drafts and logit rules, cancellation and shutdown, stop
// conditions, stats for /metrics. A step's phases are in scheduler_step.cpp.
#include "src/scheduler/scheduler_state.h"

#include "tandem/error.h"
#include "tandem/log.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <optional>
#include <utility>

namespace tandem {

// Most drafted tokens a session may feed in one step: 16 slots of 1 + 16 rows stay well inside any
// backend's decode step.
constexpr int32_t max_draft = 16;

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
    if (hooks_.vocab) {
        if (hooks_.vocab->n_vocab() > engine_.hparams().n_vocab)
            fail(error_kind::config, "the tokenizer has {} tokens but the model's logits rows {}", hooks_.vocab->n_vocab(),
                 engine_.hparams().n_vocab);
        constraints_ = std::make_unique<constraint_table>(hooks_.vocab);
    }
    slots_.resize(static_cast<size_t>(engine_.n_slots()));
    for (int32_t s = 0; s < engine_.n_slots(); ++s) {
        // Start from what the engine holds (normally nothing).
        if (engine_.slot_length(s) != 0) engine_.slot_truncate(s, 0);
    }
    if (options_.prompt_cache_bytes > 0 && engine_.kv_token_bytes() > 0)
        cache_ = std::make_unique<prompt_cache>(options_.prompt_cache_bytes);
    else if (options_.prompt_cache_bytes > 0)
        log_warn("this engine cannot copy KV: the prompt cache is off");
    if (cache_) {
        // The cache, one conversation more (a slot's KV is copied out before the insert that makes
        // room for it) and slack for runs rounded up to pages. Blobs that find no run (a
        // fragmented region) take the heap.
        const size_t bytes = size_t(options_.prompt_cache_bytes) + size_t(engine_.n_ctx()) * size_t(engine_.kv_token_bytes()) +
                             64 * host_arena::page;
        if (std::shared_ptr<uint8_t> memory = engine_.host_pinned(bytes)) {
            arena_ = std::make_shared<host_arena>(std::move(memory), bytes);
            log_info("prompt cache: {:.2f} GiB of page-locked host memory", double(bytes) / double(1ull << 30));
        }
    }
    if (cache_) disk_ = hooks_.disk;
    else if (hooks_.disk) log_warn("the prompt cache's disk tier needs the host cache: it is off");
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
            wake_.wait(lock, [&] {
                return stopping_ || !queue_.empty() || !cancels_.empty() || !active_.empty() || !tasks_.empty();
            });
            if (stopping_ && queue_.empty() && active_.empty() && tasks_.empty()) return;
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
void scheduler::abandon_active(const std::string &why, int32_t status) {
    for (auto &a : active_) {
        engine_.slot_truncate(a->slot, 0);
        slots_[a->slot].tokens.clear();
        finish(*a, finish_reason::error, why, status);
    }
    active_.clear();
    publish();
}

uint64_t scheduler::submit(gen_request request) {
    if (request.prompt.empty()) fail(error_kind::invalid_request, "the prompt is empty");
    if (static_cast<int64_t>(request.prompt.size()) >= engine_.n_ctx())
        fail(error_kind::too_large, "the prompt has {} tokens; the context holds {}", request.prompt.size(), engine_.n_ctx());
    if (request.max_tokens < 1) fail(error_kind::invalid_request, "max_tokens must be >= 1, got {}", request.max_tokens);
    if (request.constraint && !constraints_) fail(error_kind::invalid_request, "this server cannot constrain outputs (no tokenizer vocabulary)");
    if (request.constraint && !request.constraint_after.empty() && !hooks_.token_bytes)
        fail(error_kind::invalid_request, "this server cannot start a constraint after a text (no token bytes)");
    for (const auto &[id, bias] : request.sampling.logit_bias)
        if (id < 0 || id >= engine_.hparams().n_vocab)
            fail(error_kind::invalid_request, "logit_bias: token id {} is out of range (the vocabulary has {} tokens)", id,
                 engine_.hparams().n_vocab);
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

namespace {
size_t common_prefix(const std::vector<int32_t> &a, const std::vector<int32_t> &b) {
    const size_t n = std::min(a.size(), b.size());
    return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + static_cast<ptrdiff_t>(n), b.begin()).first - a.begin());
}
}  // namespace

void scheduler::admit() {
    std::vector<queued> taken;
    {
        std::lock_guard lock(mutex_);
        int32_t n_free = 0;
        for (const auto &s : slots_) n_free += s.owner == nullptr;
        while (n_free > 0 && !queue_.empty()) {
            const std::vector<int32_t> &prompt = queue_.front().request.prompt;
            const prefix_held now = prefix_now(prompt);
            if (waits_for_prefill(prompt, taken, now) || waits_for_disk(prompt, now)) break;
            taken.push_back(std::move(queue_.front()));
            queue_.pop_front();
            --n_free;
        }
        n_free_ = n_free;
        stats_.queue_depth = static_cast<int32_t>(queue_.size());
        // A finished read nobody waits for (its request was cancelled) lets its entry go.
        if (disk_read_ && disk_read_->result.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
            bool wanted = !queue_.empty() && queue_.front().request.prompt == disk_read_->prompt;
            for (const auto &q : taken) wanted = wanted || q.request.prompt == disk_read_->prompt;
            if (!wanted) disk_read_.reset();
        }
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
        const int32_t n_keep = static_cast<int32_t>(take_prefix(best, a->req.prompt, best_common));
        auto &st = slots_[best];
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
        if (session_rules::wanted(a->req.sampling, a->req.constraint != nullptr)) {
            session_constraint c;
            if (a->req.constraint) c = {constraints_->bind(*a->req.constraint), a->req.constraint_after, hooks_.token_bytes};
            a->rules = std::make_unique<session_rules>(a->req.sampling, a->req.prompt, engine_.hparams().n_vocab, std::move(c));
        }
        if (options_.draft.n_max > 0 && !a->rules) {
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


scheduler::prefix_held scheduler::prefix_now(const std::vector<int32_t> &prompt) const {
    prefix_held held;
    if (!cache_) return held;
    held.faster = cache_->longest_common(prompt);
    for (const auto &st : slots_) held.faster = std::max(held.faster, common_prefix(st.tokens, prompt));
    if (disk_) held.disk = disk_->longest_common(prompt);
    return held;
}

bool scheduler::waits_for_prefill(const std::vector<int32_t> &prompt, const std::vector<queued> &taken,
                                  const prefix_held &held) const {
    if (!cache_) return false;
    const size_t now = std::max(held.faster, held.disk);
    size_t soon = 0;
    for (const auto &a : active_)
        if (!a->decoding) soon = std::max(soon, common_prefix(a->req.prompt, prompt));
    for (const auto &q : taken) soon = std::max(soon, common_prefix(q.request.prompt, prompt));
    // Waiting pays only when the prefill under way would spare most of this prompt.
    return soon > now && 2 * (soon - now) >= prompt.size();
}

bool scheduler::waits_for_disk(const std::vector<int32_t> &prompt, const prefix_held &now) {
    if (!cache_ || !disk_ || prompt.size() < 2) return false;
    if (disk_read_) {
        const bool ready = disk_read_->result.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
        if (!ready) return true;  // one read at a time, even one a cancelled request started
        if (disk_read_->prompt == prompt) return false;
        disk_read_.reset();
    }
    const size_t limit = prompt.size() - 1;
    if (std::min(now.disk, limit) <= std::min(now.faster, limit)) return false;
    // A file the tier evicts meanwhile reads as a miss (the tier logs it): the prompt is prefilled.
    disk_read_ = disk_read{prompt, std::async(std::launch::async, [disk = disk_, p = prompt] { return disk->load(p); })};
    return true;
}

std::optional<prompt_cache::entry> scheduler::disk_entry(const std::vector<int32_t> &prompt) {
    if (disk_read_ && disk_read_->prompt == prompt) {
        std::optional<prompt_cache::entry> e = disk_read_->result.get();
        disk_read_.reset();
        return e;
    }
    return disk_->load(prompt);
}

size_t scheduler::take_prefix(int32_t slot, const std::vector<int32_t> &prompt, size_t own_common) {
    auto &st = slots_[slot];
    // Recompute at least the last prompt token: its logits pick the first output token.
    const size_t limit = prompt.size() - 1, keep = std::min(own_common, limit);
    size_t from_slot = keep, cached = 0, from_disk = 0;
    int32_t source = -1;
    prompt_cache::match m;
    std::optional<prompt_cache::entry> spilled;
    if (cache_) {
        for (int32_t s = 0; s < static_cast<int32_t>(slots_.size()); ++s) {
            const size_t common = std::min(common_prefix(slots_[s].tokens, prompt), limit);
            if (s != slot && common > from_slot) {
                source = s;
                from_slot = common;
            }
        }
        m = cache_->longest_prefix(prompt);
        cached = std::min(m.n_common, limit);
        // The disk is read only when it beats every faster source.
        if (disk_ && std::min(disk_->longest_common(prompt), limit) > std::max(cached, from_slot)) spilled = disk_entry(prompt);
        if (spilled) from_disk = std::min(common_prefix(spilled->tokens, prompt), limit);
    }
    const bool read = from_disk > std::max(cached, from_slot);
    const bool restore = !read && cached > from_slot, copy = !read && !restore && source >= 0;
    const size_t n = read ? from_disk : restore ? cached : from_slot;
    // The slot's conversation moves to the host cache before anything overwrites it (the cache is
    // filled after the restore, whose entry an insert could evict).
    prompt_cache::entry leaving;
    const uint64_t token_bytes = cache_ ? engine_.kv_token_bytes() : 0;
    const uint64_t room = cache_ ? std::max(cache_->capacity(), disk_ ? disk_->capacity() : 0) : 0;
    // The slot's old tokens survive as far as they agree with the prefix it now takes.
    const bool lost = st.tokens.size() > std::min(own_common, n);
    if (cache_ && lost && st.tokens.size() * (token_bytes + sizeof(int32_t)) <= room && !cache_->covers(st.tokens)) {
        leaving.tokens = st.tokens;
        leaving.kv = kv_bytes(kv_allocator<uint8_t>(arena_));
        leaving.kv.resize(st.tokens.size() * token_bytes);
        engine_.slot_export(slot, static_cast<int32_t>(st.tokens.size()), leaving.kv);
    }
    if (read)
        engine_.slot_import(slot, std::span<const uint8_t>(spilled->kv).first(n * token_bytes));
    else if (restore)
        engine_.slot_import(slot, std::span<const uint8_t>(m.hit->kv).first(n * token_bytes));
    else if (copy)
        engine_.slot_copy(source, slot, static_cast<int32_t>(n));
    else
        engine_.slot_truncate(slot, static_cast<int32_t>(n));
    st.tokens.assign(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(n));
    if (!leaving.tokens.empty()) keep_conversation(std::move(leaving));
    if (cache_) {
        std::lock_guard lock(mutex_);
        stats_.prompt_cache_hits += restore ? 1 : 0;
        stats_.prompt_cache_disk_hits += read ? 1 : 0;
        stats_.prompt_cache_misses += restore || read ? 0 : 1;
        stats_.prompt_cache_restored += restore ? n : 0;
        stats_.prompt_cache_disk_restored += read ? n : 0;
        stats_.prefix_tokens_copied += copy ? n : 0;
    }
    if (restore || copy || read)
        log_debug("slot {}: {} prompt tokens {}", slot, n,
                  read ? "read back from the disk cache" : restore ? "restored from the host cache" : "copied from another slot");
    return n;
}

void scheduler::keep_conversation(prompt_cache::entry e) {
    if (e.bytes() > cache_->capacity()) {
        if (disk_) disk_->store(std::move(e));
        return;
    }
    std::vector<prompt_cache::entry> evicted;
    cache_->insert(std::move(e), disk_ ? &evicted : nullptr);
    for (prompt_cache::entry &old : evicted) disk_->store(std::move(old));
}

void scheduler::run_tasks() {
    std::deque<std::packaged_task<void()>> tasks;
    {
        std::lock_guard lock(mutex_);
        tasks.swap(tasks_);
    }
    for (auto &t : tasks) t();
}

void scheduler::run_on_idle_slot(int32_t slot, std::function<void()> fn) {
    if (slot < 0 || slot >= engine_.n_slots()) fail(error_kind::not_found, "slot {} does not exist (0..{})", slot, engine_.n_slots() - 1);
    if (engine_.kv_token_bytes() == 0) fail(error_kind::unsupported, "this engine cannot copy a slot's KV");
    run_between_steps([this, slot, fn = std::move(fn)] {
        if (slots_[slot].owner) fail(error_kind::invalid_request, "slot {} is processing a request", slot);
        fn();
        publish();
    });
}

std::vector<std::vector<uint64_t>> scheduler::expert_traffic() {
    std::vector<std::vector<uint64_t>> out;
    run_between_steps([&] { out = engine_.expert_traffic(); });
    return out;
}

void scheduler::run_between_steps(std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    std::future<void> done = task.get_future();
    {
        std::lock_guard lock(mutex_);
        if (stopping_) fail(error_kind::unavailable, "the server is shutting down");
        tasks_.push_back(std::move(task));
        wake_.notify_one();
    }
    done.get();
}

slot_snapshot scheduler::slot_save(int32_t slot) {
    slot_snapshot out;
    run_on_idle_slot(slot, [&] {
        out.tokens = slots_[slot].tokens;
        out.kv.resize(out.tokens.size() * engine_.kv_token_bytes());
        engine_.slot_export(slot, static_cast<int32_t>(out.tokens.size()), out.kv);
    });
    return out;
}

void scheduler::slot_restore(int32_t slot, slot_snapshot snapshot) {
    for (int32_t id : snapshot.tokens)
        if (id < 0 || id >= engine_.hparams().n_vocab) fail(error_kind::invalid_request, "the slot file holds token {} outside the vocabulary", id);
    if (snapshot.tokens.size() >= static_cast<size_t>(engine_.n_ctx()))
        fail(error_kind::invalid_request, "the slot file holds {} tokens; a slot holds {}", snapshot.tokens.size(), engine_.n_ctx());
    if (snapshot.kv.size() != snapshot.tokens.size() * engine_.kv_token_bytes())
        fail(error_kind::invalid_request, "the slot file's KV has {} bytes, not {} for its {} tokens", snapshot.kv.size(),
             snapshot.tokens.size() * engine_.kv_token_bytes(), snapshot.tokens.size());
    run_on_idle_slot(slot, [&] {
        engine_.slot_import(slot, snapshot.kv);
        slots_[slot].tokens = std::move(snapshot.tokens);
        slots_[slot].last_used = ++use_clock_;
    });
}

void scheduler::slot_erase(int32_t slot) {
    run_on_idle_slot(slot, [&] {
        engine_.slot_truncate(slot, 0);
        slots_[slot].tokens.clear();
    });
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

void scheduler::finish(active &a, finish_reason reason, const std::string &error, int32_t status) {
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
    done.status = status;
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
    stats_.prompt_cache_bytes = cache_ ? cache_->bytes() : 0;
    stats_.prompt_cache_disk_bytes = disk_ ? disk_->bytes() : 0;
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
