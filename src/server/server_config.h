// src/server/server_config.h - tandem-server's configuration: every flag and its default in one
// place (only server_main reads argv).
#pragma once

#include "src/server/api_keys.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::server {

// Bounds on a request body's JSON, so the parsed value's memory stays proportional to the body.
// serde_json's default recursion limit is 128 too; 2^18 values hold any real chat request (a
// 10,000-message conversation is ~30,000) while an 8 MiB array of small numbers would be 4M.
struct json_limits {
    int32_t max_depth = 128;
    int64_t max_values = int64_t{1} << 18;
};

// What a request samples with for the fields it does not set: the flags named as llama-server
// names them (--temp, --top-k, ...), else the model file's recommended sampling (general.sampling.*),
// else these, llama-server's own defaults. `from` names where each came from ("flag", "model";
// absent: built in), for /props and the start-up log.
struct sampling_defaults {
    float temperature = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repeat_penalty = 1.0f;
    int32_t repeat_last_n = 64;
    std::map<std::string, std::string> from;
};

struct server_config {
    std::string model_path;
    std::string host = "127.0.0.1";          // loopback unless told otherwise
    int32_t port = 8080;                     // 0: any free port (logged)
    int32_t n_ctx = 32768;                   // tokens per KV slot
    std::string kv_type = "auto";            // --kv-type: KV cache elements, f32, f16 or auto (f16 on CUDA)
    int32_t n_slots = 16;                    // --batched-session
    int32_t prefill_chunk = 2048;
    int32_t prefill_yield = 128;
    double itl_budget = 2.0;                 // step time with prompt rows / decode-only, while decoding
    int32_t max_queue = 64;
    bool device_draws = true;                // temperature draws on the GPU (--no-device-draws: on the host)
    int32_t draft = 0;                       // --draft: prompt-lookup drafts a session a step (0: off)
    int32_t draft_ngram_min = 2;             // shortest suffix looked up for a draft
    int32_t draft_ngram_max = 4;             // longest (tried first)
    int32_t draft_step_rows = 16;            // drafts only while a step's decode rows stay within this
    std::string alias;                       // model id in the APIs (default: file name)
    std::vector<api_key> api_keys;           // empty: no auth
    int32_t n_threads = 0;                   // engine CPU threads (0: all cores)
    int32_t http_threads = 2;
    // Open connections; beyond them the oldest idle ones are closed and accepts wait. 512 as
    // nginx's worker_connections: far above what a server of 16 slots and a 64-deep queue
    // serves at once (80 requests), with room for keep-alive clients, and with the reserve below
    // within Debian's default limit of 1024 descriptors.
    int32_t max_connections = 512;
    int32_t overflow_connections = 8;        // past the limit: cheap GETs served, the rest 503
    int32_t fd_reserve = 64;                 // descriptors kept for the model, logs and engine
    int32_t request_threads = 2;             // JSON parsing and tokenization off the I/O threads
    int32_t request_queue = 64;              // requests waiting for those threads before 503
    json_limits json;                        // depth and value count of a request body
    bool allow_special_in_content = false;   // request text may spell special tokens (unsafe)
    std::string chat_template_file;          // --chat-template-file: a Jinja template instead of the file's
    std::string chat_template;               // --chat-template: a built-in (chatml, qwen3, plain) instead of the file's
    std::string reasoning_format = "auto";   // auto: reasoning separated from the text; none: left in it
    std::vector<std::string> cors_origins;   // --cors-origin: browser origins allowed ("*": any)
    std::vector<std::string> allowed_hosts;  // --allowed-host: Host names a loopback server accepts
    size_t body_limit = 8u << 20;            // bytes per request body (generation routes)
    size_t small_body_limit = 64u << 10;     // bytes per body of the other routes, which take none
    int32_t read_timeout_s = 60;             // per request read
    int32_t write_timeout_s = 60;            // per response write
    int32_t shutdown_grace_s = 10;           // in-flight work may finish within this on SIGTERM
    double mem_budget_gib = 0.0;             // 0: MemAvailable for the CPU backend
    // --cache-ram: GiB of host memory for the prompt cache (conversations whose slot was reused,
    // and prefixes shared between slots); negative: auto, a quarter of the memory available once
    // the model is loaded, at most 8 GiB; 0: off.
    double cache_ram_gib = -1.0;
    std::string slot_save_path;              // --slot-save-path: folder of slot files (empty: saving is off)
    // --cache-disk: GiB of files in slot-save-path/prompt-cache/ for what the host prompt cache
    // evicts (0: off; needs --slot-save-path and the host cache).
    double cache_disk_gib = 0.0;
    // Placement, passed to engine_options.
    std::string backend = "auto";            // auto: cuda when a GPU is visible, else cpu
    int32_t n_devices = 1;
    std::vector<int32_t> gpu_devices;
    std::string gpu_vram = "auto";           // per-GPU budgets (placement)
    std::string host_experts = "off";        // host memory for experts the devices cannot hold
    std::string expert_balance;              // routing profile placing experts (empty: uniform)
    std::string expert_tiers = "off";        // the host tier's experts requantized at load (cold=TYPE)
    std::string expert_traffic_out;          // write the recorded expert traffic here at shutdown
    std::string transport = "auto";          // CUDA transfers between devices: auto, p2p, host
    bool tensor_parallel = false;
    // Several hosts under mpirun (docs/placement.md): NAME:DEVICES,... or a hosts file; the link figure.
    std::string hosts, hosts_file, host_link;
    double host_timeout_s = 30.0;            // a worker silent this long is lost (requests fail with 503)
    sampling_defaults sampling;              // resolved from flags and the model file before serving
};

}  // namespace tandem::server
