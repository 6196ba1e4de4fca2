// tests/multi_device/test_kv_moves.cpp - a slot's K/V moved out to host memory, back into another
// slot and between slots: bitwise on every CPU placement plan and KV type, and a restored slot
// continues exactly as the slot that computed it.
#include "../model/model_test_util.h"

#include "tandem/error.h"

#include <catch2/catch.hpp>

#include <cstring>

using namespace tandem;
using namespace tandem::test;

namespace {

struct kv_case {
    const char *preset;
    int32_t devices;
    bool tensor_parallel;
    kv_type kv;
};

std::unique_ptr<engine> open_placed(const std::string &model, const kv_case &c) {
    engine_options opt;
    opt.n_slots = 3;
    opt.n_ctx = 64;
    opt.n_threads = 2;
    opt.n_devices = c.devices;
    opt.tensor_parallel = c.tensor_parallel;
    opt.kv = c.kv;
    return engine_open(gguf_file::open(model), opt);
}

bool same_bits(std::span<const uint8_t> a, std::span<const uint8_t> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a slot's KV exports the same blob on every placement and imports bitwise", "[multi_device][kv]") {
    const kv_case c = GENERATE(values<kv_case>({{"tiny", 2, false, kv_type::f32},
                                                {"tiny", 4, false, kv_type::f16},
                                                {"tiny", 2, true, kv_type::f32},
                                                {"tiny", 4, true, kv_type::f16},
                                                {"tiny-deepseek-v3", 2, false, kv_type::f32},
                                                {"tiny-deepseek-v3", 2, true, kv_type::f16},
                                                {"tiny", 4, true, kv_type::q8_0},
                                                {"tiny-deepseek-v3", 2, false, kv_type::q8_0}}));
    INFO(c.preset << ", " << c.devices << " devices" << (c.tensor_parallel ? " in pairs" : "") << ", kv "
                  << kv_type_name(c.kv));
    const std::string model = synth_gguf(c.preset, ggml_type::q4_k, 4);
    auto single = open_placed(model, {c.preset, 1, false, c.kv});
    auto placed = open_placed(model, c);
    REQUIRE(placed->counters().at("devices") == double(c.devices));
    REQUIRE(placed->kv_cache_type() == c.kv);
    const model_kv_shape shape = model_kv_shape_of(single->hparams());
    const uint64_t row_bytes = c.kv == kv_type::q8_0 ? uint64_t(shape.width) / 32 * 34 : uint64_t(shape.width) * (c.kv == kv_type::f16 ? 2 : 4);
    REQUIRE(single->kv_token_bytes() == uint64_t(single->hparams().n_layer) * uint64_t(shape.n_planes) * row_bytes);

    const std::vector<int32_t> ids = random_prompt(23, single->hparams().n_vocab, 7);
    prefill(*single, 0, ids);
    prefill(*placed, 1, ids);
    const std::vector<uint8_t> blob = slot_blob(*single, 0);
    CHECK(same_bits(slot_blob(*placed, 1), blob));

    // Into another slot of the other engine, then out again: the same bytes, the same next logits.
    placed->slot_import(2, blob);
    REQUIRE(placed->slot_length(2) == 23);
    CHECK(same_bits(slot_blob(*placed, 2), blob));
    const std::vector<float> computed = logits_after(*placed, 1, ids[3]);
    CHECK(same_bits(logits_after(*placed, 2, ids[3]), computed));

    // A blob's first tokens are the blob of the prefix: import 9 of them, prefill the rest.
    placed->slot_import(0, std::span<const uint8_t>(blob).first(9 * placed->kv_token_bytes()));
    REQUIRE(placed->slot_length(0) == 9);
    prefill(*placed, 0, std::vector<int32_t>(ids.begin() + 9, ids.end()));
    CHECK(same_bits(logits_after(*placed, 0, ids[3]), computed));
}

TEST_CASE("a slot's prefix copies to another slot and continues bitwise", "[multi_device][kv]") {
    const kv_case c = GENERATE(values<kv_case>({{"tiny", 1, false, kv_type::f32}, {"tiny", 4, true, kv_type::f16}}));
    const std::string model = synth_gguf(c.preset, ggml_type::q4_k, 4);
    auto eng = open_placed(model, c);
    const std::vector<int32_t> ids = random_prompt(20, eng->hparams().n_vocab, 3);
    const std::vector<float> whole = prefill(*eng, 0, ids);
    prefill(*eng, 1, random_prompt(30, eng->hparams().n_vocab, 4));  // longer than the copy: cut back
    eng->slot_copy(0, 1, 12);
    REQUIRE(eng->slot_length(1) == 12);
    REQUIRE(eng->slot_length(0) == 20);
    CHECK(same_bits(prefill(*eng, 1, std::vector<int32_t>(ids.begin() + 12, ids.end())), whole));
}

TEST_CASE("KV moves refuse what does not fit the slot", "[multi_device][kv]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto eng = open_placed(model, {"tiny", 1, false, kv_type::f32});
    prefill(*eng, 0, random_prompt(5, eng->hparams().n_vocab, 1));
    const uint64_t token = eng->kv_token_bytes();
    std::vector<uint8_t> blob(6 * token);
    CHECK_THROWS_AS(eng->slot_export(0, 6, blob), error);                                        // past its length
    CHECK_THROWS_AS(eng->slot_export(0, 5, blob), error);                                        // wrong size
    CHECK_THROWS_AS(eng->slot_import(1, std::span<const uint8_t>(blob).first(token + 1)), error);  // a partial token
    CHECK_THROWS_AS(eng->slot_import(1, std::vector<uint8_t>(65 * token)), error);                 // past the context
    CHECK_THROWS_AS(eng->slot_copy(0, 1, 6), error);
    CHECK(eng->slot_length(1) == 0);
}
