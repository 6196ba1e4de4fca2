// tandem/sampler.h - turns a row of logits into a token: greedy, temperature, top-k, top-p, min-p
// (every temperature draw an exact draw, draw_exact.h); from the whole row, from the row's best
// tokens when those decide the draw (logits_top), or from the engine's draw beside them.
#pragma once

#include "tandem/draw_exact.h"

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace tandem {

struct sampling_params {
    float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id wins ties)
    int32_t top_k = 0;         // 0: off
    float top_p = 1.0f;        // 1: off
    float min_p = 0.0f;        // 0: off
    uint64_t seed = 0;
    int32_t n_logprobs = 0;    // how many top alternatives to report (0: none)
    // What the request changes in its rows' logits before any of the above (tandem/logit_rules.h;
    // the scheduler turns them into each row's rules): llama.cpp's penalties over the window of the
    // last repeat_last_n tokens of prompt and output (-1: all of them, 0: none), a seen token's
    // logit l becoming (l > 0 ? l / repeat_penalty : l x repeat_penalty) - count x
    // frequency_penalty - presence_penalty; and logit_bias, added first.
    float presence_penalty = 0.0f;   // [-2, 2]
    float frequency_penalty = 0.0f;  // [-2, 2]
    float repeat_penalty = 1.0f;     // (0, 10]; 1: off
    int32_t repeat_last_n = 64;
    std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias in [-100, 100]), ids ascending, each once

    bool has_penalties() const {
        return repeat_last_n != 0 && (presence_penalty != 0.0f || frequency_penalty != 0.0f || repeat_penalty != 1.0f);
    }
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

// Tokens a logits_top keeps: enough for greedy, for up to 20 logprobs and for top_k <= 64.
constexpr int32_t logits_top_max = 64;

struct token_logit {
    int32_t id = 0;
    float logit = 0.0f;
};

// A logits row reduced to what sampling usually needs: its best tokens and its normaliser.
struct logits_top {
    int32_t n_vocab = 0;
    double log_norm = 0.0;           // log sum_i exp(logit_i) over the whole row
    bool has_nan = false;
    std::vector<token_logit> top;    // min(logits_top_max, n_vocab) best: logit descending, then id ascending
    // The row's exact draw (draw_exact.h), when the engine was asked for one (engine_row::draw): the id
    // (-1: none), its logit and the uniform number it was drawn with.
    int32_t drawn = -1;
    float drawn_logit = 0.0f;
    double drawn_u = 0.0;
};

// The host twin of the device's reduction (cuda/logits_top.h): exact top, log_norm as sample()
// computes it.
logits_top logits_top_of(std::span<const float> logits);

// The host twin of the device's exact draw (draw_exact.h, cuda/logits_draw.h): the token drawn
// from a whole row whose best logit is max_logit, for d.temperature > 0.
int32_t draw_exact(std::span<const float> logits, float max_logit, const row_draw &d);
// The exact draw from a row's summary, when its tokens decide it (the whole row, a top_k within
// them, or candidates that end within them): the drawn token, else nullopt.
std::optional<token_logit> draw_exact_top(const logits_top &top, const row_draw &d);
// Whether any of a step's rows asks for a draw.
bool draws_any(std::span<const row_draw> draws);
// The engine's host draws: top[j] (the summary of logits row j, n_vocab floats a row)
// gets row j's exact draw when draws[j] asks for one; rows on up to 8 threads.
void draw_rows_exact(std::span<const float> logits, std::span<const row_draw> draws, std::vector<logits_top> &top);

class sampler {
public:
    explicit sampler(const sampling_params &params);
    // summary, when given, must be the row's logits_top (engine_outputs::top): its maximum, NaN
    // flag, best tokens and normaliser are taken from it instead of recomputed (the same draw; the
    // normaliser, and so the logprobs, to within 1e-12 relative when a GPU reduced the row).
    sample_result sample(std::span<const float> logits, const logits_top *summary = nullptr);
    // The same draw as sample() on the whole row (same id, same random stream), from its summary
    // alone; nullopt, with no random number drawn, when the summary does not decide it: a
    // temperature draw without a top_k <= logits_top_max whose candidates run past the summary's
    // tokens and that carries no draw of the engine's (drawn, engine_row::draw).
    std::optional<sample_result> sample_top(const logits_top &top);
    // The draw the engine should make beside the row's summary for the draw `ahead` draws from
    // now (its uniform number read from a copy of the random stream), when the summary alone may
    // not decide it; temperature 0 (no draw) for greedy requests and a top_k <= logits_top_max.
    row_draw draw_request(size_t ahead = 0) const;
    // Whether the row's best token and the engine's draw (draw_request) decide every pick and what
    // the result reports: no logprobs, and greedy or a draw the engine makes (not a top_k within
    // the summary). sample_top then reads only top[0], has_nan and the draw (row_output::best).
    bool needs_best_only() const {
        const bool top_k_in_summary = params_.temperature > 0.0f && params_.top_k > 0 && params_.top_k <= logits_top_max;
        return params_.n_logprobs == 0 && !top_k_in_summary;
    }

private:
    double next_uniform(size_t ahead) const;  // the uniform number `ahead` draws from now
    row_draw make_draw(double u) const;

    sampling_params params_;
    std::mt19937_64 rng_;
};

// Index of the largest value; the lowest index wins ties.
int32_t argmax(std::span<const float> values);

}  // namespace tandem
