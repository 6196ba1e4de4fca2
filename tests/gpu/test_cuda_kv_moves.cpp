// tests/gpu/test_cuda_kv_moves.cpp - a slot's K/V on the CUDA engine moved out to host memory, back
// into another slot and between slots (the prompt cache and slot files): the same bytes out again,
// and the moved slot continues with the logits of the slot that computed it, bit for bit.
#include "gpu_test_util.h"
#include "model_test_util.h"

#include "tandem/error.h"

#include <cstring>
#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

std::unique_ptr<engine> open_cuda(const std::string &model, std::vector<int32_t> gpus, bool pair) {
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.n_slots = 3;
    opt.n_ctx = 64;
    opt.gpu_devices = std::move(gpus);
    opt.tensor_parallel = pair;
    opt.kv = kv_type::f16;
    return engine_open(gguf_file::open(model), opt);
}

std::vector<int32_t> random_tokens(int32_t n, int32_t n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t &t : ids) t = int32_t(rng() % uint32_t(n_vocab));
    return ids;
}

std::vector<uint8_t> export_all(engine &eng, int32_t slot) {
    std::vector<uint8_t> blob(size_t(eng.slot_length(slot)) * eng.kv_token_bytes());
    eng.slot_export(slot, eng.slot_length(slot), blob);
    return blob;
}

std::vector<float> next_logits(engine &eng, int32_t slot, int32_t token) {
    const engine_row row{slot, eng.slot_length(slot), token, row_output::logits};
    std::vector<float> logits;
    engine_forward_logits(eng, {&row, 1}, logits);
    return logits;
}

template <typename T> bool same_bits(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE("CUDA: a slot's KV exports, imports into another slot and continues bitwise", "[gpu][kv]") {
    if (!gpu_present()) return;
    const bool pair = GENERATE(false, true);
    INFO((pair ? "a pair on one GPU" : "one device"));
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto eng = pair ? open_cuda(model, {0, 0}, true) : open_cuda(model, {0}, false);
    REQUIRE(eng->kv_token_bytes() > 0);
    const std::vector<int32_t> ids = random_tokens(23, eng->hparams().n_vocab, 7);
    prefill(*eng, 1, ids);
    const std::vector<uint8_t> blob = export_all(*eng, 1);
    REQUIRE(blob.size() == 23 * eng->kv_token_bytes());
    eng->slot_import(2, blob);
    REQUIRE(eng->slot_length(2) == 23);
    CHECK(same_bits(export_all(*eng, 2), blob));
    const std::vector<float> computed = next_logits(*eng, 1, ids[3]);
    CHECK(same_bits(next_logits(*eng, 2, ids[3]), computed));
    // The blob's first 9 tokens, then the rest prefilled: the prompt path does not depend on where it starts.
    eng->slot_import(0, std::span<const uint8_t>(blob).first(9 * eng->kv_token_bytes()));
    REQUIRE(eng->slot_length(0) == 9);
    prefill(*eng, 0, std::vector<int32_t>(ids.begin() + 9, ids.end()));
    CHECK(same_bits(next_logits(*eng, 0, ids[3]), computed));
}

TEST_CASE("CUDA: a slot's prefix copies to another slot and continues bitwise", "[gpu][kv]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto eng = open_cuda(model, {0}, false);
    const std::vector<int32_t> ids = random_tokens(20, eng->hparams().n_vocab, 3);
    const std::vector<float> whole = prefill(*eng, 0, ids);
    prefill(*eng, 1, random_tokens(30, eng->hparams().n_vocab, 4));  // longer than the copy: cut back
    eng->slot_copy(0, 1, 12);
    REQUIRE(eng->slot_length(1) == 12);
    CHECK(same_bits(prefill(*eng, 1, std::vector<int32_t>(ids.begin() + 12, ids.end())), whole));
    std::vector<uint8_t> too_long(65 * eng->kv_token_bytes());
    CHECK_THROWS_AS(eng->slot_import(2, too_long), error);
}
