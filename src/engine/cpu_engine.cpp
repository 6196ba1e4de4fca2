// src/engine/cpu_engine.cpp - the CPU engine front: validates rows, runs the stages of the plan
// in order, exchanges expert outputs inside a tensor-parallel pair and gathers head shards.
// Partial results are combined in a fixed order (each row's experts in slot order, head rows by
// index), so logits are bitwise identical on every plan and for every batch.
#include "cpu_engine.h"
#include "load_meter.h"

#include "host_memory.h"
#include "src/cpu/cpu_ops.h"
#include "src/cpu/digits.h"
#include "tandem/error.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

namespace tandem {

cpu_engine::cpu_engine(std::shared_ptr<const gguf_file> file, const engine_options &options)
    : file_(std::move(file)), hp_(model_hparams_read(*file_)), tensors_(model_tensors_bind(*file_, hp_)),
      slots_(options, hp_) {
    if (options.n_devices < 1 || options.n_devices > 64)
        fail(error_kind::config, "--devices must be in 1..64, got {}", options.n_devices);
    const int32_t n_slots = options.n_slots, n_ctx = options.n_ctx;
    if (options.micro_batches < 0) fail(error_kind::config, "micro-batches must be >= 0, got {}", options.micro_batches);
    micro_batches_ = options.micro_batches;
    kv_ = engine_kv_type_resolve(options);
    arithmetic_ = options.arithmetic == cpu_arithmetic::exact ? cpu::cpu_arithmetic::exact : cpu::cpu_arithmetic::digits;
    n_threads_ = options.n_threads > 0 ? options.n_threads : int32_t(std::max(1u, std::thread::hardware_concurrency()));

    // The plan: N CPU virtual devices, all-to-all "P2P", sharing the host's RAM.
    const host_memory mem = host_memory_read();
    placement_model pm;
    pm.bytes = model_bytes_read(*file_, hp_, sizeof(float));
    pm.n_layer = hp_.n_layer;
    pm.n_expert = hp_.n_expert;
    pm.n_vocab = hp_.n_vocab;
    placement_request req;
    req.mode = options.n_devices == 1 ? placement_mode::single
               : options.tensor_parallel ? placement_mode::tensor_parallel
                                         : placement_mode::pipeline;
    pm.n_expert_used = hp_.n_expert_used;
    pm.d_model = hp_.d_model;
    for (int32_t i = 0; i < options.n_devices; ++i) req.devices.push_back(i);
    req.n_sessions = n_slots;
    req.n_ctx = n_ctx;
    const uint64_t host_bytes = mem.total_bytes ? mem.total_bytes : (uint64_t(1) << 40);
    topology topo = topology_cpu_virtual(options.n_devices, host_bytes);
    const bool several = !options.hosts.empty() || !options.hosts_json.empty();
    if (several) hosts_start(options, req, topo);
    // With a host tier, --gpu-vram budgets the virtual devices as if they were GPUs (what makes the
    // tier take experts); without one it stays the GPUs' flag (a CUDA fallback keeps running).
    req.host_experts = placement_parse_host_experts(options.host_experts, topo);
    if (req.host_experts && !several) req.budgets = placement_parse_vram(options.gpu_vram, size_t(options.n_devices));
    if (!options.expert_balance.empty()) req.traffic = expert_traffic_load(options.expert_balance);
    const expert_tiers_spec tiers = expert_tiers_parse(options.expert_tiers);
    req.cold_expert_bytes = expert_tiers_cold_bytes(tiers, hp_);
    plan_ = placement_plan_make(req, topo, pm);
    expert_tiers_check(tiers, hp_, plan_);
    if (comm_ && rank_ == 0) hosts_handshake(options, req, topo, pm);

    if (options.record_expert_traffic)
        traffic_.assign(size_t(hp_.n_layer), std::vector<uint64_t>(size_t(hp_.n_expert), 0));
    stage_members_ = placement_stage_members(plan_);
    scratch_.resize(stage_members_.size());
    int32_t n_local = 0;
    for (const placement_device_plan &dp : plan_.devices) n_local += dp.host == rank_ ? 1 : 0;
    const int32_t threads_each = std::max(1, n_threads_ / n_local);
    for (const placement_device_plan &dp : plan_.devices) {
        if (dp.host != rank_) {  // another host's device
            devices_.push_back(nullptr);
            continue;
        }
        cpu_part part;
        part.layer_begin = dp.layer_begin;
        part.layer_end = dp.layer_end;
        part.embedding = dp.embedding;
        part.head_begin = dp.head_begin;
        part.head_end = dp.head_end;
        if (plan_.mode == placement_mode::tensor_parallel || plan_.cold.used())
            for (const auto &ids : dp.experts) {
                std::vector<uint8_t> mask(size_t(hp_.n_expert), 0);
                for (int32_t e : ids) mask[size_t(e)] = 1;
                part.owned.push_back(std::move(mask));
            }
        devices_.push_back(std::make_unique<cpu_device>(hp_, tensors_, std::move(part), n_slots, n_ctx,
                                                        n_local == 1 ? n_threads_ : threads_each,
                                                        kv_, arithmetic_));
    }
    // The host tier: one per stage, so pipelined stages never share its scratch.
    if (plan_.cold.used())
        for (const std::vector<int32_t> &members : stage_members_) {
            const cpu_device &first = *devices_[size_t(members[0])];
            cold_.push_back(std::make_unique<cold_experts>(hp_, tensors_, plan_, first.part().layer_begin,
                                                           first.part().layer_end, first.n_threads(), arithmetic_,
                                                           tiers));
        }
    if (comm_ && rank_ == 0) hosts_wait_ready();
    if (options.progress != nullptr) read_weights_in(options.progress);
}

void cpu_engine::read_weights_in(engine_load_progress *progress) const {
    uint64_t total = 0;
    for (const gguf_tensor_info &t : file_->tensors()) total += t.n_bytes;
    load_meter meter(progress, total);
    for (const gguf_tensor_info &t : file_->tensors()) load_touch(t.data, t.n_bytes, meter);
    meter.finish();
}

std::vector<engine_device_memory> cpu_engine::device_memory() const {
    std::vector<engine_device_memory> out;
    for (size_t i = 0; i < devices_.size(); ++i) {
        if (!devices_[i]) continue;  // another host's
        const placement_device_plan &dp = plan_.devices[i];
        out.push_back({fmt::format("cpu{}", dp.logical), dp.weights(), devices_[i]->kv_bytes(), dp.bytes_scratch, 0, 0});
    }
    return out;
}

int32_t cpu_engine::slot_length(int32_t slot) const { return slots_.length(slot); }

void cpu_engine::slot_truncate(int32_t slot, int32_t n_keep) {
    slots_.truncate(slot, n_keep);
    if (comm_ && rank_ == 0) hosts_send({op_truncate, slot, n_keep, 0});
}

uint64_t cpu_engine::kv_token_bytes() const {
    const model_kv_shape kv = model_kv_shape_of(hp_);
    return uint64_t(hp_.n_layer) * uint64_t(kv.n_planes) * kv_row_bytes(kv_, kv.width);
}

// Each stage's first member writes its layers once; a tensor-parallel partner holds the same K/V.
void cpu_engine::slot_export(int32_t slot, int32_t n_tokens, std::span<uint8_t> out) {
    slots_.check_export(slot, n_tokens, out.size(), kv_token_bytes());
    for (const std::vector<int32_t> &members : stage_members_)
        if (local(members[0])) devices_[size_t(members[0])]->kv_export(slot, n_tokens, out.data(), kv_token_bytes());
    if (comm_ && rank_ == 0) hosts_export(slot, n_tokens, out);
}

void cpu_engine::slot_import(int32_t slot, std::span<const uint8_t> in) {
    const int32_t n = slots_.check_import(slot, in.size(), kv_token_bytes());
    for (const auto &dev : devices_)
        if (dev) dev->kv_import(slot, n, in.data(), kv_token_bytes());
    slots_.set_length(slot, n);
    if (comm_ && rank_ == 0) hosts_import(slot, in);
}

void cpu_engine::slot_copy(int32_t src, int32_t dst, int32_t n_tokens) {
    slots_.check_export(src, n_tokens, size_t(n_tokens) * kv_token_bytes(), kv_token_bytes());
    slots_.length(dst);
    if (src == dst) return slots_.truncate(dst, n_tokens);
    for (const auto &dev : devices_)
        if (dev) dev->kv_copy(src, dst, n_tokens);
    slots_.set_length(dst, n_tokens);
    if (comm_ && rank_ == 0) hosts_send({op_copy, src, dst, n_tokens});
}

std::string cpu_engine::layout() const {
    size_t kv = 0;
    for (const auto &d : devices_) kv += d ? d->kv_bytes() : 0;
    const bool digits = arithmetic_ == cpu::cpu_arithmetic::digits;
    return fmt::format("{} | cpu threads={} micro-batches={} kv={} {:.2f} GiB arithmetic={}{}{}", placement_layout_line(plan_), n_threads_,
                       micro_batches_ > 0 ? micro_batches_ : plan_.n_stages, kv_ == kv_type::f16 ? std::string("f16 (as f32)") : std::string(kv_type_name(kv_)), kv / 1073741824.0,
                       digits ? "digits (" : "exact", digits ? cpu::cpu_isa_name(cpu::cpu_isa_best()) : "", digits ? ")" : "");
}

std::map<std::string, double> cpu_engine::counters() const {
    size_t kv = 0;
    for (const auto &d : devices_) kv += d->kv_bytes();
    return {{"experts_touched_per_layer", experts_touched_},
            {"kv_bytes", double(kv)},
            {"threads", double(n_threads_)},
            {"devices", double(devices_.size())},
            {"bytes_moved_last_step", double(bytes_moved_)},
            {"host_tier_pairs_last_step", double(cold_pairs_)}};
}

void cpu_engine::run_stage(int32_t stage, std::span<const engine_row> rows, std::vector<float> &x,
                           stage_stats &stats) {
    const std::vector<int32_t> &members = stage_members_[size_t(stage)];
    const int64_t n = int64_t(rows.size()), d = hp_.d_model;
    const size_t max_pairs = size_t(n * hp_.n_expert_used);
    const cpu_part &part = devices_[size_t(members[0])]->part();
    // Each member holds its own copy of the hidden states (attention is replicated in a pair). The
    // buffers are the stage's, kept across calls (every slot output is written each layer: by the
    // member that owns its expert, then the exchange).
    stage_scratch &sc = scratch_[size_t(stage)];
    // dense: the shared experts or a dense FFN, per member.
    auto &xs = sc.xs, &hs = sc.hs, &outs = sc.outs, &weights = sc.weights, &dense = sc.dense;
    auto &ids = sc.ids;
    for (auto *v : {&xs, &hs, &outs, &weights, &dense}) v->resize(members.size());
    ids.resize(members.size());
    for (size_t m = 0; m < members.size(); ++m) {
        xs[m] = x;
        hs[m].resize(size_t(n * d));
        outs[m].resize(max_pairs * size_t(d));
        ids[m].resize(max_pairs);
        weights[m].resize(max_pairs);
    }
    if (stage > 0) stats.bytes_moved += x.size() * sizeof(float);  // hidden states from the previous stage
    if (members.size() > 1) stats.bytes_moved += x.size() * sizeof(float) * (members.size() - 1);
    int64_t touched = 0;
    for (int32_t l = part.layer_begin; l < part.layer_end; ++l) {
        const layer_recipe recipe = model_layer_recipe(hp_, l);
        const size_t n_pairs = size_t(n * recipe.n_expert_used);
        for (size_t m = 0; m < members.size(); ++m) {
            cpu_device &dev = *devices_[size_t(members[m])];
            dev.layer_attention(l, rows, xs[m].data());
            dev.layer_route(l, n, xs[m].data(), hs[m].data(), ids[m].data(), weights[m].data());
            if (n_pairs > 0) dev.layer_experts(l, n, hs[m].data(), ids[m].data(), outs[m].data());
            if (recipe.ffn != layer_ffn::routed) {
                dense[m].resize(size_t(n * d));
                dev.layer_dense(l, n, hs[m].data(), dense[m].data());
            }
        }
        // The host tier computes the cold slots once (the members' rows are the same bits) and
        // sends them to every member.
        if (n_pairs > 0 && !cold_.empty()) {
            cold_experts &cold = *cold_[size_t(stage)];
            stats.cold_pairs += cold.compute(l, n, hs[0].data(), ids[0].data(), outs[0].data());
            for (size_t m = 0; m < members.size(); ++m)
                for (size_t p = 0; p < n_pairs; ++p)
                    if (cold.is_cold(l, ids[m][p])) {
                        if (m > 0)
                            std::memcpy(outs[m].data() + p * size_t(d), outs[0].data() + p * size_t(d), size_t(d) * sizeof(float));
                        stats.bytes_moved += size_t(d) * sizeof(float);
                    }
        }
        // Exchange inside the pair: each member receives the slot outputs of the experts the
        // other owns, so both hold every slot's output before combining in slot order.
        for (size_t m = 0; m < members.size(); ++m)
            for (size_t other = 0; other < members.size(); ++other) {
                if (other == m) continue;
                const cpu_device &src = *devices_[size_t(members[other])];
                for (size_t p = 0; p < n_pairs; ++p)
                    if (src.owns(l, ids[m][p])) {
                        std::memcpy(outs[m].data() + p * size_t(d), outs[other].data() + p * size_t(d),
                                    size_t(d) * sizeof(float));
                        stats.bytes_moved += size_t(d) * sizeof(float);
                    }
            }
        for (size_t m = 0; m < members.size(); ++m) {
            if (recipe.ffn == layer_ffn::routed)
                cpu::moe_combine(xs[m].data(), outs[m].data(), weights[m].data(), n, recipe.n_expert_used, d);
            else
                cpu::moe_combine_dense(xs[m].data(), outs[m].data(), weights[m].data(), dense[m].data(), n,
                                       recipe.n_expert_used, d);
        }
        if (n_pairs == 0) continue;
        touched += cpu::moe_count_experts(ids[0].data(), int64_t(n_pairs), hp_.n_expert, nullptr);
        if (!traffic_.empty())
            for (size_t p = 0; p < n_pairs; ++p) ++traffic_[size_t(l)][size_t(ids[0][p])];
    }
    stats.experts_touched += touched;
    x.swap(xs[0]);
}

void cpu_engine::run_pipeline(const std::vector<std::span<const engine_row>> &groups,
                              std::vector<std::vector<float>> &xs, std::vector<stage_stats> &stats) {
    const int32_t n_stages = plan_.n_stages, n_groups = int32_t(groups.size());
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> done(size_t(n_stages), 0);  // micro-batches each stage has finished
    bool failed = false;
    std::exception_ptr error;
    auto worker = [&](int32_t s) {
        try {
            for (int32_t m = 0; m < n_groups; ++m) {
                {
                    std::unique_lock lock(mu);
                    cv.wait(lock, [&] { return failed || s == 0 || done[size_t(s - 1)] > m; });
                    if (failed) return;
                }
                run_stage(s, groups[size_t(m)], xs[size_t(m)], stats[size_t(s)]);
                std::lock_guard lock(mu);
                ++done[size_t(s)];
                cv.notify_all();
            }
        } catch (...) {
            std::lock_guard lock(mu);
            if (!failed) error = std::current_exception();
            failed = true;
            cv.notify_all();
        }
    };
    std::vector<std::thread> threads;
    for (int32_t s = 0; s < n_stages; ++s) threads.emplace_back(worker, s);
    for (auto &t : threads) t.join();
    if (error) std::rethrow_exception(error);
}

void cpu_engine::forward(std::span<const engine_row> rows, engine_outputs &out) {
    out.top.clear();
    forward_logits(rows, out.logits);
    engine_outputs_from_logits(rows, hp_.n_vocab, false, out);
}

void cpu_engine::forward_logits(std::span<const engine_row> rows, std::vector<float> &logits) {
    logits.clear();
    if (rows.empty()) return;
    if (comm_) return forward_hosts(rows, logits);
    slots_.validate(rows);
    const size_t d = size_t(hp_.d_model);
    const std::vector<std::span<const engine_row>> groups = micro_batches(rows);
    const int32_t n_groups = int32_t(groups.size());
    std::vector<std::vector<float>> xs(static_cast<size_t>(n_groups));
    for (int32_t m = 0; m < n_groups; ++m) {
        xs[size_t(m)].assign(groups[size_t(m)].size() * d, 0.0f);
        for (const auto &dev : devices_)
            if (dev && dev->part().embedding) dev->embed(groups[size_t(m)], xs[size_t(m)].data());
    }
    std::vector<stage_stats> stats(static_cast<size_t>(plan_.n_stages));
    if (n_groups == 1) {
        for (int32_t s = 0; s < plan_.n_stages; ++s) run_stage(s, rows, xs[0], stats[size_t(s)]);
    } else {
        run_pipeline(groups, xs, stats);
    }
    experts_touched_ = 0;
    bytes_moved_ = 0;
    cold_pairs_ = 0;
    for (const stage_stats &st : stats) {
        experts_touched_ += double(st.experts_touched);
        bytes_moved_ += st.bytes_moved;
        cold_pairs_ += st.cold_pairs;
    }
    experts_touched_ /= hp_.n_layer;

    // Head shards: each device with head rows computes them; gather by vocab index, in row order.
    logits.assign(cpu_output_rows(rows) * size_t(hp_.n_vocab), 0.0f);
    size_t out_row = 0;
    for (int32_t m = 0; m < n_groups; ++m) {
        const size_t group_out = cpu_output_rows(groups[size_t(m)]);
        head_rows(groups[size_t(m)], xs[size_t(m)].data(), logits.data() + out_row * size_t(hp_.n_vocab), group_out);
        out_row += group_out;
    }
    slots_.advance(rows);
}

// Micro-batches: contiguous row ranges, so a slot's rows keep their order across batches; every
// stage runs them in order, so a later batch sees the K/V an earlier one wrote.
std::vector<std::span<const engine_row>> cpu_engine::micro_batches(std::span<const engine_row> rows) const {
    const size_t n = rows.size();
    int32_t n_groups = plan_.n_stages == 1 ? 1 : (micro_batches_ > 0 ? micro_batches_ : plan_.n_stages);
    n_groups = int32_t(std::min<size_t>(size_t(n_groups), n));
    std::vector<std::span<const engine_row>> groups;
    for (int32_t m = 0; m < n_groups; ++m) {
        const size_t begin = n * size_t(m) / size_t(n_groups), end = n * size_t(m + 1) / size_t(n_groups);
        groups.push_back(rows.subspan(begin, end - begin));
    }
    return groups;
}

void cpu_engine::head_rows(std::span<const engine_row> group, const float *x, float *logits, size_t n_out) {
    std::vector<float> shard;
    for (const auto &dev : devices_) {
        if (!dev) continue;
        const cpu_part &part = dev->part();
        if (part.head_end <= part.head_begin || n_out == 0) continue;
        dev->head(group, x, shard);
        const size_t cols = size_t(part.head_end - part.head_begin);
        for (size_t j = 0; j < n_out; ++j)
            std::memcpy(logits + j * size_t(hp_.n_vocab) + size_t(part.head_begin), shard.data() + j * cols,
                        cols * sizeof(float));
        if (devices_.size() > 1) bytes_moved_ += n_out * cols * sizeof(float);
    }
}

}  // namespace tandem
