// src/engine/sampler.cpp - token sampling from one row of logits, with log-probabilities.
#include "tandem/sampler.h"

#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem {

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
        const float temp = params_.temperature;
        const float cutoff = max_logit - 30.0f * temp;
        order_.clear();
        for (int32_t i = 0; i < n; ++i)
            if (logits[i] >= cutoff) order_.push_back(i);
        auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
        std::sort(order_.begin(), order_.end(), by_logit);
        size_t keep = order_.size();
        if (params_.top_k > 0) keep = std::min<size_t>(keep, size_t(params_.top_k));
        std::vector<double> probs(keep);
        double total = 0.0;
        for (size_t i = 0; i < keep; ++i) total += probs[i] = std::exp((double(logits[order_[i]]) - max_logit) / temp);
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
        result.id = order_[keep - 1];
        for (size_t i = 0; i < keep; ++i) {
            r -= probs[i];
            if (r < 0.0) {
                result.id = order_[i];
                break;
            }
        }
    }
    result.logprob = static_cast<float>(double(logits[result.id]) - log_norm);

    if (params_.n_logprobs > 0) {
        const int32_t k = std::min(params_.n_logprobs, n);
        std::vector<int32_t> top(n);
        std::iota(top.begin(), top.end(), 0);
        std::partial_sort(top.begin(), top.begin() + k, top.end(), [&](int32_t a, int32_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
        for (int32_t i = 0; i < k; ++i)
            result.top.push_back({top[i], static_cast<float>(double(logits[top[i]]) - log_norm)});
    }
    return result;
}

}  // namespace tandem
