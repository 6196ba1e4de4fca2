// src/tools/cmd_logits.cpp - `tandem logits`: last-position logits and a greedy continuation.
#include "commands.h"
#include "engine_flags.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/sampler.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <sstream>

namespace {

struct logits_cli {
    tandem::engine_options engine;
    std::string model, ids;
    int greedy = 0;
    bool json = false, decode_logits = false;
};

std::vector<int32_t> parse_ids(const std::string &text) {
    std::vector<int32_t> ids;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        try {
            size_t used = 0;
            const long v = std::stol(item, &used);
            if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
            ids.push_back(int32_t(v));
        } catch (const std::exception &) {
            tandem::fail(tandem::error_kind::config, "--ids: '{}' is not a token id", item);
        }
    }
    if (ids.empty()) tandem::fail(tandem::error_kind::config, "--ids needs at least one token id");
    return ids;
}

}  // namespace

TANDEM_COMMAND(logits, "Print the last position's logits (and a greedy continuation) for token ids", [](CLI::App &sub) {
    auto cli = std::make_shared<logits_cli>();
    sub.add_option("-m,--model", cli->model, "GGUF file")->required();
    sub.add_option("--ids", cli->ids, "Comma-separated prompt token ids")->required();
    sub.add_option("--greedy", cli->greedy, "Greedy tokens to generate after the prompt");
    sub.add_flag("--json", cli->json, "Print JSON {\"logits\": [...], \"greedy\": [...]}");
    sub.add_flag("--decode-logits", cli->decode_logits,
                 "With --json: also each greedy step's logits (\"decode_logits\", the decode path's rows; for bitwise A/B checks)");
    tandem::tools::add_engine_flags(sub, cli->engine);
    return [cli] {
        using namespace tandem;
        const std::vector<int32_t> ids = parse_ids(cli->ids);
        if (cli->greedy < 0) fail(error_kind::config, "--greedy must be >= 0");
        if (cli->decode_logits && !cli->json) fail(error_kind::config, "--decode-logits needs --json");
        engine_options opt = cli->engine;
        opt.n_slots = 1;
        opt.n_ctx = std::max<int32_t>(opt.n_ctx, int32_t(ids.size()) + cli->greedy);
        auto file = gguf_file::open(cli->model);
        opt.n_ctx = std::min<int32_t>(opt.n_ctx, model_hparams_read(*file).n_ctx_train);
        auto eng = engine_open(file, opt);
        std::vector<engine_row> rows;
        for (size_t i = 0; i < ids.size(); ++i)
            rows.push_back({0, int32_t(i), ids[i], i + 1 == ids.size() ? row_output::logits : row_output::none, true});
        std::vector<float> logits;
        engine_forward_logits(*eng, rows, logits);
        const std::vector<float> last = logits;
        std::vector<int32_t> greedy;
        std::vector<std::vector<float>> decoded;  // --decode-logits: each decode step's row
        for (int i = 0; i < cli->greedy; ++i) {
            const int32_t next = argmax(logits);
            greedy.push_back(next);
            if (i + 1 == cli->greedy) break;
            const engine_row row{0, int32_t(ids.size() + greedy.size() - 1), next, row_output::logits};
            engine_forward_logits(*eng, {&row, 1}, logits);
            if (cli->decode_logits) decoded.push_back(logits);
        }
        if (cli->json) {
            nlohmann::json out = {{"logits", last}, {"greedy", greedy}};
            if (cli->decode_logits) out["decode_logits"] = decoded;
            std::cout << out.dump() << "\n";
        } else {
            const int32_t best = argmax(last);
            std::cout << "argmax " << best << " logit " << last[best] << "\ngreedy";
            for (int32_t t : greedy) std::cout << " " << t;
            std::cout << "\n";
        }
        return 0;
    };
});
