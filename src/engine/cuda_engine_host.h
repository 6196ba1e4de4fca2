// src/engine/cuda_engine_host.h - the CUDA engine's host side of a step (private to the engine):
// its pinned buffers and captured graphs, and the merge of the head devices' row summaries.
#pragma once

#include "cuda/logits_rules.h"
#include "cuda/logits_top.h"
#include "cuda_device.h"
#include "cuda_engine.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace tandem {

struct cuda_engine::host_state {
    int32_t *rows = nullptr;      // pinned [4][cuda_device::max_step_rows]: tokens, slots, positions, head rows
    float *logits = nullptr;      // pinned [cuda_device::max_logit_rows][n_vocab]
    cuda::logits_top_row *tops = nullptr;  // pinned [devices][cuda_device::max_logit_rows]: row summaries
    row_draw *draws = nullptr;    // pinned [cuda_device::max_logit_rows]: the step's draw requests
    cuda::logits_rules_row *rule_rows = nullptr;  // pinned [devices][cuda_device::max_logit_rows]
    uint8_t *rule_pool = nullptr;  // pinned: the step's adjustments and masks, packed (grows)
    size_t rule_pool_bytes = 0;
    int32_t *groups = nullptr;    // pinned [devices]: each device's routed-group counter
    std::vector<int64_t> groups_seen;
    // Small steps: (bucket, prompt rows, rows reduced on the device, rows of distinct slots, rows
    // drawn on the device, rows reduced to their best token, rows with logit rules) -> captured
    // step, and the bytes its transfers move.
    using graph_key = std::tuple<int32_t, bool, bool, bool, bool, bool, bool>;
    std::map<graph_key, cudaGraphExec_t> graphs;
    std::map<graph_key, uint64_t> graph_bytes;
    int32_t exchanges = 0;        // pair exchanges so far (their buffer parity)

    ~host_state() {
        for (auto &[bucket, g] : graphs) cudaGraphExecDestroy(g);
        if (rows) cudaFreeHost(rows);
        if (logits) cudaFreeHost(logits);
        if (tops) cudaFreeHost(tops);
        if (draws) cudaFreeHost(draws);
        if (rule_rows) cudaFreeHost(rule_rows);
        if (rule_pool) cudaFreeHost(rule_pool);
        if (groups) cudaFreeHost(groups);
    }
};

// One row's summary from the devices holding its head columns (each sorted best first): the max
// over devices, the sums rescaled to it in device order, the lists merged in the sampler's order.
logits_top cuda_merge_logits_top(const std::vector<const cuda::logits_top_row *> &parts, int32_t n_vocab);
// One row's best token from those devices' cuda::logits_best rows (a device with only NaNs left out).
logits_top cuda_merge_logits_best(const std::vector<const cuda::logits_top_row *> &parts, int32_t n_vocab);

}  // namespace tandem
