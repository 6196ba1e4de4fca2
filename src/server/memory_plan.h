// src/server/memory_plan.h - the start-up memory check: weights + n_slots x ctx x KV per token +
// scratch against a budget, with a message naming the shortfall.
#pragma once

#include "tandem/model.h"

#include <cstdint>
#include <string>

namespace tandem::server {

struct memory_plan {
    uint64_t weights = 0;
    uint64_t kv = 0;
    uint64_t scratch = 0;
    uint64_t budget = 0;
    uint64_t total() const { return weights + kv + scratch; }
    bool fits() const { return total() <= budget; }
    std::string describe() const;   // "weights 1.20 GiB + KV 16 x 4096 x ... = ... of budget ..."
    std::string shortfall() const;  // what is missing and what to change; "" when it fits
    int32_t n_slots = 0, n_ctx = 0;
    uint64_t kv_per_token = 0;
};

// Scratch is an estimate of the engine's per-call buffers: activations of the widest call
// (prefill_chunk + n_slots rows), attention scores per row over the context, and the logits.
memory_plan memory_plan_compute(const model_bytes &bytes, const model_hparams &hp, int32_t n_slots, int32_t n_ctx,
                                int32_t prefill_chunk, uint64_t budget);

}  // namespace tandem::server
