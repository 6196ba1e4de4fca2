// src/tools/server_flags.cpp - tandem-server's flags with their defaults, help and checks; the
// environment and TOML layers under them; llama-server's spellings.
#include "src/tools/server_flags.h"

#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/expert_tiers.h"
#include "tandem/log.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>

namespace tandem::tools {

namespace {

void add_model_flags(CLI::App &app, server_flags &f) {
    app.add_option("-m,--model", f.cfg.model_path, "GGUF model file (required)");
    app.add_option("--host", f.cfg.host, "address to listen on (loopback by default)");
    app.add_option("--port", f.cfg.port, "TCP port (0: any free port)");
    app.add_option("-c,--ctx,--ctx-size", f.cfg.n_ctx, "tokens per KV slot (-c: llama-server's flag, here per slot, not shared by the slots)")->check(CLI::Range(16, 1 << 24));
    app.add_option("--kv-type", f.cfg.kv_type,
                   "KV cache element type: f32, f16 (half the memory, tensor-core decode attention), q8_0 (ggml's "
                   "8-bit blocks, 34 bytes per 32 values), or auto: f16 on CUDA (q8_0 where f16 would not fit), f32 on the CPU")
        ->check(CLI::IsMember({"f32", "f16", "q8_0", "auto"}))
        ->capture_default_str();
    app.add_option("--batched-session,--parallel", f.cfg.n_slots, "resident KV slots (concurrent sessions; -np and --parallel as llama-server)")->check(CLI::Range(1, 1024));
    app.add_option("--prefill-chunk", f.cfg.prefill_chunk, "prompt tokens per step while nobody decodes")->check(CLI::Range(1, 1 << 20));
    app.add_option("--prefill-yield", f.cfg.prefill_yield, "most prompt tokens per step while others decode")->check(CLI::Range(1, 1 << 20));
    app.add_option("--itl-budget", f.cfg.itl_budget,
                   "while others decode, a step with prompt tokens may take at most this many times a decode-only "
                   "step (measured; >= 1.0)")
        ->check(CLI::Range(1.0, 1e6));
    app.add_option("--max-queue", f.cfg.max_queue, "requests waiting for a slot before 503")->check(CLI::Range(0, 1 << 20));
    app.add_flag("--device-draws,!--no-device-draws", f.cfg.device_draws,
                 "CUDA: temperature draws (any top_k, min_p, top_p) on the GPU holding the head (a tensor-parallel pair: "
                 "its first half's GPU), only the token leaving it (default); --no-device-draws: on the host from whole rows (the same tokens)");
    app.add_option("--draft", f.cfg.draft,
                   "speculative decoding by prompt lookup: up to this many drafted tokens a session a step, checked by "
                   "the session's own sampler (the output is unchanged; 0: off)")
        ->check(CLI::Range(0, 16));
    app.add_option("--draft-ngram-min", f.cfg.draft_ngram_min, "shortest suffix of a session's tokens looked up for a draft")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    app.add_option("--draft-ngram-max", f.cfg.draft_ngram_max, "longest suffix looked up for a draft (tried first)")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    app.add_option("--draft-step-rows", f.cfg.draft_step_rows,
                   "drafts are fed only while a step's decode rows stay within this (busy steps gain little from them)")
        ->check(CLI::Range(2, 512))
        ->capture_default_str();
}

void add_http_flags(CLI::App &app, server_flags &f) {
    app.add_option("-a,--alias", f.cfg.alias, "model id shown by the APIs (default: the file name)");
    app.add_option("--api-key", f.api_keys,
                   "require this key (Bearer; x-api-key on Anthropic routes); repeatable, each named flag-N in logs and metrics");
    app.add_option("--api-key-file", f.api_key_file,
                   "keys, one a line, as name:key or a bare key; blank lines and # comments are skipped");
    app.add_option("--http-threads", f.cfg.http_threads, "HTTP I/O threads")->check(CLI::Range(1, 256));
    app.add_option("--max-connections", f.cfg.max_connections,
                   "open connections; beyond them idle ones are closed and accepts wait (a few more are kept for /health)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--request-threads", f.cfg.request_threads, "threads that parse JSON bodies and tokenize prompts")
        ->check(CLI::Range(1, 256))
        ->capture_default_str();
    app.add_option("--request-queue", f.cfg.request_queue, "requests waiting for those threads before 503")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--chat-template-file", f.cfg.chat_template_file,
                   "a Jinja chat template to use instead of the model file's tokenizer.chat_template");
    app.add_option("--chat-template", f.cfg.chat_template,
                   "a built-in chat template instead of the model file's: chatml, qwen3 or plain ('role: content')")
        ->check(CLI::IsMember({"chatml", "qwen3", "plain"}));
    app.add_option("--reasoning-format", f.cfg.reasoning_format,
                   "auto: the model's reasoning (<think> blocks, gpt-oss analysis) is returned apart from its text "
                   "(reasoning_content, thinking blocks, reasoning items); none: left in the text as written")
        ->check(CLI::IsMember({"auto", "none"}))
        ->capture_default_str();
    app.add_flag("--allow-special-in-content", f.cfg.allow_special_in_content,
                 "tokenize special-token texts in message contents as those tokens (lets a user forge turns; off by "
                 "default: only the chat template's own markers are special)");
    app.add_option("--cors-origin", f.cfg.cors_origins,
                   "a browser origin allowed to call this server (repeatable; '*' allows any): CORS preflights are "
                   "answered and replies carry Access-Control-Allow-Origin");
    app.add_option("--allowed-host", f.cfg.allowed_hosts,
                   "another Host name a loopback server without --api-key answers (repeatable; localhost and "
                   "127.0.0.1 always are)");
    app.add_option("--body-limit", f.body_limit_mib, "largest request body in MiB")->check(CLI::Range(0.001, 1024.0));
    app.add_option("--timeout", f.timeout_s, "read and write timeout in seconds")->check(CLI::Range(1, 3600));
    app.add_option("--shutdown-grace", f.cfg.shutdown_grace_s, "seconds in-flight requests may finish after SIGTERM")->check(CLI::Range(0, 3600));
    app.add_option("--log-format", f.log_format, "text, or json: every log line one JSON object")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
    app.add_option("--log-level", f.log_level, "debug, info, warn or error (default info)")
        ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
}

void add_engine_flags(CLI::App &app, server_flags &f) {
    app.add_option("-t,--threads", f.cfg.n_threads, "engine CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
    app.add_option("--cpu-arithmetic", f.cpu_arithmetic,
                   "CPU backend: Q4_K, Q6_K and Q8_0 products on int8 digits (the GPU's Q4_K arithmetic; fast) or exact "
                   "(fp32 on dequantised weights: the reference)")
        ->check(CLI::IsMember({"digits", "exact"}))
        ->capture_default_str();
    app.add_option("--mem-budget", f.cfg.mem_budget_gib, "memory budget in GiB (default: available RAM for --backend cpu)")->check(CLI::Range(0.0, 1e6));
    app.add_option("--cache-ram", f.cfg.cache_ram_gib,
                   "GiB of host memory for the prompt cache (conversations whose slot was reused, prefixes shared "
                   "between slots); 0: off; default: a quarter of the available memory, at most 8")
        ->check(CLI::Range(0.0, 1e6));
    app.add_option("--slot-save-path", f.cfg.slot_save_path,
                   "folder for POST /slots/{id}?action=save|restore files (saving is off without it)")
        ->check(CLI::ExistingDirectory);
    app.add_option("--cache-disk", f.cfg.cache_disk_gib,
                   "GiB of files in the --slot-save-path folder's prompt-cache/ for the conversations the host prompt "
                   "cache evicts (read back instead of prefilled; the oldest files go first); 0: off")
        ->check(CLI::Range(0.0, 1e9));
    app.add_option("--backend", f.cfg.backend, "auto (cuda when a GPU is visible), cpu or cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    app.add_option("--devices", f.cfg.n_devices, "CPU virtual devices (placement)")->check(CLI::Range(1, 64));
    app.add_option("--gpu-devices", f.gpu_devices, "CUDA device order, e.g. 0,2,1,3 or auto");
    app.add_option("--hosts", f.cfg.hosts,
                   "several hosts under mpirun, one process each (this server first, then `tandem worker`s): "
                   "NAME:DEVICES,... of CPU virtual devices");
    app.add_option("--hosts-file", f.cfg.hosts_file, "the hosts as a JSON file (docs/placement.md)")->check(CLI::ExistingFile);
    app.add_option("--host-link", f.cfg.host_link, "the link between hosts: GB/s[,latency us] (default: measured at start-up)");
    app.add_option("--host-timeout", f.cfg.host_timeout_s,
                   "seconds a worker may stay silent in a step before it counts as lost (requests fail with 503)")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
    app.add_option("--gpu-vram", f.cfg.gpu_vram, "per-GPU budget in GiB list or auto");
    app.add_flag("--tensor-parallel", f.cfg.tensor_parallel,
                 "pair device i with i+N/2: routed experts split 50/50 inside each pair (an even number of devices)");
    app.add_option("--host-experts", f.cfg.host_experts,
                   "host memory for the routed experts the devices cannot hold (the host tier; CPU backend, or "
                   "virtual devices under --gpu-vram): off, auto, or GiB")
        ->capture_default_str();
    app.add_option("--expert-tiers", f.cfg.expert_tiers,
                   "the host tier's experts requantized at load to a lower-bit type, e.g. cold=q4_0 (the file is "
                   "unchanged): off or cold=TYPE")
        ->check([](const std::string &spec) {
            try {
                expert_tiers_parse(spec);
                return std::string();
            } catch (const error &e) {
                return std::string(e.what()).substr(sizeof("--expert-tiers ") - 1);  // CLI11 names the flag
            }
        })
        ->capture_default_str();
    app.add_option("--expert-balance", f.cfg.expert_balance,
                   "a routing profile (what --expert-traffic-out writes): pairs split experts by it and the host tier "
                   "keeps each layer's busiest experts on the devices");
    app.add_option("--expert-traffic-out", f.cfg.expert_traffic_out,
                   "record the rows routed to each expert; write them to this file at shutdown (for tandem plan "
                   "--expert-balance)");
    app.add_option("--transport", f.cfg.transport, "CUDA transfers between devices: auto, p2p or host (staged)")
        ->check(CLI::IsMember({"auto", "p2p", "host"}));
    app.add_option("--n-gpu-layers,--gpu-layers", f.n_gpu_layers,
                   "llama-server's -ngl: accepted and ignored (the placement plan puts every layer on the GPUs)");
}

std::string env_name(const std::string &long_name) {
    std::string out = "TANDEM_";
    for (char c : long_name) out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

}  // namespace

void server_flags_add(CLI::App &app, server_flags &f) {
    f.cpu_arithmetic = cpu_arithmetic_name(engine_options{}.arithmetic);
    f.body_limit_mib = static_cast<double>(f.cfg.body_limit) / (1 << 20);
    f.timeout_s = f.cfg.read_timeout_s;
    app.add_option("--config", f.config_file,
                   "a TOML file of settings named as the long flags (ctx = 4096, api-key = [\"...\"]); flags and "
                   "TANDEM_* variables win over it");
    add_model_flags(app, f);
    add_http_flags(app, f);
    add_engine_flags(app, f);
}

void server_flags_bind_env(CLI::App &app) {
    for (CLI::Option *opt : app.get_options()) {
        const auto &names = opt->get_lnames();
        if (names.empty() || names[0] == "help" || names[0] == "version") continue;
        opt->envname(env_name(names[0]));
    }
}

std::vector<std::string> server_flags_normalize(int argc, char **argv) {
    std::vector<std::string> out;
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        out.push_back(a == "-np" ? "--parallel" : a == "-ngl" ? "--n-gpu-layers" : a);
    }
    return out;
}

namespace {

std::vector<int32_t> parse_devices(const std::string &text) {
    std::vector<int32_t> out;
    if (text.empty() || text == "auto") return out;
    size_t at = 0;
    while (at <= text.size()) {
        size_t comma = text.find(',', at);
        std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        try {
            size_t used = 0;
            int v = std::stoi(item, &used);
            if (used != item.size() || v < 0) throw std::invalid_argument(item);
            out.push_back(v);
        } catch (const std::exception &) {
            fail(error_kind::config, "--gpu-devices '{}': '{}' is not a device ordinal (expected e.g. 0,1 or auto)", text, item);
        }
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

// A TOML value as the strings a flag would have been given: arrays give one per element.
std::vector<std::string> toml_strings(const toml::node &node, const std::string &where) {
    if (const auto *s = node.as_string()) return {s->get()};
    if (const auto *i = node.as_integer()) return {std::to_string(i->get())};
    if (const auto *d = node.as_floating_point()) return {fmt::format("{}", d->get())};
    if (const auto *b = node.as_boolean()) return {b->get() ? "true" : "false"};
    if (const auto *a = node.as_array()) {
        std::vector<std::string> out;
        for (const auto &item : *a) {
            if (item.is_array() || item.is_table()) fail(error_kind::config, "{}: arrays hold plain values only", where);
            for (auto &v : toml_strings(item, where)) out.push_back(std::move(v));
        }
        return out;
    }
    fail(error_kind::config, "{}: expected a string, number, boolean or array (tables and dates are not settings)", where);
}

}  // namespace

void server_flags_apply_config(CLI::App &app, const std::string &path) {
    toml::table table;
    try {
        table = toml::parse_file(path);
    } catch (const toml::parse_error &e) {
        const auto &at = e.source().begin;
        if (at.line == 0) fail(error_kind::config, "--config {}: {}", path, e.description());
        fail(error_kind::config, "{}:{}:{}: {}", path, at.line, at.column, e.description());
    }
    for (const auto &[key, node] : table) {
        const std::string name(key.str());
        const std::string where = fmt::format("{}:{}: {}", path, key.source().begin.line, name);
        CLI::Option *opt = name == "help" || name == "version" || name == "config" ? nullptr : app.get_option_no_throw("--" + name);
        if (opt == nullptr) fail(error_kind::config, "{}: unknown setting (settings are the long flags without dashes)", where);
        if (opt->count() > 0) continue;  // a flag or the environment gave it
        std::vector<std::string> values = toml_strings(node, where);
        if (values.size() != 1 && opt->get_expected_max() <= 1)
            fail(error_kind::config, "{}: takes one value, not an array", where);
        try {
            for (auto &v : values) opt->add_result(opt->get_items_expected_max() == 0 ? opt->get_flag_value(name, v) : v);
            opt->run_callback();
        } catch (const CLI::Error &e) {
            fail(error_kind::config, "{}: {}", where, e.what());
        }
    }
}

server::server_config server_flags_resolve(server_flags &f) {
    server::server_config cfg = std::move(f.cfg);
    if (f.log_format == "json") log_set_format(log_format::json);
    if (!f.log_level.empty())
        log_set_level(f.log_level == "debug" ? log_level::debug : f.log_level == "warn" ? log_level::warn
                      : f.log_level == "error" ? log_level::error : log_level::info);
    if (cfg.model_path.empty()) fail(error_kind::config, "no model: give -m FILE (or TANDEM_MODEL, or model in --config)");
    if (!f.n_gpu_layers.empty())
        log_info("-ngl/--n-gpu-layers {} is ignored: the placement plan puts every layer on the GPUs (--gpu-devices)", f.n_gpu_layers);
    cfg.api_keys = server::api_keys_from_flags(f.api_keys);
    if (!f.api_key_file.empty()) {
        // A key both in the file and given as a flag (a launcher passing both) counts once.
        std::vector<server::api_key> from_file = server::api_keys_read_file(f.api_key_file);
        std::erase_if(cfg.api_keys, [&](const server::api_key &k) {
            return std::any_of(from_file.begin(), from_file.end(), [&](const server::api_key &o) { return o.key == k.key; });
        });
        server::api_keys_merge(cfg.api_keys, std::move(from_file));
    }
    if (cfg.cache_disk_gib > 0 && cfg.slot_save_path.empty())
        fail(error_kind::config, "--cache-disk {} needs --slot-save-path DIR: the disk cache's files go to DIR/prompt-cache",
             cfg.cache_disk_gib);
    cfg.gpu_devices = parse_devices(f.gpu_devices);
    cfg.body_limit = static_cast<size_t>(f.body_limit_mib * (1 << 20));
    cfg.read_timeout_s = cfg.write_timeout_s = f.timeout_s;
    return cfg;
}

}  // namespace tandem::tools
