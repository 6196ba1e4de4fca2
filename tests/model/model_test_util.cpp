// tests/model/model_test_util.cpp - functions shared by the model tests.
#include "model_test_util.h"

#include "tandem/convert.h"
#include "tandem/sampler.h"
#include "tandem/quant.h"
#include "tandem/synth.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <unistd.h>

namespace tandem::test {

namespace fs = std::filesystem;

namespace {
struct scratch {
    std::string path;
    scratch() {
        path = (fs::temp_directory_path() / ("tandem-model-test-" + std::to_string(::getpid()))).string();
        fs::create_directories(path);
    }
    ~scratch() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};
}  // namespace

const std::string &scratch_dir() {
    static scratch s;
    return s.path;
}

std::string fixture_gguf(const std::string &fixture, ggml_type type) {
    static std::map<std::string, std::string> cache;
    const std::string key = fixture + "-" + std::string(ggml_type_name(type));
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    convert_options opt;
    opt.hf_dir = std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/" + fixture;
    opt.out_path = scratch_dir() + "/" + key + ".gguf";
    opt.type = type;
    convert_hf(opt);
    return cache[key] = opt.out_path;
}

std::string synth_gguf(const std::string &preset, ggml_type type, int32_t layers, bool q4_k_m) {
    static std::map<std::string, std::string> cache;
    const std::string key = preset + "-" + (q4_k_m ? std::string("q4_K_M") : std::string(ggml_type_name(type))) + "-" + std::to_string(layers);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    synth_options opt{*synth_preset_find(preset), type, layers, 7, 0, q4_k_m};
    const std::string path = scratch_dir() + "/synth-" + key + ".gguf";
    synth_write(opt, path);
    return cache[key] = path;
}

std::string dequantized_copy(const std::string &path) {
    auto in = gguf_file::open(path);
    gguf_writer w;
    for (const gguf_kv &kv : in->kvs())
        if (kv.key != "general.alignment") w.set_value(kv.key, kv.value);
    for (const gguf_tensor_info &t : in->tensors()) {
        const gguf_tensor_info *src = &t;
        w.add_tensor(t.name, ggml_type::f32, t.ne, [src](uint8_t *dst) {
            dequantize_rows(src->type, src->data, reinterpret_cast<float *>(dst), src->n_rows(), src->ne[0]);
        });
    }
    const std::string out = path + ".f32.gguf";
    w.write(out);
    return out;
}

std::unique_ptr<engine> open_cpu(const std::string &path, int32_t n_slots, int32_t n_ctx, kv_type kv, cpu_arithmetic arithmetic) {
    engine_options opt;
    opt.n_slots = n_slots;
    opt.n_ctx = n_ctx;
    opt.kv = kv;
    opt.arithmetic = arithmetic;
    return engine_open(gguf_file::open(path), opt);
}

engine_outputs forward_as(engine &eng, std::span<const engine_row> rows, row_output want, std::span<const row_draw> draws) {
    std::vector<engine_row> asked(rows.begin(), rows.end());
    size_t out = 0;
    for (engine_row &r : asked) {
        if (r.want == row_output::none) continue;
        r.want = want;
        if (!draws.empty()) r.draw = draws[out];
        ++out;
    }
    REQUIRE((draws.empty() || draws.size() == out));
    engine_outputs result;
    eng.forward(asked, result);
    return result;
}

double rel_l2(std::span<const float> a, std::span<const double> b) {
    REQUIRE(a.size() == b.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += b[i] * b[i];
    }
    return std::sqrt(num / den);
}

double rel_l2(std::span<const float> a, std::span<const float> b) {
    std::vector<double> bd(b.begin(), b.end());
    return rel_l2(a, bd);
}

std::vector<float> prefill(engine &eng, int32_t slot, const std::vector<int32_t> &ids, bool all_logits) {
    std::vector<engine_row> rows;
    const int32_t start = eng.slot_length(slot);
    for (size_t i = 0; i < ids.size(); ++i)
        rows.push_back({slot, start + int32_t(i), ids[i], logits_if(all_logits || i + 1 == ids.size()), true});
    std::vector<float> logits;
    engine_forward_logits(eng, rows, logits);
    return logits;
}

std::vector<int32_t> random_prompt(int32_t n, int32_t n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t &t : ids) t = int32_t(rng() % uint32_t(n_vocab));
    return ids;
}

std::vector<uint8_t> slot_blob(engine &eng, int32_t slot) {
    std::vector<uint8_t> blob(size_t(eng.slot_length(slot)) * eng.kv_token_bytes());
    eng.slot_export(slot, eng.slot_length(slot), blob);
    return blob;
}

std::vector<float> logits_after(engine &eng, int32_t slot, int32_t token) {
    const engine_row row{slot, eng.slot_length(slot), token, row_output::logits};
    std::vector<float> logits;
    engine_forward_logits(eng, {&row, 1}, logits);
    return logits;
}

void check_draft_rows_bitwise(const std::function<std::unique_ptr<engine>(int32_t n_slots, int32_t n_ctx)> &open, uint32_t seed) {
    constexpr size_t n_sessions = 4, n_tokens = 24;
    std::mt19937 rng(seed);
    auto alone_eng = open(int32_t(n_sessions), 128);
    const size_t nv = size_t(alone_eng->hparams().n_vocab);
    std::vector<std::vector<int32_t>> prompts(n_sessions), tokens(n_sessions);
    for (size_t s = 0; s < n_sessions; ++s)
        for (size_t i = 0; i < 3 + 9 * s; ++i) prompts[s].push_back(int32_t(rng() % nv));
    // Alone: one decode row a call; alone[s][i] the logits of the row that fed tokens[s][i].
    std::vector<std::vector<std::vector<float>>> alone(n_sessions);
    for (size_t s = 0; s < n_sessions; ++s) {
        std::vector<float> logits = prefill(*alone_eng, int32_t(s), prompts[s]);
        for (size_t i = 0; i < n_tokens; ++i) {
            tokens[s].push_back(argmax(logits));
            const engine_row row{int32_t(s), alone_eng->slot_length(int32_t(s)), tokens[s].back(), row_output::logits};
            engine_forward_logits(*alone_eng, {&row, 1}, logits);
            alone[s].push_back(logits);
        }
    }
    // Together: each forward feeds every unfinished session one to five of its next tokens (decode rows), in
    // alternating session order; then a random number of them is kept (at least the first), the
    // rest truncated away and fed again by a later call.
    auto eng = open(int32_t(n_sessions), 128);
    for (size_t s = 0; s < n_sessions; ++s) prefill(*eng, int32_t(s), prompts[s]);
    std::vector<size_t> fed(n_sessions, 0);
    std::vector<float> logits;
    for (int call = 0; call < 200; ++call) {
        std::vector<engine_row> rows;
        std::vector<std::pair<size_t, size_t>> owner;  // (session, token index) per row
        for (size_t k = 0; k < n_sessions; ++k) {
            const size_t s = call % 2 ? n_sessions - 1 - k : k;
            const size_t n = std::min<size_t>(1 + rng() % 5, n_tokens - fed[s]);
            for (size_t j = 0; j < n; ++j) {
                rows.push_back({int32_t(s), int32_t(prompts[s].size() + fed[s] + j), tokens[s][fed[s] + j], row_output::logits});
                owner.emplace_back(s, fed[s] + j);
            }
        }
        if (rows.empty()) break;
        engine_forward_logits(*eng, rows, logits);
        REQUIRE(logits.size() == rows.size() * nv);
        std::vector<size_t> n_fed(n_sessions, 0);
        for (size_t r = 0; r < rows.size(); ++r) {
            const auto [s, i] = owner[r];
            INFO("call " << call << ", session " << s << ", token " << i << ", " << rows.size() << " rows");
            CHECK(std::memcmp(logits.data() + r * nv, alone[s][i].data(), nv * sizeof(float)) == 0);
            ++n_fed[s];
        }
        for (size_t s = 0; s < n_sessions; ++s) {
            if (n_fed[s] == 0) continue;
            const size_t kept = 1 + rng() % n_fed[s];
            fed[s] += kept;
            if (kept < n_fed[s]) eng->slot_truncate(int32_t(s), int32_t(prompts[s].size() + fed[s]));
            CHECK(eng->slot_length(int32_t(s)) == int32_t(prompts[s].size() + fed[s]));
        }
    }
    for (size_t s = 0; s < n_sessions; ++s) CHECK(fed[s] == n_tokens);
}

}  // namespace tandem::test
