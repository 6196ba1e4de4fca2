// src/engine/cuda_engine.cpp - the CUDA engine front: plans the devices (placement/), builds one
// cuda_device per logical device, and runs each step: the stages in order over micro-batches,
// expert outputs exchanged inside a tensor-parallel pair and merged by owner before the slot-order
// combine, hidden states sent to the next stage, head shards gathered by vocab column. Every
// value a device receives is bits another device computed with the same kernels, so logits are
// bitwise those of the one-GPU run on every plan.
#include "cuda_engine.h"
#include "load_meter.h"

#include "cuda/attention_mla.h"
#include "cuda/cuda_check.h"
#include "cuda/logits_top.h"
#include "cuda/moe_route_grouped.h"
#include "cuda_cold_tier.h"
#include "cuda_device_state.h"
#include "cuda_engine_host.h"
#include "cuda_link.h"
#include "host_memory.h"
#include "step_split.h"
#include "tandem/error.h"
#include "tandem/log.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <thread>
#include <tuple>

namespace tandem {

namespace {

// Whether this runtime captures work that spans two GPUs (a copy between them, and the fork and
// join of their streams) into one graph. Errors are cleared: a failure only turns the graphs off.
bool cross_gpu_capture_works(cuda_device::state &a, cuda_device::state &b) {
    bool ok = cudaSetDevice(a.device) == cudaSuccess &&
              cudaStreamBeginCapture(a.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (!ok) {
        cudaGetLastError();
        return false;
    }
    ok = cudaEventRecord(a.event, a.stream) == cudaSuccess && cudaStreamWaitEvent(b.stream, a.event, 0) == cudaSuccess &&
         cudaMemcpyAsync(b.h, a.x, 16, cudaMemcpyDefault, a.stream) == cudaSuccess &&
         cudaEventRecord(a.event, a.stream) == cudaSuccess && cudaStreamWaitEvent(b.stream, a.event, 0) == cudaSuccess &&
         cudaSetDevice(b.device) == cudaSuccess && cudaMemsetAsync(b.x, 0, 16, b.stream) == cudaSuccess &&
         cudaEventRecord(b.event, b.stream) == cudaSuccess && cudaStreamWaitEvent(a.stream, b.event, 0) == cudaSuccess;
    cudaSetDevice(a.device);
    cudaGraph_t graph = nullptr;
    ok = cudaStreamEndCapture(a.stream, &graph) == cudaSuccess && ok;
    cudaGraphExec_t exec = nullptr;
    ok = ok && graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return ok;
}

int32_t graph_bucket(int32_t n) {
    int32_t b = 1;
    while (b < n) b *= 2;
    return b;
}

}  // namespace


topology cuda_topology_probe() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        fail(error_kind::config, "no CUDA device is visible (use --backend cpu, or --topology FILE to plan)");
    }
    topology topo;
    for (int i = 0; i < n; ++i) {
        cudaDeviceProp prop{};
        TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
        TANDEM_CUDA_CHECK(cudaSetDevice(i));
        size_t free_b = 0, total_b = 0;
        TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        topology_device d;
        d.id = i;
        d.name = prop.name;
        d.memory_gib = double(total_b) / double(gib);
        d.sm_count = prop.multiProcessorCount;
        // --gpu-vram auto = free memory minus the default reserve: what others use counts too.
        d.reserve_gib = double(total_b - free_b) / double(gib) + std::max(1.0, 0.05 * d.memory_gib);
        topo.devices.push_back(d);
    }
    for (int a = 0; a < n; ++a)
        for (int b = a + 1; b < n; ++b) {
            int ab = 0, ba = 0, rank = 0;
            TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&ab, a, b));
            TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&ba, b, a));
            if (!ab || !ba) continue;  // a missing pair: no P2P
            TANDEM_CUDA_CHECK(cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b));
            topo.links.push_back({a, b, true, rank, "p2p"});
        }
    return topo;
}

// deepseek2's shapes and options the CUDA engine takes (cuda_layer_deepseek2.cpp).
static void mla_check(const model_hparams &hp, const engine_options &options) {
    if (options.kv == kv_type::q8_0)
        fail(error_kind::unsupported, "the CUDA engine keeps deepseek2's latent cache in f32 or f16; --kv-type q8_0 is not "
             "supported for it (use --kv-type f16, or --backend cpu)");
    if (hp.d_model % 32 || hp.d_ff_expert % 32)
        fail(error_kind::unsupported, "the CUDA backend needs d_model and the experts' d_ff multiples of 32, the model has {} and {}",
             hp.d_model, hp.d_ff_expert);
    if (hp.kv_lora_rank > cuda::mla_max_kv_lora || hp.d_rope > cuda::mla_max_d_rope)
        fail(error_kind::unsupported, "the CUDA latent attention takes kv_lora_rank up to {} and a rope part up to {}; the "
             "model has {} and {}", cuda::mla_max_kv_lora, cuda::mla_max_d_rope, hp.kv_lora_rank, hp.d_rope);
    if (hp.n_expert > cuda::moe_route_grouped_max_experts || hp.n_expert_used > 32 || hp.n_expert_group > 64)
        fail(error_kind::unsupported, "the CUDA routing takes up to {} experts, 32 a token and 64 groups; the model has {}, {} "
             "and {}", cuda::moe_route_grouped_max_experts, hp.n_expert, hp.n_expert_used, hp.n_expert_group);
}

placement_plan cuda_plan_make(const gguf_file &file, const model_hparams &hp, const engine_options &options) {
    const int64_t q_dim = int64_t(hp.n_head) * hp.d_head;
    if (hp.arch == model_arch::deepseek2) {
        mla_check(hp, options);
    } else {
        if (hp.d_head_v != hp.d_head)
            fail(error_kind::unsupported, "the CUDA backend needs value heads as wide as key heads ({} vs {})", hp.d_head_v, hp.d_head);
        if (hp.d_model % 32 || q_dim % 32 || hp.d_ff_expert % 32)
            fail(error_kind::unsupported, "the CUDA backend needs d_model, n_head*d_head and d_ff multiples of 32");
        const int32_t group = hp.n_head_kv > 0 ? hp.n_head / hp.n_head_kv : 0;
        const bool dh_ok = hp.d_head == 32 || hp.d_head == 64 || hp.d_head == 128 || hp.d_head == 256;
        const bool group_ok = group == 1 || group == 2 || group == 4 || (group % 8 == 0 && hp.d_head <= 128);
        if (!dh_ok || !group_ok || hp.n_head % hp.n_head_kv != 0)
            fail(error_kind::unsupported, "the CUDA attention needs d_head 32, 64, 128 or 256 and 1, 2, 4 or a multiple of 8 "
                 "query heads per KV head (8+ only with d_head <= 128); the model has d_head {} and {} / {} heads",
                 hp.d_head, hp.n_head, hp.n_head_kv);
    }
    cuda_transport_check(options.transport);  // fails here, before anything loads

    // The plan, checked against the budgets before anything is allocated.
    topology topo = cuda_topology_probe();
    if (!topo.host) {
        topo.host = topology_host{};
        topo.host->memory_gib = double(host_memory_read().available_bytes) / double(gib);
    }
    placement_request req;
    req.mode = options.tensor_parallel ? placement_mode::tensor_parallel
               : options.gpu_devices.size() > 1 ? placement_mode::pipeline
                                                : placement_mode::single;
    if (options.gpu_devices.empty()) {
        if (options.tensor_parallel) req.auto_order = true;
        else req.devices = placement_auto_order(topo, placement_mode::single);
    } else {
        req.devices = options.gpu_devices;
    }
    const size_t n_logical = req.auto_order ? placement_auto_order(topo, req.mode).size() : req.devices.size();
    req.budgets = placement_parse_vram(options.gpu_vram, n_logical);
    req.n_sessions = options.n_slots;
    req.n_ctx = options.n_ctx;
    req.scratch_bytes = cuda_device::scratch_bytes(hp, options.n_ctx, true, options.tensor_parallel);
    placement_model pm;
    pm.bytes = model_bytes_read(file, hp, engine_kv_bytes(options));
    pm.n_layer = hp.n_layer;
    pm.n_expert = hp.n_expert;
    pm.n_vocab = hp.n_vocab;
    pm.n_expert_used = hp.n_expert_used;
    pm.d_model = hp.d_model;
    req.host_experts = placement_parse_host_experts(options.host_experts, topo);
    if (!options.expert_balance.empty()) req.traffic = expert_traffic_load(options.expert_balance);
    const expert_tiers_spec tiers = expert_tiers_parse(options.expert_tiers);
    req.cold_expert_bytes = expert_tiers_cold_bytes(tiers, hp);
    placement_plan plan = placement_plan_make(req, topo, pm);
    expert_tiers_check(tiers, hp, plan);

    // What the GPUs have free now, per physical device (logical devices sharing one add up).
    std::map<int32_t, uint64_t> need;
    for (const placement_device_plan &dp : plan.devices) need[dp.physical] += dp.total();
    for (const auto &[phys, bytes] : need) {
        TANDEM_CUDA_CHECK(cudaSetDevice(phys));
        size_t free_b = 0, total_b = 0;
        TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        if (bytes > free_b)
            fail(error_kind::config, "the plan needs {:.2f} GiB on GPU {} but {:.2f} GiB are free: lower --ctx or "
                 "--batched-session, or add devices ({})", double(bytes) / gib, phys, double(free_b) / gib,
                 placement_layout_line(plan));
    }

    return plan;
}

cuda_engine::cuda_engine(std::shared_ptr<const gguf_file> file, const engine_options &options)
    : file_(std::move(file)), hp_(model_hparams_read(*file_)), tensors_(model_tensors_bind(*file_, hp_)),
      slots_(options, hp_), host_(std::make_unique<host_state>()) {
    n_slots_ = options.n_slots;
    n_ctx_ = options.n_ctx;
    kv_ = engine_kv_type_resolve(options);
    if (hp_.arch == model_arch::deepseek2) {  // the resolved cache type too (names the limit)
        engine_options resolved = options;
        resolved.kv = kv_;
        mla_check(hp_, resolved);
    }
    kv_row_bytes(kv_, model_kv_shape_of(hp_).width);  // refuses a q8_0 cache of rows that are not whole blocks
    if (options.micro_batches < 0) fail(error_kind::config, "micro-batches must be >= 0, got {}", options.micro_batches);
    micro_batches_ = options.micro_batches;
    record_traffic_ = options.record_expert_traffic;
    if (options.n_devices != 1)
        fail(error_kind::config, "--devices chooses CPU virtual devices; with --backend cuda list GPUs with --gpu-devices "
                                 "(e.g. 0,0 for two logical devices on GPU 0)");
    plan_ = cuda_plan_make(*file_, hp_, options);

    stage_members_ = placement_stage_members(plan_);
    uint64_t planned = 0;
    for (const placement_device_plan &dp : plan_.devices) planned += dp.weights();
    load_meter meter(options.progress, planned);
    for (const placement_device_plan &dp : plan_.devices)
        devices_.push_back(std::make_unique<cuda_device>(hp_, tensors_, dp, n_slots_, n_ctx_, options.record_expert_traffic,
                                                         kv_, &meter));
    meter.finish();
    links_ = std::make_unique<cuda_links>(devices_, options.transport);
    multi_graphs_ = options.cuda_graphs_multi;
    // Host-staged transfers allocate their pinned buffers on first use: no graphs with them; NCCL
    // calls are not captured across GPUs here either.
    if (multi_graphs_ && devices_.size() > 1 && (links_->staged(devices_) || links_->nccl())) multi_graphs_ = false;
    for (size_t i = 1; multi_graphs_ && i < devices_.size(); ++i)
        if (devices_[i]->physical() != devices_[0]->physical() &&
            !cross_gpu_capture_works(devices_[0]->impl(), devices_[i]->impl())) {
            log_warn("cuda: this runtime cannot capture work across GPUs {} and {} into one graph: multi-device "
                     "steps run without graphs", devices_[0]->physical(), devices_[i]->physical());
            multi_graphs_ = false;
        }

    host_state &h = *host_;
    const size_t R = cuda_device::max_step_rows;
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&h.rows), 4 * R * sizeof(int32_t), cudaHostAllocPortable));
    std::fill(h.rows, h.rows + 4 * R, 0);
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&h.logits),
                                    size_t(cuda_device::max_logit_rows) * size_t(hp_.n_vocab) * sizeof(float),
                                    cudaHostAllocPortable));
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&h.tops),
                                    devices_.size() * size_t(cuda_device::max_logit_rows) * sizeof(cuda::logits_top_row),
                                    cudaHostAllocPortable));
    // The summaries run on every device holding head columns, or nowhere (forward then reduces
    // whole rows on the host).
    device_top_ = false;
    for (const auto &d : devices_) {
        const bool head = d->part().head_end > d->part().head_begin;
        if (head) device_top_ = d->has_logits_top();
        if (head && !device_top_) break;
    }
    // Draws on the device holding the head's first columns: the whole head, or half of it with the
    // other half (a tensor-parallel pair's) sent to it before the draw.
    std::vector<int32_t> heads;
    for (size_t i = 0; i < devices_.size(); ++i)
        if (devices_[i]->part().head_end > devices_[i]->part().head_begin) heads.push_back(int32_t(i));
    std::sort(heads.begin(), heads.end(),
              [&](int32_t a, int32_t b) { return devices_[size_t(a)]->part().head_begin < devices_[size_t(b)]->part().head_begin; });
    const bool head_whole = heads.size() == 1, head_halves = heads.size() == 2 &&
        devices_[size_t(heads[0])]->part().head_end == devices_[size_t(heads[1])]->part().head_begin;
    if (options.device_draws && device_top_ && (head_whole || head_halves) && devices_[size_t(heads[0])]->can_draw()) {
        draw_device_ = heads[0];
        draw_rest_ = head_halves ? heads[1] : -1;
    }
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&h.draws), size_t(cuda_device::max_logit_rows) * sizeof(row_draw),
                                    cudaHostAllocPortable));
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&h.groups), devices_.size() * sizeof(int32_t),
                                    cudaHostAllocPortable));
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&h.rule_rows),
                                    devices_.size() * size_t(cuda_device::max_logit_rows) * sizeof(cuda::logits_rules_row),
                                    cudaHostAllocPortable));
    h.groups_seen.assign(devices_.size(), 0);
    if (plan_.cold.used()) {
        const int32_t threads = options.n_threads > 0 ? options.n_threads : int32_t(std::max(1u, std::thread::hardware_concurrency()));
        const expert_tiers_spec tiers = expert_tiers_parse(options.expert_tiers);
        for (const std::vector<int32_t> &members : stage_members_) {
            const placement_device_plan &first = devices_[size_t(members[0])]->part();
            bool any = false;
            for (int32_t l = first.layer_begin; l < first.layer_end; ++l) any = any || !plan_.cold.experts[size_t(l)].empty();
            std::vector<cuda_device *> devs;
            for (int32_t i : members) devs.push_back(devices_[size_t(i)].get());
            cold_.push_back(any ? std::make_unique<cuda_cold_tier>(hp_, tensors_, plan_, std::move(devs), threads, h.rows + R, tiers)
                                : nullptr);
        }
        cold_threads_ = threads;
    }
    uint64_t weights = 0, kv = 0;
    for (const auto &d : devices_) {
        weights += d->weight_bytes();
        kv += d->kv_bytes();
    }
    log_info("cuda: {} logical device(s), weights {:.2f} GiB, KV {:.2f} GiB ({}), {}", devices_.size(),
             double(weights) / gib, double(kv) / gib, kv_type_name(kv_), links_->describe());
}

cuda_engine::~cuda_engine() {
    for (const auto &d : devices_) d->synchronize();
    cold_.clear();
    host_.reset();
    links_.reset();
    devices_.clear();
}

int32_t cuda_engine::slot_length(int32_t slot) const { return slots_.length(slot); }

void cuda_engine::slot_truncate(int32_t slot, int32_t n_keep) { slots_.truncate(slot, n_keep); }

std::string cuda_engine::layout() const {
    uint64_t kv = 0;
    for (const auto &d : devices_) kv += d->kv_bytes();
    const std::string steps = devices_.size() == 1
        ? fmt::format("graphs for <= {} rows", max_graph_rows)
        : fmt::format("micro-batches={}{}", micro_batches_ > 0 ? micro_batches_ : plan_.n_stages,
                      multi_graphs_ ? fmt::format(", graphs for <= {} rows", max_graph_rows) : std::string());
    std::set<int32_t> gpus;
    for (const auto &d : devices_) gpus.insert(d->physical());
    // "one device", "2 devices on 2 GPUs", "4 devices on 1 GPU" (logical devices sharing a GPU).
    const std::string where = devices_.size() == 1
        ? std::string("one device")
        : fmt::format("{} devices on {} GPU{}", devices_.size(), gpus.size(), gpus.size() == 1 ? "" : "s");
    const std::string tier = cold_threads_ > 0 ? fmt::format(", host tier on {} CPU threads", cold_threads_) : std::string();
    return fmt::format("{} | cuda {} ({}) {} kv={} {:.2f} GiB {}{}", placement_layout_line(plan_), devices_.front()->name(),
                       where, links_->describe(), kv_type_name(kv_), double(kv) / gib, steps, tier);
}

std::vector<int32_t> cuda_engine::gpus() const {
    std::vector<int32_t> out;
    for (const auto &d : devices_)
        if (std::find(out.begin(), out.end(), d->physical()) == out.end()) out.push_back(d->physical());
    return out;
}

std::vector<engine_device_memory> cuda_engine::device_memory() const {
    std::vector<engine_device_memory> out;
    std::map<int32_t, std::pair<size_t, size_t>> gpu;  // physical -> free, total
    for (const auto &d : devices_) {
        auto [it, fresh] = gpu.try_emplace(d->physical());
        // Off the engine's thread: the engine captures its graphs thread-locally, so a query
        // from here neither waits on nor disturbs them.
        if (fresh && (cudaSetDevice(d->physical()) != cudaSuccess ||
                      cudaMemGetInfo(&it->second.first, &it->second.second) != cudaSuccess))
            it->second = {0, 0};
        out.push_back({fmt::format("GPU {} {}", d->physical(), d->name()), d->weight_bytes(), d->kv_bytes(),
                       d->part().bytes_scratch, it->second.first, it->second.second});
    }
    return out;
}

std::map<std::string, double> cuda_engine::counters() const {
    std::set<int32_t> gpus;
    uint64_t kv = 0;
    for (const auto &d : devices_) {
        gpus.insert(d->physical());
        kv += d->kv_bytes();
    }
    return {{"launches_per_step", double(launches_per_step_)},
            {"kv_bytes", double(kv)},
            {"gpus", double(gpus.size())},
            {"experts_touched_per_layer", experts_touched_per_layer_},
            {"devices", double(devices_.size())},
            {"stages", double(plan_.n_stages)},
            {"bytes_moved_last_step", double(bytes_moved_)},
            {"device_draws", draw_device_ >= 0 ? 1.0 : 0.0},
            {"host_tier_pairs_last_step", double(cold_pairs_)}};
}

std::vector<std::vector<uint64_t>> cuda_engine::expert_traffic() const {
    if (!record_traffic_) return {};
    std::vector<std::vector<uint64_t>> traffic(size_t(hp_.n_layer), std::vector<uint64_t>(size_t(hp_.n_expert), 0));
    for (const auto &d : devices_) d->add_traffic(traffic);
    return traffic;
}

int64_t cuda_engine::enqueue(const std::vector<int32_t> &mb_begin, const std::vector<int32_t> &mb_out, int32_t n_out) {
    (void)n_out;
    int64_t launches = 0;
    const size_t R = cuda_device::max_step_rows;
    const int32_t n_mb = int32_t(mb_begin.size()) - 1;
    cuda_links &links = *links_;
    int32_t out0 = 0;
    for (int32_t m = 0; m < n_mb; ++m) {
        const int32_t b = mb_begin[size_t(m)], n = mb_begin[size_t(m) + 1] - b;
        for (int32_t s = 0; s < plan_.n_stages; ++s) {
            const std::vector<int32_t> &members = stage_members_[size_t(s)];
            cuda_device &first = *devices_[size_t(members[0])];
            const size_t row = first.d_model_bytes(), pair_row = first.pair_row_bytes();
            if (s == 0) {
                launches += first.embed(b, n);
                for (size_t i = 1; i < members.size(); ++i) {
                    cuda_device &p = *devices_[size_t(members[i])];
                    links.send(first, first.x_rows(b), p, p.x_rows(b), size_t(n) * row, (R - size_t(b)) * row);
                    links.send(first, first.h_rows(b), p, p.h_rows(b), size_t(n) * row, (R - size_t(b)) * row);
                    p.h_received();
                }
            }
            const placement_device_plan &part = first.part();
            cuda_cold_tier *tier = cold_.empty() ? nullptr : cold_[size_t(s)].get();
            for (int32_t l = part.layer_begin; l < part.layer_end; ++l) {
                // With cold experts the CPU takes the routed rows between the route and the experts.
                cuda_cold_tier *cold = tier && tier->any(l) ? tier : nullptr;
                for (int32_t i : members) {
                    cuda_device &dev = *devices_[size_t(i)];
                    launches += dev.layer_attention(l, b, n);  // the phases in order (a sum's operands are not)
                    launches += dev.layer_route(l, b, n);
                    if (!cold) launches += dev.layer_experts(l, b, n);
                }
                if (cold) {
                    launches += cold->send(l, b, n);
                    for (int32_t i : members) launches += devices_[size_t(i)]->layer_experts(l, b, n);
                }
                if (members.size() == 2) {
                    // Each member gets the other's pair outputs, then keeps the owner's value of every pair.
                    cuda_device &a = *devices_[size_t(members[0])], &c = *devices_[size_t(members[1])];
                    const int32_t parity = host_->exchanges++ & 1;
                    const size_t bytes = size_t(n) * pair_row, cap = (R - size_t(b)) * pair_row;
                    links.send(a, a.expert_out_rows(b), c, c.exchange_rows(parity, b), bytes, cap);
                    links.send(c, c.expert_out_rows(b), a, a.exchange_rows(parity, b), bytes, cap);
                    launches += a.merge_partner(l, b, n, parity) + c.merge_partner(l, b, n, parity);
                }
                if (cold) launches += cold->receive(l, b, n);
                for (int32_t i : members) launches += devices_[size_t(i)]->combine(l, b, n);
            }
            if (s + 1 < plan_.n_stages) {
                const std::vector<int32_t> &next = stage_members_[size_t(s) + 1];
                for (size_t i = 0; i < next.size(); ++i) {
                    cuda_device &src = *devices_[size_t(members[std::min(i, members.size() - 1)])];
                    cuda_device &dst = *devices_[size_t(next[i])];
                    links.send(src, src.x_rows(b), dst, dst.x_rows(b), size_t(n) * row, (R - size_t(b)) * row);
                    links.send(src, src.h_rows(b), dst, dst.h_rows(b), size_t(n) * row, (R - size_t(b)) * row);
                    dst.h_received();
                }
            } else {
                for (int32_t i : members) {
                    cuda_device &d = *devices_[size_t(i)];
                    if (d.part().head_end > d.part().head_begin) launches += d.head(b, mb_out[size_t(m)], out0);
                }
            }
        }
        out0 += mb_out[size_t(m)];
    }
    return launches;
}

void cuda_engine::join_streams() {
    cuda_device::state &d0 = devices_[0]->impl();
    for (size_t i = 1; i < devices_.size(); ++i) {
        cuda_device::state &di = devices_[i]->impl();
        TANDEM_CUDA_CHECK(cudaSetDevice(di.device));
        TANDEM_CUDA_CHECK(cudaEventRecord(di.event, di.stream));
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(d0.stream, di.event, 0));
    }
    TANDEM_CUDA_CHECK(cudaSetDevice(d0.device));
}


void cuda_engine::run_step(std::span<const engine_row> rows, bool prompt, float *logits_out, logits_top *top_out,
                           const row_draw *draws_in, bool best_only, bool device_rules) {
    host_state &h = *host_;
    const int32_t R = cuda_device::max_step_rows;
    const int32_t n_real = int32_t(rows.size());
    const bool one_device = devices_.size() == 1;
    const bool use_graph = (one_device || multi_graphs_) && n_real <= max_graph_rows;
    const int32_t n = use_graph ? graph_bucket(n_real) : n_real;
    const bool reduce = top_out != nullptr;
    const bool draw = reduce && draws_in != nullptr;
    const bool best = reduce && best_only;  // the draw kernel reads the row's max: logits_best's is the same value
    // Decode rows of distinct slots take the fused attention (cuda_device::set_distinct_slots);
    // prompt rows never do, so their steps skip the check.
    bool distinct = true;
    if (!prompt) {
        std::vector<int32_t> slots;
        slots.reserve(rows.size());
        for (const engine_row &r : rows) slots.push_back(r.slot);
        std::sort(slots.begin(), slots.end());
        distinct = std::adjacent_find(slots.begin(), slots.end()) == slots.end();
    }
    const bool ruled = reduce && device_rules && engine_rows_have_rules(rows);
    const host_state::graph_key graph_key{n, prompt, reduce, distinct, draw, best, ruled};
    for (const auto &d : devices_) {
        d->set_prompt_rows(prompt);
        d->set_distinct_slots(distinct);
    }

    // Micro-batches: contiguous row ranges (a slot's rows keep their order; each stage runs the
    // batches in order, so a later batch sees the K/V an earlier one wrote).
    int32_t n_mb = 1;
    if (plan_.n_stages > 1) n_mb = std::clamp(micro_batches_ > 0 ? micro_batches_ : plan_.n_stages, 1, n);
    std::vector<int32_t> mb_begin(size_t(n_mb) + 1), mb_out(size_t(n_mb), 0);
    for (int32_t m = 0; m <= n_mb; ++m) mb_begin[size_t(m)] = int32_t(int64_t(n) * m / n_mb);
    int32_t n_wanted = 0;
    for (int32_t m = 0; m < n_mb; ++m)
        for (int32_t i = mb_begin[size_t(m)]; i < mb_begin[size_t(m) + 1]; ++i) {
            const bool real = i < n_real;
            h.rows[i] = real ? rows[size_t(i)].token : 0;
            h.rows[R + i] = real ? rows[size_t(i)].slot : -1;
            h.rows[2 * R + i] = real ? rows[size_t(i)].pos : 0;
            if (real && rows[size_t(i)].want != row_output::none) {
                h.rows[3 * R + mb_begin[size_t(m)] + mb_out[size_t(m)]++] = i - mb_begin[size_t(m)];
                ++n_wanted;
            }
        }
    // A graph's shape is fixed: its head computes every row of the bucket (padding rows repeat
    // token 0 in no slot), and the host keeps the rows that want logits.
    std::vector<int32_t> keep;  // logits rows to keep, in row order
    int32_t n_download = n_wanted;
    if (use_graph) {
        for (int32_t m = 0; m < n_mb; ++m) {
            mb_out[size_t(m)] = mb_begin[size_t(m) + 1] - mb_begin[size_t(m)];
            for (int32_t j = 0; j < mb_out[size_t(m)]; ++j) h.rows[3 * R + mb_begin[size_t(m)] + j] = j;
        }
        for (int32_t i = 0; i < n_real; ++i)
            if (rows[size_t(i)].want != row_output::none) keep.push_back(i);
        n_download = keep.empty() ? 0 : keep.back() + 1;
    }
    // The draw requests by logits row: a graph computes every row of its bucket (the rows kept
    // below), a plain step the wanted rows in order.
    if (draw) {
        std::fill(h.draws, h.draws + cuda_device::max_logit_rows, row_draw{});
        for (int32_t j = 0; j < n_wanted; ++j) h.draws[use_graph ? keep[size_t(j)] : j] = draws_in[j];
        TANDEM_ASSERT(draw_device_ >= 0, "no device draws from the logits rows");
        devices_[size_t(draw_device_)]->upload_draws(h.draws, use_graph ? n : n_wanted);
    }
    if (ruled) upload_rules(rows, keep, use_graph ? n : n_wanted);
    for (const auto &d : devices_) d->upload_rows(h.rows);
    links_->reset_counters();
    if (use_graph) {
        // One graph per bucket. With several devices the capture forks from device 0's stream
        // into the others and joins back, so one launch replays every device's share and the
        // transfers between them; the other streams' row uploads come before it, and their
        // downloads after it.
        cuda_device::state &d0 = devices_[0]->impl();
        join_streams();
        auto it = h.graphs.find(graph_key);
        if (it == h.graphs.end()) {
            cudaGraph_t graph = nullptr;
            TANDEM_CUDA_CHECK(cudaStreamBeginCapture(d0.stream, cudaStreamCaptureModeThreadLocal));
            TANDEM_CUDA_CHECK(cudaEventRecord(d0.event, d0.stream));
            for (size_t i = 1; i < devices_.size(); ++i)
                TANDEM_CUDA_CHECK(cudaStreamWaitEvent(devices_[i]->impl().stream, d0.event, 0));
            launches_per_step_ = enqueue(mb_begin, mb_out, n);
            if (ruled) launches_per_step_ += enqueue_rules(n);
            if (reduce) launches_per_step_ += enqueue_logits_top(n, best);
            if (draw) launches_per_step_ += enqueue_draw(n);
            join_streams();
            TANDEM_CUDA_CHECK(cudaStreamEndCapture(d0.stream, &graph));
            cudaGraphExec_t exec = nullptr;
            TANDEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            TANDEM_CUDA_CHECK(cudaGraphDestroy(graph));
            it = h.graphs.emplace(graph_key, exec).first;
        }
        TANDEM_CUDA_CHECK(cudaGraphLaunch(it->second, d0.stream));
        TANDEM_CUDA_CHECK(cudaEventRecord(d0.event, d0.stream));
        for (size_t i = 1; i < devices_.size(); ++i)
            TANDEM_CUDA_CHECK(cudaStreamWaitEvent(devices_[i]->impl().stream, d0.event, 0));
    } else {
        launches_per_step_ = enqueue(mb_begin, mb_out, n_wanted);
        if (ruled) launches_per_step_ += enqueue_rules(n_wanted);
        if (reduce) launches_per_step_ += enqueue_logits_top(n_wanted, best);
        if (draw) launches_per_step_ += enqueue_draw(n_wanted);
    }
    if (use_graph && !h.graph_bytes.count(graph_key)) h.graph_bytes[graph_key] = links_->bytes_moved();
    bytes_moved_ = use_graph ? h.graph_bytes[graph_key] : links_->bytes_moved();
    for (size_t i = 0; i < devices_.size(); ++i) {
        cuda_device &d = *devices_[i];
        if (n_download > 0 && logits_out) d.download_logits(h.logits, n_download);
        if (n_download > 0 && reduce) d.download_logits_top(h.tops + i * size_t(cuda_device::max_logit_rows), n_download);
        d.download_groups_total(h.groups + i);
    }
    for (const auto &d : devices_) d->synchronize();
    for (const auto &t : cold_)
        if (t) {
            t->check();
            cold_pairs_ += t->take_pairs();
        }
    // Logits rows left the devices in micro-batch order, which is row order.
    int64_t groups = 0;
    for (size_t i = 0; i < devices_.size(); ++i) {
        groups += h.groups[i] - h.groups_seen[i];
        h.groups_seen[i] = h.groups[i];
    }
    experts_touched_per_layer_ = double(groups) / hp_.n_layer;
    const size_t vocab = size_t(hp_.n_vocab);
    if (logits_out) {
        if (!use_graph) {
            if (n_wanted > 0) std::memcpy(logits_out, h.logits, size_t(n_wanted) * vocab * sizeof(float));
        } else {
            for (size_t j = 0; j < keep.size(); ++j)
                std::memcpy(logits_out + j * vocab, h.logits + size_t(keep[j]) * vocab, vocab * sizeof(float));
        }
    }
    if (reduce) {
        std::vector<const cuda::logits_top_row *> parts;
        for (int32_t j = 0; j < n_wanted; ++j) {
            const size_t r = size_t(use_graph ? keep[size_t(j)] : j);
            parts.clear();
            for (size_t i = 0; i < devices_.size(); ++i)
                if (devices_[i]->part().head_end > devices_[i]->part().head_begin)
                    parts.push_back(h.tops + i * size_t(cuda_device::max_logit_rows) + r);
            top_out[j] = best ? cuda_merge_logits_best(parts, hp_.n_vocab) : cuda_merge_logits_top(parts, hp_.n_vocab);
            if (draw && draws_in[j].temperature > 0.0f) {
                const cuda::logits_top_row &d = h.tops[size_t(draw_device_) * size_t(cuda_device::max_logit_rows) + r];
                // A row with NaN may draw nothing: the sampler refuses it (has_nan) whatever was drawn.
                if (d.drawn < 0 && !top_out[j].has_nan) fail(error_kind::internal, "logits row {} was not drawn on the device", j);
                top_out[j].drawn = d.drawn;
                top_out[j].drawn_logit = d.drawn_logit;
                top_out[j].drawn_u = draws_in[j].u;
            }
        }
    }
}

void cuda_engine::forward(std::span<const engine_row> rows, engine_outputs &out) {
    bool want_logits = false, want_summary = false, draws = false;
    for (const engine_row &r : rows) {
        if (r.want == row_output::none) continue;
        want_logits = want_logits || r.want == row_output::logits;
        want_summary = want_summary || r.want == row_output::summary;
        draws = draws || r.draw.temperature > 0.0f;
    }
    // Whole rows when a row wants them, or when the device cannot reduce (the head's devices
    // make no summaries) or draw (a plan without device draws): logit rules, summaries and draws
    // then come from the rows on the host, the same bits. Otherwise the rules are applied on the
    // head's devices before the summaries and draws (cuda/logits_rules.h).
    if (want_logits || !device_top_ || (draws && draw_device_ < 0)) {
        forward_rows(rows, &out.logits, device_top_ ? &out.top : nullptr);
        engine_outputs_from_logits(rows, hp_.n_vocab, device_top_, out);
        return;
    }
    std::vector<row_draw> row_draws;
    for (const engine_row &r : rows)
        if (r.want != row_output::none && draws) row_draws.push_back(r.draw);
    out.logits.clear();
    forward_rows(rows, nullptr, &out.top, row_draws, !want_summary, true);
}

void cuda_engine::forward_rows(std::span<const engine_row> rows, std::vector<float> *logits, std::vector<logits_top> *top,
                               std::span<const row_draw> draws, bool best_only, bool device_rules) {
    if (logits) logits->clear();
    if (top) top->clear();
    cold_pairs_ = 0;
    if (rows.empty()) return;
    slots_.validate(rows);
    const size_t vocab = size_t(hp_.n_vocab);
    size_t n_wanted = 0;
    for (const engine_row &r : rows) n_wanted += r.want != row_output::none ? 1 : 0;
    if (logits) logits->resize(n_wanted * vocab);
    if (top) top->resize(n_wanted);
    TANDEM_ASSERT(draws.empty() || (top && draws.size() == n_wanted), "{} draw requests for {} logits rows", draws.size(), n_wanted);

    // Decode rows and prompt rows run as separate steps (their kernels differ, engine_row::prompt).
    step_limits limits;
    limits.decode_rows = size_t(cuda_device::step_rows_limit(hp_, false));
    limits.prompt_rows = size_t(cuda_device::step_rows_limit(hp_, true));
    limits.logit_rows = size_t(cuda_device::max_logit_rows);
    std::vector<engine_row> step_rows;
    std::vector<float> scratch;
    std::vector<logits_top> step_top;
    std::vector<row_draw> step_draws;
    for (const engine_step &step : engine_steps_split(rows, n_slots_, limits)) {
        step_rows.clear();
        for (size_t i : step.rows) step_rows.push_back(rows[i]);
        // Logits rows that are consecutive in the output go there directly.
        bool direct = true;
        for (size_t j = 1; j < step.out.size(); ++j) direct = direct && step.out[j] == step.out[j - 1] + 1;
        float *dst = nullptr;
        if (logits) {
            dst = step.out.empty() ? nullptr : logits->data() + step.out[0] * vocab;
            if (!direct) {
                scratch.resize(step.out.size() * vocab);
                dst = scratch.data();
            }
        }
        step_top.assign(top ? step.out.size() : 0, logits_top{});
        // A step without logits rows (a prompt chunk) reduces nothing: no summary launches; one
        // without draw requests launches no draws.
        step_draws.clear();
        for (size_t j : step.out)
            if (!draws.empty()) step_draws.push_back(draws[j]);
        const bool step_draw = draws_any(step_draws);
        run_step(step_rows, step.prompt, dst, top && !step.out.empty() ? step_top.data() : nullptr,
                 step_draw ? step_draws.data() : nullptr, best_only && !logits, device_rules && !logits);
        if (logits && !direct)
            for (size_t j = 0; j < step.out.size(); ++j)
                std::memcpy(logits->data() + step.out[j] * vocab, scratch.data() + j * vocab, vocab * sizeof(float));
        for (size_t j = 0; top && j < step.out.size(); ++j) (*top)[step.out[j]] = std::move(step_top[j]);
    }
    slots_.advance(rows);
}

}  // namespace tandem
