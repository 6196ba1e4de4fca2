// src/engine/slot_table.cpp - slot lengths and row checks shared by the CPU and CUDA engines.
#include "slot_table.h"

#include "tandem/error.h"

#include <algorithm>

namespace tandem {

slot_table::slot_table(const engine_options &options, const model_hparams &hp) : n_ctx_(options.n_ctx), n_vocab_(hp.n_vocab) {
    if (options.n_slots < 1 || options.n_slots > 1024)
        fail(error_kind::config, "number of sessions (KV slots) must be in 1..1024, got {}", options.n_slots);
    if (options.n_ctx < 1) fail(error_kind::config, "context size must be at least 1, got {}", options.n_ctx);
    if (options.n_ctx > hp.n_ctx_train)
        fail(error_kind::config, "context size {} exceeds the model's trained context {} (no RoPE scaling yet)",
             options.n_ctx, hp.n_ctx_train);
    len_.assign(size_t(options.n_slots), 0);
}

int32_t slot_table::length(int32_t slot) const {
    if (slot < 0 || slot >= n_slots()) fail(error_kind::invalid_request, "slot {} out of range 0..{}", slot, n_slots() - 1);
    return len_[size_t(slot)];
}

void slot_table::truncate(int32_t slot, int32_t n_keep) {
    const int32_t len = length(slot);
    if (n_keep < 0 || n_keep > len)
        fail(error_kind::invalid_request, "cannot keep {} tokens of slot {} which holds {}", n_keep, slot, len);
    len_[size_t(slot)] = n_keep;
}

void slot_table::check_export(int32_t slot, int32_t n_tokens, size_t out_bytes, uint64_t token_bytes) const {
    const int32_t len = length(slot);
    if (n_tokens < 0 || n_tokens > len)
        fail(error_kind::invalid_request, "cannot copy {} tokens of slot {} which holds {}", n_tokens, slot, len);
    if (out_bytes != uint64_t(n_tokens) * token_bytes)
        fail(error_kind::invalid_request, "{} tokens of KV take {} bytes, not {}", n_tokens, uint64_t(n_tokens) * token_bytes,
             out_bytes);
}

int32_t slot_table::check_import(int32_t slot, size_t in_bytes, uint64_t token_bytes) const {
    length(slot);
    if (token_bytes == 0 || in_bytes % token_bytes != 0)
        fail(error_kind::invalid_request, "a KV blob of {} bytes is not whole tokens of {} bytes", in_bytes, token_bytes);
    const uint64_t n = in_bytes / token_bytes;
    if (n > uint64_t(n_ctx_))
        fail(error_kind::too_large, "a KV blob of {} tokens does not fit the context of {} tokens", n, n_ctx_);
    return int32_t(n);
}

void slot_table::set_length(int32_t slot, int32_t n_tokens) {
    TANDEM_ASSERT(n_tokens >= 0 && n_tokens <= n_ctx_, "slot length {} outside 0..{}", n_tokens, n_ctx_);
    length(slot);
    len_[size_t(slot)] = n_tokens;
}

void slot_table::validate(std::span<const engine_row> rows) const {
    std::vector<int32_t> next = len_;
    for (size_t i = 0; i < rows.size(); ++i) {
        const engine_row &r = rows[i];
        if (r.slot < 0 || r.slot >= n_slots())
            fail(error_kind::invalid_request, "row {}: slot {} out of range 0..{}", i, r.slot, n_slots() - 1);
        if (r.token < 0 || r.token >= n_vocab_)
            fail(error_kind::invalid_request, "row {}: token {} out of range 0..{}", i, r.token, n_vocab_ - 1);
        if (r.pos != next[size_t(r.slot)])
            fail(error_kind::invalid_request, "row {}: slot {} expects position {}, got {}", i, r.slot,
                 next[size_t(r.slot)], r.pos);
        if (r.pos >= n_ctx_)
            fail(error_kind::too_large, "row {}: position {} does not fit the context of {} tokens", i, r.pos, n_ctx_);
        ++next[size_t(r.slot)];
    }
}

void slot_table::advance(std::span<const engine_row> rows) {
    for (const engine_row &r : rows) len_[size_t(r.slot)] = std::max(len_[size_t(r.slot)], r.pos + 1);
}

}  // namespace tandem
