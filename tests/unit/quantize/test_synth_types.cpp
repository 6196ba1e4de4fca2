// tests/unit/quantize/test_synth_types.cpp - `tandem synth --type`: ggml type names and llama.cpp's
// file type names, and files of the types without a random-block writer (the IQ grid types among
// them) and of llama.cpp's IQ mixes, read back.
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quant.h"
#include "tandem/synth.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <map>

using namespace tandem;
using gt = ggml_type;

namespace {

std::string write_tiny(const synth_type_choice &c, const std::string &tag) {
    synth_options o{*synth_preset_find("tiny"), c.type, 2, 3, 1, c.q4_k_m};
    o.mix = c.mix;
    const std::string path = std::string(P_tmpdir) + "/tandem_test_synth_" + tag + ".gguf";
    synth_write(o, path);
    return path;
}

std::map<std::string, gt> types_of(const gguf_file &f) {
    std::map<std::string, gt> m;
    for (const gguf_tensor_info &t : f.tensors()) m[t.name] = t.type;
    return m;
}

}  // namespace

TEST_CASE("synth --type: ggml type names, q4_k_m, and llama.cpp file types in capitals", "[synth]") {
    for (const char *name : {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "q4_K", "q4_k", "f16", "q5_k"}) {
        INFO(name);
        const synth_type_choice c = synth_type_parse(name);
        CHECK(c.type == *ggml_type_from_name(name));
        CHECK_FALSE(c.q4_k_m);
        CHECK_FALSE(c.mix.has_value());
    }
    const std::pair<const char *, std::pair<llama_ftype, gt>> mixes[] = {
        {"IQ2_XXS", {llama_ftype::iq2_xxs, gt::iq2_xxs}}, {"IQ2_XS", {llama_ftype::iq2_xs, gt::iq2_xs}},
        {"IQ2_S", {llama_ftype::iq2_s, gt::iq2_xs}},      {"IQ2_M", {llama_ftype::iq2_m, gt::iq2_s}},
        {"iq2_m", {llama_ftype::iq2_m, gt::iq2_s}},       {"IQ3_XXS", {llama_ftype::iq3_xxs, gt::iq3_xxs}},
        {"IQ3_XS", {llama_ftype::iq3_xs, gt::iq3_s}},     {"iq3_xs", {llama_ftype::iq3_xs, gt::iq3_s}},
        {"IQ3_S", {llama_ftype::iq3_s, gt::iq3_s}},       {"IQ3_M", {llama_ftype::iq3_m, gt::iq3_s}},
        {"IQ1_S", {llama_ftype::iq1_s, gt::iq1_s}},       {"IQ1_M", {llama_ftype::iq1_m, gt::iq1_m}},
        {"Q3_K_S", {llama_ftype::q3_k_s, gt::q3_k}},      {"q3_k_l", {llama_ftype::q3_k_l, gt::q3_k}},
    };
    for (const auto &[name, want] : mixes) {
        INFO(name);
        const synth_type_choice c = synth_type_parse(name);
        REQUIRE(c.mix.has_value());
        CHECK(*c.mix == want.first);
        CHECK(c.type == want.second);
    }
    for (const char *name : {"q4_k_m", "Q4_K_M", "Q4_K"}) {
        INFO(name);
        const synth_type_choice c = synth_type_parse(name);
        CHECK((c.q4_k_m && c.type == gt::q4_k && !c.mix));
    }
    CHECK_THROWS_AS(synth_type_parse("iq9_x"), error);
    CHECK_THROWS_WITH(synth_type_parse("iq9_x"), Catch::Contains("IQ2_XXS") && Catch::Contains("iq9_x"));
}

TEST_CASE("synth writes every matrix in a type without a random-block writer, of the asked spread", "[synth]") {
    for (const gt type : {gt::iq2_xxs, gt::iq2_xs, gt::iq2_s, gt::iq3_xxs, gt::iq3_s, gt::iq1_s, gt::iq1_m, gt::q5_k, gt::iq4_nl}) {
        INFO(ggml_type_name(type));
        const std::string path = write_tiny({type, false, std::nullopt}, std::string(ggml_type_name(type)));
        {
            const auto f = gguf_file::open(path);
            for (const gguf_tensor_info &t : f->tensors()) {
                INFO(t.name);
                CHECK(t.type == (t.ne.size() >= 2 && t.name.find("gate_inp") == std::string::npos ? type : gt::f32));
            }
            // attn_q: std 1/sqrt(d_model) = 1/16 asked; quantization keeps it within a factor of 2.
            const gguf_tensor_info *q = f->find_tensor("blk.0.attn_q.weight");
            REQUIRE(q != nullptr);
            std::vector<float> w(size_t(q->n_rows() * q->ne[0]));
            dequantize_rows(q->type, q->data, w.data(), q->n_rows(), q->ne[0]);
            double sum2 = 0;
            for (float v : w) {
                REQUIRE(std::isfinite(v));
                sum2 += double(v) * v;
            }
            const double std = std::sqrt(sum2 / double(w.size()));
            CHECK(std > 0.5 / 16);
            CHECK(std < 2.0 / 16);
        }
        std::remove(path.c_str());
    }
}

TEST_CASE("synth writes llama.cpp's IQ mixes with llama-quantize's per-tensor types", "[synth]") {
    // Every tensor as quant_mix_types chooses over the file's tensors in llama.cpp's order (its
    // rules are tabled in test_quant_mix) for tiny's shape: 2 layers here, n_gqa 2, 8 experts.
    struct expect {
        const char *mix;
        int64_t file_type;
        gt base, output;
    };
    for (const expect &e : {expect{"IQ2_XXS", 19, gt::iq2_xxs, gt::q5_k}, expect{"IQ2_M", 29, gt::iq2_s, gt::q5_k},
                            expect{"IQ3_XXS", 23, gt::iq3_xxs, gt::q5_k}, expect{"IQ3_S", 26, gt::iq3_s, gt::q6_k},
                            expect{"IQ1_M", 31, gt::iq1_m, gt::q5_k}}) {
        INFO(e.mix);
        const synth_type_choice c = synth_type_parse(e.mix);
        const std::string path = write_tiny(c, e.mix);
        {
            const auto f = gguf_file::open(path);
            CHECK(f->get_int("general.file_type") == e.file_type);
            std::vector<std::string> names;
            for (const gguf_tensor_info &t : f->tensors()) names.push_back(t.name);
            std::vector<quant_mix_tensor> in;
            for (size_t i : quant_mix_order(names)) in.push_back({f->tensors()[i].name, f->tensors()[i].ne, gt::f32});
            quant_mix_options mo;
            mo.ftype = *c.mix;
            mo.has_imatrix = true;
            const auto choices = quant_mix_types({"qwen3moe", 2, 4, 2, 8}, mo, in);
            for (size_t k = 0; k < in.size(); ++k) {
                INFO(in[k].name);
                CHECK(f->tensor(in[k].name).type == choices[k].type);
            }
            const std::map<std::string, gt> t = types_of(*f);
            CHECK(t.at("output.weight") == e.output);  // llama-quantize's head: Q5_K for IQ1/IQ2/IQ3_XXS
            CHECK(t.at("blk.1.ffn_gate_exps.weight") == e.base);
            CHECK(t.at("blk.1.attn_norm.weight") == gt::f32);
            CHECK(t.at("blk.1.ffn_gate_inp.weight") == gt::f32);
        }
        std::remove(path.c_str());
    }
    synth_options ds{*synth_preset_find("tiny-deepseek-v2"), gt::iq2_xxs, 1};
    ds.mix = llama_ftype::iq2_xxs;
    CHECK_THROWS_WITH(synth_write(ds, std::string(P_tmpdir) + "/tandem_test_synth_ds.gguf"), Catch::Contains("qwen3moe"));
}
