// src/tools/server_main.cpp - `tandem-server`: flags -> server_config, the memory plan, listen
// (health 503 while loading), load the engine, serve, and shut down cleanly on SIGTERM/SIGINT.
// Exit codes: 0 after a signal, 1 runtime failure, 2 configuration or usage error (including a
// memory plan that does not fit).
#include "src/chat/chat_output.h"
#include "src/engine/host_memory.h"
#include "src/scheduler/scheduler.h"
#include "src/server/api_controls.h"
#include "src/server/http_server.h"
#include "src/server/memory_plan.h"
#include "src/server/prompt_disk.h"
#include "src/server/service.h"
#include "src/server/signal_waiter.h"
#include "src/server/systemd_notify.h"
#include "src/tools/server_flags.h"
#include "src/tools/version.h"
#include "tandem/chat_template.h"
#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/placement.h"
#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

#include <CLI/CLI.hpp>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include <unistd.h>

using namespace tandem;
using namespace tandem::server;

#ifdef TANDEM_TEST_HOOKS
void alloc_failure_hook_arm(size_t min_bytes);  // tests/server/alloc_failure_hook.cpp
std::unique_ptr<engine> scripted_engine_open(std::shared_ptr<const gguf_file> file, const engine_options &options,
                                             const std::string &script);  // tests/server/scripted_engine.cpp
#endif

namespace {

#ifdef TANDEM_TEST_HOOKS
// Compiled only into tests/server's tandem-server-test, never into tandem-server:
// TANDEM_TEST_LOAD_DELAY_MS holds the server in its loading state (listening, /health 503) this
// many milliseconds before the weights load, so tests can observe that state with the tiny
// model, which loads in milliseconds.
void test_load_delay() {
    const char *text = std::getenv("TANDEM_TEST_LOAD_DELAY_MS");
    if (text == nullptr || *text == '\0') return;
    char *end = nullptr;
    long ms = std::strtol(text, &end, 10);
    if (*end != '\0' || ms < 0 || ms > 600000)
        fail(error_kind::config, "TANDEM_TEST_LOAD_DELAY_MS '{}' must be milliseconds in 0..600000", text);
    log_warn("TANDEM_TEST_LOAD_DELAY_MS: holding the loading state for {} ms (a test build)", ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// TANDEM_TEST_FAIL_ALLOC_MIB=N: once the model is loaded, every operator new of N MiB or more
// throws std::bad_alloc, as on a machine out of memory, so tests can see the server answer 503
// and go on serving (the allocation functions are replaced in tests/server/alloc_failure_hook.cpp).
void test_arm_alloc_failure() {
    const char *text = std::getenv("TANDEM_TEST_FAIL_ALLOC_MIB");
    if (text == nullptr || *text == '\0') return;
    char *end = nullptr;
    const long mib = std::strtol(text, &end, 10);
    if (*end != '\0' || mib < 1 || mib > 1 << 20)
        fail(error_kind::config, "TANDEM_TEST_FAIL_ALLOC_MIB '{}' must be MiB in 1..1048576", text);
    log_warn("TANDEM_TEST_FAIL_ALLOC_MIB: allocations of {} MiB or more fail from now on (a test build)", mib);
    alloc_failure_hook_arm(static_cast<size_t>(mib) << 20);
}
#endif

std::optional<std::string> special_text(const tokenizer &tok, const gguf_file &file, const char *key) {
    const int64_t id = file.get_int(key, -1);
    if (id < 0 || id >= tok.n_vocab()) return std::nullopt;
    return tok.token_text(static_cast<int32_t>(id));
}

// The chat template: --chat-template-file, else --chat-template, else the file's own (and its
// tool_use variant), else the plain built-in. A file template that does not parse leaves the
// server up for raw completions; chat requests get its error.
struct chosen_templates {
    chat_template main;
    std::optional<chat_template> tool_use;
};
chosen_templates choose_templates(const server_config &cfg, const gguf_file &file, const tokenizer &tok) {
    const auto bos = special_text(tok, file, "tokenizer.ggml.bos_token_id");
    const auto eos = special_text(tok, file, "tokenizer.ggml.eos_token_id");
    chosen_templates out;
    if (!cfg.chat_template_file.empty()) {
        std::ifstream in(cfg.chat_template_file, std::ios::binary);
        if (!in) fail(error_kind::config, "--chat-template-file {}: cannot read it", cfg.chat_template_file);
        std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        out.main = chat_template::from_jinja(std::move(source), "--chat-template-file " + cfg.chat_template_file, bos, eos);
        if (!out.main.parse_error.empty())
            fail(error_kind::config, "--chat-template-file {}: {}", cfg.chat_template_file, out.main.parse_error);
        return out;
    }
    if (!cfg.chat_template.empty()) {
        out.main = chat_template::builtin(cfg.chat_template);
        return out;
    }
    const std::string source = file.get_string("tokenizer.chat_template", "");
    if (source.empty()) {
        log_warn("the model file has no chat template; using the built-in plain 'role: content' one (see --chat-template)");
        out.main = chat_template::builtin("plain");
        return out;
    }
    out.main = chat_template::from_jinja(source, "tokenizer.chat_template", bos, eos);
    if (!out.main.parse_error.empty())
        log_warn("the model's chat template does not parse ({}); chat requests will be refused until "
                 "--chat-template-file or --chat-template names another", out.main.parse_error);
    const std::string tool_source = file.get_string("tokenizer.chat_template.tool_use", "");
    if (!tool_source.empty()) {
        out.tool_use = chat_template::from_jinja(tool_source, "tokenizer.chat_template.tool_use", bos, eos);
        if (!out.tool_use->parse_error.empty()) log_warn("the model's tool_use chat template does not parse ({})", out.tool_use->parse_error);
    }
    return out;
}

// The request defaults, named as llama-server names them; only those given override the model
// file's recommendation (api_controls.h).
struct sampling_options {
    sampling_defaults value;
    std::vector<std::pair<CLI::Option *, std::function<void(sampling_flags &)>>> given_if;
    sampling_flags given() const {
        sampling_flags f;
        for (const auto &[opt, take] : given_if)
            if (opt->count() > 0) take(f);
        return f;
    }
};

std::shared_ptr<sampling_options> add_sampling_flags(CLI::App &app) {
    auto s = std::make_shared<sampling_options>();
    sampling_defaults &v = s->value;
    auto add = [&](const char *name, auto &field, auto range, const char *help, auto take) {
        CLI::Option *o = app.add_option(name, field, help)->check(range);
        s->given_if.emplace_back(o, [&field, take](sampling_flags &f) { take(f, field); });
    };
    // Each: what requests that set none get; without the flag, the model file's recommendation
    // (general.sampling.*), else llama-server's default (api_controls.h).
    add("--temp", v.temperature, CLI::Range(0.0, 2.0), "default temperature (0: greedy) [model file, else 0.8]",
        [](sampling_flags &f, float x) { f.temperature = x; });
    add("--top-k", v.top_k, CLI::Range(0, 1 << 30), "default top_k (0: off) [model file, else 40]", [](sampling_flags &f, int32_t x) { f.top_k = x; });
    add("--top-p", v.top_p, CLI::Range(0.000001, 1.0), "default top_p (1: off) [model file, else 0.95]", [](sampling_flags &f, float x) { f.top_p = x; });
    add("--min-p", v.min_p, CLI::Range(0.0, 1.0), "default min_p (0: off) [model file, else 0.05]", [](sampling_flags &f, float x) { f.min_p = x; });
    add("--presence-penalty", v.presence_penalty, CLI::Range(-2.0, 2.0), "default presence_penalty (0: off) [0]",
        [](sampling_flags &f, float x) { f.presence_penalty = x; });
    add("--frequency-penalty", v.frequency_penalty, CLI::Range(-2.0, 2.0), "default frequency_penalty (0: off) [0]",
        [](sampling_flags &f, float x) { f.frequency_penalty = x; });
    add("--repeat-penalty", v.repeat_penalty, CLI::Range(0.000001, 10.0), "default repeat_penalty, llama.cpp's (1: off) [model file, else 1]",
        [](sampling_flags &f, float x) { f.repeat_penalty = x; });
    add("--repeat-last-n", v.repeat_last_n, CLI::Range(-1, 1 << 30),
        "default window of the penalties: the last N tokens of prompt and output (-1: all, 0: none) [model file, else 64]", [](sampling_flags &f, int32_t x) { f.repeat_last_n = x; });
    return s;
}

std::string config_line(const server_config &c) {
    auto list = [](const std::vector<std::string> &v) { return v.empty() ? std::string("none") : fmt::format("{}", fmt::join(v, ",")); };
    return fmt::format("config: model={} host={} port={} ctx={} batched-session={} prefill-chunk={} prefill-yield={} "
                       "itl-budget={} max-queue={} draft={} (n-grams {}-{}, step rows {}) alias={} api-keys={} threads={} http-threads={} body-limit={} timeouts={}s/{}s "
                       "max-connections={} request-threads={} request-queue={} allow-special-in-content={} chat-template-file={} chat-template={} reasoning-format={} cors-origin={} allowed-host={} "
                       "backend={} devices={} gpu-devices={} gpu-vram={} host-experts={} expert-balance={} expert-tiers={} tensor-parallel={} mem-budget={} "
                       "cache-ram={} cache-disk={} slot-save-path={}",
                       c.model_path, c.host, c.port, c.n_ctx, c.n_slots, c.prefill_chunk, c.prefill_yield, c.itl_budget, c.max_queue,
                       c.draft, c.draft_ngram_min, c.draft_ngram_max, c.draft_step_rows, c.alias, c.api_keys.size(), c.n_threads, c.http_threads, c.body_limit,
                       c.read_timeout_s, c.write_timeout_s, c.max_connections, c.request_threads, c.request_queue,
                       c.allow_special_in_content, c.chat_template_file.empty() ? "none" : c.chat_template_file,
                       c.chat_template.empty() ? "file" : c.chat_template, c.reasoning_format, list(c.cors_origins), list(c.allowed_hosts), c.backend, c.n_devices,
                       c.gpu_devices.empty() ? std::string("auto") : fmt::format("{}", fmt::join(c.gpu_devices, ",")),
                       c.gpu_vram, c.host_experts, c.expert_balance.empty() ? "none" : c.expert_balance, c.expert_tiers, c.tensor_parallel,
                       c.mem_budget_gib > 0 ? fmt::format("{}GiB", c.mem_budget_gib) : "auto",
                       c.cache_ram_gib >= 0 ? fmt::format("{}GiB", c.cache_ram_gib) : "auto",
                       c.cache_disk_gib > 0 ? fmt::format("{}GiB", c.cache_disk_gib) : "off",
                       c.slot_save_path.empty() ? "off" : c.slot_save_path);
}

// --cache-ram in bytes; auto: a quarter of the memory available once the model is loaded (what
// the CPU engine's slots have touched is already taken), at most 8 GiB as llama-server's default.
// On CUDA, auto is off: a slot's KV crosses PCIe on the engine thread, stalling every decoder.
uint64_t prompt_cache_bytes(const server_config &cfg) {
    if (cfg.cache_ram_gib >= 0) return static_cast<uint64_t>(cfg.cache_ram_gib * double(1ull << 30));
    if (cfg.backend == "cuda") return 0;
    return std::min<uint64_t>(host_memory_read().available_bytes / 4, uint64_t(8) << 30);
}

// --cache-disk's tier in slot-save-path/prompt-cache/, with the files an earlier run left there.
// It spills the host cache, so it needs one; the writer may lag by at most the host cache's bytes.
std::shared_ptr<prompt_disk> open_prompt_disk(const server_config &cfg, const slot_file_identity &id, uint64_t host_bytes) {
    if (cfg.cache_disk_gib <= 0) return nullptr;
    if (host_bytes == 0)
        fail(error_kind::config, "--cache-disk keeps what the host prompt cache evicts, and that cache is off here: give --cache-ram GiB too");
    if (id.kv_token_bytes == 0) fail(error_kind::config, "--cache-disk: this engine cannot copy KV out of its slots");
    const std::string folder = (std::filesystem::path(cfg.slot_save_path) / "prompt-cache").string();
    auto disk = std::make_shared<prompt_disk>(folder, id, static_cast<uint64_t>(cfg.cache_disk_gib * double(1ull << 30)), host_bytes);
    const auto &found = disk->scanned();
    log_info("prompt cache on disk: {:.2f} GiB in {}; reused {} files ({} tokens) of an earlier run, skipped {}, deleted {} over the bound",
             cfg.cache_disk_gib, folder, found.n_reused, found.n_tokens, found.n_skipped, found.n_evicted);
    return disk;
}

int serve(server_config cfg, const std::string &cpu_arithmetic, const sampling_flags &sampling) {
    auto file = gguf_file::open(cfg.model_path);
    model_hparams hp = model_hparams_read(*file);
    cfg.sampling = sampling_defaults_resolve(sampling, file.get());
    if (cfg.alias.empty()) cfg.alias = std::filesystem::path(cfg.model_path).filename().string();

    engine_options eo;
    eo.backend = engine_backend_parse(cfg.backend);
    eo.n_slots = cfg.n_slots;
    eo.n_ctx = cfg.n_ctx;
    eo.n_threads = cfg.n_threads;
    eo.n_devices = cfg.n_devices;
    eo.gpu_devices = cfg.gpu_devices;
    eo.gpu_vram = cfg.gpu_vram;
    eo.host_experts = cfg.host_experts;
    eo.expert_balance = cfg.expert_balance;
    eo.expert_tiers = cfg.expert_tiers;
    eo.transport = engine_transport_parse(cfg.transport);
    eo.tensor_parallel = cfg.tensor_parallel;
    eo.hosts = cfg.hosts;
    eo.host_link = cfg.host_link;
    eo.host_timeout_s = cfg.host_timeout_s;
    if (!cfg.hosts_file.empty()) eo.hosts_json = placement_hosts_file_text(cfg.hosts_file);
    eo.record_expert_traffic = !cfg.expert_traffic_out.empty();
    eo.kv = kv_type_parse(cfg.kv_type);
    eo.device_draws = cfg.device_draws;
    eo.arithmetic = cpu_arithmetic_parse(cpu_arithmetic);
    eo.backend = engine_backend_resolve(eo);
    eo.kv = engine_kv_type_fit(*file, eo);  // auto: f16 on CUDA (q8_0 where f16 does not fit), f32 on the CPU
    cfg.backend = engine_backend_name(eo.backend);
    cfg.kv_type = kv_type_name(eo.kv);
    // Refused before loading: the disk tier has nothing to keep while the host cache is off.
    if (cfg.cache_disk_gib > 0 && (cfg.cache_ram_gib == 0 || (cfg.cache_ram_gib < 0 && cfg.backend == "cuda")))
        fail(error_kind::config, "--cache-disk keeps what the host prompt cache evicts, and that cache is off here: give --cache-ram GiB too");
    // The CPU engine keeps f16 keys and values as f32 (rounded); its q8_0 cache holds the blocks.
    const double kv_elem_bytes = eo.backend == engine_backend::cuda || eo.kv == kv_type::q8_0 ? engine_kv_bytes(eo) : 4.0;
    const model_bytes bytes = model_bytes_read(*file, hp, kv_elem_bytes);

    // Memory plan before listening: the CPU backend's budget is the machine's available RAM.
    uint64_t budget = cfg.mem_budget_gib > 0 ? static_cast<uint64_t>(cfg.mem_budget_gib * (1ull << 30))
                                             : host_memory_read().available_bytes;
    if (cfg.backend == "cpu" || cfg.mem_budget_gib > 0) {
        memory_plan plan = memory_plan_compute(bytes, hp, cfg.n_slots, cfg.n_ctx, cfg.prefill_chunk, budget);
        if (!plan.fits()) fail(error_kind::config, "{}", plan.shortfall());
        log_info("memory plan: {}", plan.describe());
    }
    // GPUs: the placement plan against each device's budget and free memory, before listening.
    // Empty when --backend auto falls back to the CPU (a tensor type the CUDA backend lacks).
    if (cfg.backend != "cpu")
        if (const std::string layout = engine_plan_check(*file, eo); !layout.empty())
            log_info("placement plan fits: {}", layout);
    log_info("{}", tools::version_line("tandem-server"));
    log_info("{}", config_line(cfg));
    log_info("sampling defaults: {}", sampling_defaults_line(cfg.sampling));
    // The tokenizer and the chat template before listening: a template file that does not parse
    // is a configuration error, reported at once.
    std::optional<tokenizer> tok;
    tok.emplace(tokenizer::from_gguf(*file));
    chosen_templates templates = choose_templates(cfg, *file, *tok);
    chat_syntax syntax = chat_syntax_detect(templates.main.source);
    if (templates.main.family == chat_template_family::qwen3) syntax.think_tags = true;

    // Declared before the HTTP front so they outlive it: connections may cancel a request on
    // the scheduler and format tokens with the tokenizer until http.stop() has destroyed them.
    std::unique_ptr<engine> eng;
    std::unique_ptr<scheduler> sched;
    service svc(cfg);
    http_server http(svc, cfg);
    http.listen();

    std::mutex mutex;
    std::condition_variable cv;
    bool stop_requested = false;
    int stop_signal = 0;
    bool repeat_logged = false;
    // Signals wait in sigwait on their own thread (main blocked them before any thread started):
    // a second SIGTERM, even one that lands while the process exits, cannot kill it mid-shutdown.
    signal_waiter signals([&](int sig) {
        if (!svc.ready()) {
            // Nothing is in flight while the weights load (every request gets 503): exit now
            // rather than after a load that may take minutes.
            log_info("signal {} while loading the model: exiting", sig);
            std::_Exit(0);
        }
        std::lock_guard lock(mutex);
        if (stop_requested) {
            // Once: a supervisor repeating its signal must not flood the log.
            if (!repeat_logged)
                log_info("signal {}: already shutting down (grace {} s); further signals are ignored", sig,
                         cfg.shutdown_grace_s);
            repeat_logged = true;
            return;
        }
        stop_requested = true;
        stop_signal = sig;
        cv.notify_all();
    });
    http.run(cfg.http_threads);
    log_info("listening on http://{}:{} (health 503 until the model is loaded)", cfg.host, http.port());
    std::optional<systemd_loading_status> loading_status(std::in_place, *svc.load_progress());
#ifdef TANDEM_TEST_HOOKS
    test_load_delay();
#endif

    eo.progress = svc.load_progress();
#ifdef TANDEM_TEST_HOOKS
    // TANDEM_TEST_SCRIPT: the scripted engine replies from a file instead of running the model.
    if (const char *script = std::getenv("TANDEM_TEST_SCRIPT"); script != nullptr && *script != '\0')
        eng = scripted_engine_open(file, eo, script);
    else
#endif
        eng = engine_open(file, eo);
    loading_status.reset();
    log_info("{}", eng->layout());  // the engine's one-line layout ("layout: ...")


    scheduler_options so;
    so.prefill_chunk = cfg.prefill_chunk;
    so.prefill_yield = cfg.prefill_yield;
    so.itl_budget = cfg.itl_budget;
    so.max_queue = cfg.max_queue;
    so.draft = {cfg.draft, cfg.draft_ngram_min, cfg.draft_ngram_max};
    so.draft_step_rows = cfg.draft_step_rows;
    so.prompt_cache_bytes = prompt_cache_bytes(cfg);
    log_info("prompt cache: {}", so.prompt_cache_bytes > 0 ? fmt::format("{:.2f} GiB of host memory", double(so.prompt_cache_bytes) / (1ull << 30))
                                                            : std::string("off"));
    const slot_file_identity slot_identity{slot_file_model_hash(*file), kv_type_name(eng->kv_cache_type()), eng->kv_token_bytes(),
                                           eng->n_ctx()};
    scheduler_hooks hooks = make_scheduler_hooks(*tok);
    hooks.disk = open_prompt_disk(cfg, slot_identity, so.prompt_cache_bytes);
    sched = std::make_unique<scheduler>(*eng, so, std::move(hooks));
    sched->start();

    model_context mc;
    mc.eng = eng.get();
    mc.sched = sched.get();
    mc.tok = &*tok;
    mc.tmpl = std::move(templates.main);
    mc.tool_tmpl = std::move(templates.tool_use);
    mc.syntax = syntax;
    mc.model_id = cfg.alias;
    std::string file_name = std::filesystem::path(cfg.model_path).filename().string();
    mc.model_names = {cfg.alias, file_name, std::filesystem::path(cfg.model_path).stem().string()};
    mc.slot_identity = slot_identity;
    mc.meta = {{"n_ctx", eng->n_ctx()}, {"n_slots", eng->n_slots()}, {"kv_type", cfg.kv_type}, {"n_vocab", hp.n_vocab},
               {"arch", hp.arch_name}, {"n_layer", hp.n_layer}, {"n_expert", hp.n_expert},
               {"size", bytes.total()}, {"chat_template", chat_template_family_name(mc.tmpl.family)}};
    const chat_template_family syntax_family = mc.tmpl.family;
    const std::string syntax_origin = mc.tmpl.origin;
    svc.set_ready(std::move(mc));
#ifdef TANDEM_TEST_HOOKS
    test_arm_alloc_failure();
#endif
    log_info("ready: model '{}' ({} {} layers, {} experts) chat template {} ({}), tool calls {}", cfg.alias, hp.arch_name,
             hp.n_layer, hp.n_expert, chat_template_family_name(syntax_family), syntax_origin, tool_format_name(syntax.tools));
    systemd_notify(fmt::format("READY=1\nSTATUS=serving {} on {}:{}", cfg.alias, cfg.host, http.port()));
    systemd_watchdog watchdog([&](std::chrono::microseconds interval) { return sched->turning(interval); });

    {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop_requested; });
    }
    log_info("signal {}: no new connections; finishing in-flight work (grace {} s)", stop_signal, cfg.shutdown_grace_s);
    systemd_notify("STOPPING=1");
    http.stop_accepting();
    svc.begin_shutdown();
    // Accepted requests, queued ones included (a queued stream already has its 200), run on
    // within the grace while the scheduler still admits them; then what is left is cancelled.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(cfg.shutdown_grace_s);
    while (svc.busy() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    sched->shutdown(std::max(left, std::chrono::milliseconds(0)));
    // Let connections write their last bytes; bounded.
    for (int i = 0; i < 250 && svc.busy() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // Every connection is gone before the scheduler, the tokenizer and the engine.
    http.stop();
    if (!cfg.expert_traffic_out.empty()) {
        try {
            engine_write_expert_traffic(*eng, cfg.expert_traffic_out);
            log_info("expert traffic written to {}", cfg.expert_traffic_out);
        } catch (const error &e) {
            log_error("{}", e.what());
        }
    }
    log_info("stopped");
    return 0;
}

}  // namespace

// OpenMP reads its wait policy once, as it loads: workers spinning between steps starve the HTTP
// threads and every other program on the host, so the server starts again (same pid, for systemd)
// with sleeping workers unless the environment chose a policy (OMP_WAIT_POLICY=active spins).
static void exec_with_passive_openmp_waits(char **argv) {
    if (std::getenv("OMP_WAIT_POLICY") != nullptr || setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);  // returns only on failure: serving with spinning workers is still correct
}

int main(int argc, char **argv) {
    exec_with_passive_openmp_waits(argv);
    // Before any thread starts, so every thread inherits it; serve()'s signal_waiter takes them.
    signal_waiter_block_in_this_thread();
    tools::server_flags flags;
    CLI::App app{"tandem-server: OpenAI- and Anthropic-compatible HTTP server for MoE models in GGUF files.\n"
                 "Every flag may also come from TANDEM_<FLAG> (e.g. TANDEM_BATCHED_SESSION) or a --config TOML file; "
                 "a flag wins over the environment, the environment over the file."};
    app.set_version_flag("--version", tools::version_line("tandem-server"));
    tools::server_flags_add(app, flags);
    const auto sampling_opts = add_sampling_flags(app);
    tools::server_flags_bind_env(app);
    const std::vector<std::string> args = tools::server_flags_normalize(argc, argv);
    std::vector<const char *> arg_ptrs;
    for (const auto &a : args) arg_ptrs.push_back(a.c_str());
    try {
        app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    try {
        if (!flags.config_file.empty()) tools::server_flags_apply_config(app, flags.config_file);
        server_config cfg = tools::server_flags_resolve(flags);
        return serve(std::move(cfg), flags.cpu_arithmetic, sampling_opts->given());
    } catch (const error &e) {
        log_error("{}", e.what());
        return e.kind() == error_kind::config || e.kind() == error_kind::invalid_request ? 2 : 1;
    } catch (const std::exception &e) {
        log_error("{}", e.what());
        return 1;
    }
}
