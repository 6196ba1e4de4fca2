// tests/unit/tokenizer/test_tokenizer_hf.cpp - ids must equal those Hugging Face `tokenizers`
// recorded in tests/fixtures/*/tokenizer_cases.json: once through `tandem convert` (GGUF), once
// from tokenizer.json read here (so a converter bug and a tokenizer bug cannot hide each other).
#include "src/tokenizer/byte_level.h"
#include "src/tokenizer/pre_tokenizer.h"
#include "tandem/chat_template.h"
#include "tandem/convert.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/tokenizer.h"
#include "tokenizer_test_util.h"
#include "src/model/synth_vocab.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <fstream>
#include <sstream>

using namespace tandem;
namespace fs = std::filesystem;
using json = nlohmann::json;

using tandem::test::show;

namespace {

struct tok_case {
    std::string text;
    std::vector<int32_t> ids;
    bool special = false;
};

json read_json(const fs::path &p) {
    std::ifstream in(p);
    REQUIRE(in.good());
    return json::parse(in);
}

std::vector<fs::path> fixture_dirs() {
    std::vector<fs::path> out;
    const fs::path root = fs::path(TANDEM_SOURCE_DIR) / "tests" / "fixtures";
    if (!fs::exists(root)) return out;
    for (const auto &e : fs::directory_iterator(root))
        if (fs::exists(e.path() / "tokenizer_cases.json") && fs::exists(e.path() / "tokenizer.json"))
            out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<tok_case> read_cases(const fs::path &dir) {
    std::vector<tok_case> out;
    for (const json &c : read_json(dir / "tokenizer_cases.json"))
        out.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>(), c.at("special").get<bool>()});
    return out;
}

// Compares every case and prints the first divergent position when ids differ.
void check_cases(const tokenizer &tok, const std::vector<tok_case> &cases) {
    for (const auto &c : cases) {
        INFO("text " << json(c.text).dump() << " special " << c.special);
        const auto got = tok.encode(c.text, c.special);
        if (got != c.ids) {
            size_t at = 0;
            while (at < got.size() && at < c.ids.size() && got[at] == c.ids[at]) ++at;
            INFO("first difference at position " << at);
            INFO("hf   " << show(tok, c.ids));
            INFO("ours " << show(tok, got));
            CHECK(got == c.ids);
        }
        // HF's ByteLevel decoder gives back the normalized text.
        CHECK(tok.decode(got) == nfc(c.text));
    }
}

// tokenizer.json -> vocab the way llama.cpp's converter maps it: added tokens flagged special
// (or spelled <|...|>) are control, other added tokens user-defined.
tokenizer_vocab vocab_from_tokenizer_json(const fs::path &dir) {
    const json tj = read_json(dir / "tokenizer.json");
    std::map<int32_t, std::pair<std::string, token_type>> by_id;
    for (const auto &[text, id] : tj.at("model").at("vocab").items())
        by_id[id.get<int32_t>()] = {text, token_type::normal};
    for (const json &a : tj.at("added_tokens")) {
        const std::string content = a.at("content").get<std::string>();
        const bool control = a.at("special").get<bool>() || (content.starts_with("<|") && content.ends_with("|>"));
        by_id[a.at("id").get<int32_t>()] = {content, control ? token_type::control : token_type::user_defined};
    }
    tokenizer_vocab v;
    v.pre = "qwen2";
    const int32_t n = by_id.rbegin()->first + 1;
    for (int32_t i = 0; i < n; ++i) {
        auto it = by_id.find(i);
        v.tokens.push_back(it != by_id.end() ? it->second.first : "[PAD" + std::to_string(i) + "]");
        v.types.push_back(it != by_id.end() ? it->second.second : token_type::unused);
    }
    for (const json &m : tj.at("model").at("merges"))
        v.merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
    return v;
}

}  // namespace

TEST_CASE("HF fixture ids, vocab read from tokenizer.json", "[tokenizer][hf]") {
    const auto dirs = fixture_dirs();
    if (dirs.empty()) WARN("no tests/fixtures/*/tokenizer_cases.json: nothing to compare");
    for (const auto &dir : dirs) {
        INFO("fixture " << dir.filename().string());
        const tokenizer tok = tokenizer::from_vocab(vocab_from_tokenizer_json(dir));
        const auto cases = read_cases(dir);
        REQUIRE_FALSE(cases.empty());
        check_cases(tok, cases);
    }
}

TEST_CASE("HF fixture ids through tandem convert", "[tokenizer][hf]") {
    const auto dirs = fixture_dirs();
    if (dirs.empty()) WARN("no tests/fixtures/*/tokenizer_cases.json: nothing to compare");
    const fs::path tmp = fs::temp_directory_path() / ("tandem_test_tokenizer_hf_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    for (const auto &dir : dirs) {
        INFO("fixture " << dir.filename().string());
        convert_options opt;
        opt.hf_dir = dir.string();
        opt.out_path = (tmp / (dir.filename().string() + ".gguf")).string();
        opt.type = ggml_type::f32;
        opt.n_threads = 2;
        convert_hf(opt);
        auto file = gguf_file::open(opt.out_path);
        const tokenizer tok = tokenizer::from_gguf(*file);
        CHECK(tok.pre() == "qwen2");
        // The GGUF vocab is padded past the tokenizer; padding is unused and never produced.
        CHECK(tok.type(tok.n_vocab() - 1) == token_type::unused);
        check_cases(tok, read_cases(dir));

        // <|im_end|> ends generation; the template is ChatML.
        const auto im_end = tok.find("<|im_end|>");
        REQUIRE(im_end.has_value());
        CHECK(tok.is_eog(*im_end));
        const chat_template t = chat_template::detect(file->get_string("tokenizer.chat_template", ""));
        CHECK(t.family == chat_template_family::chatml);
        const std::string prompt = t.render({{"user", "hi there"}}, true);
        CHECK(prompt == "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n");
        const auto ids = tok.encode(prompt, true);
        CHECK(ids.front() == *tok.find("<|im_start|>"));
    }
    fs::remove_all(tmp);
}

TEST_CASE("full-size synthetic vocab: loads, round-trips, encodes fast", "[tokenizer][synth]") {
    // The vocab `tandem synth` writes for qwen3-30b-a3b shapes (151,936 entries).
    const synth_vocab sv = synth_vocab_build(151936, 1);
    tokenizer_vocab v;
    v.pre = "qwen2";
    v.tokens = sv.tokens;
    for (int32_t t : sv.types) v.types.push_back(static_cast<token_type>(t));
    v.merges = sv.merges;
    v.eos_id = sv.im_end;
    auto t0 = std::chrono::steady_clock::now();
    const tokenizer tok = tokenizer::from_vocab(std::move(v));
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::mt19937 rng(3);
    const char *words[] = {"The", " model", " reads", " each", " expert", " once", ",", " and", " the",
                           " tokens", " flow", "\n", " 1234", " language", " schoen", " rapido", "."};
    std::string text;
    while (text.size() < 500000) text += words[rng() % std::size(words)];
    t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text, false);
    const double enc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Timing is reported, never asserted (shared CI machines).
    WARN("synthetic vocab: load " << load_s << " s; " << ids.size() << " tokens from " << text.size()
                                  << " bytes in " << enc_s << " s");
    CHECK(tok.decode(ids) == text);
    CHECK(tok.is_eog(sv.im_end));
}

namespace {

// Writes a GGUF holding only tokenizer keys (set by `fill`) and loads its tokenizer.
tokenizer load_written(const std::function<void(gguf_writer &)> &fill) {
    const fs::path path = fs::temp_directory_path() / ("tandem_test_tokenizer_gguf_" + std::to_string(::getpid()) + ".gguf");
    gguf_writer w;
    w.set_string("general.architecture", "qwen3moe");
    fill(w);
    w.write(path.string(), 1);
    struct remove_at_exit {
        fs::path p;
        ~remove_at_exit() { fs::remove(p); }
    } cleanup{path};
    auto file = gguf_file::open(path.string());
    return tokenizer::from_gguf(*file);
}

void write_toy(gguf_writer &w) {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(byte_level::get().text[b]);
        types.push_back(1);
    }
    tokens.push_back("\xC4\xA0" "t");  // "Ġt"
    types.push_back(1);
    tokens.push_back("<|im_end|>");
    types.push_back(3);
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_array_string("tokenizer.ggml.tokens", tokens);
    w.set_array_i32("tokenizer.ggml.token_type", types);
    w.set_array_string("tokenizer.ggml.merges", {"\xC4\xA0 t"});
    w.set_u32("tokenizer.ggml.eos_token_id", 257);
}

template <class F>
void expect_gguf_error(F &&fill, error_kind kind, const std::string &needle) {
    try {
        load_written(fill);
        FAIL("accepted; expected " << needle);
    } catch (const error &e) {
        INFO(e.what());
        CHECK(e.kind() == kind);
        CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
}

}  // namespace

TEST_CASE("from_gguf reads the tokenizer keys and names bad ones", "[tokenizer][gguf]") {
    const tokenizer tok = load_written(write_toy);
    CHECK(tok.n_vocab() == 258);
    CHECK(tok.pre() == "qwen2");
    CHECK(tok.eos_id() == 257);
    CHECK(tok.bos_id() == -1);
    CHECK(tok.is_eog(257));
    CHECK(tok.encode(" t<|im_end|>", true) == std::vector<int32_t>{256, 257});
    CHECK(tok.encode(" t", false) == std::vector<int32_t>{256});

    // The DeepSeek pre-tokenizers load and split, and do not normalize: e + U+0301 stays three
    // bytes (qwen2's NFC makes it U+00E9, two bytes).
    for (const char *pre : {"deepseek-v3", "deepseek-llm"}) {
        INFO(pre);
        const tokenizer ds = load_written([&](gguf_writer &w) { write_toy(w); w.set_string("tokenizer.ggml.pre", pre); });
        CHECK(ds.pre() == pre);
        CHECK(ds.encode(" t<|im_end|>", true) == std::vector<int32_t>{256, 257});
        CHECK(ds.encode("e\xCC\x81", false) == std::vector<int32_t>{0x65, 0xCC, 0x81});
    }
    CHECK(tok.encode("e\xCC\x81", false) == std::vector<int32_t>{0xC3, 0xA9});

    expect_gguf_error([](gguf_writer &) {}, error_kind::file_format, "tokenizer.ggml.model");
    expect_gguf_error([](gguf_writer &w) { write_toy(w); w.set_string("tokenizer.ggml.model", "llama"); },
                      error_kind::unsupported, "'llama'");
    expect_gguf_error([](gguf_writer &w) { write_toy(w); w.set_string("tokenizer.ggml.pre", "tekken"); },
                      error_kind::unsupported, "tekken");
    expect_gguf_error([](gguf_writer &w) { write_toy(w); w.set_array_i32("tokenizer.ggml.token_type", {1, 1}); },
                      error_kind::file_format, "token_type");
    expect_gguf_error([](gguf_writer &w) { write_toy(w); w.set_array_string("tokenizer.ggml.token_type", {"a"}); },
                      error_kind::file_format, "token_type");
    expect_gguf_error([](gguf_writer &w) { write_toy(w); w.set_array_i32("tokenizer.ggml.tokens", {1}); },
                      error_kind::file_format, "tokenizer.ggml.tokens");
    expect_gguf_error([](gguf_writer &w) { write_toy(w); w.set_u32("tokenizer.ggml.eos_token_id", 999); },
                      error_kind::file_format, "eos_token_id");
    expect_gguf_error([](gguf_writer &w) { write_toy(w); w.set_array_string("tokenizer.ggml.merges", {"\xC4\xA0 q"}); },
                      error_kind::file_format, "merges[0]");
}
