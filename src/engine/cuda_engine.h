// src/engine/cuda_engine.h - the CUDA engine on one GPU: Qwen3-MoE forward over rows with every
// op on the device, weights in their GGUF types, F32 KV cache, decode steps as CUDA graphs.
#pragma once

#include "slot_table.h"
#include "tandem/engine.h"
#include "tandem/gguf.h"
#include "tandem/model.h"

#include <map>
#include <memory>
#include <vector>

namespace tandem {

class cuda_engine final : public engine {
public:
    cuda_engine(std::shared_ptr<const gguf_file> file, const engine_options &options);
    ~cuda_engine() override;

    const model_hparams &hparams() const override { return hp_; }
    int32_t n_slots() const override { return n_slots_; }
    int32_t n_ctx() const override { return n_ctx_; }
    void forward(std::span<const engine_row> rows, std::vector<float> &logits) override;
    int32_t slot_length(int32_t slot) const override;
    void slot_truncate(int32_t slot, int32_t n_keep) override;
    std::string layout() const override;
    std::map<std::string, double> counters() const override;

    // Rows per device step: larger calls run as consecutive steps (same result: a slot's rows
    // are in position order, and every step writes its K/V before the next one reads it).
    static constexpr int32_t max_step_rows = 512;
    // Calls of up to this many rows replay a CUDA graph captured for the next power of two.
    static constexpr int32_t max_graph_rows = 16;

    struct impl;  // device state (opaque here: no CUDA types in this header)

private:
    void run_step(std::span<const engine_row> rows, float *logits_out);

    std::shared_ptr<const gguf_file> file_;
    model_hparams hp_;
    model_tensors tensors_;
    slot_table slots_;
    int32_t n_slots_ = 0, n_ctx_ = 0;
    std::unique_ptr<impl> impl_;
};

}  // namespace tandem
