// src/engine/cold_experts.h - the host tier of one pipeline stage: the (row, slot) pairs routed to
// the stage's cold experts, computed on the CPU with its quantized products from the mapped file,
// or from host copies requantized at load (--expert-tiers).
// Owns: which experts are cold (from the plan), their requantized copies and the CPU scratch for
// them. Does not own routing or the combine: callers pass the routed rows and combine every slot's
// output in slot order.
#pragma once

#include "src/cpu/cpu_ops.h"
#include "src/cpu/workspace.h"
#include "tandem/expert_tiers.h"
#include "tandem/model.h"
#include "tandem/placement.h"

#include <cstdint>
#include <vector>

namespace tandem {

class cold_experts {
public:
    // The plan's cold experts of layers [layer_begin, layer_end). digits arithmetic gives the
    // GPU's Q4_K products bit for bit (src/cpu/digits.h), so a slot's output is the same bits
    // whichever tier computes it. With tiers.cold, each layer's cold experts are requantized to
    // that type now (deterministically: the same file and spec give the same bits) and computed
    // from those copies; the file's bytes are then never read for them.
    cold_experts(const model_hparams &hp, const model_tensors &tensors, const placement_plan &plan, int32_t layer_begin,
                 int32_t layer_end, int32_t n_threads, cpu::cpu_arithmetic arithmetic, const expert_tiers_spec &tiers = {});

    // Whether the layer has cold experts (a step may still route no row to them).
    bool any(int32_t layer) const;
    bool is_cold(int32_t layer, int32_t expert) const;
    // out [n_rows][k][d_model]: the outputs of the slots whose expert is cold (the others untouched),
    // for h [n_rows][d_model] normalised rows and ids [n_rows][k] their experts. Returns the number
    // of such slots.
    int64_t compute(int32_t layer, int64_t n_rows, const float *h, const int32_t *ids, float *out);

private:
    // One layer's cold experts requantized, back to back in the order of their ids.
    struct tier_layer {
        std::vector<int32_t> compact;  // [n_expert] index among the cold experts; n_cold for the others
        int32_t n_cold = 0;
        std::vector<uint8_t> gate, up;  // [n_cold * d_ff] rows of d_model elements of the tier's type
        std::vector<uint8_t> down;      // [n_cold * d_model] rows of d_ff elements
    };
    void requantize(const expert_tiers_spec &tiers, int32_t n_threads);
    void compute_tier(int32_t layer, int64_t k, int64_t n_rows, const float *h, const int32_t *ids, float *out);

    const model_hparams &hp_;
    const model_tensors &tensors_;
    int32_t layer_begin_ = 0;
    std::vector<std::vector<uint8_t>> cold_;  // [layer - layer_begin][n_expert] 1 = cold
    ggml_type tier_type_ = ggml_type::f32;
    std::vector<tier_layer> tiers_;           // [layer - layer_begin]; empty without tiers
    uint64_t tier_bytes_ = 0;                 // bytes of the requantized copies
    std::vector<int32_t> tier_ids_;           // [n_rows * k] a call's ids as compact indices
    std::vector<uint8_t> tier_owned_;         // [n_cold + 1] 1 but for the last (the non-cold experts)
    cpu::cpu_context ctx_;
    cpu::cpu_workspace ws_;
};

}  // namespace tandem
