// tests/unit/tokenizer/test_pretokenizer_cases.cpp - ids must equal those Hugging Face `tokenizers`
// recorded for byte-level BPE tokenizers built with each DeepSeek pre-tokenizer Sequence
// (tests/fixtures/pretokenizers/<pre>/, written by tests/fixtures/make_pretokenizer_cases.py).
// The vocab is read from tokenizer.json, once directly and once through a GGUF whose
// tokenizer.ggml.pre is the folder's name. Reported Skipped while the folder is not there.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tandem/gguf.h"
#include "tandem/tokenizer.h"
#include "tokenizer_test_util.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

using namespace tandem;
namespace fs = std::filesystem;
using json = nlohmann::json;

using tandem::test::show;

namespace {

const fs::path cases_root = fs::path(TANDEM_SOURCE_DIR) / "tests" / "fixtures" / "pretokenizers";
// The pre-tokenizers the script writes; every one must be present once the folder is.
const char *const expected_pres[] = {"deepseek-v3", "deepseek-llm"};

json read_json(const fs::path &p) {
    std::ifstream in(p);
    REQUIRE(in.good());
    return json::parse(in);
}

// tokenizer.json -> vocab as llama.cpp's converter maps it: added tokens flagged special are
// control tokens, the others user-defined; ids without an entry become unused padding.
tokenizer_vocab vocab_from_tokenizer_json(const fs::path &dir, const std::string &pre) {
    const json tj = read_json(dir / "tokenizer.json");
    std::map<int32_t, std::pair<std::string, token_type>> by_id;
    for (const auto &[text, id] : tj.at("model").at("vocab").items()) by_id[id.get<int32_t>()] = {text, token_type::normal};
    for (const json &a : tj.at("added_tokens"))
        by_id[a.at("id").get<int32_t>()] = {a.at("content").get<std::string>(),
                                            a.at("special").get<bool>() ? token_type::control : token_type::user_defined};
    tokenizer_vocab v;
    v.pre = pre;
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

tokenizer through_gguf(const tokenizer_vocab &v, const std::string &name) {
    const fs::path path = fs::temp_directory_path() / ("tandem_test_pretok_" + name + "_" + std::to_string(::getpid()) + ".gguf");
    gguf_writer w;
    w.set_string("general.architecture", "deepseek2");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", v.pre);
    w.set_array_string("tokenizer.ggml.tokens", v.tokens);
    std::vector<int32_t> types;
    for (token_type t : v.types) types.push_back(static_cast<int32_t>(t));
    w.set_array_i32("tokenizer.ggml.token_type", types);
    w.set_array_string("tokenizer.ggml.merges", v.merges);
    w.write(path.string(), 1);
    auto file = gguf_file::open(path.string());
    tokenizer tok = tokenizer::from_gguf(*file);
    fs::remove(path);
    return tok;
}

void check_cases(const tokenizer &tok, const json &cases) {
    for (const json &c : cases) {
        const std::string text = c.at("text").get<std::string>();
        const auto want = c.at("ids").get<std::vector<int32_t>>();
        INFO("text " << json(text).dump());
        const auto got = tok.encode(text, true);
        if (got != want) {
            size_t at = 0;
            while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
            INFO("first difference at position " << at);
            INFO("hf   " << show(tok, want));
            INFO("ours " << show(tok, got));
            CHECK(got == want);
        }
        // No normalizer in these tokenizers: decoding gives back the text byte for byte.
        CHECK(tok.decode(got) == text);
    }
}

}  // namespace

TEST_CASE("DeepSeek pre-tokenizers: ids equal Hugging Face tokenizers", "[tokenizer][hf][deepseek]") {
    for (const char *pre : expected_pres) {
        const fs::path dir = cases_root / pre;
        INFO("fixture " << dir.string());
        REQUIRE(fs::exists(dir / "tokenizer.json"));
        REQUIRE(fs::exists(dir / "cases.json"));
        const json cases = read_json(dir / "cases.json");
        REQUIRE(cases.size() >= 20);
        const tokenizer_vocab v = vocab_from_tokenizer_json(dir, pre);
        {
            INFO("vocab read from tokenizer.json");
            check_cases(tokenizer::from_vocab(v), cases);
        }
        {
            INFO("vocab through a GGUF");
            const tokenizer tok = through_gguf(v, pre);
            CHECK(tok.pre() == pre);
            check_cases(tok, cases);
        }
    }
}

int main(int argc, char **argv) {
    if (!fs::exists(cases_root)) {
        std::printf("%s is missing (tests/fixtures/README.md says how to write it): skipped\n", cases_root.string().c_str());
        return TANDEM_SKIP_RETURN_CODE;
    }
    return Catch::Session().run(argc, argv);
}
