// src/engine/sampler.cpp - token sampling from one row of logits, with log-probabilities.
#include "tandem/sampler.h"

#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem {

namespace {
// The sampler's order of token ids: higher logit first, the lower id first among equal logits.
auto logit_order(std::span<const float> logits) {
    return [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
}
}  // namespace

int32_t argmax(std::span<const float> values) {
    TANDEM_ASSERT(!values.empty());
    int32_t best = 0;
    for (size_t i = 1; i < values.size(); ++i)
        if (values[i] > values[best]) best = static_cast<int32_t>(i);  // strict: lowest id wins ties
    return best;
}

sampler::sampler(const sampling_params &params) : params_(params), rng_(params.seed) {
    if (params.top_p <= 0.0f || params.top_p > 1.0f)
        fail(error_kind::invalid_request, "top_p must be in (0, 1], got {}", params.top_p);
    if (params.top_k < 0) fail(error_kind::invalid_request, "top_k must be >= 0, got {}", params.top_k);
    if (params.min_p < 0.0f || params.min_p > 1.0f)
        fail(error_kind::invalid_request, "min_p must be in [0, 1], got {}", params.min_p);
    if (params.n_logprobs < 0 || params.n_logprobs > 20)
        fail(error_kind::invalid_request, "the number of top logprobs must be in 0..20, got {}", params.n_logprobs);
}

template <class Logit>
size_t sampler::draw(size_t n_candidates, Logit logit, float max_logit) {
    const float temp = params_.temperature;
    size_t keep = n_candidates;
    if (params_.top_k > 0) keep = std::min<size_t>(keep, size_t(params_.top_k));
    std::vector<double> probs(keep);
    double total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i] = std::exp((double(logit(i)) - max_logit) / temp);
    if (params_.min_p > 0.0f) {
        const double floor_p = params_.min_p * probs[0];
        while (keep > 1 && probs[keep - 1] < floor_p) total -= probs[--keep];
    }
    if (params_.top_p < 1.0f) {
        double cum = 0.0;
        size_t i = 0;
        for (; i < keep; ++i) {
            cum += probs[i] / total;
            if (cum >= params_.top_p) break;
        }
        keep = std::min(keep, i + 1);
    }
    total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
    std::uniform_real_distribution<double> uniform(0.0, total);
    double r = uniform(rng_);
    for (size_t i = 0; i < keep; ++i) {
        r -= probs[i];
        if (r < 0.0) return i;
    }
    return keep - 1;
}

sample_result sampler::sample(std::span<const float> logits) {
    const int32_t n = static_cast<int32_t>(logits.size());
    TANDEM_ASSERT(n > 0);
    for (float v : logits)
        if (std::isnan(v)) fail(error_kind::internal, "logits contain NaN");

    // Log-softmax normaliser of the raw logits, in double so large vocabularies stay exact enough.
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float v : logits) sum += std::exp(double(v) - max_logit);
    const double log_norm = double(max_logit) + std::log(sum);

    sample_result result;
    if (params_.temperature <= 0.0f) {
        result.id = argmax(logits);
    } else {
        // Candidates: tokens whose probability is within e^-30 of the best one; the rest would
        // contribute less than 1e-13 each and only cost a sort over the whole vocabulary.
        const float cutoff = max_logit - 30.0f * params_.temperature;
        order_.clear();
        for (int32_t i = 0; i < n; ++i)
            if (logits[i] >= cutoff) order_.push_back(i);
        std::sort(order_.begin(), order_.end(), logit_order(logits));
        result.id = order_[draw(order_.size(), [&](size_t i) { return logits[order_[i]]; }, max_logit)];
    }
    result.logprob = static_cast<float>(double(logits[result.id]) - log_norm);

    if (params_.n_logprobs > 0) {
        const int32_t k = std::min(params_.n_logprobs, n);
        std::vector<int32_t> top(n);
        std::iota(top.begin(), top.end(), 0);
        std::partial_sort(top.begin(), top.begin() + k, top.end(), logit_order(logits));
        for (int32_t i = 0; i < k; ++i)
            result.top.push_back({top[i], static_cast<float>(double(logits[top[i]]) - log_norm)});
    }
    return result;
}

bool sampler::needs_full_row() const {
    return params_.temperature > 0.0f && (params_.top_k == 0 || params_.top_k > logits_top_max);
}

std::optional<sample_result> sampler::sample_top(const logits_top &t) {
    TANDEM_ASSERT(!t.top.empty() && t.n_vocab > 0);
    if (t.has_nan) fail(error_kind::internal, "logits contain NaN");
    const float max_logit = t.top[0].logit;
    const bool whole_row = int32_t(t.top.size()) == t.n_vocab;
    sample_result result;
    if (params_.temperature <= 0.0f) {
        result.id = t.top[0].id;
        result.logprob = static_cast<float>(double(t.top[0].logit) - t.log_norm);
    } else {
        // The candidates of sample(): the top's entries within the cutoff, which are all of them
        // when the top runs past the cutoff (or is the whole row); else only a top_k no larger
        // than the entries within the cutoff makes the rest irrelevant.
        const float cutoff = max_logit - 30.0f * params_.temperature;
        size_t n_cand = 0;
        while (n_cand < t.top.size() && t.top[n_cand].logit >= cutoff) ++n_cand;
        const bool all_known = whole_row || n_cand < t.top.size();
        if (!all_known && !(params_.top_k > 0 && size_t(params_.top_k) <= n_cand)) return std::nullopt;
        const size_t i = draw(n_cand, [&](size_t j) { return t.top[j].logit; }, max_logit);
        result.id = t.top[i].id;
        result.logprob = static_cast<float>(double(t.top[i].logit) - t.log_norm);
    }
    if (params_.n_logprobs > 0) {
        const size_t k = std::min(size_t(params_.n_logprobs), t.top.size());
        for (size_t i = 0; i < k; ++i)
            result.top.push_back({t.top[i].id, static_cast<float>(double(t.top[i].logit) - t.log_norm)});
    }
    return result;
}

logits_top logits_top_of(std::span<const float> logits) {
    const int32_t n = static_cast<int32_t>(logits.size());
    TANDEM_ASSERT(n > 0);
    logits_top t;
    t.n_vocab = n;
    // As sample(): the max and the normaliser over the non-NaN values, NaN flagged.
    float max_logit = -INFINITY;
    for (float v : logits) {
        if (std::isnan(v)) t.has_nan = true;
        else max_logit = std::max(max_logit, v);
    }
    double sum = 0.0;
    for (float v : logits)
        if (!std::isnan(v)) sum += std::exp(double(v) - max_logit);
    t.log_norm = double(max_logit) + std::log(sum);
    std::vector<int32_t> ids;
    ids.reserve(size_t(n));
    for (int32_t i = 0; i < n; ++i)
        if (!std::isnan(logits[i])) ids.push_back(i);
    const size_t k = std::min(ids.size(), size_t(logits_top_max));
    std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(k), ids.end(), logit_order(logits));
    for (size_t i = 0; i < k; ++i) t.top.push_back({ids[i], logits[size_t(ids[i])]});
    return t;
}

}  // namespace tandem
