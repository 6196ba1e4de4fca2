// tests/unit/engine/test_cuda_types.cpp - the host-side check that refuses a file for the CUDA
// backend (or sends `--backend auto` to the CPU) names the first tensor of a type it cannot compute.
#include "../../../src/engine/cuda_types.h"

#include "tandem/gguf.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>

using namespace tandem;

namespace {

std::string file_with(std::vector<std::pair<std::string, ggml_type>> tensors) {
    const std::string path = std::string(P_tmpdir) + "/tandem_test_cuda_types.gguf";
    gguf_writer w;
    w.set_string("general.architecture", "qwen3moe");
    for (const auto &[name, type] : tensors)
        w.add_tensor(name, type, {256, 2}, [n = ggml_row_bytes(type, 256) * 2](uint8_t *dst) { std::memset(dst, 0, n); });
    w.add_tensor("blk.0.attn_norm.weight", ggml_type::f32, {256}, [](uint8_t *dst) { std::memset(dst, 0, 1024); });
    w.write(path, 1);
    return path;
}

}  // namespace

TEST_CASE("the CUDA type check names the first tensor it cannot compute", "[engine][cuda_types]") {
    const std::string ok = file_with({{"blk.0.attn_q.weight", ggml_type::q4_k}, {"output.weight", ggml_type::q6_k},
                                      {"token_embd.weight", ggml_type::q8_0}, {"blk.0.attn_k.weight", ggml_type::bf16},
                                      {"blk.0.ffn_down_exps.weight", ggml_type::iq4_xs}, {"blk.1.attn_v.weight", ggml_type::q5_k},
                                      {"blk.1.ffn_gate_exps.weight", ggml_type::mxfp4}, {"blk.1.attn_q.weight", ggml_type::q4_0},
                                      {"blk.1.ffn_up_exps.weight", ggml_type::iq2_xxs}, {"blk.1.ffn_down_exps.weight", ggml_type::iq3_s},
                                      {"blk.2.ffn_gate_exps.weight", ggml_type::iq1_m}});
    CHECK(cuda_type_refusal(*gguf_file::open(ok)).empty());
    const std::string bad = file_with({{"blk.0.attn_q.weight", ggml_type::iq3_xxs}, {"blk.0.ffn_down_exps.weight", ggml_type::tq2_0},
                                       {"blk.1.attn_v.weight", ggml_type::q8_k}});
    const std::string why = cuda_type_refusal(*gguf_file::open(bad));
    CHECK_THAT(why, Catch::Contains("blk.0.ffn_down_exps.weight") && Catch::Contains("tq2_0") && Catch::Contains("CUDA"));
    // A type neither backend computes with gets no advice to use the CPU.
    CHECK_THAT(why, !Catch::Contains("--backend cpu"));
    // Every type the CPU engine computes with runs on CUDA (the grid IQ types included).
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k,
                        ggml_type::q5_k, ggml_type::q3_k, ggml_type::q2_k, ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0,
                        ggml_type::q5_1, ggml_type::iq4_nl, ggml_type::iq4_xs, ggml_type::mxfp4, ggml_type::iq2_xxs,
                        ggml_type::iq2_xs, ggml_type::iq2_s, ggml_type::iq3_xxs, ggml_type::iq3_s, ggml_type::iq1_s,
                        ggml_type::iq1_m})
        CHECK(cuda_computes(t));
    for (ggml_type t : {ggml_type::q8_1, ggml_type::q8_k, ggml_type::tq1_0, ggml_type::tq2_0, ggml_type::i8, ggml_type::f64})
        CHECK_FALSE(cuda_computes(t));
    std::remove(ok.c_str());
    std::remove(bad.c_str());
}
