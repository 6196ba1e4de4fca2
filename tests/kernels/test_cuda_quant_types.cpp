// tests/kernels/test_cuda_quant_types.cpp - the tensor types the CUDA products take through their
// generic paths only (Q5_K, Q3_K, Q2_K, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4 and the grid
// IQ types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M): every
// decoded weight bitwise the CPU's dequantize_row, on blocks of random bytes (every scale and
// quant bit pattern); the grouped decode products (SwiGLU gate/up, then down) and the grouped
// prompt products against the CPU twin, a row's pairs alone bitwise what they were among others.
// Their dense products run in the every-type loops of test_cuda_kernels and test_cuda_matmul_prompt.
#include "gpu_test_util.h"
#include "quant_test_util.h"
#include "digit_groups_test_util.h"

#include "cuda/matmul_prompt.h"
#include "cuda/matvec.h"
#include "cuda/norm.h"
#include "tandem/quant.h"

#include <cmath>
#include <cstring>

using namespace tandem;
using tandem::test::device_buffer;
using tandem::test::device_groups;
using tandem::test::groups_of_row;
using tandem::test::host_groups;
using tandem::test::random_matrix;
using tandem::test::rel_err;
using tandem::test::route_random;
using tandem::test::tolerance;

namespace {

const ggml_type added_types[] = {ggml_type::q5_k,    ggml_type::q3_k,   ggml_type::q2_k,  ggml_type::q4_0,
                                 ggml_type::q4_1,    ggml_type::q5_0,   ggml_type::q5_1,  ggml_type::iq4_nl,
                                 ggml_type::iq4_xs,  ggml_type::mxfp4,  ggml_type::iq2_xxs, ggml_type::iq2_xs,
                                 ggml_type::iq2_s,   ggml_type::iq3_xxs, ggml_type::iq3_s, ggml_type::iq1_s,
                                 ggml_type::iq1_m};

bool k_quant(ggml_type t) { return ggml_type_info(t).block_elems == 256; }

// Equal bits, or NaN on both sides (random half scales include NaN and infinities, whose
// products' NaN payloads the two sides need not agree on).
bool same_value(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

// The decode products of one type for a step routed at random: gate/up (SwiGLU) into act
// [rows * k][ff], down into out [rows * k][d]; `prompt` runs matmul_prompt instead of matvec.
struct grouped_run {
    std::vector<float> act, out;
};
grouped_run run_grouped(bool prompt, ggml_type type, const host_groups &hg, const device_buffer<uint8_t> &gate,
                        const device_buffer<uint8_t> &up, const device_buffer<uint8_t> &down, const float *x, int32_t n_expert,
                        int32_t d, int32_t ff, int32_t n_pairs) {
    const device_groups g(hg);
    device_buffer<float> act(size_t(n_pairs) * ff), out(size_t(n_pairs) * d);
    act.poison();
    out.poison();
    cuda::matvec_args gu = g.matvec_grouped_args(gate.ptr, up.ptr, d, ff, x, g.px.ptr, act.ptr, n_expert, n_pairs);
    cuda::matvec_args dn = g.matvec_grouped_args(down.ptr, nullptr, ff, d, act.ptr, g.py.ptr, out.ptr, n_expert, n_pairs);
    gu.type = dn.type = type;
    if (prompt) {
        cuda::matmul_prompt(gu, nullptr);
        cuda::matmul_prompt(dn, nullptr);
    } else {
        cuda::matvec(gu, nullptr);
        cuda::matvec(dn, nullptr);
    }
    return {act.download(), out.download()};
}

}  // namespace

TEST_CASE("added types: every decoded weight of random blocks is bitwise the CPU's dequantize_row", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    std::mt19937_64 rng(5900);
    for (const ggml_type type : added_types) {
        INFO("type " << ggml_type_name(type));
        // Rows of 5 (K-quants 2) blocks: random bytes, so every scale, exponent and quant pattern
        // occurs; 389 rows draw each entry of the largest grid (IQ1_S, 2,048) about 12 times.
        const int32_t d = k_quant(type) ? 512 : 160, vocab = 389;
        const size_t row_bytes = ggml_row_bytes(type, d);
        std::vector<uint8_t> table(row_bytes * vocab);
        for (auto &b : table) b = uint8_t(rng());
        std::vector<int32_t> tokens;
        for (int32_t t = vocab - 1; t >= 0; --t) tokens.push_back(t);
        tokens.push_back(5);  // a repeated token
        std::vector<float> ref(tokens.size() * d);
        for (size_t i = 0; i < tokens.size(); ++i)
            dequantize_row(type, table.data() + size_t(tokens[i]) * row_bytes, ref.data() + i * d, d);
        device_buffer<uint8_t> dt(table);
        device_buffer<int32_t> dtok(tokens);
        device_buffer<float> dx(ref.size());
        dx.poison();
        cuda::embed({dt.ptr, type, dtok.ptr, dx.ptr, int32_t(tokens.size()), d}, nullptr);
        const auto got = dx.download();
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < ref.size(); ++i)
            if (!same_value(got[i], ref[i]) && bad++ == 0) first = i;
        INFO("first differing element " << first << " (row " << first / size_t(d) << ", element " << first % size_t(d)
                                        << "): GPU " << got[first] << " CPU " << ref[first]);
        CHECK(bad == 0);
    }
}

TEST_CASE("added types: grouped decode and prompt products match the CPU; a row's pairs alone are bitwise the same",
          "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    uint64_t seed = 5950;
    for (const ggml_type type : added_types)
        for (const bool prompt : {false, true}) {
            ++seed;
            // K-quants: gate/up over 2 blocks, down over 3 (K = 768); 32-element blocks: 5 and 3
            // blocks (K chunks of four items with a partial last one). Prompt steps: more rows.
            const int32_t n_expert = 8, k = 4, rows = prompt ? 40 : 9;
            const int32_t d = k_quant(type) ? 512 : 160, ff = k_quant(type) ? 768 : 96;
            INFO("type " << ggml_type_name(type) << (prompt ? " prompt" : " decode") << " rows " << rows << " seed " << seed);
            std::mt19937_64 rng(seed);
            const host_groups hg = route_random(rng, rows, k, n_expert);
            const auto gate = random_matrix(rng, type, d, int64_t(ff) * n_expert, 0.06f);
            const auto up = random_matrix(rng, type, d, int64_t(ff) * n_expert, 0.06f);
            const auto down = random_matrix(rng, type, ff, int64_t(d) * n_expert, 0.06f);
            const auto h = test::random_floats(rng, size_t(rows) * d);
            const std::vector<float> out_ref = test::cpu_grouped_ffn(gate, up, down, type, n_expert, d, ff, h, hg.ids, k);

            device_buffer<uint8_t> dgate(gate), dup(up), ddown(down);
            device_buffer<float> dh(h);
            const int32_t n_pairs = rows * k;
            const grouped_run all = run_grouped(prompt, type, hg, dgate, dup, ddown, dh.ptr, n_expert, d, ff, n_pairs);
            // Two products and SwiGLU's expf: the grouped FFN's bound (matmul_prompt's doubled, as
            // test_cuda_matmul_prompt holds its grouped FFN).
            const double bound = prompt ? 2 * tolerance::matmul_prompt : tolerance::moe;
            for (int32_t p = 0; p < n_pairs; ++p) {
                INFO("pair " << p << " expert " << hg.ids[size_t(p)]);
                CHECK(rel_err(all.out.data() + size_t(p) * d, out_ref.data() + size_t(p) * d, size_t(d)) <= bound);
            }
            for (int32_t r = 0; r < rows; r += 4) {
                INFO("row " << r << " alone");
                device_buffer<float> x1(std::vector<float>(h.begin() + std::ptrdiff_t(size_t(r) * d),
                                                           h.begin() + std::ptrdiff_t(size_t(r + 1) * d)));
                const grouped_run one = run_grouped(prompt, type, groups_of_row(hg, r, k), dgate, dup, ddown, x1.ptr, n_expert, d, ff, k);
                CHECK(std::memcmp(one.act.data(), all.act.data() + size_t(r) * k * ff, size_t(k) * ff * sizeof(float)) == 0);
                CHECK(std::memcmp(one.out.data(), all.out.data() + size_t(r) * k * d, size_t(k) * d * sizeof(float)) == 0);
            }
        }
}

// Host arithmetic only (runs without a GPU).
TEST_CASE("added types: the CUDA row and block sizes are the CPU's", "[kernels]") {
    CHECK(cuda::matvec_row_bytes(ggml_type::q4_0, 96) == 3 * 18);
    CHECK(cuda::matvec_row_bytes(ggml_type::mxfp4, 64) == 2 * 17);
    CHECK(cuda::matvec_row_bytes(ggml_type::q5_k, 512) == 2 * 176);
    CHECK(cuda::matvec_row_bytes(ggml_type::iq2_xxs, 512) == 2 * 66);
    CHECK(cuda::matvec_row_bytes(ggml_type::iq1_m, 256) == 56);
    CHECK(cuda::matvec_row_bytes(ggml_type::q8_k, 256) == 0);
    CHECK(cuda::matvec_row_bytes(ggml_type::tq2_0, 256) == 0);
    for (const ggml_type type : added_types)
        CHECK(cuda::matvec_block_elems(type) == ggml_type_info(type).block_elems);
    for (const ggml_type type : added_types)
        CHECK(cuda::matvec_row_bytes(type, 512) == int64_t(ggml_row_bytes(type, 512)));
}
