// tests/unit/engine/test_expert_tiers.cpp - the --expert-tiers spec (tandem/expert_tiers.h): what it
// accepts, the clear errors for what it refuses, and its checks against a model and a plan.
#include "tandem/error.h"
#include "tandem/expert_tiers.h"

#include <catch2/catch.hpp>

#include <string>

using namespace tandem;

namespace {

std::string error_of(const std::string &spec) {
    try {
        expert_tiers_parse(spec);
    } catch (const error &e) {
        CHECK(e.kind() == error_kind::config);
        return e.what();
    }
    return "accepted";
}

}  // namespace

TEST_CASE("expert tier specs name the cold tier's type", "[expert_tiers]") {
    CHECK_FALSE(expert_tiers_parse("").any());
    CHECK_FALSE(expert_tiers_parse("off").any());
    CHECK(expert_tiers_parse("cold=q4_0").cold == ggml_type::q4_0);
    CHECK(expert_tiers_parse("cold=IQ4_XS").cold == ggml_type::iq4_xs);
    CHECK(expert_tiers_parse("cold=q3_k").cold == ggml_type::q3_k);
    CHECK(expert_tiers_parse("Cold=q8_0").cold == ggml_type::q8_0);
    CHECK(expert_tiers_parse("cold=iq2_xxs").cold == ggml_type::iq2_xxs);  // quantized with a uniform importance
    CHECK(expert_tiers_name(expert_tiers_parse("cold=Q4_K")) == "cold=q4_k");
    CHECK(expert_tiers_name(expert_tiers_parse("off")) == "off");
    CHECK(expert_tiers_parse(expert_tiers_name(expert_tiers_parse("cold=iq4_xs"))).cold == ggml_type::iq4_xs);
}

TEST_CASE("bad expert tier specs are refused with the problem named", "[expert_tiers]") {
    CHECK_THAT(error_of("cold=q9_9"), Catch::Contains("unknown type 'q9_9'"));
    CHECK_THAT(error_of("cold=q8_1"), Catch::Contains("cannot quantize to q8_1"));
    CHECK_THAT(error_of("cold=q8_k"), Catch::Contains("cannot quantize to q8_K"));
    CHECK_THAT(error_of("cold=i32"), Catch::Contains("cannot quantize to i32"));
    CHECK_THAT(error_of("warm=q4_0"), Catch::Contains("unknown tier 'warm'"));
    CHECK_THAT(error_of("hot=q4_0"), Catch::Contains("unknown tier 'hot'"));
    CHECK_THAT(error_of("cold"), Catch::Contains("'cold' is not TIER=TYPE"));
    CHECK_THAT(error_of("q4_0"), Catch::Contains("is not TIER=TYPE"));
    CHECK_THAT(error_of("cold="), Catch::Contains("names no type"));
    CHECK_THAT(error_of("cold=q4_0,"), Catch::Contains("trailing comma"));
    CHECK_THAT(error_of(",cold=q4_0"), Catch::Contains("is not TIER=TYPE"));
    CHECK_THAT(error_of("cold=q4_0,cold=q8_0"), Catch::Contains("given twice"));
    CHECK_THAT(error_of("auto"), Catch::Contains("expected off or cold=TYPE"));
}

TEST_CASE("expert tiers are checked against the model's rows; a cold expert's bytes go to the planner", "[expert_tiers]") {
    model_hparams hp;
    hp.n_layer = 2;
    hp.n_expert = 4;
    hp.d_model = 96;  // blocks of 32 divide it, blocks of 256 do not
    hp.d_ff_expert = 64;
    placement_plan plan;
    plan.cold.allowed = true;
    plan.cold.experts = {{0, 3}, {1}};
    plan.cold.bytes = 1;  // a plan with a host tier
    plan.cold.budget = uint64_t(1) << 30;
    CHECK_NOTHROW(expert_tiers_check(expert_tiers_parse("cold=q4_0"), hp, plan));
    CHECK_NOTHROW(expert_tiers_check(expert_tiers_parse("off"), hp, plan));
    const std::string msg = [&] {
        try {
            expert_tiers_check(expert_tiers_parse("cold=q4_k"), hp, plan);
        } catch (const error &e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    }();
    CHECK_THAT(msg, Catch::Contains("blocks of 256 do not divide the experts' rows (d_model 96, expert d_ff 64)"));

    // Three experts of 2 * 64 rows of 96 and 96 rows of 64, 4 bytes each element in f32.
    CHECK(expert_tiers_bytes(hp, ggml_type::f32, 3) == 3u * (2u * 64u * 96u + 96u * 64u) * 4u);
    CHECK(expert_tiers_cold_bytes(expert_tiers_parse("cold=f32"), hp) == expert_tiers_bytes(hp, ggml_type::f32, 1));
    CHECK_FALSE(expert_tiers_cold_bytes(expert_tiers_parse("cold=q4_k"), hp));  // blocks of 256: refused by the check
    CHECK_FALSE(expert_tiers_cold_bytes(expert_tiers_parse("off"), hp));

    // Without a host tier nothing is requantized, whatever the rows.
    plan.cold = {};
    CHECK_NOTHROW(expert_tiers_check(expert_tiers_parse("cold=q8_0"), hp, plan));
}
