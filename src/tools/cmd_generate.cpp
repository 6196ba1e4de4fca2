// src/tools/cmd_generate.cpp - `tandem generate`: tokenize, prefill, sample and stream text.
#include "commands.h"
#include "engine_flags.h"

#include "tandem/chat_template.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/sampler.h"
#include "tandem/tokenizer.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <span>

namespace {

struct generate_cli {
    tandem::engine_options engine;
    tandem::sampling_params sampling;
    std::string model, prompt;
    int n_predict = 64;
    bool chat = false;
};

}  // namespace

TANDEM_COMMAND(generate, "Generate text from a prompt", [](CLI::App &sub) {
    auto cli = std::make_shared<generate_cli>();
    sub.add_option("-m,--model", cli->model, "GGUF file")->required();
    sub.add_option("-p,--prompt", cli->prompt, "Prompt text")->required();
    sub.add_option("-n,--n-predict", cli->n_predict, "Tokens to generate");
    sub.add_option("--temp", cli->sampling.temperature, "Temperature (0: greedy)");
    sub.add_option("--top-k", cli->sampling.top_k, "Top-k (0: off)");
    sub.add_option("--top-p", cli->sampling.top_p, "Top-p (1: off)");
    sub.add_option("--seed", cli->sampling.seed, "Sampling seed");
    sub.add_flag("--chat", cli->chat, "Wrap the prompt as a user turn in the model's chat template");
    tandem::tools::add_engine_flags(sub, cli->engine);
    return [cli] {
        using namespace tandem;
        using clock = std::chrono::steady_clock;
        if (cli->n_predict < 0) fail(error_kind::config, "-n must be >= 0");
        auto file = gguf_file::open(cli->model);
        const tokenizer tok = tokenizer::from_gguf(*file);
        std::string text = cli->prompt;
        if (cli->chat) {
            const chat_template tmpl = chat_template::detect(file->get_string("tokenizer.chat_template", ""));
            text = tmpl.render({{"user", cli->prompt}}, true);
        }
        std::vector<int32_t> ids = tok.encode(text, cli->chat);
        if (tok.add_bos() && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
        if (ids.empty()) fail(error_kind::config, "the prompt has no tokens");
        engine_options opt = cli->engine;
        opt.n_slots = 1;
        opt.n_ctx = std::min<int32_t>(std::max<int32_t>(opt.n_ctx, int32_t(ids.size()) + cli->n_predict),
                                      model_hparams_read(*file).n_ctx_train);
        if (int32_t(ids.size()) + cli->n_predict > opt.n_ctx)
            fail(error_kind::config, "prompt ({} tokens) + {} new tokens exceed the context of {}", ids.size(),
                 cli->n_predict, opt.n_ctx);
        auto eng = engine_open(file, opt);
        sampler samp(cli->sampling);
        token_streamer stream(tok);

        std::vector<engine_row> rows;
        for (size_t i = 0; i < ids.size(); ++i)
            rows.push_back({0, int32_t(i), ids[i], i + 1 == ids.size() ? row_output::summary : row_output::none, true});
        // As the server steps: the row's summary, with the engine's draw where the sampler asks for
        // one (on the GPU unless --no-device-draws).
        engine_outputs out;
        const std::vector<logits_top> &tops = out.top;
        auto forward = [&](std::span<const engine_row> step_rows) {
            std::vector<engine_row> asked(step_rows.begin(), step_rows.end());
            asked.back().draw = samp.draw_request();
            eng->forward(asked, out);
        };
        const auto t0 = clock::now();
        forward(rows);
        const auto t1 = clock::now();
        std::fputs(cli->prompt.c_str(), stdout);
        int n_gen = 0;
        int32_t pos = int32_t(ids.size());
        for (; n_gen < cli->n_predict; ++n_gen) {
            const std::optional<sample_result> picked = samp.sample_top(tops.at(0));
            if (!picked) fail(error_kind::internal, "the engine's row summary did not decide the draw");
            const int32_t next = picked->id;
            if (tok.is_eog(next)) break;
            const std::string piece = stream.push(next);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            if (n_gen + 1 == cli->n_predict) {
                ++n_gen;
                break;
            }
            const engine_row row{0, pos++, next, row_output::summary};
            forward({&row, 1});
        }
        const std::string rest = stream.flush();
        std::fwrite(rest.data(), 1, rest.size(), stdout);
        std::fputs("\n", stdout);
        const auto t2 = clock::now();
        const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
        const double decode_s = std::chrono::duration<double>(t2 - t1).count();
        std::fprintf(stderr, "%s\nprompt %zu tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)\n",
                     eng->layout().c_str(), ids.size(), prefill_s, ids.size() / prefill_s, n_gen, decode_s,
                     n_gen > 0 ? n_gen / decode_s : 0.0);
        return 0;
    };
});
