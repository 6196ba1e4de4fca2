// src/engine/expert_tiers.cpp - the --expert-tiers spec: parsing, and its checks against a model
// and a placement plan before anything loads.
#include "tandem/expert_tiers.h"

#include "tandem/error.h"
#include "tandem/log.h"
#include "tandem/quant.h"

#include <string_view>

namespace tandem {

namespace {

constexpr std::string_view spec_help = "expected off or cold=TYPE (e.g. cold=q4_0, cold=iq4_xs, cold=q3_k)";

std::string lower(std::string_view s) {
    std::string out(s);
    for (char &c : out) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return out;
}

ggml_type parse_type(std::string_view tier, std::string_view name, const std::string &spec) {
    if (name.empty()) fail(error_kind::config, "--expert-tiers '{}': tier '{}' names no type; {}", spec, tier, spec_help);
    const std::optional<ggml_type> type = ggml_type_from_name(name);
    if (!type) fail(error_kind::config, "--expert-tiers '{}': unknown type '{}'", spec, name);
    if (!ggml_type_info(*type).computable || !ggml_type_can_quantize(*type))
        fail(error_kind::config, "--expert-tiers '{}': Tandem cannot quantize to {} (pick a type it quantizes, e.g. q4_0, q4_k, iq4_xs, q8_0)",
             spec, ggml_type_name(*type));
    return *type;
}

}  // namespace

expert_tiers_spec expert_tiers_parse(const std::string &spec) {
    expert_tiers_spec tiers;
    if (spec.empty() || spec == "off") return tiers;
    std::string_view rest = spec;
    while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        if (comma != std::string_view::npos && rest.empty())
            fail(error_kind::config, "--expert-tiers '{}': a trailing comma; {}", spec, spec_help);
        const size_t eq = item.find('=');
        if (item.empty() || eq == std::string_view::npos)
            fail(error_kind::config, "--expert-tiers '{}': '{}' is not TIER=TYPE; {}", spec, item, spec_help);
        const std::string tier = lower(item.substr(0, eq));
        if (tier != "cold")
            fail(error_kind::config, "--expert-tiers '{}': unknown tier '{}' (the one tier is cold: the host tier's experts)", spec,
                 item.substr(0, eq));
        if (tiers.cold) fail(error_kind::config, "--expert-tiers '{}': the cold tier is given twice", spec);
        tiers.cold = parse_type(tier, item.substr(eq + 1), spec);
    }
    return tiers;
}

std::string expert_tiers_name(const expert_tiers_spec &tiers) {
    return tiers.cold ? "cold=" + lower(ggml_type_name(*tiers.cold)) : std::string("off");
}

uint64_t expert_tiers_bytes(const model_hparams &hp, ggml_type type, uint64_t n_experts) {
    const int64_t d = hp.d_model, ff = hp.d_ff_expert;
    return n_experts * (2 * uint64_t(ff) * ggml_row_bytes(type, d) + uint64_t(d) * ggml_row_bytes(type, ff));
}

std::optional<uint64_t> expert_tiers_cold_bytes(const expert_tiers_spec &tiers, const model_hparams &hp) {
    if (!tiers.cold) return std::nullopt;
    const int64_t block = ggml_type_info(*tiers.cold).block_elems;
    if (hp.d_model % block != 0 || hp.d_ff_expert % block != 0) return std::nullopt;
    return expert_tiers_bytes(hp, *tiers.cold, 1);
}

void expert_tiers_check(const expert_tiers_spec &tiers, const model_hparams &hp, const placement_plan &plan) {
    if (!tiers.cold) return;
    const ggml_type type = *tiers.cold;
    const int64_t block = ggml_type_info(type).block_elems;
    if (hp.d_model % block != 0 || hp.d_ff_expert % block != 0)
        fail(error_kind::config,
             "--expert-tiers {}: {}'s blocks of {} do not divide the experts' rows (d_model {}, expert d_ff {}); pick a "
             "type whose block divides both (q8_0, q4_0 and iq4_nl take blocks of 32)",
             expert_tiers_name(tiers), ggml_type_name(type), block, hp.d_model, hp.d_ff_expert);
    // The host tier's budget is the planner's (placement_request::cold_expert_bytes counts these copies).
    if (!plan.cold.used())
        log_info("--expert-tiers {}: the plan puts no expert on the host tier (see --host-experts); nothing to requantize",
                 expert_tiers_name(tiers));
}

}  // namespace tandem
