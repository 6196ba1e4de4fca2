// src/tools/engine_flags.h - the engine flags shared by `tandem logits|generate|bench`.
#pragma once

#include "tandem/engine.h"
#include "tandem/placement.h"

#include <CLI/CLI.hpp>

namespace tandem::tools {

inline void add_engine_flags(CLI::App &sub, engine_options &opt) {
    opt.backend = "auto";
    sub.add_option("--backend", opt.backend, "auto (cuda when a GPU is visible), cpu or cuda")->capture_default_str();
    sub.add_option("--threads", opt.n_threads, "CPU threads (default: all cores)");
    sub.add_option("--cpu-arithmetic", opt.cpu_arithmetic,
                   "CPU backend: Q4_K, Q6_K and Q8_0 products on int8 digits (the GPU's Q4_K arithmetic; fast) or exact "
                   "(fp32 on dequantised weights: the reference)")
        ->check(CLI::IsMember({"digits", "exact"}))
        ->capture_default_str();
    sub.add_option("--ctx", opt.n_ctx, "Tokens per KV slot");
    sub.add_option("--kv-type", opt.kv_type, "KV cache element type: f32, f16 (half the memory, tensor-core decode attention), or auto: f16 on CUDA, f32 on the CPU")
        ->capture_default_str();
    sub.add_option("--devices", opt.n_devices, "CPU virtual devices (placement)");
    sub.add_option_function<std::string>(
        "--gpu-devices",
        [&opt](const std::string &spec) {
            const device_list list = placement_parse_devices(spec);
            opt.gpu_devices = list.auto_order ? std::vector<int32_t>{} : list.ids;
        },
        "CUDA devices in logical order, e.g. 0,1 or 0,0,0,0 (logical devices sharing GPU 0), or auto");
    sub.add_option("--gpu-vram", opt.gpu_vram, "Per-GPU budget: auto (free memory minus a reserve), or GiB for all / per device");
    sub.add_option("--transport", opt.transport, "CUDA transfers between devices: auto, p2p or host (staged, the fallback)");
    sub.add_flag("--tensor-parallel", opt.tensor_parallel, "Pair devices: split routed experts 50/50");
    sub.add_flag("--device-draws,!--no-device-draws", opt.device_draws,
                 "CUDA: temperature draws (engine::forward_draw) on the GPU holding the head (a tensor-parallel pair: its "
                 "first half's GPU; the default); "
                 "--no-device-draws: on the host from whole rows (the same tokens)");
    sub.add_option("--micro-batches", opt.micro_batches,
                   "Micro-batches moving through pipeline stages concurrently (0: one per stage, 1: no overlap)");
}

}  // namespace tandem::tools
