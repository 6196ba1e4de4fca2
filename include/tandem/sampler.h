// tandem/sampler.h - turns a row of logits into a token: greedy, temperature, top-k, top-p, min-p.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tandem {

struct sampling_params {
    float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id wins ties)
    int32_t top_k = 0;         // 0: off
    float top_p = 1.0f;        // 1: off
    float min_p = 0.0f;        // 0: off
    uint64_t seed = 0;
    int32_t n_logprobs = 0;    // how many top alternatives to report (0: none)
};

struct token_logprob {
    int32_t id = 0;
    float logprob = 0.0f;      // log-softmax of the raw logits (before temperature)
};

struct sample_result {
    int32_t id = 0;
    float logprob = 0.0f;
    std::vector<token_logprob> top;  // n_logprobs best, descending
};

class sampler {
public:
    explicit sampler(const sampling_params &params);
    sample_result sample(std::span<const float> logits);

private:
    sampling_params params_;
    std::mt19937_64 rng_;
    std::vector<int32_t> order_;  // scratch
};

// Index of the largest value; the lowest index wins ties.
int32_t argmax(std::span<const float> values);

}  // namespace tandem
