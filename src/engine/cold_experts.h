// src/engine/cold_experts.h - the host tier of one pipeline stage: the (row, slot) pairs routed to
// the stage's cold experts, computed on the CPU with its quantized products from the mapped file.
// Owns: which experts are cold (from the plan) and the CPU scratch for them. Does not own routing
// or the combine: callers pass the routed rows and combine every slot's output in slot order.
#pragma once

#include "src/cpu/cpu_ops.h"
#include "src/cpu/workspace.h"
#include "tandem/model.h"
#include "tandem/placement.h"

#include <cstdint>
#include <vector>

namespace tandem {

class cold_experts {
public:
    // The plan's cold experts of layers [layer_begin, layer_end). digits arithmetic gives the
    // GPU's Q4_K products bit for bit (src/cpu/digits.h), so a slot's output is the same bits
    // whichever tier computes it.
    cold_experts(const model_hparams &hp, const model_tensors &tensors, const placement_plan &plan, int32_t layer_begin,
                 int32_t layer_end, int32_t n_threads, cpu::cpu_arithmetic arithmetic);

    // Whether the layer has cold experts (a step may still route no row to them).
    bool any(int32_t layer) const;
    bool is_cold(int32_t layer, int32_t expert) const;
    // out [n_rows][k][d_model]: the outputs of the slots whose expert is cold (the others untouched),
    // for h [n_rows][d_model] normalised rows and ids [n_rows][k] their experts. Returns the number
    // of such slots.
    int64_t compute(int32_t layer, int64_t n_rows, const float *h, const int32_t *ids, float *out);

private:
    const model_hparams &hp_;
    const model_tensors &tensors_;
    int32_t layer_begin_ = 0;
    std::vector<std::vector<uint8_t>> cold_;  // [layer - layer_begin][n_expert] 1 = cold
    cpu::cpu_context ctx_;
    cpu::cpu_workspace ws_;
};

}  // namespace tandem
