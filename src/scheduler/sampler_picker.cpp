// src/scheduler/sampler_picker.cpp - the seeded tandem::sampler behind the token_picker interface:
// whole rows through sample(); row summaries (with the engine's draws, draw_request) through sample_top().
#include "src/scheduler/scheduler.h"

#include "tandem/error.h"

#include <optional>
#include <utility>

namespace tandem {

namespace {

class sampler_picker : public token_picker {
public:
    explicit sampler_picker(const sampling_params &p) : sampler_(p) {}
    sample_result pick(std::span<const float> logits, const logits_top *summary) override { return sampler_.sample(logits, summary); }
    // Every draw is decided by the row's summary, with the engine's draw where asked for.
    bool picks_from_top() const override { return true; }
    row_draw draw_request(size_t ahead) const override { return sampler_.draw_request(ahead); }
    bool needs_best_only() const override { return sampler_.needs_best_only(); }
    sample_result pick_top(const logits_top &top) override {
        std::optional<sample_result> r = sampler_.sample_top(top);
        if (!r) fail(error_kind::internal, "the engine's row summary does not decide this draw (no draw made beside it)");
        return std::move(*r);
    }

private:
    sampler sampler_;
};

}  // namespace

std::unique_ptr<token_picker> make_sampler_picker(const sampling_params &params) {
    return std::make_unique<sampler_picker>(params);
}

}  // namespace tandem
