// tandem/engine.h - the one engine call: a forward pass over rows (slot, position, token) that
// may come from several sessions, on a backend and a placement plan.
#pragma once

#include "tandem/model.h"
#include "tandem/sampler.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem {

class gguf_file;

struct engine_row {
    int32_t slot = 0;         // KV slot (session) the row belongs to
    int32_t pos = 0;          // position in that slot's sequence
    int32_t token = 0;        // input token id
    bool want_logits = false; // write this row's logits to the output
    // A row of a prompt (prefill) rather than a generated token. The CUDA engine computes prompt
    // rows with its tiled GEMM kernels and decode rows with its matrix-vector ones: each kind's results
    // are independent of the step's other rows, bitwise, and the two kinds agree within the
    // CUDA-vs-CPU tolerance. Callers mark every row of a prompt, however it is chunked, so a
    // session's cache never depends on how its prompt was split. The CPU engine ignores it.
    bool prompt = false;
};

struct engine_options {
    std::string backend = "cpu";        // "cpu", "cuda", or "auto" (engine_backend_resolve)
    int32_t n_slots = 1;                // resident KV slots
    int32_t n_ctx = 4096;               // tokens per slot
    int32_t n_threads = 0;              // CPU threads (0: all cores)
    int32_t n_devices = 1;              // CPU virtual devices (placement)
    std::vector<int32_t> gpu_devices;   // CUDA device ordinals in logical order (duplicates share a
                                        // GPU); empty: auto (pairs from the topology with
                                        // tensor_parallel, else the GPU with the most memory)
    std::string gpu_vram = "auto";      // per-GPU budgets: "auto", or GiB for all / per device
    std::string transport = "auto";     // CUDA transfers between devices: auto, p2p or host
    bool tensor_parallel = false;
    // Count the rows routed to each expert of each layer (engine::expert_traffic), the input of
    // `--expert-balance`. Costs one small launch per layer on CUDA.
    bool record_expert_traffic = false;
    // CUDA, several devices: replay decode steps (<= 64 rows) as one graph spanning the devices.
    bool cuda_graphs_multi = true;
    // With several pipeline stages, rows are split into this many micro-batches that move
    // through the stages concurrently (0: one per stage; 1: no overlap).
    int32_t micro_batches = 0;
    // The KV cache's element type: "f32", "f16" (half the bytes: the CUDA engine stores halves and
    // its decode attention runs on tensor cores; the CPU engine rounds each key and value to the
    // nearest half and keeps it as f32, so both compute on the same values), or "auto" (f16 on the
    // CUDA backend, f32 on the CPU: the server's default). engine_kv_bytes checks it.
    std::string kv_type = "f32";
    // CPU backend: products with Q4_K, Q6_K and Q8_0 weights as "digits" (int8 activation digits,
    // integer dot products: the GPU's arithmetic on Q4_K, several times faster) or "exact" (each
    // weight dequantised to float, fp32 products: the reference). Other weight types are always exact.
    std::string cpu_arithmetic = "digits";
    // CUDA: make forward_draw's draws on the device that holds the head (a tensor-parallel pair:
    // the first half's device, the other half sent to it), else on the host from the downloaded
    // rows (the same tokens, slower). counters()["device_draws"]: whether the plan does.
    // On by default since its GPU run (session 46, H100: the kernel tests under memcheck and
    // racecheck, and the same tokens as the host's draws; docs/perf-notes.md).
    bool device_draws = true;
};

// options.kv_type with "auto" resolved by the backend (options.backend, resolved first when
// "auto"); other names as given (engine_kv_bytes rejects unknown ones).
std::string engine_kv_type_resolve(const engine_options &options);
// Bytes of one KV cache element for the resolved options.kv_type (4 or 2); throws config for an
// unknown name.
uint32_t engine_kv_bytes(const engine_options &options);

class engine {
public:
    virtual ~engine() = default;

    virtual const model_hparams &hparams() const = 0;
    virtual int32_t n_slots() const = 0;
    virtual int32_t n_ctx() const = 0;

    // Runs all rows in one call. Within a slot, rows must have consecutive positions starting
    // at the slot's cached length (slot_length); a slot may appear with several rows (prefill)
    // and any number of slots may appear (decode). Logits of rows with want_logits are written
    // to `logits` in row order, n_vocab floats each. A row's logits do not depend on the other
    // rows of the call (batch invariance, bitwise).
    virtual void forward(std::span<const engine_row> rows, std::vector<float> &logits) = 0;

    // forward, with each want_logits row reduced to its logits_top (sampler.h), in row order.
    // The CUDA engine reduces the rows on the device and moves ~0.5 KB a row to the host instead
    // of n_vocab floats; the default reduces forward's rows on the host (logits_top_of). The top
    // is the same bits either way.
    virtual void forward_top(std::span<const engine_row> rows, std::vector<logits_top> &top) {
        std::vector<float> logits;
        forward(rows, logits);
        const size_t vocab = size_t(hparams().n_vocab);
        top.clear();
        for (size_t i = 0; i < logits.size() / vocab; ++i) top.push_back(logits_top_of({logits.data() + i * vocab, vocab}));
    }

    // forward_draw for rows that need nothing of their summary but the best token and the draw
    // (no logprobs; greedy, or a draw the engine makes): top[j].top[0] is the row's best (id, logit)
    // in the sampler's order, has_nan its NaN flag and drawn / drawn_logit / drawn_u its draw, all
    // bitwise forward_draw's; nothing else is promised (log_norm may be NaN, the top may hold that
    // one entry). The CUDA engine reduces each row to its best on the device in one launch
    // (cuda/logits_top.h: logits_best) instead of selecting 64 and summing the normaliser; the
    // default is forward_draw.
    virtual void forward_best(std::span<const engine_row> rows, std::span<const row_draw> draws, std::vector<logits_top> &top) {
        forward_draw(rows, draws, top);
    }

    // forward and forward_top in one call: whole rows and their summaries (a draw from a whole row
    // takes the row's normaliser and best tokens from its summary instead of computing them). The
    // CUDA engine reduces on the device beside the rows' download; the default reduces on the host.
    virtual void forward_rows_top(std::span<const engine_row> rows, std::vector<float> &logits, std::vector<logits_top> &top) {
        forward(rows, logits);
        const size_t vocab = size_t(hparams().n_vocab);
        top.clear();
        for (size_t i = 0; i < logits.size() / vocab; ++i) top.push_back(logits_top_of({logits.data() + i * vocab, vocab}));
    }

    // forward_top, and for each want_logits row j with draws[j].temperature > 0 (draws: one a
    // want_logits row, in row order, or empty) the row's exact draw (draw_exact.h) in
    // top[j].drawn, drawn_logit and drawn_u. The CUDA engine can draw on the device (engine_options::
    // device_draws): only the token and the summary leave it.
    // The default draws on the host from forward_rows_top's rows: the same token either way.
    virtual void forward_draw(std::span<const engine_row> rows, std::span<const row_draw> draws, std::vector<logits_top> &top) {
        if (!draws_any(draws)) {
            forward_top(rows, top);
            return;
        }
        std::vector<float> logits;
        forward_rows_top(rows, logits, top);
        draw_rows_exact(logits, draws, top);
    }

    // Tokens whose K/V the slot holds.
    virtual int32_t slot_length(int32_t slot) const = 0;
    // Keeps the first n_keep cached positions of the slot and forgets the rest.
    virtual void slot_truncate(int32_t slot, int32_t n_keep) = 0;

    // One line describing the backend and placement ("cpu: 1 device, 16 slots x 4096 ...").
    virtual std::string layout() const = 0;

    // Backend counters for benchmarks and /metrics (e.g. "launches_per_step", "device_name" is
    // not a number so it goes in layout()). Empty when the backend keeps none.
    virtual std::map<std::string, double> counters() const { return {}; }

    // Rows routed to each expert of each layer since the engine opened ([n_layer][n_expert]),
    // when engine_options::record_expert_traffic was set; empty otherwise.
    virtual std::vector<std::vector<uint64_t>> expert_traffic() const { return {}; }
};

// "auto" -> "cuda" when this build has the CUDA backend, a GPU is visible and no CPU virtual
// devices were asked for (n_devices 1); else "cpu". Other names are returned as they are.
std::string engine_backend_resolve(const engine_options &options);

// Builds the engine for a validated model file. Throws config errors that name the problem.
std::unique_ptr<engine> engine_open(std::shared_ptr<const gguf_file> file, const engine_options &options);

// Checks, without loading anything, that the backend can run the model with these options and
// that the placement plan fits the devices' budgets (CUDA: what the GPUs have free now); returns
// the plan's layout line. Throws the error engine_open would throw. The CPU backend's memory is
// checked by the caller (the server's memory plan); for it this returns an empty string.
std::string engine_plan_check(const gguf_file &file, const engine_options &options);

// Writes the engine's recorded expert traffic as the `--expert-balance` JSON (placement.h) to path.
// Throws config when the engine did not record, or the file cannot be written.
void engine_write_expert_traffic(const engine &eng, const std::string &path);

// Measured copy bandwidth between each ordered pair of the listed GPUs (peer-to-peer and staged
// through host memory), one line per pair. Throws unsupported without the CUDA backend.
std::string engine_link_report(const std::vector<int32_t> &gpus);

}  // namespace tandem
