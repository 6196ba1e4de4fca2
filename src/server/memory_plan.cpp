// src/server/memory_plan.cpp - see memory_plan.h.
#include "src/server/memory_plan.h"

#include <fmt/format.h>

namespace tandem::server {

static std::string gib(uint64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30)); }

memory_plan memory_plan_compute(const model_bytes &bytes, const model_hparams &hp, int32_t n_slots, int32_t n_ctx,
                                int32_t prefill_chunk, uint64_t budget) {
    memory_plan p;
    p.n_slots = n_slots;
    p.n_ctx = n_ctx;
    p.kv_per_token = bytes.kv_per_token;
    p.weights = bytes.total();
    p.kv = static_cast<uint64_t>(n_slots) * static_cast<uint64_t>(n_ctx) * bytes.kv_per_token;
    const uint64_t rows = static_cast<uint64_t>(prefill_chunk) + static_cast<uint64_t>(n_slots);
    const uint64_t f = sizeof(float);
    // Per row: residual, norm, q/k/v/attention output, the k routed experts' gate/up/down
    // intermediates and outputs. Generous by design: the check is there to refuse obvious misfits.
    uint64_t per_row = f * (4ull * hp.d_model + 3ull * hp.n_head * hp.d_head +
                            static_cast<uint64_t>(hp.n_expert_used) * (3ull * hp.d_ff_expert + hp.d_model));
    uint64_t scores = f * static_cast<uint64_t>(n_ctx) * static_cast<uint64_t>(hp.n_head) * 16;  // per-thread blocks
    uint64_t logits = f * static_cast<uint64_t>(n_slots + 1) * static_cast<uint64_t>(hp.n_vocab);
    p.scratch = rows * per_row + scores + logits + (64ull << 20);
    p.budget = budget;
    return p;
}

std::string memory_plan::describe() const {
    return fmt::format("weights {} + KV {} slots x {} tokens x {} B = {} + scratch {} = {} of budget {}", gib(weights),
                       n_slots, n_ctx, kv_per_token, gib(kv), gib(scratch), gib(total()), gib(budget));
}

std::string memory_plan::shortfall() const {
    if (fits()) return {};
    uint64_t missing = total() - budget;
    uint64_t room_for_kv = budget > weights + scratch ? budget - weights - scratch : 0;
    uint64_t per_slot = static_cast<uint64_t>(n_ctx) * kv_per_token;
    uint64_t slots_fit = per_slot ? room_for_kv / per_slot : 0;
    return fmt::format("the memory plan needs {} but the budget is {}: {} short ({}). With --ctx {} at most {} "
                       "slots fit; lower --batched-session or --ctx, or raise --mem-budget",
                       gib(total()), gib(budget), gib(missing), describe(), n_ctx, slots_fit);
}

}  // namespace tandem::server
