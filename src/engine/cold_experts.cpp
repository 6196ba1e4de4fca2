// src/engine/cold_experts.cpp - the host tier's expert products: the grouped expert pass of the CPU
// backend restricted to the cold experts, weights read in place from the mapped GGUF file, or from
// their copies requantized at load (--expert-tiers).
#include "cold_experts.h"

#include "cpu_moe_args.h"
#include "src/cpu/digits.h"

#include "tandem/error.h"
#include "tandem/log.h"
#include "tandem/quant.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <exception>

namespace tandem {

cold_experts::cold_experts(const model_hparams &hp, const model_tensors &tensors, const placement_plan &plan,
                           int32_t layer_begin, int32_t layer_end, int32_t n_threads, cpu::cpu_arithmetic arithmetic,
                           const expert_tiers_spec &tiers)
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
    if (tiers.cold) requantize(tiers, ctx_.n_threads);
}

namespace {

// One expert's rows [first_row, first_row + n_rows) of a stacked tensor, each of row_len elements,
// dequantized to f32 and quantized to `type` at dst. A row's blocks depend only on that row (and on
// the importance, the same for every row), so the result is the same on any thread count.
void requantize_rows(const gguf_tensor_info *t, int64_t first_row, int64_t n_rows, int64_t row_len, ggml_type type,
                     uint8_t *dst, std::vector<float> &scratch, const float *importance) {
    scratch.resize(size_t(n_rows * row_len));
    dequantize_rows(t->type, t->data + size_t(first_row) * ggml_row_bytes(t->type, row_len), scratch.data(), n_rows,
                    row_len);
    quantize_rows(type, scratch.data(), dst, n_rows, row_len, importance);
}

}  // namespace

void cold_experts::requantize(const expert_tiers_spec &tiers, int32_t n_threads) {
    const auto start = std::chrono::steady_clock::now();
    const ggml_type type = *tiers.cold;
    tier_type_ = type;
    const int64_t d = hp_.d_model, ff = hp_.d_ff_expert;
    const size_t gate_row = ggml_row_bytes(type, d), down_row = ggml_row_bytes(type, ff);
    // The jobs: (layer, expert, matrix 0 gate / 1 up / 2 down), so threads share out every layer's work.
    struct job {
        int32_t layer, expert, compact, matrix;
    };
    std::vector<job> jobs;
    uint64_t before = 0;
    tiers_.resize(cold_.size());
    for (size_t i = 0; i < cold_.size(); ++i) {
        tier_layer &tl = tiers_[i];
        const int32_t layer = layer_begin_ + int32_t(i);
        tl.compact.assign(size_t(hp_.n_expert), 0);
        for (int32_t e = 0; e < hp_.n_expert; ++e)
            if (cold_[i][size_t(e)]) {
                jobs.push_back({layer, e, tl.n_cold, 0});
                jobs.push_back({layer, e, tl.n_cold, 1});
                jobs.push_back({layer, e, tl.n_cold, 2});
                tl.compact[size_t(e)] = tl.n_cold++;
            }
        for (int32_t e = 0; e < hp_.n_expert; ++e)
            if (!cold_[i][size_t(e)]) tl.compact[size_t(e)] = tl.n_cold;
        if (tl.n_cold == 0) continue;
        const layer_tensors &lt = tensors_.layers[size_t(layer)];
        for (const gguf_tensor_info *t : {lt.gate_exps, lt.up_exps, lt.down_exps})
            before += t->n_bytes / uint64_t(hp_.n_expert) * uint64_t(tl.n_cold);
        tl.gate.resize(size_t(tl.n_cold * ff) * gate_row);
        tl.up.resize(size_t(tl.n_cold * ff) * gate_row);
        tl.down.resize(size_t(tl.n_cold * d) * down_row);
        tier_bytes_ += tl.gate.size() + tl.up.size() + tl.down.size();
    }
    if (jobs.empty()) return;
    // Types that quantize only with an importance matrix get a uniform one (every column alike).
    const std::vector<float> uniform(size_t(std::max(d, ff)), 1.0f);
    const float *importance = ggml_type_needs_importance(type) ? uniform.data() : nullptr;
    std::vector<std::vector<float>> scratch(static_cast<size_t>(n_threads));
    std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (size_t i = 0; i < jobs.size(); ++i) {
        const job &j = jobs[i];
        tier_layer &tl = tiers_[size_t(j.layer - layer_begin_)];
        const layer_tensors &lt = tensors_.layers[size_t(j.layer)];
        std::vector<float> &buf = scratch[size_t(omp_get_thread_num())];
        try {
            if (j.matrix == 2)
                requantize_rows(lt.down_exps, j.expert * d, d, ff, type, tl.down.data() + size_t(j.compact * d) * down_row,
                                buf, importance);
            else
                requantize_rows(j.matrix == 0 ? lt.gate_exps : lt.up_exps, j.expert * ff, ff, d, type,
                                (j.matrix == 0 ? tl.gate : tl.up).data() + size_t(j.compact * ff) * gate_row, buf,
                                importance);
        } catch (...) {
#pragma omp critical(cold_experts_requantize)
            if (!failure) failure = std::current_exception();
        }
    }
    if (failure) std::rethrow_exception(failure);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // docs/performance.md (`tandem bench --expert-tiers T`, every expert cold): exact products cost more than the bytes saved.
    if (ctx_.arithmetic == cpu::cpu_arithmetic::digits && !(cpu::digits_apply(type, d) && cpu::digits_apply(type, ff)))
        log_warn("--expert-tiers cold={}: the CPU computes {} with its exact arithmetic (digits cover q4_K, q6_K and "
                 "q8_0), slower per weight; fewer bytes may not make up for it",
                 ggml_type_name(type), ggml_type_name(type));
    auto mib = [](uint64_t bytes) { return double(bytes) / double(uint64_t(1) << 20); };
    log_info("host tier: {} cold experts of layers {}..{} requantized to {} in {:.2f} s: {:.1f} MiB in the file, {:.1f} MiB "
             "in host memory",
             jobs.size() / 3, layer_begin_, layer_begin_ + int32_t(cold_.size()) - 1, ggml_type_name(type), seconds,
             mib(before), mib(tier_bytes_));
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
    if (!tiers_.empty()) {
        compute_tier(layer, k, n_rows, h, ids, out);
        return n_cold;
    }
    const cpu::moe_grouped_args args = cpu_moe_args(tensors_.layers[size_t(layer)], hp_, k, n_rows, h, ids, out, cold);
    cpu::moe_grouped(ctx_, args);
    return n_cold;
}

// The grouped pass over the layer's requantized experts: ids become compact indices, and every
// expert that is not cold maps to one extra index that is not owned, so its pairs stay untouched
// and its (absent) rows are never read.
void cold_experts::compute_tier(int32_t layer, int64_t k, int64_t n_rows, const float *h, const int32_t *ids,
                                float *out) {
    const tier_layer &tl = tiers_[size_t(layer - layer_begin_)];
    const int64_t d = hp_.d_model, ff = hp_.d_ff_expert, n_experts = tl.n_cold + 1;
    tier_ids_.resize(size_t(n_rows * k));
    for (int64_t p = 0; p < n_rows * k; ++p) tier_ids_[size_t(p)] = tl.compact[size_t(ids[p])];
    tier_owned_.assign(size_t(n_experts), 1);
    tier_owned_.back() = 0;
    auto matrix = [&](const std::vector<uint8_t> &data, int64_t n_in, int64_t n_out) {
        return cpu::cpu_matrix{data.data(), tier_type_, n_in, n_out * n_experts, ggml_row_bytes(tier_type_, n_in)};
    };
    cpu::moe_grouped_args a;
    a.gate_exps = matrix(tl.gate, d, ff);
    a.up_exps = matrix(tl.up, d, ff);
    a.down_exps = matrix(tl.down, ff, d);
    a.x = h;
    a.ids = tier_ids_.data();
    a.out = out;
    a.n_rows = n_rows;
    a.k = k;
    a.n_expert = n_experts;
    a.d_model = d;
    a.d_ff = ff;
    a.owned = tier_owned_.data();
    cpu::moe_grouped(ctx_, a);
}

}  // namespace tandem
