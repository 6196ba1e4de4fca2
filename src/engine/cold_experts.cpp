// src/engine/cold_experts.cpp - the host tier's expert products: the grouped expert pass of the CPU
// backend restricted to the cold experts, weights read in place from the mapped GGUF file.
#include "cold_experts.h"

#include "cpu_moe_args.h"

#include "tandem/error.h"

#include <algorithm>

namespace tandem {

cold_experts::cold_experts(const model_hparams &hp, const model_tensors &tensors, const placement_plan &plan,
                           int32_t layer_begin, int32_t layer_end, int32_t n_threads, cpu::cpu_arithmetic arithmetic)
    : hp_(hp), tensors_(tensors), layer_begin_(layer_begin) {
    TANDEM_ASSERT(layer_begin >= 0 && layer_end >= layer_begin && layer_end <= hp.n_layer);
    ctx_.n_threads = std::max(1, n_threads);
    ctx_.arithmetic = arithmetic;
    ctx_.ws = &ws_;
    for (int32_t l = layer_begin; l < layer_end; ++l) {
        std::vector<uint8_t> mask(size_t(hp.n_expert), 0);
        if (!plan.cold.experts.empty())
            for (int32_t e : plan.cold.experts[size_t(l)]) mask[size_t(e)] = 1;
        cold_.push_back(std::move(mask));
    }
}

bool cold_experts::any(int32_t layer) const {
    const auto &m = cold_[size_t(layer - layer_begin_)];
    return std::find(m.begin(), m.end(), uint8_t{1}) != m.end();
}

bool cold_experts::is_cold(int32_t layer, int32_t expert) const {
    return cold_[size_t(layer - layer_begin_)][size_t(expert)] != 0;
}

int64_t cold_experts::compute(int32_t layer, int64_t n_rows, const float *h, const int32_t *ids, float *out) {
    TANDEM_ASSERT(layer >= layer_begin_ && layer < layer_begin_ + int32_t(cold_.size()), "layer {} is not this stage's", layer);
    if (!any(layer)) return 0;
    const int64_t k = model_layer_recipe(hp_, layer).n_expert_used;
    const uint8_t *cold = cold_[size_t(layer - layer_begin_)].data();
    const int64_t n_cold = std::count_if(ids, ids + n_rows * k, [&](int32_t e) { return cold[e] != 0; });
    if (n_cold == 0) return 0;
    const cpu::moe_grouped_args args = cpu_moe_args(tensors_.layers[size_t(layer)], hp_, k, n_rows, h, ids, out, cold);
    cpu::moe_grouped(ctx_, args);
    return n_cold;
}

}  // namespace tandem
