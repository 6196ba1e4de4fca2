// tandem/engine.h - the one engine call: a forward pass over rows (slot, position, token) that
// may come from several sessions, on a backend and a placement plan.
#pragma once

#include "tandem/logit_rules.h"
#include "tandem/model.h"
#include "tandem/sampler.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem {

class gguf_file;

// What a caller needs back from one row of an engine call. Rows that want anything are the
// call's output rows, in row order.
enum class row_output : uint8_t {
    none,
    best,     // the row's best token and NaN flag (top[0], has_nan), and its draw when asked
    summary,  // its logits_top: 64 best tokens and the normaliser, and its draw when asked
    logits,   // its whole logits row, and its summary
};

struct engine_row {
    int32_t slot = 0;          // KV slot (session) the row belongs to
    int32_t pos = 0;           // position in that slot's sequence
    int32_t token = 0;         // input token id
    row_output want = row_output::none;
    // A row of a prompt (prefill) rather than a generated token. The CUDA engine computes prompt
    // rows with its tiled GEMM kernels and decode rows with its matrix-vector ones: each kind's results
    // are independent of the step's other rows, bitwise, and the two kinds agree within the
    // CUDA-vs-CPU tolerance. Callers mark every row of a prompt, however it is chunked, so a
    // session's cache never depends on how its prompt was split. The CPU engine ignores it.
    bool prompt = false;
    // With temperature > 0, an output row's exact draw (draw_exact.h) is made beside its summary
    // (logits_top::drawn, drawn_logit, drawn_u): on the device that holds the head where the
    // backend can, else on the host from the whole row; the same token either way.
    row_draw draw{};
    // An output row's logit rules (generation controls), applied before its summary, best token
    // and draw, and to the logits it returns; null: none. The caller keeps them alive for the call.
    const row_rules *rules = nullptr;
};

// An engine call's results. `top` has one entry per output row, in row order: for a row that wants
// `best` only top[0], has_nan and the draw are promised (log_norm may be NaN, the top may hold that
// one entry); for the others the whole summary. `logits` holds n_vocab floats per output row when
// any row of the call wants logits, and is empty otherwise.
struct engine_outputs {
    std::vector<logits_top> top;
    std::vector<float> logits;
};

enum class engine_backend : uint8_t { automatic, cpu, cuda };
enum class kv_type : uint8_t { automatic, f32, f16, q8_0 };
// CUDA transfers between devices: peer-to-peer where a pair has it (automatic), only p2p, staged
// through pinned host memory, or NCCL send/recv.
enum class engine_transport : uint8_t { automatic, p2p, host, nccl };
enum class cpu_arithmetic : uint8_t { digits, exact };

// Names as the flags spell them ("auto", "cpu", "cuda"; "auto", "f32", "f16"; "auto", "p2p",
// "host", "nccl"); parse throws error(config) naming the allowed values.
engine_backend engine_backend_parse(const std::string &name);
const char *engine_backend_name(engine_backend backend);
kv_type kv_type_parse(const std::string &name);
const char *kv_type_name(kv_type type);
engine_transport engine_transport_parse(const std::string &name);
const char *engine_transport_name(engine_transport transport);
cpu_arithmetic cpu_arithmetic_parse(const std::string &name);  // "digits", "exact"
const char *cpu_arithmetic_name(cpu_arithmetic arithmetic);

// Weights an opening engine has placed so far (CUDA: uploaded to the GPUs; CPU: read in from the
// file's mapping), for a server's log and /health while it loads; other threads read it.
struct engine_load_progress {
    std::atomic<uint64_t> done{0};
    std::atomic<uint64_t> total{0};  // 0 until the engine has planned
    double percent() const;          // 0..100
};

// One device of an engine's plan: what the engine placed there and, on a GPU, the memory the GPU
// has in all and free now (both 0 for CPU virtual devices).
struct engine_device_memory {
    std::string name;  // "GPU 0 NVIDIA H100 80GB HBM3", "cpu0"
    uint64_t weights = 0, kv = 0, other = 0;  // other: step buffers and exchange space
    uint64_t gpu_free = 0, gpu_total = 0;
};

struct engine_options {
    engine_backend backend = engine_backend::cpu;  // automatic: engine_backend_resolve
    int32_t n_slots = 1;                // resident KV slots
    int32_t n_ctx = 4096;               // tokens per slot
    int32_t n_threads = 0;              // CPU threads (0: all cores)
    int32_t n_devices = 1;              // CPU virtual devices (placement)
    std::vector<int32_t> gpu_devices;   // CUDA device ordinals in logical order (duplicates share a
                                        // GPU); empty: auto (pairs from the topology with
                                        // tensor_parallel, else the GPU with the most memory)
    std::string gpu_vram = "auto";      // per-GPU budgets: "auto", or GiB for all / per device (the
                                        // CPU backend with a host tier: its virtual devices' budgets)
    // Host memory for the routed experts the devices cannot hold ("off", "auto" or GiB): the host
    // tier, whose rows the CPU computes with its quantized products (placement.h).
    std::string host_experts = "off";
    // A routing profile (expert traffic JSON, --expert-balance): pairs split experts by it and the
    // host tier keeps each layer's busiest experts on the devices; empty: uniform routing.
    std::string expert_balance;
    // Tiers of precision for the host tier's experts (tandem/expert_tiers.h): "off", or "cold=TYPE"
    // to requantize the cold experts at load into host memory with that type (the file is unchanged).
    std::string expert_tiers = "off";
    engine_transport transport = engine_transport::automatic;
    bool tensor_parallel = false;
    // Count the rows routed to each expert of each layer (engine::expert_traffic), the input of
    // `--expert-balance`. Costs one small launch per layer on CUDA.
    bool record_expert_traffic = false;
    // CUDA, several devices: replay decode steps (<= 64 rows) as one graph spanning the devices.
    bool cuda_graphs_multi = true;
    // With several pipeline stages, rows are split into this many micro-batches that move
    // through the stages concurrently (0: one per stage; 1: no overlap).
    int32_t micro_batches = 0;
    // The KV cache's element type: f32, f16 (half the bytes: the CUDA engine stores halves and its
    // decode attention runs on tensor cores; the CPU engine rounds each key and value to the
    // nearest half and keeps it as f32, so both compute on the same values), q8_0 (ggml's blocks of
    // 32 int8 values and an f16 scale, 34 bytes per 32 values on both engines: each row of keys and
    // values quantized as ggml's quantize_row_q8_0 does, dequantized by the attention as it loads
    // them), or automatic (f16 on the CUDA backend, q8_0 where f16's plan would not fit; f32 on
    // the CPU: the server's default).
    kv_type kv = kv_type::f32;
    // CPU backend: products with Q4_K, Q6_K and Q8_0 weights on digits (int8 activation digits,
    // integer dot products: the GPU's arithmetic on Q4_K, several times faster) or exact (each
    // weight dequantised to float, fp32 products: the reference). Other weight types are always exact.
    cpu_arithmetic arithmetic = cpu_arithmetic::digits;
    // CUDA: make the rows' draws on the device that holds the head (a tensor-parallel pair: the
    // first half's device, the other half sent to it), else on the host from the downloaded rows
    // (the same tokens, slower). counters()["device_draws"]: whether the plan does.
    bool device_draws = true;
    // Several hosts, one process each under mpirun (CPU backend; docs/placement.md): "NAME:DEVICES,..."
    // or a hosts file's JSON text; host_link "GB/s[,latency us]" (empty: measured at start-up).
    std::string hosts, hosts_json, host_link;
    // A worker that takes no message for this long is lost: in-flight requests fail with 503.
    double host_timeout_s = 30.0;
    // Several hosts: the memory of a host the hosts list gives none (0: this machine's available).
    uint64_t host_memory_bytes = 0;
    // Where the engine reports its loading (null: nowhere). The CPU engine then also reads its
    // weights in while it opens, so the first requests do not wait on the file's pages.
    engine_load_progress *progress = nullptr;
};

// options.kv with automatic resolved by the backend (options.backend, resolved first when automatic).
kv_type engine_kv_type_resolve(const engine_options &options);
// The same for a model file, as engine_open resolves it: on the CUDA backend, automatic is f16,
// or q8_0 where the placement plan fits with q8_0 but not with f16 (logged).
kv_type engine_kv_type_fit(const gguf_file &file, const engine_options &options);
// Bytes of one KV cache element for the resolved options.kv: 4, 2, or 34/32 for q8_0.
double engine_kv_bytes(const engine_options &options);
// Bytes of a row of `width` cache elements of `type` (resolved), as slot blobs and files hold it;
// q8_0 rows are whole blocks of 32 (error(config) otherwise).
uint64_t kv_row_bytes(kv_type type, int64_t width);

class engine {
public:
    virtual ~engine() = default;

    virtual const model_hparams &hparams() const = 0;
    virtual int32_t n_slots() const = 0;
    virtual int32_t n_ctx() const = 0;

    // Runs all rows in one call. Within a slot, rows must have consecutive positions starting
    // at the slot's cached length (slot_length); a slot may appear with several rows (prefill)
    // and any number of slots may appear (decode). Each output row gets what it wants (and may
    // get more: a call computes, for every output row, the most any row of it wants). A row's
    // results do not depend on the other rows of the call (batch invariance, bitwise).
    virtual void forward(std::span<const engine_row> rows, engine_outputs &out) = 0;

    // Tokens whose K/V the slot holds.
    virtual int32_t slot_length(int32_t slot) const = 0;
    // Keeps the first n_keep cached positions of the slot and forgets the rest.
    virtual void slot_truncate(int32_t slot, int32_t n_keep) = 0;

    // A slot's K/V as a blob, for the host prompt cache and slot files. A blob of n tokens holds,
    // token after token, every layer's cache planes (model_kv_shape_of) once in layer order, each
    // plane's `width` elements in the cache's type (kv_cache_type: floats, halves or q8_0 blocks), bitwise as
    // the slot holds them, whatever the placement; so its first m tokens are the blob of m.
    // Bytes of one token of a blob; 0: this engine cannot move K/V (the methods below throw).
    virtual uint64_t kv_token_bytes() const { return 0; }
    virtual kv_type kv_cache_type() const { return kv_type::f32; }
    // out [n_tokens * kv_token_bytes()] <- the slot's positions [0, n_tokens) (<= slot_length).
    virtual void slot_export(int32_t slot, int32_t n_tokens, std::span<uint8_t> out);
    // The slot holds the blob's in.size() / kv_token_bytes() tokens (<= n_ctx) and nothing after.
    virtual void slot_import(int32_t slot, std::span<const uint8_t> in);
    // Slot dst holds slot src's positions [0, n_tokens) (<= its length) and nothing after.
    virtual void slot_copy(int32_t src, int32_t dst, int32_t n_tokens);
    // Page-locked host memory of `bytes` that slot_export and slot_import move K/V to and from
    // without staging (the host prompt cache keeps its blobs there), or nullptr where an engine
    // gains nothing from it (the CPU engine).
    virtual std::shared_ptr<uint8_t> host_pinned(size_t bytes) {
        (void)bytes;
        return nullptr;
    }

    // One line describing the backend and placement ("cpu: 1 device, 16 slots x 4096 ...").
    virtual std::string layout() const = 0;

    // Backend counters for benchmarks and /metrics (e.g. "launches_per_step"; "kv_bytes": the KV
    // cache's bytes over every device; "device_name" is not a number so it goes in layout()).
    // Empty when the backend keeps none.
    virtual std::map<std::string, double> counters() const { return {}; }

    // The distinct physical GPUs the engine runs on, in plan order; empty for the CPU backend.
    virtual std::vector<int32_t> gpus() const { return {}; }

    // Each device of the plan, in plan order (for /monitor).
    virtual std::vector<engine_device_memory> device_memory() const { return {}; }

    // Rows routed to each expert of each layer since the engine opened ([n_layer][n_expert]),
    // when engine_options::record_expert_traffic was set; empty otherwise.
    virtual std::vector<std::vector<uint64_t>> expert_traffic() const { return {}; }

    // Several hosts: each host the engine lost ("name (rank r): why"); thread-safe. Empty otherwise.
    virtual std::vector<std::string> lost_hosts() const { return {}; }
};

// automatic -> cuda when this build has the CUDA backend, a GPU is visible and no CPU virtual
// devices were asked for (n_devices 1); else cpu. Others are returned as they are.
engine_backend engine_backend_resolve(const engine_options &options);

// Whether any output row of the call carries logit rules.
bool engine_rows_have_rules(std::span<const engine_row> rows);

// For backends that compute whole logits rows, on the host: applies the output rows' rules, fills
// out.top (each output row's summary, unless tops_done and no row has rules) and the rows' draws
// from out.logits, then drops out.logits when no row wants them. out.logits holds n_vocab floats
// per output row.
void engine_outputs_from_logits(std::span<const engine_row> rows, int32_t n_vocab, bool tops_done, engine_outputs &out);

// The whole logits rows of a call whose output rows want logits (tools and tests).
void engine_forward_logits(engine &eng, std::span<const engine_row> rows, std::vector<float> &logits);

// Builds the engine for a validated model file. Throws config errors that name the problem.
std::unique_ptr<engine> engine_open(std::shared_ptr<const gguf_file> file, const engine_options &options);

// Checks, without loading anything, that the backend can run the model with these options and
// that the placement plan fits the devices' budgets (CUDA: what the GPUs have free now); returns
// the plan's layout line. Throws the error engine_open would throw. The CPU backend's memory is
// checked by the caller (the server's memory plan); for it this returns an empty string.
std::string engine_plan_check(const gguf_file &file, const engine_options &options);

// `tandem worker`: a process of a run over several hosts (an mpirun rank other than 0). Takes its
// options from the front (rank 0), opens the model (model_path, or the front's path when empty),
// runs its stages until the front's engine closes; returns the exit code. Throws config without
// MPI. many: serve one engine after another until the front sends an empty configuration (tests
// that open several engines in one run).
int engine_worker_run(const std::string &model_path, int32_t n_threads, bool many = false);

// Writes the engine's recorded expert traffic as the `--expert-balance` JSON (placement.h) to path.
// Throws config when the engine did not record, or the file cannot be written.
void engine_write_expert_traffic(const engine &eng, const std::string &path);

// A GPU's memory bandwidth, the roof of a memory-bound step: the peak from its memory clock and
// bus width (0 when the device does not report them) and a measured device-to-device copy (bytes
// read plus bytes written a second: 1 GiB copies, median of 5). Throws unsupported without the
// CUDA backend.
struct engine_memory_speed {
    int32_t gpu = 0;
    double peak_gb_s = 0;
    double copy_gb_s = 0;
};
engine_memory_speed engine_memory_measure(int32_t gpu);

// Measured copy bandwidth between each ordered pair of the listed GPUs (peer-to-peer and staged
// through host memory), one line per pair. Throws unsupported without the CUDA backend.
std::string engine_link_report(const std::vector<int32_t> &gpus);

}  // namespace tandem
