// tests/unit/convert/test_convert_fixtures.cpp - converts the committed HF fixtures (written by
// transformers/safetensors/tokenizers through tests/fixtures/make_fixtures.py) and checks the GGUF
// against the files themselves, read here with a separate minimal parser.
#include "tandem/convert.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/quant.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

namespace fs = std::filesystem;
using json = nlohmann::json;
using tandem::ggml_type;

namespace {

const fs::path fixtures = fs::path(TANDEM_SOURCE_DIR) / "tests/fixtures";

json load_json(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return json::parse(in);
}

// name -> float values, from every *.safetensors in the folder (header parsed independently).
std::map<std::string, std::vector<float>> read_checkpoint(const fs::path &dir) {
    std::map<std::string, std::vector<float>> out;
    for (const auto &entry : fs::directory_iterator(dir)) {
        if (entry.path().extension() != ".safetensors") continue;
        std::ifstream in(entry.path(), std::ios::binary);
        const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
        uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        const json h = json::parse(bytes.begin() + 8, bytes.begin() + 8 + std::ptrdiff_t(n));
        for (const auto &[name, v] : h.items()) {
            if (name == "__metadata__") continue;
            const size_t begin = v["data_offsets"][0], end = v["data_offsets"][1];
            const char *p = bytes.data() + 8 + n + begin;
            const std::string dtype = v["dtype"];
            std::vector<float> vals;
            if (dtype == "F32") {
                vals.resize((end - begin) / 4);
                std::memcpy(vals.data(), p, end - begin);
            } else {
                REQUIRE(dtype == "BF16");
                for (size_t i = 0; i < (end - begin) / 2; ++i) {
                    uint32_t bits = 0;
                    std::memcpy(reinterpret_cast<char *>(&bits) + 2, p + 2 * i, 2);  // bf16 = top half
                    float f;
                    std::memcpy(&f, &bits, 4);
                    vals.push_back(f);
                }
            }
            out[name] = std::move(vals);
        }
    }
    return out;
}

std::shared_ptr<const tandem::gguf_file> convert_fixture(const std::string &name, const fs::path &out_dir,
                                                         ggml_type type, tandem::convert_summary *sum = nullptr) {
    tandem::convert_options o;
    o.hf_dir = (fixtures / name).string();
    o.out_path = (out_dir / (name + "-" + std::string(tandem::ggml_type_name(type)) + ".gguf")).string();
    o.type = type;
    o.n_threads = 2;
    const auto s = tandem::convert_hf(o);
    if (sum) *sum = s;
    return tandem::gguf_file::open(o.out_path);
}

struct out_dir {
    fs::path path = fs::temp_directory_path() / ("tandem_convert_fx_" + std::to_string(std::random_device{}()));
    out_dir() { fs::create_directories(path); }
    ~out_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

}  // namespace

TEST_CASE("convert fixtures: vocab, merges and exact F32 tensors of qwen3moe-a and -b", "[convert][fixtures]") {
    for (const char *name : {"qwen3moe-a", "qwen3moe-b"}) {
        INFO("fixture " << name);
        if (!fs::exists(fixtures / name / "config.json")) {
            WARN("fixture " << name << " absent: run tests/fixtures/make_fixtures.py");
            continue;
        }
        out_dir tmp;
        const auto f = convert_fixture(name, tmp.path, ggml_type::f32);
        const json cfg = load_json(fixtures / name / "config.json");
        const json tok = load_json(fixtures / name / "tokenizer.json");

        const int64_t n_vocab = cfg["vocab_size"];
        const auto &tokens = f->get_array("tokenizer.ggml.tokens").strings;
        const auto &types = f->get_array("tokenizer.ggml.token_type").ints;
        REQUIRE(int64_t(tokens.size()) == n_vocab);
        std::vector<int> seen(size_t(n_vocab), 0);
        for (const auto &[text, id] : tok["model"]["vocab"].items()) {
            CHECK(tokens[id.get<size_t>()] == text);
            CHECK(types[id.get<size_t>()] == 1);
            seen[id.get<size_t>()] = 1;
        }
        for (const json &a : tok["added_tokens"]) {
            const size_t id = a["id"];
            CHECK(tokens[id] == a["content"].get<std::string>());
            CHECK(types[id] == (a["special"].get<bool>() ? 3 : 4));
            seen[id] = 1;
        }
        int64_t n_pad = 0;
        for (int64_t i = 0; i < n_vocab; ++i)
            if (!seen[size_t(i)]) {
                ++n_pad;
                CHECK(tokens[size_t(i)] == "[PAD" + std::to_string(i) + "]");
                CHECK(types[size_t(i)] == 5);
            }
        CHECK(n_pad >= 64);  // make_fixtures.py pads vocab_size by at least 64 beyond the tokenizer

        const auto &merges = f->get_array("tokenizer.ggml.merges").strings;
        REQUIRE(merges.size() == tok["model"]["merges"].size());
        for (size_t i = 0; i < merges.size(); ++i) {
            const json &m = tok["model"]["merges"][i];
            CHECK(merges[i] == (m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>()));
        }
        CHECK_FALSE(f->get_string("tokenizer.chat_template").empty());
        CHECK(f->get_int("tokenizer.ggml.eos_token_id") == cfg["eos_token_id"].get<int64_t>());

        // The engine's reader takes the file: hyper-parameters as in config.json, every tensor bound.
        const tandem::model_hparams hp = tandem::model_hparams_read(*f);
        CHECK(hp.n_layer == cfg["num_hidden_layers"].get<int>());
        CHECK(hp.d_model == cfg["hidden_size"].get<int>());
        CHECK(hp.d_head == cfg["head_dim"].get<int>());
        CHECK(hp.n_vocab == n_vocab);
        CHECK_NOTHROW(tandem::model_tensors_bind(*f, hp));

        // Every checkpoint value lands in its GGUF tensor unchanged (F32 output).
        const auto ckpt = read_checkpoint(fixtures / name);
        const int64_t n_layer = cfg["num_hidden_layers"];
        const int64_t n_expert = cfg.contains("num_experts") ? cfg["num_experts"] : cfg["num_local_experts"];
        auto values = [&](const std::string &gguf_name) {
            const auto &t = f->tensor(gguf_name + ".weight");
            REQUIRE(t.type == ggml_type::f32);
            std::vector<float> v(size_t(t.n_elements()));
            std::memcpy(v.data(), t.data, v.size() * 4);
            return v;
        };
        CHECK(values("token_embd") == ckpt.at("model.embed_tokens.weight"));
        CHECK(values("output") == ckpt.at("lm_head.weight"));
        CHECK(values("output_norm") == ckpt.at("model.norm.weight"));
        for (int64_t l = 0; l < n_layer; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
            CHECK(values(b + "attn_q") == ckpt.at(p + "self_attn.q_proj.weight"));
            CHECK(values(b + "attn_output") == ckpt.at(p + "self_attn.o_proj.weight"));
            CHECK(values(b + "attn_k_norm") == ckpt.at(p + "self_attn.k_norm.weight"));
            CHECK(values(b + "ffn_gate_inp") == ckpt.at(p + "mlp.gate.weight"));
            for (const char *w : {"gate", "up", "down"}) {
                std::vector<float> stacked;
                for (int64_t e = 0; e < n_expert; ++e) {
                    const auto &v = ckpt.at(p + "mlp.experts." + std::to_string(e) + "." + w + "_proj.weight");
                    stacked.insert(stacked.end(), v.begin(), v.end());
                }
                CHECK(values(b + "ffn_" + w + "_exps") == stacked);
            }
        }
    }
}

TEST_CASE("convert fixtures: Q4_K applies to qwen3moe-a (rows of 256), falls back on -b", "[convert][fixtures]") {
    if (!fs::exists(fixtures / "qwen3moe-a/config.json") || !fs::exists(fixtures / "qwen3moe-b/config.json")) {
        WARN("fixtures absent: run tests/fixtures/make_fixtures.py");
        return;
    }
    out_dir tmp;
    tandem::convert_summary sum;
    const auto a = convert_fixture("qwen3moe-a", tmp.path, ggml_type::q4_k, &sum);
    CHECK(sum.fallbacks.empty());
    CHECK(a->tensor("blk.1.ffn_down_exps.weight").type == ggml_type::q4_k);
    CHECK(a->tensor("blk.0.attn_k.weight").type == ggml_type::q4_k);
    CHECK(a->tensor("blk.0.ffn_gate_inp.weight").type == ggml_type::f32);
    const auto b = convert_fixture("qwen3moe-b", tmp.path, ggml_type::q4_k, &sum);
    CHECK_FALSE(sum.fallbacks.empty());
    CHECK(b->tensor("blk.2.ffn_down_exps.weight").type == ggml_type::q8_0);  // rows of 32
    CHECK(b->tensor("blk.0.attn_output.weight").type == ggml_type::q8_0);    // rows of 128
}
