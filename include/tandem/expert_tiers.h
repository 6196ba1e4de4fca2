// tandem/expert_tiers.h - tiers of precision for the host tier's experts (--expert-tiers): the
// cold experts requantized at load into host memory with a lower-bit type, so the CPU reads fewer
// bytes per cold row. The model file is never changed.
#pragma once

#include "tandem/model.h"
#include "tandem/placement.h"
#include "tandem/types.h"

#include <optional>
#include <string>

namespace tandem {

struct expert_tiers_spec {
    // The type the host tier's experts are requantized to; nullopt: read in place from the file.
    std::optional<ggml_type> cold;
    bool any() const { return cold.has_value(); }
};

// "" or "off": no tiers; "cold=TYPE": the host tier's experts in TYPE (a ggml type name such as
// q4_0, iq4_xs, q3_k that the CPU computes with and can quantize). Throws error(config) naming the
// problem: a malformed spec, an unknown tier name, an unknown type, a type without a quantizer.
expert_tiers_spec expert_tiers_parse(const std::string &spec);
// The spec as expert_tiers_parse reads it back ("off", "cold=q4_0").
std::string expert_tiers_name(const expert_tiers_spec &tiers);

// Bytes of `n_experts` routed experts of the model (gate, up and down) in `type`.
uint64_t expert_tiers_bytes(const model_hparams &hp, ggml_type type, uint64_t n_experts);
// One cold expert's bytes as the tiers hold it (placement_request::cold_expert_bytes): nullopt
// without tiers, or for a type whose blocks do not divide the rows (expert_tiers_check refuses it).
std::optional<uint64_t> expert_tiers_cold_bytes(const expert_tiers_spec &tiers, const model_hparams &hp);

// Checks the tiers against the model before anything loads: the type's block must divide the
// experts' rows (d_model and d_ff_expert); the planner has counted the copies against the host
// tier's budget. Logs one line when the plan puts nothing on the host tier (the tiers change
// nothing then). Throws error(config).
void expert_tiers_check(const expert_tiers_spec &tiers, const model_hparams &hp, const placement_plan &plan);

}  // namespace tandem
