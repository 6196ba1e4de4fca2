// src/tools/cmd_synth.cpp - `tandem synth`: random-weight models of real shapes.
#include "commands.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/synth.h"

#include <chrono>
#include <filesystem>

namespace {

struct synth_cli {
    std::string preset, out, type = "q4_k", split_max_size;
    int layers = 0, threads = 0;
    uint64_t seed = 1;
    bool mla_kv_b = false;
};

}  // namespace

TANDEM_COMMAND(synth, "Write a random-weight model of a real shape (tiny, qwen3-30b-a3b, deepseek-v3, ...)",
               [](CLI::App &sub) {
                   auto cli = std::make_shared<synth_cli>();
                   std::string known;
                   for (const auto &n : tandem::synth_preset_names()) known += (known.empty() ? "" : ", ") + n;
                   sub.add_option("--preset", cli->preset, "Model shape: " + known)->required();
                   sub.add_option("--out", cli->out, "Output GGUF file")->required();
                   sub.add_option("--type", cli->type,
                                  "Matrix type (f32, f16, bf16, q8_0, q4_k, q6_k, iq2_xxs, ... every computable ggml type), "
                                  "q4_k_m, or a llama.cpp mix as llama-quantize names it in capitals (IQ2_XXS, IQ3_M, Q3_K_S, ...)");
                   sub.add_option("--layers", cli->layers, "Number of layers (default: the preset's)");
                   sub.add_option("--seed", cli->seed, "Random seed");
                   sub.add_option("--threads", cli->threads, "Writer threads (default: all cores)");
                   sub.add_flag("--mla-kv-b", cli->mla_kv_b,
                                "deepseek2: one attn_kv_b tensor with llama.cpp's legacy keys instead of attn_k_b/attn_v_b");
                   sub.add_option("--split-max-size", cli->split_max_size,
                                  "Write llama.cpp's split files of at most this size (e.g. 500M, 5G)");
                   return [cli] {
                       using namespace tandem;
                       auto preset = synth_preset_find(cli->preset);
                       if (!preset) {
                           std::string names;
                           for (const auto &n : synth_preset_names()) names += (names.empty() ? "" : ", ") + n;
                           fail(error_kind::config, "unknown preset '{}' (known: {})", cli->preset, names);
                       }
                       const synth_type_choice choice = synth_type_parse(cli->type);
                       if (cli->layers < 0) fail(error_kind::config, "--layers must be positive");
                       if (cli->mla_kv_b && preset->arch != model_arch::deepseek2)
                           fail(error_kind::config, "--mla-kv-b applies to deepseek2 presets only");
                       synth_options opt{*preset, choice.type, cli->layers, cli->seed, cli->threads, choice.q4_k_m, cli->mla_kv_b};
                       opt.mix = choice.mix;
                       if (!cli->split_max_size.empty()) opt.split_max_bytes = gguf_parse_split_size(cli->split_max_size);
                       const auto t0 = std::chrono::steady_clock::now();
                       const std::vector<std::string> paths = synth_write(opt, cli->out);
                       const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                       double gb = 0;
                       for (const std::string &p : paths) gb += double(std::filesystem::file_size(p)) / 1e9;
                       log_info("synth: wrote {} ({} {}, {:.2f} GB) in {:.1f} s ({:.2f} GB/s)", paths.front(), cli->preset,
                                cli->type, gb, secs, gb / secs);
                       return 0;
                   };
               });
