// src/engine/cuda_engine.h - the CUDA engine: a placement plan over logical CUDA devices (one GPU,
// pipeline stages, tensor-parallel pairs; several logical devices may share a GPU), every op on
// the devices, weights in their GGUF types, F32 KV cache. One-device decode steps replay CUDA
// graphs; with several devices, rows move through the stages in micro-batches.
#pragma once

#include "slot_table.h"
#include "tandem/engine.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/placement.h"

#include <map>
#include <memory>
#include <vector>

namespace tandem {

class cuda_cold_tier;
class cuda_device;
class cuda_links;

class cuda_engine final : public engine {
public:
    cuda_engine(std::shared_ptr<const gguf_file> file, const engine_options &options);
    ~cuda_engine() override;

    const model_hparams &hparams() const override { return hp_; }
    int32_t n_slots() const override { return n_slots_; }
    int32_t n_ctx() const override { return n_ctx_; }
    void forward(std::span<const engine_row> rows, engine_outputs &out) override;
    int32_t slot_length(int32_t slot) const override;
    void slot_truncate(int32_t slot, int32_t n_keep) override;
    uint64_t kv_token_bytes() const override;
    kv_type kv_cache_type() const override { return kv_; }
    void slot_export(int32_t slot, int32_t n_tokens, std::span<uint8_t> out) override;
    void slot_import(int32_t slot, std::span<const uint8_t> in) override;
    void slot_copy(int32_t src, int32_t dst, int32_t n_tokens) override;
    std::shared_ptr<uint8_t> host_pinned(size_t bytes) override;
    std::string layout() const override;
    std::map<std::string, double> counters() const override;
    std::vector<int32_t> gpus() const override;
    std::vector<engine_device_memory> device_memory() const override;
    std::vector<std::vector<uint64_t>> expert_traffic() const override;

    const placement_plan &plan() const { return plan_; }

    // Larger calls run as consecutive steps of at most cuda_device::step_rows_limit rows (same
    // result: a slot's rows are in position order, each step writes its K/V before the next reads).
    // Calls of up to this many rows replay a CUDA graph captured for the next power of two (one
    // device always; several with engine_options::cuda_graphs_multi).
    static constexpr int32_t max_graph_rows = 64;

    struct host_state;  // pinned buffers and graphs (opaque here: no CUDA types in this header)

private:
    // Whole rows into *logits and / or summaries into *top (either may be null) for the output
    // rows; with draws (one an output row, or empty) the summaries carry the device's draws; with
    // best_only (no logits) each summary is the row's best token alone.
    // device_rules: the output rows' logit rules are applied on the head's devices (only without
    // whole rows, whose rules the host applies).
    void forward_rows(std::span<const engine_row> rows, std::vector<float> *logits, std::vector<logits_top> *top,
                      std::span<const row_draw> draws = {}, bool best_only = false, bool device_rules = false);
    // One step of rows of one kind (engine_row::prompt), within cuda_device's row limits; the
    // logits rows go to logits_out and / or, reduced on the devices, to top_out (either may be
    // null); draws_in (null, or one a logits row) are drawn on the head's device into top_out;
    // best_only: top_out gets each row's best token alone.
    void run_step(std::span<const engine_row> rows, bool prompt, float *logits_out, logits_top *top_out, const row_draw *draws_in,
                  bool best_only, bool device_rules);
    // Tokens of K/V the pinned staging buffer holds (allocated on first use), and every device
    // finished with what was enqueued (the staging buffer is reused and graphs replay on device
    // 0's stream, so a device's own stream order is not enough).
    int32_t kv_staging_tokens();
    void synchronize_all();
    // Device 0's stream waits for everything enqueued so far on the other devices' streams.
    void join_streams();
    // Enqueues the whole step on every device; returns the launches.
    int64_t enqueue(const std::vector<int32_t> &mb_begin, const std::vector<int32_t> &mb_out, int32_t n_out);
    // Enqueues the reduction of logits rows [0, n_out) on every device holding head columns
    // (best_only: to each row's best token).
    int64_t enqueue_logits_top(int32_t n_out, bool best_only);
    int64_t enqueue_draw(int32_t n_out);  // a split head's other columns sent first
    // The output rows' logit rules -> every device holding head columns, a descriptor for each of
    // the step's n_logits_rows logits rows (keep: a graph's logits row of each output row; empty:
    // output row j is logits row j); then their launches, before the summaries.
    void upload_rules(std::span<const engine_row> rows, const std::vector<int32_t> &keep, int32_t n_logits_rows);
    int64_t enqueue_rules(int32_t n_out);

    std::shared_ptr<const gguf_file> file_;
    model_hparams hp_;
    model_tensors tensors_;
    slot_table slots_;
    int32_t n_slots_ = 0, n_ctx_ = 0, micro_batches_ = 0;
    kv_type kv_ = kv_type::f32;  // engine_options::kv resolved: f32, f16 or q8_0
    bool multi_graphs_ = false;
    bool device_top_ = false;      // the head's devices reduce logits rows to summaries
    // engine_options::device_draws where the plan allows: the device that draws (it holds the
    // head's first columns), and the one whose columns it gets first (a split head; -1: none).
    int32_t draw_device_ = -1, draw_rest_ = -1;
    bool record_traffic_ = false;  // several devices: decode steps as one multi-device graph
    placement_plan plan_;
    std::vector<std::unique_ptr<cuda_device>> devices_;  // by logical index
    std::vector<std::vector<int32_t>> stage_members_;    // [stage] -> logical devices (host first)
    std::unique_ptr<cuda_links> links_;
    std::unique_ptr<host_state> host_;
    std::vector<std::unique_ptr<cuda_cold_tier>> cold_;  // [stage] the host tier (null: no cold experts there)
    int32_t cold_threads_ = 0;
    int64_t cold_pairs_ = 0;  // (row, slot) pairs the host tier computed in the last call
    int64_t launches_per_step_ = 0;
    double experts_touched_per_layer_ = 0;
    uint64_t bytes_moved_ = 0;
};

// The topology of the visible CUDA devices (names, memory, SMs, peer access and rank): the
// probe `tandem plan --backend cuda` and the engine use.
topology cuda_topology_probe();

// The plan a CUDA engine would run for this model and these options, checked against the model's
// shapes, the budgets and what the GPUs have free now. Throws config/unsupported naming the
// problem; allocates nothing (the server calls it before it listens).
placement_plan cuda_plan_make(const gguf_file &file, const model_hparams &hp, const engine_options &options);

}  // namespace tandem
