// src/engine/engine.cpp - engine_open: picks the backend and placement for a model file.
#include "cpu_engine.h"
#include "cuda_types.h"
#ifdef TANDEM_HAVE_CUDA
#include "cuda_engine.h"
#include "cuda_link.h"

#include <cuda_runtime.h>
#endif
#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/placement.h"

#include <fstream>

namespace tandem {

#ifdef TANDEM_HAVE_CUDA
namespace {
// `tandem plan --backend cuda` and the planner's --gpu-devices auto read the GPUs through this.
const bool cuda_probe_registered = [] {
    topology_probe_register(cuda_topology_probe);
    return true;
}();
}  // namespace
#endif

engine_backend engine_backend_resolve(const engine_options &options) {
    if (options.backend != engine_backend::automatic) return options.backend;
    if (!options.hosts.empty() || !options.hosts_json.empty()) return engine_backend::cpu;  // several hosts: CPU engine
#ifdef TANDEM_HAVE_CUDA
    if (options.n_devices == 1) {
        int n = 0;
        if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return engine_backend::cuda;
        cudaGetLastError();
    }
#endif
    return engine_backend::cpu;
}

kv_type engine_kv_type_resolve(const engine_options &options) {
    if (options.kv != kv_type::automatic) return options.kv;
    return engine_backend_resolve(options) == engine_backend::cuda ? kv_type::f16 : kv_type::f32;
}

double engine_kv_bytes(const engine_options &options) {
    switch (engine_kv_type_resolve(options)) {
    case kv_type::f16: return 2.0;
    case kv_type::q8_0: return 34.0 / 32.0;
    default: return 4.0;
    }
}

uint64_t kv_row_bytes(kv_type type, int64_t width) {
    switch (type) {
    case kv_type::f16: return uint64_t(width) * 2;
    case kv_type::q8_0:
        if (width % 32 != 0)
            fail(error_kind::config, "--kv-type q8_0 needs cache rows of whole 32-element blocks; this model's rows have {} elements", width);
        return uint64_t(width / 32) * 34;
    default: return uint64_t(width) * 4;
    }
}

// qwen3moe runs on the CUDA engine whenever it is chosen; deepseek2 (f32 or f16 cache; cuda_plan_make
// refuses what it cannot run, naming why) is experimental there and runs on it only when CUDA is
// asked for by name: --backend auto keeps it on the CPU engine. An architecture the CUDA engine does
// not run goes to the CPU engine when the backend is automatic, and is refused when CUDA is named.
static bool cuda_runs(const gguf_file &file, bool named) {
    const model_arch arch = model_hparams_read(file).arch;
    return arch == model_arch::qwen3moe || (arch == model_arch::deepseek2 && named);
}

#ifdef TANDEM_HAVE_CUDA
// A file holding a type the CUDA backend cannot compute with is refused, naming the tensor, when
// CUDA was asked for; with --backend auto it runs on the CPU backend instead.
static engine_options cuda_or_cpu(const gguf_file &file, engine_options options, const engine_options &requested) {
    if (options.backend != engine_backend::cuda) return options;
    const std::string why = cuda_type_refusal(file);
    if (why.empty()) return options;
    if (requested.backend != engine_backend::automatic) fail(error_kind::unsupported, "{}: {}", file.path(), why);
    log_info("backend auto: {}: {}; using the CPU backend", file.path(), why);
    options.backend = engine_backend::cpu;
    options.kv = requested.kv;
    options.kv = engine_kv_type_resolve(options);
    return options;
}
#endif

static engine_options resolve_backend(const gguf_file &file, const engine_options &options_in) {
    engine_options options = options_in;
    options.backend = engine_backend_resolve(options_in);
    if (options.backend != engine_backend::cuda) return options;
    if (!cuda_runs(file, options_in.backend == engine_backend::cuda)) {
        if (options_in.backend == engine_backend::cuda)
            fail(error_kind::unsupported, "{}: the CUDA backend does not run {} models yet; use --backend cpu", file.path(),
                 model_hparams_read(file).arch_name);
        options.backend = engine_backend::cpu;
        return options;
    }
#ifdef TANDEM_HAVE_CUDA
    options = cuda_or_cpu(file, options, options_in);
#endif
    return options;
}

#ifndef TANDEM_HAVE_CUDA
[[noreturn]] static void no_cuda_backend() {
    fail(error_kind::unsupported, "this build has no CUDA backend (configure with -DTANDEM_CUDA=ON; use --backend cpu)");
}
#endif

#ifdef TANDEM_HAVE_CUDA
// --kv-type auto on CUDA: f16, or q8_0 where the plan does not fit with f16 and does with q8_0.
// Where neither fits, f16, whose plan then reports why.
static kv_type cuda_kv_fit(const gguf_file &file, engine_options options) {
    const model_hparams hp = model_hparams_read(file);
    options.kv = kv_type::f16;
    try {
        cuda_plan_make(file, hp, options);
        return kv_type::f16;
    } catch (const error &why) {
        if (why.kind() != error_kind::config) throw;
        options.kv = kv_type::q8_0;
        try {
            cuda_plan_make(file, hp, options);
        } catch (const error &) {
            return kv_type::f16;
        }
        log_info("--kv-type auto: q8_0, since the plan does not fit with an f16 KV cache ({})", why.what());
        return kv_type::q8_0;
    }
}
#endif

kv_type engine_kv_type_fit(const gguf_file &file, const engine_options &options_in) {
    if (options_in.kv != kv_type::automatic) return options_in.kv;
    const engine_options options = resolve_backend(file, options_in);
#ifdef TANDEM_HAVE_CUDA
    if (options.backend == engine_backend::cuda) return cuda_kv_fit(file, options);
#endif
    return engine_kv_type_resolve(options);
}

std::unique_ptr<engine> engine_open(std::shared_ptr<const gguf_file> file, const engine_options &options_in) {
    engine_options options = resolve_backend(*file, options_in);
    options.kv = engine_kv_type_fit(*file, options);
    const bool several_hosts = !options.hosts.empty() || !options.hosts_json.empty();
    if (several_hosts && options.backend != engine_backend::cpu)
        fail(error_kind::config, "several hosts (--hosts) run on the CPU backend (--backend cpu); the CUDA engine runs on one host");
    if (options.backend == engine_backend::cpu) return std::make_unique<cpu_engine>(std::move(file), options);
#ifdef TANDEM_HAVE_CUDA
    return std::make_unique<cuda_engine>(std::move(file), options);
#else
    no_cuda_backend();
#endif
}

std::string engine_plan_check(const gguf_file &file, const engine_options &options_in) {
    const engine_options options = resolve_backend(file, options_in);
    if (options.backend == engine_backend::cpu) return "";
#ifdef TANDEM_HAVE_CUDA
    return placement_layout_line(cuda_plan_make(file, model_hparams_read(file), options));
#else
    no_cuda_backend();
#endif
}

void engine_write_expert_traffic(const engine &eng, const std::string &path) {
    expert_traffic traffic;
    traffic.counts = eng.expert_traffic();
    if (traffic.counts.empty())
        fail(error_kind::config, "the engine recorded no expert traffic (open it with record_expert_traffic)");
    const std::string text = expert_traffic_to_json(traffic) + "\n";
    std::ofstream out(path);
    out << text;
    if (!out) fail(error_kind::config, "cannot write expert traffic to {}", path);
}

std::string engine_link_report(const std::vector<int32_t> &gpus) {
#ifdef TANDEM_HAVE_CUDA
    std::string out;
    const size_t bytes = size_t(256) << 20;
    for (const cuda_link_speed &sp : cuda_links_measure(std::vector<int>(gpus.begin(), gpus.end()), bytes, 7))
        out += fmt::format("link {} -> {}: p2p {} | staged through host {:.1f} GB/s (256 MiB copies, median of 7)\n",
                           sp.a, sp.b, sp.p2p_gb_s > 0 ? fmt::format("{:.1f} GB/s", sp.p2p_gb_s) : "none",
                           sp.host_gb_s);
    return out.empty() ? "link: fewer than two distinct GPUs listed, nothing to measure\n" : out;
#else
    (void)gpus;
    fail(error_kind::unsupported, "this build has no CUDA backend: no links to measure");
#endif
}

engine_memory_speed engine_memory_measure(int32_t gpu) {
#ifdef TANDEM_HAVE_CUDA
    const cuda_memory_speed sp = cuda_memory_measure(gpu, size_t(1) << 30, 5);
    return {gpu, sp.peak_gb_s, sp.copy_gb_s};
#else
    (void)gpu;
    fail(error_kind::unsupported, "this build has no CUDA backend: no GPU memory to measure");
#endif
}

}  // namespace tandem
