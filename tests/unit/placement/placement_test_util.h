// tests/unit/placement/placement_test_util.h - real model shapes turned into bytes by class
// (Q4_K matrices, F32 norms and router, F16 KV), computed here from the shapes, and fixture paths.
#pragma once

#include "tandem/error.h"
#include "tandem/placement.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::test {

struct moe_shape {
    const char *name;
    int32_t n_layer, d_model, n_head, n_head_kv, d_head, n_expert, n_expert_used, d_ff_expert, n_vocab;
};

inline const moe_shape qwen3_30b_a3b{"qwen3-30b-a3b", 48, 2048, 32, 4, 128, 128, 8, 768, 151936};
inline const moe_shape qwen3_235b_a22b{"qwen3-235b-a22b", 94, 4096, 64, 4, 128, 128, 8, 1536, 151936};

// Q4_K: 256 weights per super-block of 144 bytes (2 f16 scales, 12 bytes of 6-bit scales, 128
// bytes of nibbles).
inline uint64_t q4k_bytes(uint64_t rows, uint64_t cols) { return rows * (cols / 256) * 144; }
inline uint64_t f32_bytes(uint64_t n) { return n * 4; }

// Bytes of one routed expert of one layer: gate and up [d_ff x d_model], down [d_model x d_ff].
inline uint64_t expert_bytes(const moe_shape &s) {
    return 2 * q4k_bytes(s.d_ff_expert, s.d_model) + q4k_bytes(s.d_model, s.d_ff_expert);
}

inline uint64_t layer_replicated_bytes(const moe_shape &s) {
    const uint64_t q = uint64_t(s.n_head) * s.d_head, kv = uint64_t(s.n_head_kv) * s.d_head;
    return q4k_bytes(q, s.d_model) + 2 * q4k_bytes(kv, s.d_model) + q4k_bytes(s.d_model, q)  // q, k, v, o
           + f32_bytes(2 * uint64_t(s.d_model) + 2 * uint64_t(s.d_head))                      // norms, q/k norms
           + f32_bytes(uint64_t(s.n_expert) * s.d_model);                                      // router
}

inline placement_model model_of(const moe_shape &s) {
    placement_model m;
    m.n_layer = s.n_layer;
    m.n_expert = s.n_expert;
    m.n_vocab = s.n_vocab;
    m.bytes.layer_replicated.assign(s.n_layer, layer_replicated_bytes(s));
    m.bytes.layer_experts.assign(s.n_layer, expert_bytes(s) * uint64_t(s.n_expert));
    m.bytes.embedding = q4k_bytes(s.n_vocab, s.d_model);
    m.bytes.head = q4k_bytes(s.n_vocab, s.d_model) + f32_bytes(s.d_model);  // output + output_norm
    m.bytes.kv_per_token = uint64_t(s.n_layer) * 2 * s.n_head_kv * s.d_head * 2;  // K and V, F16
    return m;
}

inline std::string fixture(const char *name) {
    return std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/topologies/" + name;
}

inline double to_gib(uint64_t bytes) { return double(bytes) / double(gib); }

// The planner's scratch per device in these tests.
inline constexpr uint64_t scratch = uint64_t{512} << 20;

inline placement_request request(placement_mode mode, std::vector<int32_t> ids, int64_t sessions = 16, int64_t ctx = 4096) {
    placement_request r;
    r.mode = mode;
    r.devices = std::move(ids);
    r.n_sessions = sessions;
    r.n_ctx = ctx;
    r.scratch_bytes = scratch;
    return r;
}

// The message of the config error the planner must raise for this request.
inline std::string config_error_of(const placement_request &r, const topology &t, const placement_model &m) {
    try {
        placement_plan_make(r, t, m);
    } catch (const error &e) {
        CHECK(e.kind() == error_kind::config);
        return e.what();
    }
    FAIL("expected a config error");
    return {};
}

}  // namespace tandem::test
