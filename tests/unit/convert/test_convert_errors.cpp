// tests/unit/convert/test_convert_errors.cpp - broken checkpoints get a tandem::error of the right
// kind naming the file, key or tensor, never a crash, and no output file is left behind.
#include "convert_test_util.h"

#include "tandem/convert.h"
#include "tandem/error.h"

#include <catch2/catch.hpp>

#include <functional>
#include <limits>

using namespace convert_test;
using tandem::error_kind;
using tandem::ggml_type;

namespace {

// A valid folder to break in one way per test.
struct broken_folder {
    temp_dir tmp{"err"};
    fs::path hf = tmp.path / "hf";
    fs::path out = tmp.path / "out.gguf";
    tiny_model m = make_model(tiny_spec{}, 21);
    broken_folder() {
        fs::create_directories(hf);
        write_folder(hf, m, folder_style{});
    }
    void convert(ggml_type type = ggml_type::f32) const {
        tandem::convert_options o;
        o.hf_dir = hf.string();
        o.out_path = out.string();
        o.type = type;
        o.n_threads = 1;
        tandem::convert_hf(o);
    }
    // Rewrites model.safetensors from the model with `edit` applied to the entry list.
    template <class F>
    void rewrite(F &&edit) {
        std::vector<st_entry> entries;
        for (const std::string &name : m.order) {
            std::vector<float> v = m.values[name];
            entries.push_back({name, "F32", m.shapes[name], encode(v, "F32")});
        }
        edit(entries);
        write_safetensors(hf / "model.safetensors", entries);
    }
    void expect(error_kind kind, const std::string &needle, ggml_type type = ggml_type::f32) const {
        try {
            convert(type);
            FAIL("converted; expected an error mentioning '" << needle << "'");
        } catch (const tandem::error &e) {
            INFO("message: " << e.what());
            CHECK(e.kind() == kind);
            CHECK(std::string(e.what()).find(needle) != std::string::npos);
        }
        CHECK_FALSE(fs::exists(out));
        CHECK_FALSE(fs::exists(out.string() + ".partial"));
    }
    void edit_config(const std::function<void(json &)> &edit) const {
        json c = config_json(m.spec, false);
        edit(c);
        write_json(hf / "config.json", c);
    }
};

}  // namespace

TEST_CASE("convert errors: missing and misshaped tensors are named", "[convert]") {
    broken_folder f;
    const std::string gone = "model.layers.1.mlp.experts.2.up_proj.weight";
    f.rewrite([&](std::vector<st_entry> &e) {
        e.erase(std::remove_if(e.begin(), e.end(), [&](const st_entry &x) { return x.name == gone; }), e.end());
    });
    f.expect(error_kind::file_format, gone);

    f.rewrite([](std::vector<st_entry> &e) {
        for (st_entry &x : e)
            if (x.name == "model.layers.0.self_attn.q_proj.weight") {
                x.shape = {32, 128};  // same bytes, wrong shape
            }
    });
    f.expect(error_kind::file_format, "model.layers.0.self_attn.q_proj.weight");

    f.rewrite([](std::vector<st_entry> &e) { e.push_back({"model.layers.9.mlp.gate.weight", "F32", {1}, {0, 0, 0, 0}}); });
    f.expect(error_kind::unsupported, "model.layers.9.mlp.gate.weight");
}

TEST_CASE("convert errors: dtypes other than F32/F16/BF16 are refused by name", "[convert]") {
    broken_folder f;
    f.rewrite([](std::vector<st_entry> &e) {
        for (st_entry &x : e)
            if (x.name == "model.norm.weight") x.dtype = "I32";  // 4 bytes per element: sizes still agree
    });
    f.expect(error_kind::unsupported, "model.norm.weight");
}

TEST_CASE("convert errors: truncated files, headers past the end, bad JSON, bad offsets", "[convert]") {
    broken_folder f;
    const fs::path st = f.hf / "model.safetensors";
    const auto size = fs::file_size(st);
    fs::resize_file(st, size - 3);
    f.expect(error_kind::file_format, "model.safetensors");

    f.rewrite([](std::vector<st_entry> &) {});
    {
        std::fstream io(st, std::ios::in | std::ios::out | std::ios::binary);
        const uint64_t huge = uint64_t(1) << 40;  // header length far beyond the file
        for (int i = 0; i < 8; ++i) io.put(char((huge >> (8 * i)) & 0xff));
    }
    f.expect(error_kind::file_format, "past the end");

    f.rewrite([](std::vector<st_entry> &) {});
    {
        std::fstream io(st, std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(8);
        io.put('[');  // the header's opening brace
        io.put('{');
    }
    f.expect(error_kind::file_format, "JSON");

    fs::resize_file(st, 5);
    f.expect(error_kind::file_format, "8-byte");
}

TEST_CASE("convert errors: random truncations and byte flips of a safetensors file never crash", "[convert]") {
    temp_dir tmp("fuzz");
    tiny_spec s;
    s.n_layer = 1;
    tiny_model m = make_model(s, 22);
    std::vector<st_entry> entries;
    for (const std::string &name : m.order) {
        std::vector<float> v = m.values[name];
        entries.push_back({name, "F32", m.shapes[name], encode(v, "F32")});
    }
    const fs::path good = tmp.path / "good.safetensors";
    write_safetensors(good, entries);
    std::ifstream in(good, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    REQUIRE(tandem::safetensors_file::open(good.string())->tensors().size() == entries.size());

    const uint32_t seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(bytes[size_t(i)]);
    const fs::path bad = tmp.path / "bad.safetensors";
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<char> b = bytes;
        if (trial % 2 == 0) {
            b.resize(std::uniform_int_distribution<size_t>(0, b.size() - 1)(rng));
        } else {  // flip a byte in the header: the JSON or the length
            const size_t at = std::uniform_int_distribution<size_t>(0, 8 + header_len - 1)(rng);
            b[at] = char(std::uniform_int_distribution<int>(0, 255)(rng));
        }
        std::ofstream(bad, std::ios::binary).write(b.data(), std::streamsize(b.size()));
        try {
            auto f = tandem::safetensors_file::open(bad.string());
            // Accepted (a flip inside a name or a digit that still agrees): every tensor fits the file.
            for (const auto &t : f->tensors()) CHECK(t.n_bytes <= b.size());
        } catch (const tandem::error &e) {
            CHECK((e.kind() == error_kind::file_format || e.kind() == error_kind::unsupported));
        }
    }
}

TEST_CASE("convert errors: architectures and features the engine cannot run", "[convert]") {
    broken_folder f;
    f.edit_config([](json &c) { c["architectures"] = {"LlamaForCausalLM"}; });
    f.expect(error_kind::unsupported, "LlamaForCausalLM");

    f.edit_config([](json &c) {
        c["architectures"] = nullptr;
        c["model_type"] = "llama";
    });
    f.expect(error_kind::unsupported, "model_type");

    f.edit_config([](json &c) { c["decoder_sparse_step"] = 2; });
    f.expect(error_kind::unsupported, "decoder_sparse_step");

    f.edit_config([](json &c) { c["mlp_only_layers"] = {1}; });
    f.expect(error_kind::unsupported, "mlp_only_layers");

    f.edit_config([](json &c) { c.erase("hidden_size"); });
    f.expect(error_kind::file_format, "hidden_size");

    f.edit_config([](json &c) { c["vocab_size"] = 8; });  // the tokenizer defines 12 ids
    f.expect(error_kind::file_format, "vocab_size");

    f.edit_config([](json &) {});
    f.expect(error_kind::config, "--type", ggml_type::q4_0);
}

TEST_CASE("convert errors: broken tokenizer and index files", "[convert]") {
    broken_folder f;
    json tok = tokenizer_json(false);
    tok["model"]["merges"].push_back("abc");  // no separating space
    write_json(f.hf / "tokenizer.json", tok);
    f.expect(error_kind::file_format, "merge 3");

    tok = tokenizer_json(false);
    tok["pre_tokenizer"] = {{"type", "Whitespace"}};
    tok["decoder"] = {{"type", "WordPiece"}};
    write_json(f.hf / "tokenizer.json", tok);
    f.expect(error_kind::unsupported, "byte-level");

    write_json(f.hf / "tokenizer.json", tokenizer_json(false));
    write_json(f.hf / "model.safetensors.index.json",
               {{"weight_map", {{"model.norm.weight", "model.safetensors"}, {"lm_head.bias", "model.safetensors"}}}});
    f.expect(error_kind::file_format, "lm_head.bias");

    write_json(f.hf / "model.safetensors.index.json", {{"weight_map", {{"model.norm.weight", "../x.safetensors"}}}});
    f.expect(error_kind::file_format, "../x.safetensors");
}

TEST_CASE("convert errors: a non-finite weight that cannot be quantized names its tensor", "[convert]") {
    broken_folder f;
    f.m.values["model.layers.1.self_attn.v_proj.weight"][5] = std::numeric_limits<float>::quiet_NaN();
    f.rewrite([](std::vector<st_entry> &) {});
    f.expect(error_kind::file_format, "model.layers.1.self_attn.v_proj.weight", ggml_type::q8_0);
}
