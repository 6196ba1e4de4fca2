// src/engine/cpu_engine.h - the CPU reference engine: one or several CPU virtual devices
// executing a placement plan (pipeline stages, tensor-parallel pairs), per-slot KV caches.
#pragma once

#include "cold_experts.h"
#include "cpu_device.h"
#include "slot_table.h"
#include "tandem/engine.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/placement.h"

#include <memory>
#include <vector>

namespace tandem {

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

private:
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
};

}  // namespace tandem
