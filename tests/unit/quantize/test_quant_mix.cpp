// tests/unit/quantize/test_quant_mix.cpp - each tensor's type under llama.cpp's mixes, against
// tables written from llama-quant.cpp's rules (llama_tensor_get_type) for a Qwen3-MoE shape.
#include "tandem/error.h"
#include "tandem/quantize.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>

using namespace tandem;
using gt = ggml_type;

namespace {

// 16 layers (n/8 = 2, n/16 = 1, 7n/8 = 14), 32 query heads over 4 KV heads (n_gqa 8), 128 experts.
constexpr int n_layer = 16;
quant_mix_model qwen3moe() { return {"qwen3moe", n_layer, 32, 4, 128}; }

std::vector<quant_mix_tensor> qwen3moe_tensors(bool with_output = true) {
    std::vector<quant_mix_tensor> t = {{"token_embd.weight", {2048, 1000}, gt::f16},
                                       {"output_norm.weight", {2048}, gt::f32}};
    if (with_output) t.push_back({"output.weight", {2048, 1000}, gt::f16});
    for (int l = 0; l < n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        for (const quant_mix_tensor &x : std::vector<quant_mix_tensor>{
                 {b + "attn_norm.weight", {2048}, gt::f32},           {b + "attn_q.weight", {2048, 4096}, gt::f16},
                 {b + "attn_k.weight", {2048, 512}, gt::f16},         {b + "attn_v.weight", {2048, 512}, gt::f16},
                 {b + "attn_output.weight", {4096, 2048}, gt::f16},   {b + "attn_q_norm.weight", {128}, gt::f32},
                 {b + "attn_k_norm.weight", {128}, gt::f32},          {b + "ffn_norm.weight", {2048}, gt::f32},
                 {b + "ffn_gate_inp.weight", {2048, 128}, gt::f32},   {b + "ffn_gate_exps.weight", {2048, 768, 128}, gt::f16},
                 {b + "ffn_up_exps.weight", {2048, 768, 128}, gt::f16}, {b + "ffn_down_exps.weight", {768, 2048, 128}, gt::f16}})
            t.push_back(x);
    }
    return t;
}

// Tensors in llama.cpp's order, and the type chosen for each, by name.
std::map<std::string, quant_mix_choice> choose(const quant_mix_model &m, const quant_mix_options &o,
                                               std::vector<quant_mix_tensor> tensors) {
    std::vector<std::string> names;
    for (const auto &t : tensors) names.push_back(t.name);
    std::vector<quant_mix_tensor> ordered;
    for (size_t i : quant_mix_order(names)) ordered.push_back(tensors[i]);
    const std::vector<quant_mix_choice> c = quant_mix_types(m, o, ordered);
    std::map<std::string, quant_mix_choice> out;
    for (size_t i = 0; i < ordered.size(); ++i) out[ordered[i].name] = c[i];
    return out;
}

// use_more_bits(i, 16): i < 2, i >= 14, or (i - 2) % 3 == 2.
const std::set<int> more_bits = {0, 1, 4, 7, 10, 13, 14, 15};

struct mix_row {
    const char *ftype;
    bool imatrix;
    gt output, token_embd, attn_q, attn_k, attn_output, gate_up;
    gt attn_v, attn_v_bumped;
    std::set<int> attn_v_layers;  // layers whose attn_v is attn_v_bumped
    gt down, down_bumped;
    std::set<int> down_layers;
};

// Read off llama_tensor_get_type_impl for n_gqa 8, 128 experts, 16 layers, output.weight present.
const mix_row rows[] = {
    // K-quants: output Q6_K; Q4_K_M/Q5_K_M give attn_v and ffn_down Q6_K on use_more_bits layers.
    {"Q4_K_M", false, gt::q6_k, gt::q4_k, gt::q4_k, gt::q4_k, gt::q4_k, gt::q4_k, gt::q4_k, gt::q6_k, more_bits, gt::q4_k, gt::q6_k, more_bits},
    {"Q5_K_M", false, gt::q6_k, gt::q5_k, gt::q5_k, gt::q5_k, gt::q5_k, gt::q5_k, gt::q5_k, gt::q6_k, more_bits, gt::q5_k, gt::q6_k, more_bits},
    // Q4_K_S: the first four attn_v and the first eighth of ffn_down Q5_K.
    {"Q4_K_S", false, gt::q6_k, gt::q4_k, gt::q4_k, gt::q4_k, gt::q4_k, gt::q4_k, gt::q4_k, gt::q5_k, {0, 1, 2, 3}, gt::q4_k, gt::q5_k, {0, 1}},
    {"Q5_K_S", false, gt::q6_k, gt::q5_k, gt::q5_k, gt::q5_k, gt::q5_k, gt::q5_k, gt::q5_k, gt::q5_k, {}, gt::q5_k, gt::q5_k, {}},
    {"Q3_K_S", false, gt::q6_k, gt::q3_k, gt::q3_k, gt::q3_k, gt::q3_k, gt::q3_k, gt::q3_k, gt::q3_k, {}, gt::q3_k, gt::q3_k, {}},
    // Q3_K_M: attn_v Q5_K for the first two then Q4_K; ffn_down Q5_K below n/16, else Q4_K (not falcon).
    {"Q3_K_M", false, gt::q6_k, gt::q3_k, gt::q3_k, gt::q3_k, gt::q4_k, gt::q3_k, gt::q4_k, gt::q5_k, {0, 1}, gt::q4_k, gt::q5_k, {0}},
    {"Q3_K_L", false, gt::q6_k, gt::q3_k, gt::q3_k, gt::q3_k, gt::q5_k, gt::q3_k, gt::q5_k, gt::q5_k, {}, gt::q5_k, gt::q5_k, {}},
    // Q2_K: attn_v Q4_K (n_gqa >= 4), ffn_down and attn_output Q3_K.
    {"Q2_K", false, gt::q6_k, gt::q2_k, gt::q2_k, gt::q2_k, gt::q3_k, gt::q2_k, gt::q4_k, gt::q4_k, {}, gt::q3_k, gt::q3_k, {}},
    {"Q6_K", false, gt::q6_k, gt::q6_k, gt::q6_k, gt::q6_k, gt::q6_k, gt::q6_k, gt::q6_k, gt::q6_k, {}, gt::q6_k, gt::q6_k, {}},
    {"Q8_0", false, gt::q8_0, gt::q8_0, gt::q8_0, gt::q8_0, gt::q8_0, gt::q8_0, gt::q8_0, gt::q8_0, {}, gt::q8_0, gt::q8_0, {}},
    {"Q4_0", false, gt::q6_k, gt::q4_0, gt::q4_0, gt::q4_0, gt::q4_0, gt::q4_0, gt::q4_0, gt::q4_0, {}, gt::q4_0, gt::q4_0, {}},
    // With an imatrix, Q4_0's first eighth of ffn_down is guarded with Q4_1.
    {"Q4_0", true, gt::q6_k, gt::q4_0, gt::q4_0, gt::q4_0, gt::q4_0, gt::q4_0, gt::q4_0, gt::q4_0, {}, gt::q4_0, gt::q4_1, {0, 1}},
    // IQ4: attn_v Q5_K (n_gqa >= 4); without an imatrix the first eighth of ffn_down Q5_K.
    {"IQ4_XS", false, gt::q6_k, gt::iq4_xs, gt::iq4_xs, gt::iq4_xs, gt::iq4_xs, gt::iq4_xs, gt::q5_k, gt::q5_k, {}, gt::iq4_xs, gt::q5_k, {0, 1}},
    {"IQ4_XS", true, gt::q6_k, gt::iq4_xs, gt::iq4_xs, gt::iq4_xs, gt::iq4_xs, gt::iq4_xs, gt::q5_k, gt::q5_k, {}, gt::iq4_xs, gt::iq4_xs, {}},
    {"IQ4_NL", false, gt::q6_k, gt::iq4_nl, gt::iq4_nl, gt::iq4_nl, gt::iq4_nl, gt::iq4_nl, gt::q5_k, gt::q5_k, {}, gt::iq4_nl, gt::q5_k, {0, 1}},
    // IQ3_XXS: head Q5_K, embedding IQ3_S, attn_q/attn_k IQ2_S, attn_output IQ3_S, attn_v Q4_K;
    // ffn_down Q4_K/Q3_K without an imatrix, the base with one.
    {"IQ3_XXS", true, gt::q5_k, gt::iq3_s, gt::iq2_s, gt::iq2_s, gt::iq3_s, gt::iq3_xxs, gt::q4_k, gt::q4_k, {}, gt::iq3_xxs, gt::iq3_xxs, {}},
    {"IQ3_XXS", false, gt::q5_k, gt::iq3_s, gt::iq2_s, gt::iq2_s, gt::iq3_s, gt::iq3_xxs, gt::q4_k, gt::q4_k, {}, gt::q3_k, gt::q4_k, {0, 1}},
    {"IQ3_S", false, gt::q6_k, gt::iq3_s, gt::iq3_s, gt::iq3_s, gt::iq3_s, gt::iq3_s, gt::q4_k, gt::q4_k, {}, gt::iq3_s, gt::iq3_s, {}},
    {"IQ3_M", false, gt::q6_k, gt::iq3_s, gt::iq3_s, gt::iq3_s, gt::q4_k, gt::iq3_s, gt::q4_k, gt::q4_k, {}, gt::iq3_s, gt::q4_k, {0, 1}},
    // IQ1/IQ2 mixes: head Q5_K, attn_v Q4_K (n_expert >= 4), the first n/8 ffn_down Q2_K (IQ3_S for
    // IQ2_S/IQ2_M), attn_output IQ2_XXS for IQ1 and IQ3_S for IQ2_S/IQ2_M.
    {"IQ2_XXS", true, gt::q5_k, gt::q2_k, gt::iq2_xxs, gt::iq2_xxs, gt::iq2_xxs, gt::iq2_xxs, gt::q4_k, gt::q4_k, {}, gt::iq2_xxs, gt::q2_k, {0, 1}},
    {"IQ2_XS", true, gt::q5_k, gt::q2_k, gt::iq2_xs, gt::iq2_xs, gt::iq2_xs, gt::iq2_xs, gt::q4_k, gt::q4_k, {}, gt::iq2_xs, gt::q2_k, {0, 1}},
    {"IQ2_S", true, gt::q5_k, gt::iq3_s, gt::iq2_xs, gt::iq2_xs, gt::iq3_s, gt::iq2_xs, gt::q4_k, gt::q4_k, {}, gt::iq2_xs, gt::iq3_s, {0, 1}},
    {"IQ2_M", true, gt::q5_k, gt::iq3_s, gt::iq2_s, gt::iq2_s, gt::iq3_s, gt::iq2_s, gt::q4_k, gt::q4_k, {}, gt::iq2_s, gt::iq3_s, {0, 1}},
    {"IQ1_S", true, gt::q5_k, gt::q2_k, gt::iq1_s, gt::iq1_s, gt::iq2_xxs, gt::iq1_s, gt::q4_k, gt::q4_k, {}, gt::iq1_s, gt::q2_k, {0, 1}},
    {"IQ1_M", true, gt::q5_k, gt::q2_k, gt::iq1_m, gt::iq1_m, gt::iq2_xxs, gt::iq1_m, gt::q4_k, gt::q4_k, {}, gt::iq1_m, gt::q2_k, {0, 1}},
    // MXFP4_MOE: expert tensors MXFP4, every other matrix (head and embedding included) Q8_0.
    {"MXFP4_MOE", false, gt::q8_0, gt::q8_0, gt::q8_0, gt::q8_0, gt::q8_0, gt::mxfp4, gt::q8_0, gt::q8_0, {}, gt::mxfp4, gt::mxfp4, {}},
};

quant_mix_options options_for(const char *ftype, bool imatrix) {
    quant_mix_options o;
    o.ftype = quant_ftype_find(ftype)->ftype;
    o.has_imatrix = imatrix;
    return o;
}

}  // namespace

TEST_CASE("every tensor of a Qwen3-MoE model gets llama-quantize's type", "[quantize][mix]") {
    for (const mix_row &r : rows) {
        CAPTURE(r.ftype, r.imatrix);
        auto c = choose(qwen3moe(), options_for(r.ftype, r.imatrix), qwen3moe_tensors());
        CHECK(c["output.weight"].type == r.output);
        CHECK(c["token_embd.weight"].type == r.token_embd);
        CHECK(c["output_norm.weight"].type == gt::f32);
        for (int l = 0; l < n_layer; ++l) {
            const std::string b = "blk." + std::to_string(l) + ".";
            CAPTURE(l);
            CHECK(c[b + "attn_q.weight"].type == r.attn_q);
            CHECK(c[b + "attn_k.weight"].type == r.attn_k);
            CHECK(c[b + "attn_output.weight"].type == r.attn_output);
            CHECK(c[b + "ffn_gate_exps.weight"].type == r.gate_up);
            CHECK(c[b + "ffn_up_exps.weight"].type == r.gate_up);
            CHECK(c[b + "attn_v.weight"].type == (r.attn_v_layers.count(l) ? r.attn_v_bumped : r.attn_v));
            CHECK(c[b + "ffn_down_exps.weight"].type == (r.down_layers.count(l) ? r.down_bumped : r.down));
            // Norms and the router are never quantized.
            CHECK(c[b + "attn_norm.weight"].type == gt::f32);
            CHECK(c[b + "ffn_gate_inp.weight"].type == gt::f32);
            CHECK(c[b + "attn_q_norm.weight"].type == gt::f32);
            CHECK_FALSE(c[b + "attn_q.weight"].fallback);
        }
    }
}

TEST_CASE("ftype names, aliases and llama_ftype values", "[quantize][mix]") {
    CHECK(quant_ftype_find("q4_k_m")->ftype == llama_ftype::q4_k_m);
    CHECK(uint32_t(quant_ftype_find("Q4_K")->ftype) == 15);  // alias of Q4_K_M
    CHECK(uint32_t(quant_ftype_find("Q5_K")->ftype) == 17);
    CHECK(uint32_t(quant_ftype_find("Q3_K")->ftype) == 12);
    CHECK(uint32_t(quant_ftype_find("IQ4_XS")->ftype) == 30);
    CHECK(uint32_t(quant_ftype_find("MXFP4_MOE")->ftype) == 38);
    CHECK(quant_ftype_find("IQ2_S")->base == gt::iq2_xs);  // llama_ftype_get_default_type
    CHECK(quant_ftype_find("IQ2_M")->base == gt::iq2_s);
    CHECK(quant_ftype_find("IQ3_M")->base == gt::iq3_s);
    CHECK_FALSE(quant_ftype_find("Q4_K_X"));
}

TEST_CASE("a model without output.weight quantizes its tied embedding as the head", "[quantize][mix]") {
    auto c = choose(qwen3moe(), options_for("Q4_K_M", false), qwen3moe_tensors(false));
    CHECK(c["token_embd.weight"].type == gt::q6_k);
    c = choose(qwen3moe(), options_for("IQ2_XXS", true), qwen3moe_tensors(false));
    CHECK(c["token_embd.weight"].type == gt::q5_k);
}

TEST_CASE("eight experts: Mixtral's rules for attn_v, attn_k and attn_output", "[quantize][mix]") {
    const quant_mix_model mixtral{"llama", 4, 32, 8, 8};
    std::vector<quant_mix_tensor> t;
    for (const char *n : {"attn_v", "attn_k", "attn_output", "attn_q"})
        t.push_back({std::string("blk.0.") + n + ".weight", {4096, 1024}, gt::f16});
    auto c = choose(mixtral, options_for("Q4_K_M", false), t);
    CHECK(c["blk.0.attn_v.weight"].type == gt::q8_0);
    CHECK(c["blk.0.attn_k.weight"].type == gt::q8_0);
    CHECK(c["blk.0.attn_output.weight"].type == gt::q5_k);
    CHECK(c["blk.0.attn_q.weight"].type == gt::q4_k);
    c = choose(mixtral, options_for("IQ2_XXS", true), t);
    CHECK(c["blk.0.attn_k.weight"].type == gt::q4_k);
    CHECK(c["blk.0.attn_output.weight"].type == gt::q5_k);
}

TEST_CASE("rows that are not whole blocks fall back as llama-quantize does", "[quantize][mix]") {
    auto one = [](const char *ftype, std::vector<int64_t> ne) {
        return choose(qwen3moe(), options_for(ftype, false), {{"blk.3.attn_q.weight", ne, gt::f16}})["blk.3.attn_q.weight"];
    };
    CHECK(one("Q4_K_S", {96, 64}).type == gt::q5_0);  // Q4_K -> Q5_0
    CHECK(one("Q4_K_S", {96, 64}).fallback);
    CHECK(one("Q5_K_S", {96, 64}).type == gt::q5_1);
    CHECK(one("Q6_K", {96, 64}).type == gt::q8_0);
    CHECK(one("Q3_K_S", {96, 64}).type == gt::q4_0);
    CHECK(one("IQ4_XS", {96, 64}).type == gt::iq4_nl);
    CHECK(one("Q4_K_S", {40, 64}).type == gt::f16);  // not even 32 divides it
    CHECK_THROWS_AS(one("Q8_0", {40, 64}), tandem::error);  // no fallback exists for Q8_0
    // The head: Q8_0 where its rows are not whole blocks of the base type.
    auto c = choose(qwen3moe(), options_for("Q4_K_M", false), {{"output.weight", {96, 64}, gt::f16}});
    CHECK(c["output.weight"].type == gt::q8_0);
}

TEST_CASE("--tensor-type overrides win and skip the per-layer counters", "[quantize][mix]") {
    quant_mix_options o = options_for("Q4_K_M", false);
    o.overrides = {{"BLK\\.0\\.attn_v", gt::q8_0}, {"ffn_up", gt::iq4_xs}};
    auto c = choose(qwen3moe(), o, qwen3moe_tensors());
    CHECK(c["blk.0.attn_v.weight"].type == gt::q8_0);
    CHECK(c["blk.5.ffn_up_exps.weight"].type == gt::iq4_xs);
    // blk.0's attn_v was not counted, so blk.N's counter is N - 1: use_more_bits(N - 1, 16).
    CHECK(c["blk.1.attn_v.weight"].type == gt::q6_k);  // 0
    CHECK(c["blk.2.attn_v.weight"].type == gt::q6_k);  // 1
    CHECK(c["blk.3.attn_v.weight"].type == gt::q4_k);  // 2
    CHECK(c["blk.4.attn_v.weight"].type == gt::q4_k);  // 3
    CHECK(c["blk.5.attn_v.weight"].type == gt::q6_k);  // 4
    // ffn_down reads its layer from the name in an MoE model: unaffected.
    CHECK(c["blk.4.ffn_down_exps.weight"].type == gt::q6_k);
    o.overrides = {{"attn_[", gt::q8_0}};
    CHECK_THROWS_AS(choose(qwen3moe(), o, qwen3moe_tensors()), tandem::error);
}

TEST_CASE("output and embedding types, and --pure", "[quantize][mix]") {
    quant_mix_options o = options_for("Q4_K_M", false);
    o.output_type = gt::q8_0;
    o.token_embd_type = gt::f16;
    auto c = choose(qwen3moe(), o, qwen3moe_tensors());
    CHECK(c["output.weight"].type == gt::q8_0);
    CHECK(c["token_embd.weight"].type == gt::f16);
    o = options_for("Q4_K_M", false);
    o.pure = true;
    c = choose(qwen3moe(), o, qwen3moe_tensors());
    CHECK(c["output.weight"].type == gt::q4_k);
    CHECK(c["blk.0.attn_v.weight"].type == gt::q4_k);
    CHECK(c["blk.0.ffn_down_exps.weight"].type == gt::q4_k);
}

TEST_CASE("llama.cpp's weight order: outside blk.N first, then by layer number, then by name", "[quantize][mix]") {
    const std::vector<std::string> names = {"blk.10.a.weight", "blk.2.b.weight", "output.weight", "blk.2.a.weight",
                                            "token_embd.weight", "output_norm.weight"};
    const std::vector<size_t> order = quant_mix_order(names);
    std::vector<std::string> got;
    for (size_t i : order) got.push_back(names[i]);
    CHECK(got == std::vector<std::string>{"output.weight", "output_norm.weight", "token_embd.weight", "blk.2.a.weight",
                                          "blk.2.b.weight", "blk.10.a.weight"});
}

TEST_CASE("which tensors need an importance matrix", "[quantize][mix]") {
    CHECK(quant_mix_requires_imatrix("blk.0.attn_q.weight", gt::iq2_xxs, llama_ftype::iq2_xxs));
    CHECK(quant_mix_requires_imatrix("blk.0.attn_q.weight", gt::iq3_xxs, llama_ftype::iq3_xxs));
    CHECK_FALSE(quant_mix_requires_imatrix("output.weight", gt::iq2_xxs, llama_ftype::iq2_xxs));
    CHECK_FALSE(quant_mix_requires_imatrix("blk.0.attn_q.weight", gt::q2_k, llama_ftype::q2_k));
    CHECK(quant_mix_requires_imatrix("blk.0.attn_q.weight", gt::q2_k, llama_ftype::q2_k_s));
    CHECK_FALSE(quant_mix_requires_imatrix("blk.0.attn_q.weight", gt::iq4_xs, llama_ftype::iq4_xs));
}
