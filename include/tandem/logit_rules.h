// tandem/logit_rules.h - what a request changes in its rows' logits before the row's summary,
// best token and draw: per-token adjustments (logit_bias, then llama.cpp's repeat penalty, then
// the presence and frequency penalties) and an allowed-token mask (constrained decoding). One
// formula for the host and the device, in single roundings, so both engines give the same bits.
#pragma once

#include "tandem/host_device.h"

#include <cstdint>
#include <limits>
#if __cplusplus >= 202002L
#include <span>
#endif

namespace tandem {

struct token_adjust {
    int32_t id = 0;
    float bias = 0.0f;      // added first (logit_bias)
    float repeat = 1.0f;    // then the repeat penalty: l > 0 ? l / repeat : l x repeat
    float subtract = 0.0f;  // then subtracted: count x frequency_penalty + presence_penalty
};

// Division and product in single roundings that the device compiler may not fuse or approximate.
TANDEM_HOST_DEVICE inline float token_adjust_apply(const token_adjust &a, float l) {
#if defined(__CUDA_ARCH__)
    l = __fadd_rn(l, a.bias);
    if (a.repeat != 1.0f) l = l > 0.0f ? __fdiv_rn(l, a.repeat) : __fmul_rn(l, a.repeat);
    l = __fsub_rn(l, a.subtract);
    // A NaN (given, or infinity minus infinity) leaves as one pattern: the GPU and x86 carry different payloads.
    return l != l ? __int_as_float(0x7fc00000) : l;
#else
    l = l + a.bias;
    if (a.repeat != 1.0f) l = l > 0.0f ? l / a.repeat : l * a.repeat;
    l = l - a.subtract;
    return l != l ? std::numeric_limits<float>::quiet_NaN() : l;
#endif
}

// Whether token id passes an allowed-token mask (bit id % 32 of word id / 32).
TANDEM_HOST_DEVICE inline bool token_allowed(const uint32_t *allowed, int32_t id) {
    return (allowed[id >> 5] >> (id & 31)) & 1u;
}

// The kernels (cuda/logits_rules.h) are C++17 and see only the per-token parts above.
#if __cplusplus >= 202002L
// A row's rules. Adjustments first, then every token outside the mask becomes -infinity.
struct row_rules {
    std::span<const token_adjust> adjust;  // ids ascending, each once
    std::span<const uint32_t> allowed;     // empty: every token; else (n_vocab + 31) / 32 words
    bool empty() const { return adjust.empty() && allowed.empty(); }
};

// The host twin: applies the rules to one row of n_vocab logits in place.
void row_rules_apply(const row_rules &rules, std::span<float> logits);
#endif

}  // namespace tandem
