// src/tools/engine_flags.h - the engine flags shared by `tandem logits|generate|bench`.
#pragma once

#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/expert_tiers.h"
#include "tandem/placement.h"

#include <CLI/CLI.hpp>

namespace tandem::tools {

// A flag whose text names an enum value (engine.h's *_parse / *_name); a bad name is a usage error
// that lists the allowed ones.
template <typename E>
CLI::Option *add_enum_option(CLI::App &app, const std::string &flag, E &value, E (*parse)(const std::string &),
                             const char *(*name)(E), const std::string &help) {
    CLI::Option *opt = app.add_option_function<std::string>(
        flag,
        [&value, parse, flag](const std::string &text) {
            try {
                value = parse(text);
            } catch (const tandem::error &e) {
                throw CLI::ValidationError(flag, e.what());
            }
        },
        help);
    return opt->default_str(name(value));
}

inline void add_engine_flags(CLI::App &sub, engine_options &opt) {
    opt.backend = engine_backend::automatic;
    add_enum_option(sub, "--backend", opt.backend, engine_backend_parse, engine_backend_name,
                    "auto (cuda when a GPU is visible), cpu or cuda");
    sub.add_option("--threads", opt.n_threads, "CPU threads (default: all cores)");
    add_enum_option(sub, "--cpu-arithmetic", opt.arithmetic, cpu_arithmetic_parse, cpu_arithmetic_name,
                    "CPU backend: Q4_K, Q6_K and Q8_0 products on int8 digits (the GPU's Q4_K arithmetic; fast) or exact "
                    "(fp32 on dequantised weights: the reference)");
    sub.add_option("--ctx", opt.n_ctx, "Tokens per KV slot");
    add_enum_option(sub, "--kv-type", opt.kv, kv_type_parse, kv_type_name,
                    "KV cache element type: f32, f16 (half the memory, tensor-core decode attention), or auto: f16 on CUDA, f32 on the CPU");
    sub.add_option("--devices", opt.n_devices, "CPU virtual devices (placement)");
    sub.add_option_function<std::string>(
        "--gpu-devices",
        [&opt](const std::string &spec) {
            const device_list list = placement_parse_devices(spec);
            opt.gpu_devices = list.auto_order ? std::vector<int32_t>{} : list.ids;
        },
        "CUDA devices in logical order, e.g. 0,1 or 0,0,0,0 (logical devices sharing GPU 0), or auto");
    sub.add_option("--gpu-vram", opt.gpu_vram, "Per-GPU budget: auto (free memory minus a reserve), or GiB for all / per device");
    sub.add_option("--host-experts", opt.host_experts,
                   "Host memory for routed experts the devices cannot hold (the host tier, computed by the CPU): off, auto or GiB")
        ->capture_default_str();
    sub.add_option("--expert-balance", opt.expert_balance,
                   "Routing profile (expert traffic JSON): pairs split experts by it, the host tier keeps the busiest on the devices");
    sub.add_option_function<std::string>(
           "--expert-tiers",
           [&opt](const std::string &spec) {
               try {
                   expert_tiers_parse(spec);
               } catch (const tandem::error &e) {
                   throw CLI::ValidationError("--expert-tiers", std::string(e.what()).substr(sizeof("--expert-tiers ") - 1));
               }
               opt.expert_tiers = spec;
           },
           "Host tier's experts requantized at load to a lower-bit type, e.g. cold=q4_0 (the file is unchanged): off or cold=TYPE")
        ->default_str(opt.expert_tiers);
    add_enum_option(sub, "--transport", opt.transport, engine_transport_parse, engine_transport_name,
                    "CUDA transfers between devices: auto, p2p, host (staged, the fallback) or nccl");
    sub.add_flag("--tensor-parallel", opt.tensor_parallel, "Pair devices: split routed experts 50/50");
    sub.add_flag("--device-draws,!--no-device-draws", opt.device_draws,
                 "CUDA: temperature draws on the GPU holding the head (a tensor-parallel pair: its "
                 "first half's GPU; the default); "
                 "--no-device-draws: on the host from whole rows (the same tokens)");
    sub.add_option("--hosts", opt.hosts, "Several hosts under mpirun, one process each (this first, then `tandem worker`s): NAME:DEVICES,...");
    sub.add_option_function<std::string>(
        "--hosts-file", [&opt](const std::string &path) { opt.hosts_json = placement_hosts_file_text(path); },
        "The hosts as a JSON file (docs/placement.md)");
    sub.add_option("--host-link", opt.host_link, "The link between hosts: GB/s[,latency us] (default: measured)");
    sub.add_option("--host-timeout", opt.host_timeout_s, "Seconds a worker may stay silent in a step before it is lost");
    sub.add_option("--micro-batches", opt.micro_batches,
                   "Micro-batches moving through pipeline stages concurrently (0: one per stage, 1: no overlap)");
}

}  // namespace tandem::tools
