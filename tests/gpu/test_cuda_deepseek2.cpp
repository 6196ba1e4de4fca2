// tests/gpu/test_cuda_deepseek2.cpp - deepseek2 on the CUDA engine: the latent attention and the
// grouped routing kernels against their CPU twins; the engine against the CPU engine on the
// committed fixtures and on V2-Lite's and Moonlight's shapes (greedy tokens identical, logits within
// tolerance::model_logits), f32 and f16 caches; batch, chunking and placement (pipeline stages,
// tensor-parallel pairs) invariance bitwise; a q8_0 cache refused naming why.
#include "gpu_test_util.h"
#include "model_test_util.h"

#include "cuda/attention_mla.h"
#include "cuda/ffn_dense.h"
#include "cuda/moe_route_grouped.h"
#include "src/cpu/cpu_ops.h"
#include "tandem/error.h"
#include "tandem/quant.h"
#include "tandem/sampler.h"
#include "tandem/swiglu.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

std::unique_ptr<engine> open_cuda(const std::string &path, int32_t n_slots, int32_t n_ctx, kv_type kv = kv_type::f32,
                                  std::vector<int32_t> devices = {}, int32_t micro_batches = 0, bool tensor_parallel = false) {
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.n_slots = n_slots;
    opt.n_ctx = n_ctx;
    opt.kv = kv;
    opt.gpu_devices = std::move(devices);
    opt.micro_batches = micro_batches;
    opt.tensor_parallel = tensor_parallel;
    return engine_open(gguf_file::open(path), opt);
}

std::vector<int32_t> random_tokens(std::mt19937 &rng, size_t n, int32_t n_vocab) {
    std::vector<int32_t> out(n);
    for (auto &t : out) t = int32_t(rng() % uint32_t(n_vocab));
    return out;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Prefill (every row's logits), then greedy decode on both engines: each row within the bound,
// greedy tokens identical.
void compare_engines(const std::string &path, size_t prompt_len, size_t n_steps, uint32_t seed, kv_type kv) {
    auto cpu = open_cpu(path, 2, 128, kv);
    auto gpu = open_cuda(path, 2, 128, kv);
    REQUIRE(gpu->hparams().arch == model_arch::deepseek2);
    const int32_t nv = cpu->hparams().n_vocab;
    std::mt19937 rng(seed);
    const std::vector<int32_t> prompt = random_tokens(rng, prompt_len, nv);
    const std::vector<float> lc = prefill(*cpu, 1, prompt, true), lg = prefill(*gpu, 1, prompt, true);
    REQUIRE(lc.size() == lg.size());
    double worst = 0;
    for (size_t r = 0; r < prompt_len; ++r) {
        const double e = rel_err(lg.data() + r * nv, lc.data() + r * nv, size_t(nv));
        worst = std::max(worst, e);
        INFO("prefill row " << r);
        CHECK(e <= tolerance::model_logits);
    }
    std::vector<float> c(lc.end() - nv, lc.end()), g(lg.end() - nv, lg.end());
    for (size_t step = 0; step < n_steps; ++step) {
        const int32_t tc = argmax(c), tg = argmax(g);
        INFO("first divergent greedy token at decode step " << step);
        REQUIRE(tc == tg);
        const engine_row row{1, cpu->slot_length(1), tc, row_output::logits};
        engine_forward_logits(*cpu, {&row, 1}, c);
        engine_forward_logits(*gpu, {&row, 1}, g);
        const double e = rel_err(g.data(), c.data(), size_t(nv));
        worst = std::max(worst, e);
        CHECK(e <= tolerance::model_logits);
    }
    WARN(path << " kv " << kv_type_name(kv) << ": worst relative L2 error of CUDA vs CPU logits " << worst);
}

// A rounding through half precision, as an f16 cache stores a value.
float to_half(float v) { return __half2float(__float2half_rn(v)); }

}  // namespace

TEST_CASE("CUDA latent attention matches attention_mla on f32 and f16 caches", "[gpu][kernels][deepseek2]") {
    if (!gpu_present()) return;
    const bool f16 = GENERATE(false, true), prompt = GENERATE(false, true);
    const int32_t lora = GENERATE(64, 512), rope = GENERATE(16, 64);
    // 3 heads, and 19: two blocks of the prompt rows' kernel, the second one partly empty.
    const int32_t n_head = GENERATE(3, 19);
    INFO("kv_lora " << lora << " d_rope " << rope << " heads " << n_head << (f16 ? " f16" : " f32") << (prompt ? " prompt" : " decode"));
    const int32_t d_head = 32 + rope, n_slots = 3, n_ctx = 300, width = lora + rope;
    const std::vector<int32_t> slots = {2, 0, -1, 2, 1}, positions = {0, 299, 0, 17, 150};
    const int32_t n = int32_t(slots.size());
    std::mt19937_64 rng(uint64_t(lora * 131 + rope + (f16 ? 7 : 0)));
    std::vector<float> cache = random_floats(rng, size_t(n_slots) * n_ctx * width);
    if (f16)
        for (float &v : cache) v = to_half(v);
    const std::vector<float> q_lat = random_floats(rng, size_t(n) * n_head * lora, 0.3f);
    const std::vector<float> q = random_floats(rng, size_t(n) * n_head * d_head, 0.3f);
    const float scale = 0.11f;

    std::vector<float> q_rope(size_t(n) * n_head * rope), want(size_t(n) * n_head * lora, 0.0f);
    for (int32_t r = 0; r < n; ++r)
        for (int32_t h = 0; h < n_head; ++h)
            std::copy_n(q.data() + (size_t(r) * n_head + h) * d_head + d_head - rope, rope, q_rope.data() + (size_t(r) * n_head + h) * rope);
    std::vector<const float *> rows_cache(size_t(n), cache.data());
    std::vector<int32_t> real_pos(positions);
    for (int32_t r = 0; r < n; ++r)
        if (slots[size_t(r)] >= 0) rows_cache[size_t(r)] = cache.data() + size_t(slots[size_t(r)]) * n_ctx * width;
    cpu::cpu_context ctx;
    cpu::attention_mla(ctx, {q_lat.data(), q_rope.data(), rows_cache.data(), real_pos.data(), want.data(), n, n_head, lora, rope, scale});

    device_buffer<float> d_q_lat(q_lat), d_q(q), d_out(want.size());
    device_buffer<int32_t> d_slots(slots), d_pos(positions);
    device_buffer<float> d_cache32(f16 ? 1 : cache.size());
    std::vector<__half> halves(f16 ? cache.size() : 1);
    if (f16)
        for (size_t i = 0; i < cache.size(); ++i) halves[i] = __float2half_rn(cache[i]);
    device_buffer<__half> d_cache16(halves);
    if (!f16) d_cache32.upload(cache);
    d_out.poison();
    cuda::mla_attention_args a;
    a.q_lat = d_q_lat.ptr;
    a.q = d_q.ptr;
    a.q_stride = int64_t(n_head) * d_head;
    a.cache = f16 ? static_cast<const void *>(d_cache16.ptr) : d_cache32.ptr;
    a.cache_f16 = f16;
    a.slots = d_slots.ptr;
    a.positions = d_pos.ptr;
    a.out_lat = d_out.ptr;
    a.n_rows = n;
    a.n_head = n_head;
    a.d_head = d_head;
    a.kv_lora = lora;
    a.d_rope = rope;
    a.n_ctx = n_ctx;
    a.scale = scale;
    a.prompt = prompt;
    cuda::mla_attention(a, nullptr);
    const std::vector<float> got = d_out.download();
    for (int32_t r = 0; r < n; ++r) {
        INFO("row " << r);
        const size_t at = size_t(r) * n_head * lora, len = size_t(n_head) * lora;
        if (slots[size_t(r)] < 0) {
            CHECK(std::all_of(got.begin() + long(at), got.begin() + long(at + len), [](float v) { return v == 0.0f; }));
            continue;
        }
        CHECK(rel_err(got.data() + at, want.data() + at, len) <= tolerance::attention);
    }
    // Another launch with the rows reversed: each row's outputs are bitwise the same.
    std::vector<int32_t> rs(slots.rbegin(), slots.rend()), rp(positions.rbegin(), positions.rend());
    std::vector<float> q_lat_r, q_r;
    for (int32_t r = n - 1; r >= 0; --r) {
        q_lat_r.insert(q_lat_r.end(), q_lat.begin() + long(size_t(r) * n_head * lora), q_lat.begin() + long(size_t(r + 1) * n_head * lora));
        q_r.insert(q_r.end(), q.begin() + long(size_t(r) * n_head * d_head), q.begin() + long(size_t(r + 1) * n_head * d_head));
    }
    d_q_lat.upload(q_lat_r);
    d_q.upload(q_r);
    d_slots.upload(rs);
    d_pos.upload(rp);
    cuda::mla_attention(a, nullptr);
    const std::vector<float> again = d_out.download();
    for (int32_t r = 0; r < n; ++r) {
        const size_t len = size_t(n_head) * lora;
        INFO("row " << r << " reversed");
        CHECK(std::memcmp(again.data() + size_t(n - 1 - r) * len, got.data() + size_t(r) * len, len * sizeof(float)) == 0);
    }
}

TEST_CASE("CUDA latent norm, YaRN rope, cache write and head products match the CPU's", "[gpu][kernels][deepseek2]") {
    if (!gpu_present()) return;
    const bool f16 = GENERATE(false, true);
    INFO((f16 ? "f16" : "f32") << " cache");
    const int32_t n_head = 4, nope = 64, rope = 32, d_head = nope + rope, lora = 256, width = lora + rope, n_ctx = 64;
    const std::vector<int32_t> slots = {1, -1, 0, 1}, positions = {5, 0, 63, 6};
    const int32_t n = int32_t(slots.size());
    std::mt19937_64 rng(f16 ? 91 : 90);
    const std::vector<float> kv = random_floats(rng, size_t(n) * width), q = random_floats(rng, size_t(n) * n_head * d_head);
    const std::vector<float> norm_w = random_floats(rng, size_t(lora), 0.5f);
    const std::vector<float> inv_freq = cpu::rope_inv_freq(10000.0f, rope, 8.0f, 4096, 32.0f, 1.0f);  // YaRN
    // The CPU twin's steps (cpu_layer_deepseek2.cpp).
    std::vector<float> want_kv = kv, want_q = q;
    for (int32_t r = 0; r < n; ++r) cpu::rmsnorm(want_kv.data() + size_t(r) * width, norm_w.data(), want_kv.data() + size_t(r) * width, 1, lora, 1e-6f);
    cpu::rope_pairs(want_kv.data() + lora, positions.data(), n, width, 1, 0, inv_freq.data(), rope, 1.0f);
    cpu::rope_pairs(want_q.data() + nope, positions.data(), n, int64_t(n_head) * d_head, n_head, d_head, inv_freq.data(), rope, 1.0f);

    device_buffer<float> d_kv(kv), d_q(q), d_norm(norm_w), d_freq(inv_freq);
    device_buffer<int32_t> d_slots(slots), d_pos(positions);
    device_buffer<float> d_cache32(size_t(2) * n_ctx * width);
    device_buffer<__half> d_cache16(size_t(2) * n_ctx * width);
    d_cache32.poison();
    d_cache16.poison();
    cuda::mla_rope_cache_args a;
    a.kv = d_kv.ptr;
    a.q = d_q.ptr;
    a.kv_norm = d_norm.ptr;
    a.inv_freq = d_freq.ptr;
    a.slots = d_slots.ptr;
    a.positions = d_pos.ptr;
    a.cache = f16 ? static_cast<void *>(d_cache16.ptr) : d_cache32.ptr;
    a.cache_f16 = f16;
    a.n_rows = n;
    a.n_head = n_head;
    a.d_head = d_head;
    a.kv_lora = lora;
    a.d_rope = rope;
    a.n_ctx = n_ctx;
    cuda::mla_rope_cache(a, nullptr);
    const std::vector<float> got_kv = d_kv.download(), got_q = d_q.download();
    const std::vector<float> cache32 = d_cache32.download();
    const std::vector<__half> cache16 = d_cache16.download();
    for (int32_t r = 0; r < n; ++r) {
        INFO("row " << r);
        const size_t at = size_t(r) * width;
        CHECK(std::memcmp(got_kv.data() + at, want_kv.data() + at, size_t(lora) * sizeof(float)) == 0);  // the norm: bitwise
        CHECK(rel_err(got_kv.data() + at + lora, want_kv.data() + at + lora, size_t(rope)) <= tolerance::rope);
        const size_t qa = size_t(r) * n_head * d_head;
        CHECK(rel_err(got_q.data() + qa, want_q.data() + qa, size_t(n_head) * d_head) <= tolerance::rope);
        if (slots[size_t(r)] < 0) continue;
        const size_t c = (size_t(slots[size_t(r)]) * n_ctx + size_t(positions[size_t(r)])) * width;
        for (int32_t i = 0; i < width; ++i) {
            const float cached = f16 ? __half2float(cache16[c + size_t(i)]) : cache32[c + size_t(i)];
            const float want = f16 ? to_half(got_kv[at + size_t(i)]) : got_kv[at + size_t(i)];
            CHECK(std::memcmp(&cached, &want, sizeof(float)) == 0);
        }
    }

    // W_UK over the roped queries' nope parts: y[r][h][o] = sum_i w[h][o][i] q[r][h][i].
    const std::vector<float> w = random_floats(rng, size_t(n_head) * lora * nope, 0.1f);
    device_buffer<float> d_w(w), d_y(size_t(n) * n_head * lora);
    d_y.poison();
    cuda::mla_head_product({d_w.ptr, d_q.ptr, d_y.ptr, int64_t(n_head) * d_head, d_head, int64_t(n_head) * lora, lora, n, n_head, nope, lora},
                           nullptr);
    const std::vector<float> y = d_y.download();
    std::vector<float> want_y(y.size());
    for (int32_t r = 0; r < n; ++r)
        for (int32_t h = 0; h < n_head; ++h)
            for (int32_t o = 0; o < lora; ++o) {
                double acc = 0;
                for (int32_t i = 0; i < nope; ++i)
                    acc += double(w[(size_t(h) * lora + o) * nope + i]) * got_q[(size_t(r) * n_head + h) * d_head + i];
                want_y[(size_t(r) * n_head + h) * lora + o] = float(acc);
            }
    CHECK(rel_err(y.data(), want_y.data(), y.size()) <= 1e-6);
}

TEST_CASE("CUDA grouped routing matches moe_route_grouped", "[gpu][kernels][deepseek2]") {
    if (!gpu_present()) return;
    struct shape {
        int32_t n_expert, k, n_group, n_group_used;
        bool sigmoid, normalise, bias;
        float scale;
    };
    const shape sh = GENERATE(shape{16, 3, 4, 2, true, true, true, 2.5f},     // deepseekv3-a
                              shape{8, 3, 1, 1, false, false, false, 1.0f},   // deepseekv2-b
                              shape{64, 6, 1, 1, true, true, true, 2.446f},   // Moonlight
                              shape{64, 6, 1, 1, false, false, false, 1.0f},  // V2-Lite
                              shape{256, 8, 8, 4, true, true, true, 2.5f});   // V3
    INFO("experts " << sh.n_expert << " k " << sh.k << " groups " << sh.n_group << "/" << sh.n_group_used);
    const int32_t n = 37;
    std::mt19937_64 rng(uint64_t(sh.n_expert * 7 + sh.k));
    const std::vector<float> logits = random_floats(rng, size_t(n) * sh.n_expert, 1.5f);
    const std::vector<float> bias = random_floats(rng, size_t(sh.n_expert), 0.05f);
    std::vector<int32_t> slots(static_cast<size_t>(n));
    for (int32_t r = 0; r < n; ++r) slots[size_t(r)] = r % 9 == 4 ? -1 : r;
    std::vector<int32_t> want_ids(size_t(n) * sh.k);
    std::vector<float> want_w(size_t(n) * sh.k);
    cpu::moe_route_grouped_args c;
    c.logits = logits.data();
    c.bias = sh.bias ? bias.data() : nullptr;
    c.ids = want_ids.data();
    c.weights = want_w.data();
    c.n_rows = n;
    c.n_expert = sh.n_expert;
    c.k = sh.k;
    c.n_group = sh.n_group;
    c.n_group_used = sh.n_group_used;
    c.sigmoid = sh.sigmoid;
    c.normalise = sh.normalise;
    c.scale = sh.scale;
    cpu::moe_route_grouped(c);

    device_buffer<float> d_logits(logits), d_bias(bias), d_w(want_w.size());
    device_buffer<int32_t> d_slots(slots), d_ids(want_ids.size());
    cuda::moe_route_grouped_args g;
    g.logits = d_logits.ptr;
    g.bias = sh.bias ? d_bias.ptr : nullptr;
    g.slots = d_slots.ptr;
    g.ids = d_ids.ptr;
    g.weights = d_w.ptr;
    g.n_rows = n;
    g.n_expert = sh.n_expert;
    g.k = sh.k;
    g.n_group = sh.n_group;
    g.n_group_used = sh.n_group_used;
    g.sigmoid = sh.sigmoid;
    g.normalise = sh.normalise;
    g.scale = sh.scale;
    cuda::moe_route_grouped(g, nullptr);
    const std::vector<int32_t> ids = d_ids.download();
    const std::vector<float> w = d_w.download();
    for (int32_t r = 0; r < n; ++r) {
        INFO("row " << r);
        const size_t at = size_t(r) * sh.k;
        if (slots[size_t(r)] < 0) {
            for (int32_t s = 0; s < sh.k; ++s) CHECK(ids[at + s] == -1);
            continue;
        }
        for (int32_t s = 0; s < sh.k; ++s) CHECK(ids[at + s] == want_ids[at + s]);
        CHECK(rel_err(w.data() + at, want_w.data() + at, size_t(sh.k)) <= tolerance::route_weights);
    }
}

TEST_CASE("CUDA always-on FFN pieces match their CPU twins", "[gpu][kernels][deepseek2]") {
    if (!gpu_present()) return;
    const int32_t n = 5, k = GENERATE(0, 3), d = 200, n_in = 72, n_out = 48;
    INFO("k " << k);
    std::mt19937_64 rng(uint64_t(500 + k));
    // The combine: x += (sum_s w_s out_s) + dense, bitwise the CPU's moe_combine_dense.
    const std::vector<float> x = random_floats(rng, size_t(n) * d), out = random_floats(rng, size_t(n) * std::max(k, 1) * d);
    const std::vector<float> w = random_floats(rng, size_t(n) * std::max(k, 1)), dense = random_floats(rng, size_t(n) * d);
    const std::vector<int32_t> slots = {0, 1, -1, 3, 4};
    std::vector<float> want = x;
    cpu::moe_combine_dense(want.data(), out.data(), w.data(), dense.data(), n, k, d);
    device_buffer<float> d_x(x), d_out(out), d_w(w), d_dense(dense);
    device_buffer<int32_t> d_slots(slots);
    cuda::ffn_combine({d_x.ptr, d_out.ptr, d_w.ptr, d_dense.ptr, d_slots.ptr, n, k, d}, nullptr);
    const std::vector<float> got = d_x.download();
    for (int32_t r = 0; r < n; ++r) {
        INFO("row " << r);
        const std::vector<float> &ref = slots[size_t(r)] < 0 ? x : want;  // a padding row is left as is
        CHECK(std::memcmp(got.data() + size_t(r) * d, ref.data() + size_t(r) * d, size_t(d) * sizeof(float)) == 0);
    }
    // The plain product of a width the tensor-core products do not take (F32 and F16), and SwiGLU.
    for (const ggml_type type : {ggml_type::f32, ggml_type::f16}) {
        INFO(ggml_type_name(type));
        std::vector<float> wm = random_floats(rng, size_t(n_out) * n_in);
        std::vector<uint16_t> halves(wm.size());
        for (size_t i = 0; i < wm.size(); ++i) {
            halves[i] = fp32_to_fp16(wm[i]);
            if (type == ggml_type::f16) wm[i] = fp16_to_fp32(halves[i]);
        }
        const std::vector<float> xs = random_floats(rng, size_t(n) * n_in), y0 = random_floats(rng, size_t(n) * n_out);
        std::vector<float> ref(y0.size());
        for (int32_t r = 0; r < n; ++r)
            for (int32_t o = 0; o < n_out; ++o) {
                double acc = 0;
                for (int32_t i = 0; i < n_in; ++i) acc += double(wm[size_t(o) * n_in + i]) * xs[size_t(r) * n_in + i];
                ref[size_t(r) * n_out + o] = float(acc) + y0[size_t(r) * n_out + o];
            }
        device_buffer<float> d_wf(wm), d_xs(xs), d_y(y0);
        device_buffer<uint16_t> d_wh(halves);
        cuda::dense_plain_args a;
        a.w = type == ggml_type::f16 ? static_cast<const void *>(d_wh.ptr) : d_wf.ptr;
        a.type = type;
        a.n_in = n_in;
        a.n_out = n_out;
        a.n_rows = n;
        a.x = d_xs.ptr;
        a.y = d_y.ptr;
        a.x_stride = n_in;
        a.y_stride = n_out;
        a.accumulate = true;
        cuda::dense_plain(a, nullptr);
        const std::vector<float> y = d_y.download();
        CHECK(rel_err(y.data(), ref.data(), y.size()) <= 1e-6);
        // silu(gate) * up over the outputs: bitwise the CPU's (tandem/swiglu.h).
        device_buffer<float> d_up(xs);
        cuda::swiglu_rows(d_y.ptr, d_up.ptr, n, n_out, n_out, nullptr);
        const std::vector<float> g = d_y.download();
        std::vector<float> want_g(g.size());
        for (size_t i = 0; i < g.size(); ++i) want_g[i] = swiglu(y[i], xs[i]);
        CHECK(std::memcmp(g.data(), want_g.data(), g.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("CUDA deepseek2 engine matches the CPU engine on the committed fixtures", "[gpu][model][deepseek2]") {
    if (!gpu_present()) return;
    const std::string fixture = GENERATE(std::string("deepseekv3-a"), std::string("deepseekv2-b"));
    const ggml_type type = GENERATE(ggml_type::f32, ggml_type::q8_0, ggml_type::q4_k);
    const kv_type kv = GENERATE(kv_type::f32, kv_type::f16);
    INFO(fixture << " " << ggml_type_name(type) << " kv " << kv_type_name(kv));
    if (!std::filesystem::exists(std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/" + fixture + "/model.safetensors")) {
        WARN("tests/fixtures/" << fixture << " is missing (tests/fixtures/README.md says how to write it): skipping");
        return;
    }
    compare_engines(fixture_gguf(fixture, type), 11, 12, 77, kv);
}

TEST_CASE("CUDA deepseek2 engine matches the CPU engine on synth models", "[gpu][model][deepseek2]") {
    if (!gpu_present()) return;
    // The tiny presets (V3's and V2's layouts) with 80 prompt rows (the direct, non-graph path too);
    // V2-Lite's and Moonlight's real shapes in three layers (one dense, two routed).
    const kv_type kv = GENERATE(kv_type::f32, kv_type::f16);
    for (const char *preset : {"tiny-deepseek-v3", "tiny-deepseek-v2"}) {
        INFO(preset);
        compare_engines(synth_gguf(preset, ggml_type::q4_k, 0), 80, 10, 91, kv);
    }
    for (const char *preset : {"deepseek-v2-lite", "moonlight-16b-a3b"}) {
        INFO(preset);
        compare_engines(synth_gguf(preset, ggml_type::q4_k, 3), 24, 6, 92, kv);
    }
}

TEST_CASE("CUDA deepseek2 decode logits are bitwise independent of the other rows of the step", "[gpu][invariance][deepseek2]") {
    if (!gpu_present()) return;
    const std::string preset = GENERATE(std::string("tiny-deepseek-v3"), std::string("tiny-deepseek-v2"));
    const kv_type kv = GENERATE(kv_type::f32, kv_type::f16);
    INFO(preset << " kv " << kv_type_name(kv));
    const std::string model = synth_gguf(preset, ggml_type::q4_k, 0);
    std::mt19937 rng(4243);
    const size_t n_sessions = 16, n_steps = 16;
    auto alone_eng = open_cuda(model, int32_t(n_sessions) + 1, 256, kv);
    auto batch_eng = open_cuda(model, int32_t(n_sessions) + 1, 256, kv);
    const int32_t nv = alone_eng->hparams().n_vocab;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t s = 0; s < n_sessions; ++s) prompts.push_back(random_tokens(rng, 1 + 7 * s, nv));
    // Alone: each session's rows in calls of their own.
    std::vector<std::vector<std::vector<float>>> alone(n_sessions);
    std::vector<std::vector<int32_t>> tokens(n_sessions);
    for (size_t s = 0; s < n_sessions; ++s) {
        std::vector<float> logits = prefill(*alone_eng, int32_t(s), prompts[s]);
        for (size_t step = 0; step < n_steps; ++step) {
            const int32_t next = argmax(logits);
            tokens[s].push_back(next);
            const engine_row row{int32_t(s), alone_eng->slot_length(int32_t(s)), next, row_output::logits};
            engine_forward_logits(*alone_eng, {&row, 1}, logits);
            alone[s].push_back(logits);
        }
    }
    // Together: all sessions a call, order reversed every other step; a stranger's prefill rides
    // along at step 5 (a graph bucket) and step 7 (60 rows: the direct path).
    for (size_t s = 0; s < n_sessions; ++s) prefill(*batch_eng, int32_t(s), prompts[s]);
    const std::vector<int32_t> stranger = random_tokens(rng, 4, nv);
    std::vector<float> logits;
    for (size_t step = 0; step < n_steps; ++step) {
        std::vector<engine_row> rows;
        std::vector<size_t> order;
        for (size_t i = 0; i < n_sessions; ++i) order.push_back(step % 2 ? n_sessions - 1 - i : i);
        for (size_t s : order) rows.push_back({int32_t(s), batch_eng->slot_length(int32_t(s)), tokens[s][step], row_output::logits});
        if (step == 5)
            for (size_t i = 0; i < stranger.size(); ++i) rows.push_back({int32_t(n_sessions), int32_t(i), stranger[i], row_output::none, true});
        if (step == 7)
            for (int32_t i = 0; i < 60; ++i)
                rows.push_back({int32_t(n_sessions), int32_t(stranger.size()) + i, stranger[size_t(i) % stranger.size()], row_output::none, true});
        engine_forward_logits(*batch_eng, rows, logits);
        REQUIRE(logits.size() == n_sessions * size_t(nv));
        for (size_t i = 0; i < n_sessions; ++i) {
            const size_t s = order[i];
            const std::vector<float> mine(logits.begin() + long(i * nv), logits.begin() + long((i + 1) * nv));
            INFO("session " << s << " step " << step);
            CHECK(same_bits(mine, alone[s][step]));
        }
    }
}

TEST_CASE("CUDA deepseek2 decode rows of a session fed several a call match one a call, bitwise", "[gpu][invariance][deepseek2]") {
    if (!gpu_present()) return;
    const kv_type kv = GENERATE(kv_type::f32, kv_type::f16);
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q4_k, 0);
    check_draft_rows_bitwise([&](int32_t n_slots, int32_t n_ctx) { return open_cuda(model, n_slots, n_ctx, kv); }, 617);
}

TEST_CASE("CUDA deepseek2 prompt rows are bitwise independent of chunking", "[gpu][invariance][deepseek2]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q4_k, 0);
    const kv_type kv = GENERATE(kv_type::f32, kv_type::f16);
    INFO("kv " << kv_type_name(kv));
    auto whole = open_cuda(model, 2, 256, kv), chunked = open_cuda(model, 2, 256, kv);
    const int32_t nv = whole->hparams().n_vocab;
    std::mt19937 rng(607);
    const auto prompt = random_tokens(rng, 150, nv);
    const std::vector<float> ref = prefill(*whole, 0, prompt, true);
    // Chunks of 1, 5, 30, 64 and 50 rows, each call also decoding another session.
    prefill(*chunked, 1, random_tokens(rng, 3, nv));
    int32_t next_other = 7;
    size_t at = 0;
    for (size_t len : {size_t(1), size_t(5), size_t(30), size_t(64), size_t(50)}) {
        std::vector<engine_row> rows;
        rows.push_back({1, chunked->slot_length(1), next_other, row_output::logits});
        for (size_t i = 0; i < len; ++i) rows.push_back({0, int32_t(at + i), prompt[at + i], row_output::logits, true});
        std::vector<float> logits;
        engine_forward_logits(*chunked, rows, logits);
        REQUIRE(logits.size() == (len + 1) * size_t(nv));
        next_other = argmax({logits.data(), size_t(nv)});
        for (size_t i = 0; i < len; ++i) {
            INFO("prompt row " << at + i << " in a chunk of " << len);
            CHECK(std::memcmp(logits.data() + (i + 1) * nv, ref.data() + (at + i) * nv, size_t(nv) * sizeof(float)) == 0);
        }
        at += len;
    }
    REQUIRE(at == prompt.size());
    std::vector<float> a(ref.end() - nv, ref.end()), b = a;
    for (int step = 0; step < 6; ++step) {
        const int32_t tok = argmax(a);
        const engine_row ra{0, whole->slot_length(0), tok, row_output::logits}, rb{0, chunked->slot_length(0), tok, row_output::logits};
        engine_forward_logits(*whole, {&ra, 1}, a);
        engine_forward_logits(*chunked, {&rb, 1}, b);
        INFO("decode step " << step);
        CHECK(same_bits(a, b));
    }
}

TEST_CASE("CUDA deepseek2 logits are bitwise equal on pipeline stages and tensor-parallel pairs", "[gpu][placement][deepseek2]") {
    if (!gpu_present()) return;
    // Three sessions' prefills in one call, then greedy decode steps of all three, the last ones
    // with a fourth session's prompt riding along.
    auto run = [](const std::string &model, std::vector<int32_t> devices, int32_t micro_batches, bool tensor_parallel) {
        auto eng = open_cuda(model, 4, 160, kv_type::f32, std::move(devices), micro_batches, tensor_parallel);
        std::mt19937 rng(12);
        const int32_t nv = eng->hparams().n_vocab;
        std::vector<engine_row> rows;
        const int lengths[3] = {7, 1, 40};
        for (int32_t s = 0; s < 3; ++s)
            for (int32_t i = 0; i < lengths[s]; ++i)
                rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(i + 1 == lengths[s]), true});
        std::vector<std::vector<float>> out;
        std::vector<float> logits;
        engine_forward_logits(*eng, rows, logits);
        out.push_back(logits);
        for (int step = 0; step < 8; ++step) {
            rows.clear();
            for (int32_t s = 0; s < 3; ++s)
                rows.push_back({s, eng->slot_length(s), argmax({logits.data() + size_t(s) * size_t(nv), size_t(nv)}), row_output::logits});
            if (step >= 5)
                for (int32_t i = 0; i < 9; ++i)
                    rows.push_back({3, eng->slot_length(3) + i, int32_t(rng() % uint32_t(nv)), row_output::none, true});
            engine_forward_logits(*eng, rows, logits);
            out.push_back(logits);
        }
        return out;
    };
    // The dense first layer, shared experts beside routed ones split 50/50 in a pair, the latent
    // cache crossing stage boundaries.
    const std::string preset = GENERATE(std::string("tiny-deepseek-v3"), std::string("tiny-deepseek-v2"));
    const std::string model = synth_gguf(preset, ggml_type::q4_k, 0);
    const auto single = run(model, {0}, 0, false);
    struct plan {
        std::vector<int32_t> devices;
        int32_t micro_batches;
        bool tensor_parallel;
    };
    for (const plan &p : {plan{{0, 0}, 0, false}, plan{{0, 0, 0}, 0, false}, plan{{0, 0, 0, 0}, 1, false}, plan{{0, 0, 0, 0}, 3, false},
                          plan{{0, 0}, 0, true}, plan{{0, 0, 0, 0}, 0, true}, plan{{0, 0, 0, 0}, 2, true}}) {
        INFO(preset << ": " << p.devices.size() << " logical devices, micro-batches " << p.micro_batches
                    << (p.tensor_parallel ? ", tensor-parallel pairs" : ", pipeline"));
        const auto placed = run(model, p.devices, p.micro_batches, p.tensor_parallel);
        REQUIRE(placed.size() == single.size());
        for (size_t i = 0; i < placed.size(); ++i) {
            INFO("call " << i);
            CHECK(same_bits(placed[i], single[i]));
        }
    }
}

TEST_CASE("CUDA deepseek2 refuses a q8_0 cache naming why, and --kv-type auto takes f16", "[gpu][engine][deepseek2]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q4_k, 0);
    try {
        open_cuda(model, 2, 64, kv_type::q8_0);
        FAIL("a q8_0 cache was accepted");
    } catch (const tandem::error &e) {
        CHECK(e.kind() == error_kind::unsupported);
        CHECK_THAT(e.what(), Catch::Contains("q8_0"));
    }
    engine_options opt;
    opt.backend = engine_backend::cuda;
    opt.n_slots = 2;
    opt.n_ctx = 64;
    opt.kv = kv_type::automatic;
    CHECK(engine_open(gguf_file::open(model), opt)->kv_cache_type() == kv_type::f16);
}

TEST_CASE("--backend auto keeps deepseek2 on the CPU engine; --backend cuda runs it on the GPU", "[gpu][engine][deepseek2]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q4_k, 0);
    engine_options opt;
    opt.n_slots = 2;
    opt.n_ctx = 64;
    opt.backend = engine_backend::automatic;
    CHECK(engine_open(gguf_file::open(model), opt)->gpus().empty());
    opt.backend = engine_backend::cuda;
    CHECK_FALSE(engine_open(gguf_file::open(model), opt)->gpus().empty());
}

TEST_CASE("CUDA deepseek2 slots move as blobs of the latent cache and decode bitwise the same", "[gpu][engine][deepseek2]") {
    if (!gpu_present()) return;
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q4_k, 0);
    const kv_type kv = GENERATE(kv_type::f32, kv_type::f16);
    INFO("kv " << kv_type_name(kv));
    auto a = open_cuda(model, 2, 128, kv), b = open_cuda(model, 2, 128, kv);
    const model_hparams &hp = a->hparams();
    // One plane a token per layer: the latent and the roped key.
    REQUIRE(a->kv_token_bytes() == uint64_t(hp.n_layer) * uint64_t(hp.kv_lora_rank + hp.d_rope) * (kv == kv_type::f16 ? 2 : 4));
    std::mt19937 rng(515);
    const std::vector<float> first = prefill(*a, 0, random_tokens(rng, 37, hp.n_vocab));
    const std::vector<uint8_t> blob = slot_blob(*a, 0);
    REQUIRE(blob.size() == size_t(37) * a->kv_token_bytes());
    b->slot_import(1, blob);
    REQUIRE(b->slot_length(1) == 37);
    REQUIRE(slot_blob(*b, 1) == blob);
    int32_t token = argmax(first);
    for (int step = 0; step < 4; ++step) {
        INFO("decode step " << step);
        const std::vector<float> la = logits_after(*a, 0, token), lb = logits_after(*b, 1, token);
        CHECK(same_bits(la, lb));
        token = argmax(la);
    }
}

TEST_CASE("CUDA deepseek2 decode rows that share a slot match the CPU and repeat bitwise, with and without a graph",
          "[gpu][model][deepseek2]") {
    if (!gpu_present()) return;
    // A prompt fed as decode rows (without engine_row::prompt): each row reads the latents the rows
    // before it wrote in the same step; 9 rows take a graph bucket, 70 the direct launches.
    const std::string model = synth_gguf("tiny-deepseek-v3", ggml_type::q4_k, 0);
    for (const int32_t n : {9, 70}) {
        INFO(n << " rows of one slot");
        auto cpu = open_cpu(model, 2, 128);
        const int32_t nv = cpu->hparams().n_vocab;
        std::mt19937 rng(uint32_t(700 + n));
        const std::vector<int32_t> tokens = random_tokens(rng, size_t(n), nv);
        std::vector<engine_row> rows;
        for (int32_t i = 0; i < n; ++i) rows.push_back({1, i, tokens[size_t(i)], row_output::logits});
        std::vector<float> lc, first;
        engine_forward_logits(*cpu, rows, lc);
        for (int run = 0; run < 2; ++run) {
            auto gpu = open_cuda(model, 2, 128);
            std::vector<float> lg;
            engine_forward_logits(*gpu, rows, lg);
            REQUIRE(lg.size() == lc.size());
            for (int32_t r = 0; r < n; ++r) {
                INFO("row " << r);
                CHECK(rel_err(lg.data() + size_t(r) * nv, lc.data() + size_t(r) * nv, size_t(nv)) <= tolerance::model_logits);
            }
            if (run == 0)
                first = lg;
            else
                CHECK(same_bits(lg, first));
        }
    }
}
