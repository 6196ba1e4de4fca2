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
    if (!(params.presence_penalty >= -2.0f && params.presence_penalty <= 2.0f))
        fail(error_kind::invalid_request, "presence_penalty must be in [-2, 2], got {}", params.presence_penalty);
    if (!(params.frequency_penalty >= -2.0f && params.frequency_penalty <= 2.0f))
        fail(error_kind::invalid_request, "frequency_penalty must be in [-2, 2], got {}", params.frequency_penalty);
    if (!(params.repeat_penalty > 0.0f && params.repeat_penalty <= 10.0f))
        fail(error_kind::invalid_request, "repeat_penalty must be in (0, 10], got {}", params.repeat_penalty);
    if (params.repeat_last_n < -1) fail(error_kind::invalid_request, "repeat_last_n must be -1 (all tokens) or >= 0, got {}", params.repeat_last_n);
    for (size_t i = 0; i < params.logit_bias.size(); ++i) {
        const auto [id, bias] = params.logit_bias[i];
        if (id < 0) fail(error_kind::invalid_request, "logit_bias: token id {} is negative", id);
        if (i > 0 && id <= params.logit_bias[i - 1].first)
            fail(error_kind::invalid_request, "logit_bias: token ids must be ascending and distinct ({} after {})", id,
                 params.logit_bias[i - 1].first);
        if (!(bias >= -100.0f && bias <= 100.0f)) fail(error_kind::invalid_request, "logit_bias: the bias of token {} must be in [-100, 100], got {}", id, bias);
    }
}

sample_result sampler::sample(std::span<const float> logits, const logits_top *summary) {
    const int32_t n = static_cast<int32_t>(logits.size());
    TANDEM_ASSERT(n > 0);
    TANDEM_ASSERT(!summary || (summary->n_vocab == n && !summary->top.empty()), "sample: a summary of another row");
    // The row's maximum and log-softmax normaliser (in double, so large vocabularies stay exact
    // enough): from its summary when given (logits_top_of computes them so; the device's
    // reduction gives the same maximum and a normaliser within 1e-12).
    float max_logit = 0.0f;
    double log_norm = 0.0;
    if (summary) {
        if (summary->has_nan) fail(error_kind::internal, "logits contain NaN");
        max_logit = summary->top[0].logit;
        log_norm = summary->log_norm;
    } else {
        for (float v : logits)
            if (std::isnan(v)) fail(error_kind::internal, "logits contain NaN");
        max_logit = *std::max_element(logits.begin(), logits.end());
        double sum = 0.0;
        for (float v : logits) sum += std::exp(double(v) - max_logit);
        log_norm = double(max_logit) + std::log(sum);
    }

    sample_result result;
    if (params_.temperature <= 0.0f) {
        result.id = summary ? summary->top[0].id : argmax(logits);
    } else {
        result.id = draw_exact(logits, max_logit, make_draw(next_uniform(0)));
        rng_.discard(1);
    }
    result.logprob = static_cast<float>(double(logits[result.id]) - log_norm);

    if (params_.n_logprobs > 0) {
        const int32_t k = std::min(params_.n_logprobs, n);
        if (summary && size_t(k) <= summary->top.size()) {
            for (int32_t i = 0; i < k; ++i)
                result.top.push_back({summary->top[size_t(i)].id, static_cast<float>(double(summary->top[size_t(i)].logit) - log_norm)});
        } else {
            std::vector<int32_t> top(n);
            std::iota(top.begin(), top.end(), 0);
            std::partial_sort(top.begin(), top.begin() + k, top.end(), logit_order(logits));
            for (int32_t i = 0; i < k; ++i)
                result.top.push_back({top[i], static_cast<float>(double(logits[top[i]]) - log_norm)});
        }
    }
    return result;
}

double sampler::next_uniform(size_t ahead) const {
    std::mt19937_64 rng = rng_;
    rng.discard(ahead);
    return std::generate_canonical<double, 53>(rng);  // one 64-bit draw of the engine
}

row_draw sampler::make_draw(double u) const {
    row_draw d;
    d.temperature = params_.temperature;
    d.inv_temp = float(1.0 / double(params_.temperature));
    d.min_p = params_.min_p;
    d.top_p = params_.top_p;
    d.top_k = params_.top_k;
    d.u = u;
    return d;
}

row_draw sampler::draw_request(size_t ahead) const {
    // A top_k within the summary's tokens is decided by the summary alone.
    if (params_.temperature <= 0.0f || (params_.top_k > 0 && params_.top_k <= logits_top_max)) return {};
    return make_draw(next_uniform(ahead));
}

std::optional<sample_result> sampler::sample_top(const logits_top &t) {
    TANDEM_ASSERT(!t.top.empty() && t.n_vocab > 0);
    if (t.has_nan) fail(error_kind::internal, "logits contain NaN");
    sample_result result;
    if (params_.temperature <= 0.0f) {
        result.id = t.top[0].id;
        result.logprob = static_cast<float>(double(t.top[0].logit) - t.log_norm);
    } else {
        const row_draw d = make_draw(next_uniform(0));
        if (t.drawn >= 0) {
            if (t.drawn_u != d.u) fail(error_kind::internal, "a logits row drawn with another uniform number than the sampler's next");
            result.id = t.drawn;
            result.logprob = static_cast<float>(double(t.drawn_logit) - t.log_norm);
        } else {
            const std::optional<token_logit> got = draw_exact_top(t, d);
            if (!got) return std::nullopt;  // the random stream is left as it was
            result.id = got->id;
            result.logprob = static_cast<float>(double(got->logit) - t.log_norm);
        }
        rng_.discard(1);
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
