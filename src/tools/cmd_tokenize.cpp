// src/tools/cmd_tokenize.cpp - `tandem tokenize`: the token ids of a text as a JSON array.
#include "commands.h"

#include "tandem/gguf.h"
#include "tandem/tokenizer.h"

#include <fmt/format.h>

#include <memory>
#include <string>

namespace {

struct tokenize_cli {
    std::string model, text;
    bool special = false, pieces = false;
};

// A JSON string literal of a token's bytes; a piece may be partial UTF-8, whose bytes become
// U+FFFD so the output stays valid JSON.
std::string json_quote(const std::string &s) {
    const std::string clean = tandem::utf8_sanitize(s);
    std::string out = "\"";
    for (char c : clean) {
        const auto b = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (b < 0x20) {
            out += fmt::format("\\u{:04x}", b);
        } else {
            out += c;
        }
    }
    return out + "\"";
}

}  // namespace

TANDEM_COMMAND(tokenize, "Print the token ids of a text as a JSON array", [](CLI::App &sub) {
    auto cli = std::make_shared<tokenize_cli>();
    sub.add_option("-m,--model", cli->model, "GGUF file")->required();
    sub.add_option("--text", cli->text, "Text to tokenize")->required();
    sub.add_flag("--special", cli->special, "Recognise control tokens such as <|im_start|> in the text");
    sub.add_flag("--pieces", cli->pieces, "Print [id, \"bytes\"] pairs instead of bare ids");
    return [cli] {
        using namespace tandem;
        auto file = gguf_file::open(cli->model);
        const tokenizer tok = tokenizer::from_gguf(*file);
        const std::vector<int32_t> ids = tok.encode(cli->text, cli->special);
        std::string out = "[";
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i) out += ", ";
            out += cli->pieces ? fmt::format("[{}, {}]", ids[i], json_quote(tok.token_bytes(ids[i])))
                               : std::to_string(ids[i]);
        }
        fmt::print("{}]\n", out);
        return 0;
    };
});
