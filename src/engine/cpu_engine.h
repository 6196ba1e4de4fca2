// src/engine/cpu_engine.h - the CPU reference engine: one or several CPU virtual devices
// executing a placement plan (pipeline stages, tensor-parallel pairs), per-slot KV caches.
#pragma once

#include "cold_experts.h"
#include "cpu_device.h"
#include "slot_table.h"
#include "src/hosts/host_comm.h"
#include "tandem/engine.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/placement.h"

#include <memory>
#include <vector>

namespace tandem {

// Rows of a call that want an output.
inline size_t cpu_output_rows(std::span<const engine_row> rows) {
    size_t n = 0;
    for (const engine_row &r : rows) n += r.want != row_output::none ? 1 : 0;
    return n;
}

class cpu_engine final : public engine {
public:
    cpu_engine(std::shared_ptr<const gguf_file> file, const engine_options &options);

    const model_hparams &hparams() const override { return hp_; }
    int32_t n_slots() const override { return slots_.n_slots(); }
    int32_t n_ctx() const override { return slots_.n_ctx(); }
    void forward(std::span<const engine_row> rows, engine_outputs &out) override;
    int32_t slot_length(int32_t slot) const override;
    void slot_truncate(int32_t slot, int32_t n_keep) override;
    uint64_t kv_token_bytes() const override;
    kv_type kv_cache_type() const override { return kv_; }
    void slot_export(int32_t slot, int32_t n_tokens, std::span<uint8_t> out) override;
    void slot_import(int32_t slot, std::span<const uint8_t> in) override;
    void slot_copy(int32_t src, int32_t dst, int32_t n_tokens) override;
    std::string layout() const override;
    std::map<std::string, double> counters() const override;
    std::vector<std::vector<uint64_t>> expert_traffic() const override { return traffic_; }
    std::vector<engine_device_memory> device_memory() const override;

    const placement_plan &plan() const { return plan_; }
    std::vector<std::string> lost_hosts() const override;
    // A worker of a run over several hosts: runs the front's commands until it says stop.
    void serve();
    ~cpu_engine() override;

private:
    // Several hosts (cpu_engine_hosts.cpp): the front sends each worker the options and measures
    // the link before planning; after building its devices it waits for every worker's.
    void hosts_start(const engine_options &options, placement_request &req, topology &topo);
    // The front, once its plan stands: the workers' options, then the link measured (unless given).
    void hosts_handshake(const engine_options &options, placement_request &req, const topology &topo,
                         const placement_model &pm);
    void hosts_wait_ready();
    // Both roles: this process's stages of a step over the micro-batches; the front gathers logits.
    void forward_hosts(std::span<const engine_row> rows, std::vector<float> &logits);
    void hosts_check() const;  // throws unavailable once a host was lost
    struct host_command {
        int32_t op = 0, a = 0, b = 0, c = 0;
    };
    enum host_op : int32_t { op_forward = 1, op_truncate, op_copy, op_import, op_export, op_stop };
    void hosts_send(host_command cmd, std::span<const engine_row> rows = {});  // to every worker
    void hosts_export(int32_t slot, int32_t n_tokens, std::span<uint8_t> out);
    void hosts_import(int32_t slot, std::span<const uint8_t> in);
    // Contiguous row ranges, one per micro-batch.
    std::vector<std::span<const engine_row>> micro_batches(std::span<const engine_row> rows) const;
    // The group's head rows [n_out][n_vocab] from this process's head shards.
    void head_rows(std::span<const engine_row> group, const float *x, float *logits, size_t n_out);
    bool local(int32_t logical) const { return devices_[size_t(logical)] != nullptr; }
    bool stage_local(int32_t stage) const { return plan_.stage_host(stage) == rank_; }

    // Faults the file's pages in while the server reports loading (engine_options::progress).
    void read_weights_in(engine_load_progress *progress) const;
    // The logits of the output rows, n_vocab floats each in row order.
    void forward_logits(std::span<const engine_row> rows, std::vector<float> &logits);
    struct stage_stats {
        int64_t experts_touched = 0;  // summed over the stage's layers
        uint64_t bytes_moved = 0;
        int64_t cold_pairs = 0;       // (row, slot) pairs the host tier computed
    };
    // Runs one stage's layers on its members (one device, or a tensor-parallel pair).
    void run_stage(int32_t stage, std::span<const engine_row> rows, std::vector<float> &x, stage_stats &stats);
    // Runs every stage over the micro-batches; stage s works on micro-batch m while stage s+1
    // works on m-1 (one thread per stage, each with its devices' share of the cores).
    void run_pipeline(const std::vector<std::span<const engine_row>> &groups, std::vector<std::vector<float>> &xs,
                      std::vector<stage_stats> &stats);

    std::shared_ptr<const gguf_file> file_;
    model_hparams hp_;
    model_tensors tensors_;
    placement_plan plan_;
    std::vector<std::unique_ptr<cpu_device>> devices_;   // by logical index
    std::vector<std::vector<int32_t>> stage_members_;     // [stage] -> logical devices (host first)
    std::vector<std::unique_ptr<cold_experts>> cold_;     // [stage] the host tier; empty when unused
    // A stage's buffers, kept across calls (one thread runs a stage at a time): per member its hidden
    // states, normalised rows, slot outputs, routing.
    struct stage_scratch {
        std::vector<std::vector<float>> xs, hs, outs, weights, dense;
        std::vector<std::vector<int32_t>> ids;
    };
    std::vector<stage_scratch> scratch_;                  // [stage]
    slot_table slots_;
    int32_t n_threads_ = 0, micro_batches_ = 0;
    kv_type kv_ = kv_type::f32;  // engine_options::kv resolved: f16 rounds keys and values (kept as f32), q8_0 stores blocks
    cpu::cpu_arithmetic arithmetic_ = cpu::cpu_arithmetic::digits;
    double experts_touched_ = 0;     // distinct experts per layer in the last forward (average)
    uint64_t bytes_moved_ = 0;       // hidden states, expert outputs and logits between devices
    int64_t cold_pairs_ = 0;         // (row, slot) pairs of the last forward on the host tier
    std::vector<std::vector<uint64_t>> traffic_;  // [n_layer][n_expert] when recording (each stage
                                                  // thread writes only its own layers' rows)
    // Several hosts: this process's rank (0: the front) and the comm; devices_ of other hosts are null.
    host_comm *comm_ = nullptr;
    int32_t rank_ = 0;
    double host_timeout_s_ = 30.0;
    uint64_t host_memory_bytes_ = 0;  // what a host the list gives no memory has
};

}  // namespace tandem
