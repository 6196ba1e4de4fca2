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

// Candidates are drawn by inverse CDF in ascending id order (a fixed order, so the whole row and
// its top give the same bits for the same candidates), after top_k (the best top_k), min_p (weights
// of at least min_p x the best's) and top_p (the best-first prefix whose weight reaches top_p of the
// rest's). Only top_k and top_p need an order of the candidates, and only as selections (expected
// linear time), never a sort of the whole vocabulary.
int32_t sampler::draw(std::vector<token_logit> &cand, float max_logit) {
    const double temp = params_.temperature;
    auto better = [](const token_logit &a, const token_logit &b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
    auto by_id = [](const token_logit &a, const token_logit &b) { return a.id < b.id; };
    if (params_.top_k > 0 && size_t(params_.top_k) < cand.size()) {
        std::nth_element(cand.begin(), cand.begin() + (params_.top_k - 1), cand.end(), better);
        cand.resize(size_t(params_.top_k));
        std::sort(cand.begin(), cand.end(), by_id);
    }
    // Weights in float (the draw's arithmetic, the same for a whole row and its top), summed in double.
    const float inv_temp = float(1.0 / temp);
    auto weigh = [&] {
        weights_.resize(cand.size());
        for (size_t i = 0; i < cand.size(); ++i) weights_[i] = double(std::exp((cand[i].logit - max_logit) * inv_temp));
    };
    weigh();
    if (params_.min_p > 0.0f) {
        // The best candidate weighs exp(0) = 1: it always stays.
        size_t kept = 0;
        for (size_t i = 0; i < cand.size(); ++i)
            if (weights_[i] >= double(params_.min_p) || cand[i].logit == max_logit) {
                cand[kept] = cand[i];
                weights_[kept++] = weights_[i];
            }
        cand.resize(kept);
        weights_.resize(kept);
    }
    if (params_.top_p < 1.0f && cand.size() > 1) {
        double total = 0.0;
        for (double w : weights_) total += w;
        order_.resize(cand.size());
        for (size_t i = 0; i < cand.size(); ++i) order_[i] = int32_t(i);
        auto better_at = [&](int32_t x, int32_t y) { return better(cand[size_t(x)], cand[size_t(y)]); };
        // The nucleus's size by selection, not by sorting: order_[0, lo) holds tokens known to be
        // in it (their weight `acc`), [lo, hi) those still undecided, best-first order unknown.
        // Each round partitions the undecided around their middle one (a deterministic choice, so
        // the same candidates always give the same nucleus); the last few are sorted and walked.
        const double need = double(params_.top_p) * total;
        size_t lo = 0, hi = cand.size(), keep = 0;
        double acc = 0.0;
        while (keep == 0 && hi - lo > 64) {
            // The middle one as the pivot, parked last while the others are partitioned.
            std::swap(order_[lo + (hi - lo) / 2], order_[hi - 1]);
            const int32_t pivot = order_[hi - 1];
            const auto mid = std::partition(order_.begin() + std::ptrdiff_t(lo), order_.begin() + std::ptrdiff_t(hi - 1),
                                            [&](int32_t x) { return better_at(x, pivot); });
            const size_t n_better = size_t(mid - order_.begin()) - lo;
            double mass = 0.0;
            for (size_t i = lo; i < lo + n_better; ++i) mass += weights_[size_t(order_[i])];
            if (acc + mass >= need) {
                hi = lo + n_better;
            } else {
                // The pivot follows the better ones (it is the best of the rest).
                std::iter_swap(mid, order_.begin() + std::ptrdiff_t(hi - 1));
                acc += mass + weights_[size_t(pivot)];
                lo += n_better + 1;
                if (acc >= need || lo == hi) keep = lo;
            }
        }
        if (keep == 0) {
            std::sort(order_.begin() + std::ptrdiff_t(lo), order_.begin() + std::ptrdiff_t(hi), better_at);
            keep = hi;
            for (size_t i = lo; i < hi; ++i) {
                acc += weights_[size_t(order_[i])];
                if (acc >= need) {
                    keep = i + 1;
                    break;
                }
            }
        }
        // The nucleus back in id order: a mark a candidate, then the marked ones in place.
        in_nucleus_.assign(cand.size(), 0);
        for (size_t i = 0; i < keep; ++i) in_nucleus_[size_t(order_[i])] = 1;
        size_t kept = 0;
        for (size_t i = 0; i < cand.size(); ++i)
            if (in_nucleus_[i]) {
                cand[kept] = cand[i];
                weights_[kept++] = weights_[i];
            }
        cand.resize(kept);
        weights_.resize(kept);
    }
    double total = 0.0;
    for (double w : weights_) total += w;
    std::uniform_real_distribution<double> uniform(0.0, total);
    double r = uniform(rng_);
    for (size_t i = 0; i < cand.size(); ++i) {
        r -= weights_[i];
        if (r < 0.0) return cand[i].id;
    }
    return cand.back().id;
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
    } else if (draws_exact()) {
        row_draw d = draw_request();
        rng_.discard(1);  // the uniform number draw_request read
        result.id = draw_exact(logits, max_logit, d);
    } else {
        // Candidates: tokens whose probability is within e^-30 of the best one; the rest would
        // contribute less than 1e-13 each.
        const float cutoff = max_logit - 30.0f * params_.temperature;
        candidates_.clear();
        for (int32_t i = 0; i < n; ++i)
            if (logits[i] >= cutoff) candidates_.push_back({i, logits[i]});
        result.id = draw(candidates_, max_logit);
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

bool sampler::needs_full_row() const {
    // Exact draws (top_k 0) come with the row's summary; top_k <= logits_top_max draws from it.
    return params_.temperature > 0.0f && params_.top_k > logits_top_max;
}

bool sampler::draws_exact() const { return params_.temperature > 0.0f && params_.top_k == 0; }

row_draw sampler::draw_request(size_t ahead) const {
    row_draw d;
    if (!draws_exact()) return d;
    std::mt19937_64 rng = rng_;
    rng.discard(ahead);
    d.temperature = params_.temperature;
    d.inv_temp = float(1.0 / double(params_.temperature));
    d.min_p = params_.min_p;
    d.top_p = params_.top_p;
    d.u = std::generate_canonical<double, 53>(rng);
    return d;
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
    } else if (draws_exact()) {
        const row_draw d = draw_request();
        if (t.drawn >= 0) {
            if (t.drawn_u != d.u) fail(error_kind::internal, "a logits row drawn with another uniform number than the sampler's next");
            result.id = t.drawn;
            result.logprob = static_cast<float>(double(t.drawn_logit) - t.log_norm);
        } else if (whole_row) {
            std::vector<float> row(size_t(t.n_vocab));
            for (const token_logit &c : t.top) row[size_t(c.id)] = c.logit;
            result.id = draw_exact(row, max_logit, d);
            result.logprob = static_cast<float>(double(row[size_t(result.id)]) - t.log_norm);
        } else {
            return std::nullopt;
        }
        rng_.discard(1);
    } else {
        // The candidates of sample(): the top's entries within the cutoff, which are all of them
        // when the top runs past the cutoff (or is the whole row); else only a top_k no larger
        // than the entries within the cutoff makes the rest irrelevant.
        const float cutoff = max_logit - 30.0f * params_.temperature;
        size_t n_cand = 0;
        while (n_cand < t.top.size() && t.top[n_cand].logit >= cutoff) ++n_cand;
        const bool all_known = whole_row || n_cand < t.top.size();
        if (!all_known && !(params_.top_k > 0 && size_t(params_.top_k) <= n_cand)) return std::nullopt;
        candidates_.assign(t.top.begin(), t.top.begin() + std::ptrdiff_t(n_cand));
        std::sort(candidates_.begin(), candidates_.end(), [](const token_logit &a, const token_logit &b) { return a.id < b.id; });
        result.id = draw(candidates_, max_logit);
        float logit = max_logit;
        for (const token_logit &c : t.top)
            if (c.id == result.id) logit = c.logit;
        result.logprob = static_cast<float>(double(logit) - t.log_norm);
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
