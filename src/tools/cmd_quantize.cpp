// src/tools/cmd_quantize.cpp - `tandem quantize`: a GGUF file to one of llama.cpp's quant mixes.
#include "commands.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/quantize.h"

#include <chrono>
#include <filesystem>

namespace {

struct quantize_cli {
    std::string in, out, type, imatrix, output_type, token_embd_type, split_max_size;
    std::vector<std::string> tensor_types;
    int threads = 0;
    bool dry_run = false, pure = false;
};

tandem::ggml_type parse_type(const std::string &s, const char *flag) {
    auto t = tandem::ggml_type_from_name(s);
    if (!t || !tandem::ggml_type_info(*t).computable)
        tandem::fail(tandem::error_kind::config, "{} '{}' is not a tensor type Tandem computes with", flag, s);
    return *t;
}

tandem::quantize_options options_from(const quantize_cli &cli) {
    using namespace tandem;
    quantize_options o;
    o.ftype_name = cli.type;
    o.imatrix_path = cli.imatrix;
    if (!cli.output_type.empty()) o.output_type = parse_type(cli.output_type, "--output-tensor-type");
    if (!cli.token_embd_type.empty()) o.token_embd_type = parse_type(cli.token_embd_type, "--token-embedding-type");
    for (const std::string &tt : cli.tensor_types) {
        const size_t eq = tt.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == tt.size())
            fail(error_kind::config, "--tensor-type '{}': expected PATTERN=TYPE (e.g. attn_v=q8_0)", tt);
        o.overrides.emplace_back(tt.substr(0, eq), parse_type(tt.substr(eq + 1), "--tensor-type"));
    }
    o.pure = cli.pure;
    o.dry_run = cli.dry_run;
    o.n_threads = cli.threads;
    if (!cli.split_max_size.empty()) o.split_max_bytes = gguf_parse_split_size(cli.split_max_size);
    return o;
}

}  // namespace

TANDEM_COMMAND(quantize, "Quantize a GGUF model to one of llama.cpp's mixes (Q4_K_M, Q5_K_M, IQ4_XS, ...)",
               [](CLI::App &sub) {
                   auto cli = std::make_shared<quantize_cli>();
                   sub.add_option("in", cli->in, "Input GGUF (F32/F16/BF16 matrices; a split set by its first file)")
                       ->required();
                   sub.add_option("out", cli->out, "Output GGUF")->required();
                   sub.add_option("type", cli->type, "llama-quantize's type: Q4_K_M, Q5_K_M, Q6_K, Q8_0, IQ4_XS, ...")
                       ->required();
                   sub.add_option("--imatrix", cli->imatrix, "Importance matrix (llama-imatrix's GGUF or .dat)");
                   sub.add_option("--output-tensor-type", cli->output_type, "Type of output.weight");
                   sub.add_option("--token-embedding-type", cli->token_embd_type, "Type of token_embd.weight");
                   sub.add_option("--tensor-type", cli->tensor_types, "PATTERN=TYPE: tensors whose name matches get TYPE");
                   sub.add_flag("--pure", cli->pure, "No mix: every matrix gets the type's base tensor type");
                   sub.add_flag("--dry-run", cli->dry_run, "Print each tensor's type and the sizes, write nothing");
                   sub.add_option("--threads", cli->threads, "Tensors quantized at once (default: all cores)");
                   sub.add_option("--split-max-size", cli->split_max_size, "Write split files of at most this size (500M, 5G)");
                   return [cli] {
                       using namespace tandem;
                       const quantize_options o = options_from(*cli);
                       const auto t0 = std::chrono::steady_clock::now();
                       const quantize_report r = quantize_model(cli->in, cli->out, o);
                       const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                       uint64_t in_bytes = 0, out_bytes = 0;
                       for (const quantize_tensor_report &t : r.tensors) {
                           in_bytes += t.bytes_in;
                           out_bytes += t.bytes_out;
                           if (o.dry_run)
                               fmt::print("{:<40} {:>6} -> {:<7} {:10.3f} MiB\n", t.name, ggml_type_name(t.from),
                                          ggml_type_name(t.to), double(t.bytes_out) / 1048576.0);
                       }
                       log_info("quantize: {} tensors, {:.2f} MiB -> {:.2f} MiB{} in {:.1f} s", r.tensors.size(),
                                double(in_bytes) / 1048576.0, double(out_bytes) / 1048576.0,
                                r.paths.empty() ? "" : fmt::format(" ({})", r.paths.front()), secs);
                       return 0;
                   };
               });
