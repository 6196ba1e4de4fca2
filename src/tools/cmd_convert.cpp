// src/tools/cmd_convert.cpp - `tandem convert`: a Hugging Face Qwen3-MoE or DeepSeek-V2/V3 checkpoint folder to GGUF.
#include "commands.h"

#include "tandem/convert.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"

#include <chrono>
#include <filesystem>

namespace {

struct convert_cli {
    std::string hf, out, type = "f16", expert_type, name, split_max_size;
    int threads = 0;
};

tandem::ggml_type parse_type(const std::string &s, const char *flag) {
    auto t = tandem::ggml_type_from_name(s);
    if (!t) tandem::fail(tandem::error_kind::config, "{} '{}': use f32, f16, bf16, q8_0, q4_k or q6_k", flag, s);
    return *t;
}

}  // namespace

TANDEM_COMMAND(convert, "Convert a Hugging Face Qwen3-MoE or DeepSeek-V2/V3 checkpoint folder to GGUF", [](CLI::App &sub) {
    auto cli = std::make_shared<convert_cli>();
    sub.add_option("--hf", cli->hf, "Checkpoint folder (config.json, *.safetensors, tokenizer.json)")->required();
    sub.add_option("--out", cli->out, "Output GGUF file")->required();
    sub.add_option("--type", cli->type, "Matrix type: f32, f16, bf16, q8_0, q4_k, q6_k (default f16)");
    sub.add_option("--expert-type", cli->expert_type, "Type of the expert matrices (default: --type)");
    sub.add_option("--name", cli->name, "general.name (default: the folder's name)");
    sub.add_option("--threads", cli->threads, "Writer threads (default: all cores)");
    sub.add_option("--split-max-size", cli->split_max_size, "Write llama.cpp's split files of at most this size (500M, 5G)");
    return [cli] {
        using namespace tandem;
        convert_options opt;
        opt.hf_dir = cli->hf;
        opt.out_path = cli->out;
        opt.type = parse_type(cli->type, "--type");
        if (!cli->expert_type.empty()) opt.expert_type = parse_type(cli->expert_type, "--expert-type");
        opt.name = cli->name;
        opt.n_threads = cli->threads;
        if (!cli->split_max_size.empty()) opt.split_max_bytes = gguf_parse_split_size(cli->split_max_size);
        const auto t0 = std::chrono::steady_clock::now();
        const convert_summary sum = convert_hf(opt);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double gb = 0;
        for (const std::string &p : sum.paths) gb += double(std::filesystem::file_size(p)) / 1e9;
        log_info("convert: {} tensors, {:.3f} GB in {:.1f} s{}", sum.n_tensors, gb, secs,
                 sum.fallbacks.empty() ? "" : fmt::format(" ({} type fallbacks)", sum.fallbacks.size()));
        return 0;
    };
});
