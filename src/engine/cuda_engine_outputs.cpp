// src/engine/cuda_engine_outputs.cpp - what the CUDA engine does with a step's logits rows: the
// rows' logit rules sent to the head's devices and launched there, the summaries and draws
// launched, and the devices' summaries merged into each row's.
#include "cuda_device_state.h"
#include "cuda_engine_host.h"
#include "cuda_link.h"
#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace tandem {

logits_top cuda_merge_logits_top(const std::vector<const cuda::logits_top_row *> &parts, int32_t n_vocab) {
    logits_top t;
    t.n_vocab = n_vocab;
    float max_logit = -INFINITY;
    for (const cuda::logits_top_row *p : parts) {
        max_logit = std::max(max_logit, p->max);
        t.has_nan = t.has_nan || p->has_nan != 0;
    }
    double sum = 0.0;
    for (const cuda::logits_top_row *p : parts)
        if (p->sum_exp > 0.0) sum += p->sum_exp * std::exp(double(p->max) - double(max_logit));
    t.log_norm = double(max_logit) + std::log(sum);
    std::vector<size_t> at(parts.size(), 0);
    const size_t want = std::min<size_t>(logits_top_max, size_t(n_vocab));
    while (t.top.size() < want) {
        int best = -1;
        for (size_t d = 0; d < parts.size(); ++d) {
            if (at[d] >= size_t(parts[d]->n)) continue;
            if (best < 0) {
                best = int(d);
                continue;
            }
            const float a = parts[d]->logit[at[d]], b = parts[size_t(best)]->logit[at[size_t(best)]];
            if (a > b || (a == b && parts[d]->id[at[d]] < parts[size_t(best)]->id[at[size_t(best)]])) best = int(d);
        }
        TANDEM_ASSERT(best >= 0, "the devices' logits summaries hold {} of {} tokens", t.top.size(), want);
        const size_t b = size_t(best);
        t.top.push_back({parts[b]->id[at[b]], parts[b]->logit[at[b]]});
        ++at[b];
    }
    return t;
}

logits_top cuda_merge_logits_best(const std::vector<const cuda::logits_top_row *> &parts, int32_t n_vocab) {
    logits_top t;
    t.n_vocab = n_vocab;
    t.log_norm = std::numeric_limits<double>::quiet_NaN();  // not computed
    token_logit best{-1, -INFINITY};
    for (const cuda::logits_top_row *p : parts) {
        t.has_nan = t.has_nan || p->has_nan != 0;
        if (p->n < 1 || p->id[0] < 0) continue;
        const token_logit c{p->id[0], p->logit[0]};
        if (best.id < 0 || c.logit > best.logit || (c.logit == best.logit && c.id < best.id)) best = c;
    }
    t.top.push_back(best);
    return t;
}

int64_t cuda_engine::enqueue_draw(int32_t n_out) {
    cuda_device &d = *devices_[size_t(draw_device_)];
    if (draw_rest_ >= 0) {
        cuda_device &rest = *devices_[size_t(draw_rest_)];
        const size_t row = size_t(rest.part().head_end - rest.part().head_begin) * sizeof(float);
        links_->send(rest, rest.logits_rows(), d, d.logits_rest_rows(), size_t(n_out) * row, size_t(cuda_device::max_logit_rows) * row);
    }
    return d.logits_draw(n_out);
}

// The output rows' rules packed once (each row's adjustments, then its mask, 16-byte aligned) and
// sent to every device holding head columns, with a descriptor for each of the step's logits rows
// (logits row keep[j] of a graph, j otherwise, for output row j; none for the others).
void cuda_engine::upload_rules(std::span<const engine_row> rows, const std::vector<int32_t> &keep, int32_t n_logits_rows) {
    host_state &h = *host_;
    struct placed {
        int32_t logits_row;
        const row_rules *rules;
        size_t adjust_at, mask_at;
    };
    std::vector<placed> ruled;
    size_t bytes = 0;
    auto take = [&](size_t n) {
        const size_t at = bytes;
        bytes += (n + 15) / 16 * 16;
        return at;
    };
    int32_t j = 0;
    for (const engine_row &r : rows) {
        if (r.want == row_output::none) continue;
        const int32_t logits_row = keep.empty() ? j : keep[size_t(j)];
        ++j;
        if (!r.rules || r.rules->empty()) continue;
        TANDEM_ASSERT(r.rules->allowed.empty() || r.rules->allowed.size() * 32 >= size_t(hp_.n_vocab),
                      "a mask of {} words for {} tokens", r.rules->allowed.size(), hp_.n_vocab);
        const size_t adjust_at = take(r.rules->adjust.size_bytes());
        ruled.push_back({logits_row, r.rules, adjust_at, take(r.rules->allowed.size_bytes())});
    }
    if (bytes > h.rule_pool_bytes) {
        if (h.rule_pool) TANDEM_CUDA_CHECK(cudaFreeHost(h.rule_pool));
        h.rule_pool = nullptr;
        h.rule_pool_bytes = std::max(bytes, h.rule_pool_bytes * 2);
        TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&h.rule_pool), h.rule_pool_bytes, cudaHostAllocPortable));
    }
    for (const placed &p : ruled) {
        if (!p.rules->adjust.empty()) std::memcpy(h.rule_pool + p.adjust_at, p.rules->adjust.data(), p.rules->adjust.size_bytes());
        if (!p.rules->allowed.empty()) std::memcpy(h.rule_pool + p.mask_at, p.rules->allowed.data(), p.rules->allowed.size_bytes());
    }
    for (size_t i = 0; i < devices_.size(); ++i) {
        cuda_device &d = *devices_[i];
        if (d.part().head_end <= d.part().head_begin) continue;
        const uint8_t *base = d.rules_pool(bytes);
        cuda::logits_rules_row *desc = h.rule_rows + i * size_t(cuda_device::max_logit_rows);
        std::fill(desc, desc + n_logits_rows, cuda::logits_rules_row{});
        for (const placed &p : ruled) {
            cuda::logits_rules_row &row = desc[p.logits_row];
            if (!p.rules->adjust.empty()) row.adjust = reinterpret_cast<const token_adjust *>(base + p.adjust_at);
            if (!p.rules->allowed.empty()) row.allowed = reinterpret_cast<const uint32_t *>(base + p.mask_at);
            row.n_adjust = int32_t(p.rules->adjust.size());
        }
        d.upload_rules(desc, n_logits_rows, h.rule_pool, bytes);
    }
}

int64_t cuda_engine::enqueue_rules(int32_t n_out) {
    int64_t launches = 0;
    for (const auto &d : devices_)
        if (d->part().head_end > d->part().head_begin) launches += d->logits_rules(n_out);
    return launches;
}

int64_t cuda_engine::enqueue_logits_top(int32_t n_out, bool best_only) {
    int64_t launches = 0;
    for (const auto &d : devices_)
        if (d->part().head_end > d->part().head_begin) launches += d->logits_top(n_out, best_only);
    return launches;
}

}  // namespace tandem
