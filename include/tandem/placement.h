// tandem/placement.h - the placement planner: devices x topology x model bytes x budgets -> a
// plan the engine executes (stages, tensor-parallel pairs, expert shards, head shards), plus the
// topology and expert-traffic files that feed it. Pure: no CUDA, no files read implicitly.
#pragma once

#include "tandem/model.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

constexpr uint64_t gib = uint64_t{1} << 30;

// ---- topology -------------------------------------------------------------------------------
// JSON form (docs/placement.md has the full description):
// {"devices": [{"id": 0, "name": "L40S", "memory_gib": 48, "sm_count": 142, "reserve_gib": 1.5}],
//  "links":   [{"a": 0, "b": 1, "p2p": true, "rank": 0, "kind": "nvlink"}]}
// Required: devices[].id, devices[].memory_gib, links[].a, links[].b. A pair without a link entry
// (or with "p2p": false) has no peer access. rank is CUDA's P2P performance rank: lower is better.
struct topology_device {
    int32_t id = 0;                    // physical device id (CUDA ordinal, or CPU virtual index)
    std::string name;                  // "L40S", "H200", "cpu"
    double memory_gib = 0.0;           // total memory of the device
    int32_t sm_count = 0;              // 0 when unknown
    std::optional<double> reserve_gib; // memory kept back by --gpu-vram auto; default: see below
    double bandwidth_gbps = 0.0;       // memory bandwidth in GB/s (speed predictions); 0 = unknown
};

// The host beside the GPUs: its memory (the cold expert tier's room) and the speed figures the
// plan's prediction uses. JSON: "host": {"memory_gib": 256, "reserve_gib": 8, "bandwidth_gbps": 60,
// "link_gbps": 25, "link_latency_us": 10}; every field optional.
struct topology_host {
    double memory_gib = 0.0;           // 0 = unknown (--host-experts auto then needs a figure)
    std::optional<double> reserve_gib; // kept back by --host-experts auto; default max(4 GiB, 10%)
    double bandwidth_gbps = 0.0;       // expert weights the CPU's products read per second (GB/s)
    double link_gbps = 0.0;            // host <-> GPU copies (PCIe), GB/s
    double link_latency_us = 0.0;      // one small host <-> GPU copy, microseconds
};

struct topology_link {
    int32_t a = 0, b = 0;
    bool p2p = true;
    int32_t rank = 0;                  // lower is better
    std::string kind;                  // free text: "nvlink", "pcie", "sys"; may be empty
};

struct topology {
    std::vector<topology_device> devices;
    std::vector<topology_link> links;
    std::optional<topology_host> host;

    const topology_device *find(int32_t id) const;
    // The link between two distinct devices in either direction; nullptr when none is listed.
    const topology_link *link(int32_t a, int32_t b) const;
    // True for the same device, or a listed link with p2p.
    bool p2p(int32_t a, int32_t b) const;
};

// Parsing validates everything (unique ids, known link ends, no self or duplicate links, no
// unknown keys) and throws error_kind::config naming `source` and the offending entry.
topology topology_parse(std::string_view json_text, std::string_view source);
topology topology_load(const std::string &path);
std::string topology_to_json(const topology &topo);

// --gpu-vram auto keeps this much of a device back (CUDA context, cuBLAS/NCCL workspaces,
// allocator slack): reserve_gib when the file gives it, else max(1 GiB, 5% of memory).
uint64_t topology_reserve_bytes(const topology_device &dev);

// N CPU virtual devices (ids 0..N-1), all-to-all P2P with rank 0, each with memory
// host_available_bytes / N and no reserve (the figure is already what the host can spare); the
// host entry has the same memory (the devices and a host tier share it).
topology topology_cpu_virtual(int32_t n_devices, uint64_t host_available_bytes);

// Where the topology of real GPUs comes from: the CUDA backend registers a probe at start-up;
// without one (CPU-only build) topology_probe throws a config error asking for --topology.
using topology_probe_fn = std::function<topology()>;
void topology_probe_register(topology_probe_fn probe);
bool topology_probe_available();
topology topology_probe();

// ---- expert traffic (--expert-balance FILE) ------------------------------------------------
// JSON: {"n_layer": 48, "n_expert": 128, "counts": [[c_0_0, ..., c_0_127], ..., [...]]}
// counts[l][e] = rows routed to expert e of layer l (any non-negative integers, e.g. recorded
// by the engine). n_layer and n_expert are optional and checked against counts when present.
struct expert_traffic {
    std::vector<std::vector<uint64_t>> counts;  // [n_layer][n_expert]
};
expert_traffic expert_traffic_parse(std::string_view json_text, std::string_view source);
expert_traffic expert_traffic_load(const std::string &path);
// The JSON form above (n_layer, n_expert and counts), what the engine's recording writes.
std::string expert_traffic_to_json(const expert_traffic &traffic);

// Splits one layer's experts into two halves carrying about half the routed rows each.
// Returns a flag per expert: true = the host's half. Guarantee (the stated tolerance):
// |rows(host half) - total/2| <= max(count)/2; on traffic without a dominant expert it is far
// tighter (tests: within 1% of the layer's rows when every expert has < 2% of them).
// Ties (equal loads) go to the half with fewer experts, so zero-traffic experts spread evenly;
// a layer with no recorded rows falls back to the by-index split.
std::vector<bool> expert_traffic_split(const std::vector<uint64_t> &counts);
// The same with the halves' expert counts differing by at most one: what a pair uses when its
// expert room, not its rows, is the limit. Rows balanced by the same longest-first pass under the
// count cap, then the same swaps.
std::vector<bool> expert_traffic_split_even(const std::vector<uint64_t> &counts);

// ---- hosts (--hosts a:2,b:2 or --hosts-file FILE) --------------------------------------------
// One process per host: the first host is the front (HTTP, scheduler, sampling), the others run
// their stages as workers. Each host lists its devices in the plan's device order, host by host.
struct placement_host {
    std::string name;
    int32_t n_devices = 0;
    double memory_gib = 0.0;           // CPU virtual devices: the host's memory (0: this machine's)
};

// The link between hosts: what one stage hand-off across hosts costs in the prediction.
struct placement_host_link {
    double gbps = 0.0;                 // 0: unknown (the prediction's default)
    double latency_us = 0.0;
    std::string source;                // "given", "measured" or empty (defaults)
};

struct placement_hosts {
    std::vector<placement_host> hosts;
    placement_host_link link;
};

// "a:2,b:2" -> two hosts of two devices; names unique, counts >= 1. Throws config naming the element.
placement_hosts placement_parse_hosts(std::string_view spec);
// JSON: {"hosts": [{"name": "a", "devices": 2, "memory_gib": 64}], "link_gbps": 10,
// "link_latency_us": 50}; devices required, the rest optional; unknown keys are errors.
placement_hosts placement_hosts_parse(std::string_view json_text, std::string_view source);
placement_hosts placement_hosts_load(const std::string &path);
// The file's text after checking it parses (what the front sends its workers).
std::string placement_hosts_file_text(const std::string &path);
// --host-link "GBPS" or "GBPS,LATENCY_US" (both positive); source "given".
placement_host_link placement_parse_host_link(std::string_view spec);

// ---- inputs ---------------------------------------------------------------------------------
struct placement_request;
// CPU virtual devices on several hosts: host h runs devices 0..n_h-1, each with the host's memory
// (memory_gib, else local_available_bytes: hosts like this one) split evenly. Sets req.devices and
// req.budgets (per logical device, hosts in turn) and returns the topology they refer to.
topology placement_cpu_hosts(const std::vector<placement_host> &hosts, uint64_t local_available_bytes,
                             placement_request &req);

enum class placement_mode { single, pipeline, tensor_parallel };
const char *placement_mode_name(placement_mode mode);

struct placement_model {
    model_bytes bytes;        // per-layer replicated / routed-expert bytes, embedding, head, KV
    int32_t n_layer = 0;
    int32_t n_expert = 0;
    int32_t n_vocab = 0;
    int32_t n_expert_used = 0;  // routed experts per token (speed prediction; 0: none)
    int32_t d_model = 0;        // hidden width (hand-off bytes in the prediction)
};

struct placement_request {
    placement_mode mode = placement_mode::single;
    bool auto_order = false;          // --gpu-devices auto: the planner picks devices and order
    std::vector<int32_t> devices;     // physical ids in logical order (duplicates allowed)
    std::vector<uint64_t> budgets;    // bytes per logical device, or one for all; empty = auto
    int64_t n_sessions = 1;           // --batched-session
    int64_t n_ctx = 4096;             // tokens per session
    uint64_t scratch_bytes = 0;       // per logical device (activations, workspaces)
    std::optional<expert_traffic> traffic;  // --expert-balance: the routing profile
    // --host-experts: bytes of host memory for cold routed experts (the host tier, computed by the
    // CPU) when the model does not fit the GPUs; nullopt: no host tier (such a plan is refused).
    std::optional<uint64_t> host_experts;
    // --expert-tiers: bytes of one routed expert (gate, up and down) as the host tier holds it,
    // requantized; nullopt: as in the file. The tier's budget and the speed prediction count these.
    std::optional<uint64_t> cold_expert_bytes;
    // Several hosts: `devices` (and per-device budgets) list each host's devices in turn. Pipeline
    // stages stay contiguous per host; with pairs each host's devices pair among themselves.
    std::vector<placement_host> hosts;
    placement_host_link host_link;
};

// "auto" -> auto_order; "0,2,1,3" -> ids. Throws config naming the bad element.
struct device_list {
    bool auto_order = false;
    std::vector<int32_t> ids;
};
device_list placement_parse_devices(std::string_view spec);
// "auto" -> {}; "40" -> one value for every device; "40,40,80,80" -> one per device (GiB,
// decimals allowed). Throws config when the count is neither 1 nor n_devices.
std::vector<uint64_t> placement_parse_vram(std::string_view spec, size_t n_devices);
// --host-experts: "off" -> nullopt; "auto" -> the topology's host memory less its reserve (max(4
// GiB, 10%) unless reserve_gib says); "96" -> GiB. Throws config for anything else, and for auto
// when the topology does not know the host's memory.
std::optional<uint64_t> placement_parse_host_experts(std::string_view spec, const topology &topo);

// The order `auto` picks. tensor_parallel: a best perfect matching of P2P pairs (fewest devices
// left out, then lowest sum of link ranks, then lowest ids), hosts (smaller id of each pair, in
// ascending order) first, then their partners in the same order. pipeline: every device by id.
// single: the device with the most memory (lowest id on ties).
std::vector<int32_t> placement_auto_order(const topology &topo, placement_mode mode);

// ---- the plan -------------------------------------------------------------------------------
enum class placement_role { single, host, partner };
const char *placement_role_name(placement_role role);

struct placement_device_plan {
    int32_t logical = 0;              // index in the plan's device order
    int32_t physical = 0;             // topology id
    std::string name;
    int32_t stage = 0;
    int32_t host = 0;                 // index into placement_plan::hosts (0 without hosts)
    placement_role role = placement_role::single;
    int32_t partner = -1;             // logical index of the pair partner; -1 without pairs
    int32_t layer_begin = 0;          // layers [layer_begin, layer_end)
    int32_t layer_end = 0;
    std::vector<std::vector<int32_t>> experts;  // [layer - layer_begin] routed expert ids, sorted
    bool embedding = false;           // token_embd lives here (host of the first stage)
    int32_t head_begin = 0;           // output head vocab rows [head_begin, head_end); empty: none
    int32_t head_end = 0;
    uint64_t bytes_replicated = 0;    // attention, norms, router, shared experts of its layers
    uint64_t bytes_experts = 0;       // its routed experts
    uint64_t bytes_embedding = 0;
    uint64_t bytes_head = 0;          // its share of the head rows (output_norm included)
    uint64_t bytes_kv = 0;            // K/V of its layers for n_sessions x n_ctx
    uint64_t bytes_scratch = 0;
    uint64_t budget = 0;

    uint64_t weights() const { return bytes_replicated + bytes_experts + bytes_embedding + bytes_head; }
    uint64_t total() const { return weights() + bytes_kv + bytes_scratch; }
    uint64_t free() const { return budget > total() ? budget - total() : 0; }
};

// The host tier: routed experts kept in host memory, their rows computed by the CPU. Per layer the
// experts the router picks most (by the profile; every expert alike without one) stay on the GPUs.
struct placement_cold_plan {
    bool allowed = false;             // a host budget was given (--host-experts)
    uint64_t budget = 0;              // its bytes
    uint64_t bytes = 0;               // bytes of the cold experts
    std::vector<std::vector<int32_t>> experts;  // [layer] cold expert ids, sorted; all empty: none
    std::vector<double> row_share;    // [layer] expected share of the layer's routed rows that are cold
    bool used() const { return bytes > 0; }
};

// Decode speed the plan predicts for one session from bandwidth figures (docs/placement.md states
// the model): per layer the GPU reads the replicated and hot expert bytes while the CPU reads the
// expected cold expert bytes; a layer takes the longer of the two.
struct placement_prediction {
    double tok_s = 0.0;               // 0: not predicted (the model shape lacks n_expert_used)
    double gpu_ms = 0.0;              // per token, the GPUs' share (layers, head, hand-offs)
    double cold_ms = 0.0;             // per token, the host tier's expert time (overlapped)
    double gpu_gbps = 0.0, cpu_gbps = 0.0, link_gbps = 0.0, link_latency_us = 0.0;  // figures used
    bool default_figures = false;     // some figure was not in the topology
    double host_link_gbps = 0.0, host_link_latency_us = 0.0;  // between hosts (several hosts only)
};

struct placement_plan {
    placement_mode mode = placement_mode::single;
    int32_t n_stages = 0;
    int32_t n_layer = 0, n_expert = 0, n_vocab = 0;
    int64_t n_sessions = 0, n_ctx = 0;
    bool traffic_balanced = false;
    // With traffic: per layer, the host half's share of the layer's routed rows (0..1).
    std::vector<double> host_row_share;
    std::vector<placement_device_plan> devices;  // by logical index
    placement_cold_plan cold;                    // the host tier (empty when everything fits the GPUs)
    placement_prediction prediction;
    std::vector<std::string> notes;              // e.g. devices `auto` left out
    std::vector<placement_host> hosts;           // empty: one host
    placement_host_link host_link;

    // The host a stage runs on (0 without hosts).
    int32_t stage_host(int32_t stage) const;

    // The stage that runs `layer`; -1 when out of range.
    int32_t stage_of_layer(int32_t layer) const;
};

// Checks everything before anything is loaded. Throws error_kind::config for bad requests (odd
// device count with pairs, unknown ids, budget lists of the wrong length, a pair without P2P,
// with the order that fixes it) and when the plan does not fit (names the device, the GiB
// missing and the biggest class on it). With a host tier, routed experts that do not fit move to
// it, the least used first; refused when even that does not fit (with the numbers), and a routing
// profile of another model shape is refused.
placement_plan placement_plan_make(const placement_request &request, const topology &topo,
                                   const placement_model &model);

// The logical devices of each stage, the stage's host (or single device) first, then its
// partner: what an engine runs per stage.
std::vector<std::vector<int32_t>> placement_stage_members(const placement_plan &plan);

// The one line the server logs at start-up and `tandem plan` prints, e.g.
// layout: tp pairs=2 stages=2 devices=4 kv=16x4096 | s0 L0-23 [d0@0 E0-63 emb 7.7/132.8G +
// d2@2 E64-127 7.6/132.8G] | s1 L24-47 [d1@1 E0-63 head 0-75967 7.6/132.8G + d3@3 E64-127 head
// 75968-151935 7.6/132.8G]   (dI@P: logical device I on physical P; ranges inclusive; GiB used/budget)
std::string placement_layout_line(const placement_plan &plan);
// Several hosts: one line per host (its devices, stages, layers, bytes) and the link; else empty.
std::string placement_hosts_table(const placement_plan &plan);
// A per-device table of bytes by class (GiB), one row per logical device.
std::string placement_table(const placement_plan &plan);
// Per layer: stage, experts and expected share of routed rows on the GPUs and on the host tier.
// Empty when the plan has no host tier in use.
std::string placement_tier_table(const placement_plan &plan);
// One line with the plan's predicted decode speed and the figures behind it; empty without one.
std::string placement_prediction_line(const placement_plan &plan);
// The whole plan as JSON (indent 2), per-layer expert ids included.
std::string placement_plan_json(const placement_plan &plan);

}  // namespace tandem
