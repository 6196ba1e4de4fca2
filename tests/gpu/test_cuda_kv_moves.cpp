// tests/gpu/test_cuda_kv_moves.cpp - a slot's K/V on the CUDA engine moved out to host memory, back
// into another slot and between slots (the prompt cache and slot files): the same bytes out again,
// and the moved slot continues with the logits of the slot that computed it, bit for bit; with
// caches of halves and of q8_0 blocks.
#include "gpu_test_util.h"
#include "model_test_util.h"

#include "tandem/error.h"

#include <cstring>

using namespace tandem;
using namespace tandem::test;

namespace {

std::unique_ptr<engine> open_cuda(const std::string &model, std::vector<int32_t> gpus, bool pair, kv_type kv = kv_type::f16) {
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.n_slots = 3;
    opt.n_ctx = 64;
    opt.gpu_devices = std::move(gpus);
    opt.tensor_parallel = pair;
    opt.kv = kv;
    return engine_open(gguf_file::open(model), opt);
}

template <typename T> bool same_bits(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE("CUDA: a slot's KV exports, imports into another slot and continues bitwise", "[gpu][kv]") {
    if (!gpu_present()) return;
    const bool pair = GENERATE(false, true);
    const kv_type kv = GENERATE(kv_type::f16, kv_type::q8_0);
    INFO((pair ? "a pair on one GPU" : "one device") << " kv " << kv_type_name(kv));
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto eng = pair ? open_cuda(model, {0, 0}, true, kv) : open_cuda(model, {0}, false, kv);
    const model_kv_shape shape = model_kv_shape_of(eng->hparams());
    REQUIRE(eng->kv_cache_type() == kv);
    REQUIRE(eng->kv_token_bytes() == uint64_t(eng->hparams().n_layer) * uint64_t(shape.n_planes) * kv_row_bytes(kv, shape.width));
    const std::vector<int32_t> ids = random_prompt(23, eng->hparams().n_vocab, 7);
    prefill(*eng, 1, ids);
    const std::vector<uint8_t> blob = slot_blob(*eng, 1);
    REQUIRE(blob.size() == 23 * eng->kv_token_bytes());
    eng->slot_import(2, blob);
    REQUIRE(eng->slot_length(2) == 23);
    CHECK(same_bits(slot_blob(*eng, 2), blob));
    const std::vector<float> computed = logits_after(*eng, 1, ids[3]);
    CHECK(same_bits(logits_after(*eng, 2, ids[3]), computed));
    // The blob's first 9 tokens, then the rest prefilled: the prompt path does not depend on where it starts.
    eng->slot_import(0, std::span<const uint8_t>(blob).first(9 * eng->kv_token_bytes()));
    REQUIRE(eng->slot_length(0) == 9);
    prefill(*eng, 0, std::vector<int32_t>(ids.begin() + 9, ids.end()));
    CHECK(same_bits(logits_after(*eng, 0, ids[3]), computed));

    // Page-locked memory (host_pinned) takes the copies without staging: the same bytes both ways.
    const std::shared_ptr<uint8_t> pinned = eng->host_pinned(2 * blob.size() + 1);
    REQUIRE(pinned != nullptr);
    uint8_t *at = pinned.get() + 1;  // not aligned: a blob's place in the prompt cache's region is any byte
    eng->slot_export(1, 23, std::span<uint8_t>(at, blob.size()));
    CHECK(std::memcmp(at, blob.data(), blob.size()) == 0);
    std::memcpy(at + blob.size(), blob.data(), blob.size());
    eng->slot_import(2, std::span<const uint8_t>(at + blob.size(), 13 * eng->kv_token_bytes()));
    REQUIRE(eng->slot_length(2) == 13);
    CHECK(same_bits(slot_blob(*eng, 2), std::vector<uint8_t>(blob.begin(), blob.begin() + ptrdiff_t(13 * eng->kv_token_bytes()))));
}

TEST_CASE("CUDA: a slot's prefix copies to another slot and continues bitwise", "[gpu][kv]") {
    if (!gpu_present()) return;
    const kv_type kv = GENERATE(kv_type::f16, kv_type::q8_0);
    INFO("kv " << kv_type_name(kv));
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto eng = open_cuda(model, {0}, false, kv);
    const std::vector<int32_t> ids = random_prompt(20, eng->hparams().n_vocab, 3);
    const std::vector<float> whole = prefill(*eng, 0, ids);
    prefill(*eng, 1, random_prompt(30, eng->hparams().n_vocab, 4));  // longer than the copy: cut back
    eng->slot_copy(0, 1, 12);
    REQUIRE(eng->slot_length(1) == 12);
    CHECK(same_bits(prefill(*eng, 1, std::vector<int32_t>(ids.begin() + 12, ids.end())), whole));
    std::vector<uint8_t> too_long(65 * eng->kv_token_bytes());
    CHECK_THROWS_AS(eng->slot_import(2, too_long), error);
}
