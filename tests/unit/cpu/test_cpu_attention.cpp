// tests/unit/cpu/test_cpu_attention.cpp - cpu::attention over a q8_0 cache (attention_args::k_q8,
// v_q8): bitwise the attention over the blocks' dequantized floats (what the CPU engine computed
// when it kept q8_0-rounded keys and values as floats), for head widths that split blocks and
// rows of several slots at once; and results that do not depend on the other rows of the call.
#include "src/cpu/cpu_ops.h"
#include "tandem/quant.h"
#include "tandem/quant_blocks.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace tandem;

namespace {

std::vector<float> normal_floats(std::mt19937 &rng, size_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float &x : v) x = dist(rng);
    return v;
}

}  // namespace

TEST_CASE("attention over a q8_0 cache is bitwise attention over its dequantized values", "[cpu][attention]") {
    struct shape { int64_t n_head, n_head_kv, d_head; };
    // d_head 16: two heads share a block; 48: heads start mid-block; 128: Qwen3's.
    const shape sh = GENERATE(shape{4, 2, 16}, shape{6, 2, 48}, shape{8, 2, 128}, shape{4, 4, 32});
    const uint32_t seed = 6100;
    INFO("heads " << sh.n_head << "/" << sh.n_head_kv << " d_head " << sh.d_head << " seed " << seed);
    std::mt19937 rng(seed);
    const int64_t n_slots = 3, n_ctx = 40, kv_dim = sh.n_head_kv * sh.d_head, q_dim = sh.n_head * sh.d_head;
    REQUIRE(kv_dim % 32 == 0);
    const std::vector<float> k = normal_floats(rng, size_t(n_slots * n_ctx * kv_dim), 1.5f);
    const std::vector<float> v = normal_floats(rng, k.size(), 1.0f);
    std::vector<block_q8_0> kb(k.size() / 32), vb(v.size() / 32);
    quantize_row(ggml_type::q8_0, k.data(), kb.data(), int64_t(k.size()));
    quantize_row(ggml_type::q8_0, v.data(), vb.data(), int64_t(v.size()));
    std::vector<float> kd(k.size()), vd(v.size());
    dequantize_row(ggml_type::q8_0, kb.data(), kd.data(), int64_t(kd.size()));
    dequantize_row(ggml_type::q8_0, vb.data(), vd.data(), int64_t(vd.size()));
    CHECK(std::memcmp(kd.data(), k.data(), k.size() * sizeof(float)) != 0);  // the blocks do round

    const std::vector<int32_t> slots = {0, 2, 1, 2, 0}, pos = {0, 39, 17, 5, 31};
    const int64_t n = int64_t(slots.size());
    const std::vector<float> q = normal_floats(rng, size_t(n * q_dim), 2.0f);
    std::vector<const float *> kf, vf;
    std::vector<const block_q8_0 *> kq, vq;
    for (int32_t s : slots) {
        kf.push_back(kd.data() + size_t(s * n_ctx * kv_dim));
        vf.push_back(vd.data() + size_t(s * n_ctx * kv_dim));
        kq.push_back(kb.data() + size_t(s * n_ctx * kv_dim / 32));
        vq.push_back(vb.data() + size_t(s * n_ctx * kv_dim / 32));
    }
    const float scale = 1.0f / std::sqrt(float(sh.d_head));
    std::vector<float> want(size_t(n * q_dim)), got(want.size(), NAN);
    cpu::attention(cpu::cpu_context{3}, {q.data(), kf.data(), vf.data(), pos.data(), want.data(), n, sh.n_head, sh.n_head_kv, sh.d_head, scale});
    cpu::attention_args a{q.data(), nullptr, nullptr, pos.data(), got.data(), n, sh.n_head, sh.n_head_kv, sh.d_head, scale};
    a.k_q8 = kq.data();
    a.v_q8 = vq.data();
    cpu::attention(cpu::cpu_context{3}, a);
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);

    // Each row alone, on one thread: the same bits.
    for (int64_t r = 0; r < n; ++r) {
        INFO("row " << r);
        std::vector<float> alone(static_cast<size_t>(q_dim));
        cpu::attention_args one{q.data() + r * q_dim, nullptr, nullptr, pos.data() + r, alone.data(), 1, sh.n_head, sh.n_head_kv, sh.d_head, scale};
        one.k_q8 = kq.data() + r;
        one.v_q8 = vq.data() + r;
        cpu::attention(cpu::cpu_context{1}, one);
        CHECK(std::memcmp(alone.data(), got.data() + r * q_dim, size_t(q_dim) * sizeof(float)) == 0);
    }
}
