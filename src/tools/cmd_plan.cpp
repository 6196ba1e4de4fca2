// src/tools/cmd_plan.cpp - `tandem plan`: resolves devices, topology and budgets for a model file and
// prints the placement plan (the server's start-up layout line and a per-device table, or JSON).
#include "commands.h"
#include "engine_flags.h"

#include "src/engine/host_memory.h"
#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/expert_tiers.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>

namespace {

struct plan_cli {
    std::string model;
    std::string gpu_devices;        // empty: 0..N-1 on CPU virtual devices, "0" on GPUs
    std::string gpu_vram = "auto";
    bool tensor_parallel = false;
    int64_t n_ctx = 4096;
    tandem::kv_type kv = tandem::kv_type::automatic;  // as the server: f16 on CUDA
    int64_t n_sessions = 16;
    std::string topology_path;
    std::string traffic_path;
    std::string host_experts = "off";
    std::string expert_tiers = "off";
    bool json = false;
    bool measure_links = false;
    tandem::engine_backend backend = tandem::engine_backend::automatic;
    int32_t n_devices = 0;          // CPU virtual devices; 0: enough for the ids --gpu-devices lists, else 1
    double scratch_mib = 512.0;
    std::string hosts, hosts_file, host_link;
};

// --hosts or --hosts-file (not both), and --host-link over the file's figure.
tandem::placement_hosts hosts_of(const plan_cli &cli) {
    using namespace tandem;
    if (!cli.hosts.empty() && !cli.hosts_file.empty()) fail(error_kind::config, "give --hosts or --hosts-file, not both");
    placement_hosts h = !cli.hosts.empty() ? placement_parse_hosts(cli.hosts)
                        : !cli.hosts_file.empty() ? placement_hosts_load(cli.hosts_file) : placement_hosts{};
    if (!cli.host_link.empty()) {
        if (h.hosts.empty()) fail(error_kind::config, "--host-link needs --hosts or --hosts-file");
        h.link = placement_parse_host_link(cli.host_link);
    }
    return h;
}

int plan_run(plan_cli cli) {
    using namespace tandem;
    if (cli.backend == engine_backend::automatic) {  // GPUs when they are visible, unless CPU virtual devices were asked for
        engine_options probe;
        probe.backend = engine_backend::automatic;
        probe.n_devices = cli.n_devices > 1 ? cli.n_devices : 1;
        cli.backend = engine_backend_resolve(probe);
    }
    if (cli.n_ctx < 1 || cli.n_sessions < 1)
        fail(error_kind::config, "--ctx ({}) and --batched-session ({}) must be >= 1", cli.n_ctx, cli.n_sessions);
    if (!(cli.scratch_mib >= 0.0) || cli.scratch_mib > 1e7)
        fail(error_kind::config, "--scratch-mib {} must be between 0 and 1e7", cli.scratch_mib);

    device_list devices = cli.gpu_devices.empty() ? device_list{} : placement_parse_devices(cli.gpu_devices);
    const placement_hosts hosts = hosts_of(cli);
    const bool cpu_hosts = !hosts.hosts.empty() && cli.backend == engine_backend::cpu && cli.topology_path.empty();
    if (cpu_hosts && (!devices.ids.empty() || devices.auto_order || cli.n_devices > 0))
        fail(error_kind::config, "with --hosts on CPU virtual devices, each host's count is its devices: drop --devices and --gpu-devices");

    // Topology: a file wins; CPU virtual devices are all-to-all with the host's available RAM
    // split N ways; GPUs come from the probe the CUDA backend registers.
    topology topo;
    if (!cli.topology_path.empty()) {
        topo = topology_load(cli.topology_path);
    } else if (cli.backend == engine_backend::cpu) {
        // Enough virtual devices for every id listed (0,0,0,0 is one device shared four ways).
        const int32_t listed = devices.ids.empty() ? 1 : *std::max_element(devices.ids.begin(), devices.ids.end()) + 1;
        const int32_t n = cli.n_devices > 0 ? cli.n_devices : listed;
        topo = topology_cpu_virtual(n, host_memory_read().available_bytes);
    } else {
        topo = topology_probe();
    }
    // The host's memory where the topology does not describe it: what it has available now.
    placement_request req;
    if (cpu_hosts) topo = placement_cpu_hosts(hosts.hosts, host_memory_read().available_bytes, req);
    if (!topo.host) {
        topo.host = topology_host{};
        topo.host->memory_gib = double(host_memory_read().available_bytes) / double(gib);
    }
    if (!devices.auto_order && devices.ids.empty()) {
        if (cli.backend == engine_backend::cpu && cli.topology_path.empty()) {
            devices.ids.resize(topo.devices.size());
            std::iota(devices.ids.begin(), devices.ids.end(), 0);
        } else {
            devices.ids = {topo.devices.front().id};
        }
    }

    if (cpu_hosts) devices.ids = req.devices;
    req.auto_order = devices.auto_order;
    req.devices = devices.ids;
    if (cli.tensor_parallel) req.mode = placement_mode::tensor_parallel;
    else if (devices.auto_order) req.mode = topo.devices.size() > 1 ? placement_mode::pipeline : placement_mode::single;
    else req.mode = devices.ids.size() > 1 ? placement_mode::pipeline : placement_mode::single;
    const size_t n_logical = devices.auto_order ? placement_auto_order(topo, req.mode).size() : devices.ids.size();
    if (!cpu_hosts || cli.gpu_vram != "auto") req.budgets = placement_parse_vram(cli.gpu_vram, n_logical);
    req.hosts = hosts.hosts;
    req.host_link = hosts.link;
    req.n_sessions = cli.n_sessions;
    req.n_ctx = cli.n_ctx;
    req.scratch_bytes = uint64_t(cli.scratch_mib * double(uint64_t{1} << 20));
    if (!cli.traffic_path.empty()) req.traffic = expert_traffic_load(cli.traffic_path);
    req.host_experts = placement_parse_host_experts(cli.host_experts, topo);

    auto file = gguf_file::open(cli.model);
    const model_hparams hp = model_hparams_read(*file);
    engine_options kv_opt;
    kv_opt.kv = cli.kv;
    kv_opt.backend = engine_backend::cuda;  // the plan places CUDA devices: auto is f16
    const double kv_elem_bytes = engine_kv_bytes(kv_opt);  // the CUDA engine's (the CPU engine keeps f16 as f32)
    placement_model model;
    model.bytes = model_bytes_read(*file, hp, kv_elem_bytes);
    model.n_layer = hp.n_layer;
    model.n_expert = hp.n_expert;
    model.n_vocab = hp.n_vocab;
    model.n_expert_used = hp.n_expert_used;
    model.d_model = hp.d_model;

    const expert_tiers_spec expert_tiers = expert_tiers_parse(cli.expert_tiers);
    req.cold_expert_bytes = expert_tiers_cold_bytes(expert_tiers, hp);
    const placement_plan plan = placement_plan_make(req, topo, model);
    expert_tiers_check(expert_tiers, hp, plan);
    if (cli.json) {
        fmt::print("{}\n", placement_plan_json(plan));
    } else {
        fmt::print("{}\n\n{}", placement_layout_line(plan), placement_table(plan));
        if (const std::string per_host = placement_hosts_table(plan); !per_host.empty()) fmt::print("\n{}", per_host);
        if (const std::string tiers = placement_tier_table(plan); !tiers.empty()) fmt::print("\n{}", tiers);
        if (const std::string speed = placement_prediction_line(plan); !speed.empty()) fmt::print("{}", speed);
    }
    if (cli.measure_links) {
        if (cli.backend != engine_backend::cuda) fail(error_kind::config, "--measure-links needs --backend cuda (it copies between GPUs)");
        std::vector<int32_t> gpus;
        for (const placement_device_plan &dp : plan.devices)
            if (std::find(gpus.begin(), gpus.end(), dp.physical) == gpus.end()) gpus.push_back(dp.physical);
        fmt::print("\n{}", engine_link_report(gpus));
    }
    return 0;
}

}  // namespace

TANDEM_COMMAND(plan, "Plan devices, pairs and budgets for a model and print the layout", [](CLI::App &sub) {
    auto cli = std::make_shared<plan_cli>();
    sub.add_option("-m,--model", cli->model, "GGUF file")->required();
    sub.add_option("--gpu-devices", cli->gpu_devices, "Device ids in logical order (duplicates share a device), or auto");
    sub.add_option("--gpu-vram", cli->gpu_vram, "auto (memory minus a reserve), or GiB: one for all or one per device")
        ->capture_default_str();
    sub.add_flag("--tensor-parallel", cli->tensor_parallel, "Pair device i with i+N/2 and split routed experts");
    sub.add_option("--ctx", cli->n_ctx, "Tokens per session (KV)")->capture_default_str();
    tandem::tools::add_enum_option(sub, "--kv-type", cli->kv, tandem::kv_type_parse, tandem::kv_type_name,
                                   "KV cache element type: f32, f16, q8_0 (34 bytes per 32 elements), or auto (f16, as the server on CUDA)");
    sub.add_option("--batched-session", cli->n_sessions, "Resident sessions (KV slots)")->capture_default_str();
    sub.add_option("--topology", cli->topology_path, "Topology JSON file (see docs/placement.md)");
    sub.add_option("--expert-balance", cli->traffic_path,
                   "Routing profile (expert traffic JSON): split pairs' experts by routed rows and keep the busiest on the GPUs");
    sub.add_option("--host-experts", cli->host_experts,
                   "Host memory for routed experts the GPUs cannot hold (the host tier, computed by the CPU): off, auto, or GiB")
        ->capture_default_str();
    sub.add_option("--expert-tiers", cli->expert_tiers,
                   "off, or cold=TYPE: the host tier's experts requantized to TYPE at load (the budget and the prediction count those bytes)")
        ->capture_default_str();
    sub.add_option("--hosts", cli->hosts, "Several hosts, one process each: NAME:DEVICES,... (the first is the front)");
    sub.add_option("--hosts-file", cli->hosts_file, "Hosts JSON file (names, devices, memory, link figures; docs/placement.md)");
    sub.add_option("--host-link", cli->host_link, "The link between hosts: GB/s[,latency in us] (default 10 GB/s, 50 us)");
    sub.add_flag("--json", cli->json, "Print the plan as JSON");
    sub.add_flag("--measure-links", cli->measure_links, "Also measure copy bandwidth between the plan's GPUs (--backend cuda)");
    tandem::tools::add_enum_option(sub, "--backend", cli->backend, tandem::engine_backend_parse, tandem::engine_backend_name,
                                   "auto (cuda when a GPU is visible), cpu (virtual devices) or cuda");
    sub.add_option("--devices", cli->n_devices, "CPU virtual devices (default: enough for the --gpu-devices ids)");
    sub.add_option("--scratch-mib", cli->scratch_mib, "Scratch (activations, workspaces) per device in MiB")
        ->capture_default_str();
    return [cli] { return plan_run(*cli); };
});
