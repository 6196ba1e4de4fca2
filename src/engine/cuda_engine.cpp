// src/engine/cuda_engine.cpp - the CUDA engine: uploads the model in its GGUF types, keeps
// per-slot F32 K/V on the device, runs each step's forward as launches of the cuda/ families
// (captured once per batch-size bucket as a CUDA graph), and copies back only the logits asked for.
#include "cuda_engine.h"

#include "cuda/attention.h"
#include "cuda/cuda_check.h"
#include "cuda/matvec.h"
#include "cuda/moe.h"
#include "cuda/norm.h"
#include "tandem/error.h"
#include "tandem/log.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

namespace tandem {

namespace {

// A weight matrix on the device: n_mat stacked matrices of n_out rows of n_in elements.
struct dev_matrix {
    const void *data = nullptr;
    ggml_type type = ggml_type::f32;
    int32_t n_in = 0, n_out = 0;
};

struct dev_layer {
    const float *attn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr, *ffn_norm = nullptr;
    dev_matrix wq, wk, wv, wo, router, gate, up, down;
};

template <class T>
T *device_alloc(size_t count) {
    void *p = nullptr;
    if (count == 0) count = 1;
    TANDEM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    return static_cast<T *>(p);
}

int32_t graph_bucket(int32_t n) {
    int32_t b = 1;
    while (b < n) b *= 2;
    return b;
}

}  // namespace

struct cuda_engine::impl {
    int device = 0;
    std::string device_name;
    cudaStream_t stream = nullptr;
    uint8_t *weights = nullptr;
    size_t weight_bytes = 0;
    float *kv = nullptr;  // [n_layer][2][n_slots][n_ctx][kv_dim]
    size_t kv_bytes = 0;
    float *inv_freq = nullptr;
    dev_matrix tok_embd, output;
    const float *output_norm = nullptr;
    std::vector<dev_layer> layers;
    int32_t chunk = 0, n_chunks = 0;

    // Step buffers for max_step_rows rows.
    int32_t *rows_dev = nullptr;   // [4][max_step_rows]: tokens, slots, positions, head rows
    int32_t *rows_host = nullptr;  // pinned mirror, plus one slot for the groups counter
    float *x = nullptr, *h = nullptr, *q = nullptr, *kb = nullptr, *vb = nullptr, *att = nullptr;
    float *router_logits = nullptr, *route_w = nullptr, *act = nullptr, *eout = nullptr, *partial = nullptr;
    int32_t *ids = nullptr, *group_expert = nullptr, *group_off = nullptr, *n_groups = nullptr;
    int32_t *pair_x = nullptr, *pair_y = nullptr, *groups_total = nullptr;
    float *logits = nullptr;       // [max_step_rows][n_vocab]
    float *logits_host = nullptr;  // pinned
    int32_t groups_total_host = 0;

    std::map<int32_t, cudaGraphExec_t> graphs;  // bucket -> captured step
    int64_t launches_per_step = 0;
    double experts_touched_per_layer = 0;

    ~impl() {
        for (auto &[bucket, g] : graphs) cudaGraphExecDestroy(g);
        for (void *p : std::initializer_list<void *>{weights, kv, inv_freq, rows_dev, x, h, q, kb, vb, att, router_logits,
                                                     route_w, act, eout, partial, ids, group_expert, group_off, n_groups,
                                                     pair_x, pair_y, groups_total, logits})
            if (p) cudaFree(p);
        if (rows_host) cudaFreeHost(rows_host);
        if (logits_host) cudaFreeHost(logits_host);
        if (stream) cudaStreamDestroy(stream);
    }
};

cuda_engine::cuda_engine(std::shared_ptr<const gguf_file> file, const engine_options &options)
    : file_(std::move(file)), hp_(model_hparams_read(*file_)), tensors_(model_tensors_bind(*file_, hp_)),
      slots_(options, hp_), impl_(std::make_unique<impl>()) {
    if (options.tensor_parallel || options.gpu_devices.size() > 1 || options.n_devices != 1)
        fail(error_kind::unsupported, "the CUDA backend runs on one GPU for now (no --tensor-parallel, one --gpu-devices entry)");
    n_slots_ = options.n_slots;
    n_ctx_ = options.n_ctx;

    impl &m = *impl_;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        cudaGetLastError();
        fail(error_kind::config, "--backend cuda: no CUDA device is visible (use --backend cpu)");
    }
    m.device = options.gpu_devices.empty() ? 0 : options.gpu_devices[0];
    if (m.device < 0 || m.device >= n_dev)
        fail(error_kind::config, "--gpu-devices {}: this machine has CUDA devices 0..{}", m.device, n_dev - 1);
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    cudaDeviceProp prop{};
    TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, m.device));
    m.device_name = prop.name;
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));

    const int64_t d = hp_.d_model, dh = hp_.d_head, kv_dim = int64_t(hp_.n_head_kv) * dh, q_dim = int64_t(hp_.n_head) * dh;
    if (hp_.d_head_v != hp_.d_head)
        fail(error_kind::unsupported, "the CUDA backend needs value heads as wide as key heads ({} vs {})", hp_.d_head_v, hp_.d_head);
    if (d % 32 || q_dim % 32 || hp_.d_ff_expert % 32)
        fail(error_kind::unsupported, "the CUDA backend needs d_model, n_head*d_head and d_ff multiples of 32");

    // Memory plan before allocating: weights + KV + step buffers must fit.
    m.chunk = cuda::attention_chunk(n_ctx_);
    m.n_chunks = (n_ctx_ + m.chunk - 1) / m.chunk;
    std::vector<const gguf_tensor_info *> all = {tensors_.tok_embd, tensors_.output_norm, tensors_.output};
    for (const layer_tensors &lt : tensors_.layers)
        for (const gguf_tensor_info *t : {lt.attn_norm, lt.wq, lt.wk, lt.wv, lt.wo, lt.q_norm, lt.k_norm, lt.ffn_norm,
                                          lt.router, lt.gate_exps, lt.up_exps, lt.down_exps})
            all.push_back(t);
    std::unordered_map<const gguf_tensor_info *, size_t> offset_of;
    for (const gguf_tensor_info *t : all) {
        if (offset_of.count(t)) continue;  // tied head: the embedding once
        offset_of[t] = m.weight_bytes;
        m.weight_bytes += (t->n_bytes + 255) / 256 * 256;
    }
    m.kv_bytes = size_t(hp_.n_layer) * 2 * size_t(n_slots_) * size_t(n_ctx_) * size_t(kv_dim) * sizeof(float);
    const size_t r = max_step_rows, k = size_t(hp_.n_expert_used);
    const size_t step_floats = r * (2 * d + 2 * q_dim + 2 * kv_dim + hp_.n_expert + k + k * hp_.d_ff_expert + k * d +
                                    size_t(hp_.n_head) * m.n_chunks * (dh + 2) + hp_.n_vocab);
    size_t free_b = 0, total_b = 0;
    TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = m.weight_bytes + m.kv_bytes + step_floats * 4 + (size_t(256) << 20);
    if (need > free_b)
        fail(error_kind::config, "the model needs {:.2f} GiB on {} (weights {:.2f}, KV {:.2f} for {} slots x {} tokens, "
             "step buffers {:.2f}) but {:.2f} GiB are free: lower --ctx or --batched-session",
             need / 1073741824.0, m.device_name, m.weight_bytes / 1073741824.0, m.kv_bytes / 1073741824.0, n_slots_,
             n_ctx_, step_floats * 4 / 1073741824.0, free_b / 1073741824.0);

    // Weights, in their file types.
    m.weights = device_alloc<uint8_t>(m.weight_bytes);
    for (const auto &[t, off] : offset_of)
        TANDEM_CUDA_CHECK(cudaMemcpy(m.weights + off, t->data, t->n_bytes, cudaMemcpyHostToDevice));
    auto mat = [&](const gguf_tensor_info *t) {
        dev_matrix dm;
        dm.data = m.weights + offset_of.at(t);
        dm.type = t->type;
        dm.n_in = int32_t(t->ne[0]);
        dm.n_out = int32_t(t->ne.size() > 1 ? t->ne[1] : 1);
        return dm;
    };
    auto vec = [&](const gguf_tensor_info *t) {
        TANDEM_ASSERT(t->type == ggml_type::f32, "{} must be f32", t->name);
        return reinterpret_cast<const float *>(m.weights + offset_of.at(t));
    };
    m.tok_embd = mat(tensors_.tok_embd);
    m.output = mat(tensors_.output);
    m.output_norm = vec(tensors_.output_norm);
    for (const layer_tensors &lt : tensors_.layers) {
        dev_layer dl;
        dl.attn_norm = vec(lt.attn_norm);
        dl.q_norm = vec(lt.q_norm);
        dl.k_norm = vec(lt.k_norm);
        dl.ffn_norm = vec(lt.ffn_norm);
        dl.wq = mat(lt.wq);
        dl.wk = mat(lt.wk);
        dl.wv = mat(lt.wv);
        dl.wo = mat(lt.wo);
        dl.router = mat(lt.router);
        dl.gate = mat(lt.gate_exps);
        dl.up = mat(lt.up_exps);
        dl.down = mat(lt.down_exps);
        for (const dev_matrix *dm : {&dl.wq, &dl.wk, &dl.wv, &dl.wo, &dl.router, &dl.gate, &dl.up, &dl.down})
            if (cuda::matvec_row_bytes(dm->type, dm->n_in) == 0)
                fail(error_kind::unsupported, "the CUDA backend cannot compute tensors of type {}", ggml_type_name(dm->type));
        if (dl.gate.type != dl.up.type)
            fail(error_kind::unsupported, "the CUDA backend needs gate and up experts of one type ({} vs {})",
                 ggml_type_name(dl.gate.type), ggml_type_name(dl.up.type));
        m.layers.push_back(dl);
    }

    // KV cache (F32, like the CPU twin) and RoPE frequencies computed as the CPU does.
    m.kv = device_alloc<float>(m.kv_bytes / sizeof(float));
    std::vector<float> inv_freq(size_t(dh / 2));
    for (int64_t i = 0; i < dh / 2; ++i)
        inv_freq[size_t(i)] = 1.0f / static_cast<float>(std::pow(double(hp_.rope_theta), double(float(2 * i) / float(dh))));
    m.inv_freq = device_alloc<float>(inv_freq.size());
    TANDEM_CUDA_CHECK(cudaMemcpy(m.inv_freq, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));

    m.rows_dev = device_alloc<int32_t>(4 * r);
    TANDEM_CUDA_CHECK(cudaMallocHost(&m.rows_host, (4 * r + 1) * sizeof(int32_t)));
    std::fill(m.rows_host, m.rows_host + 4 * r + 1, 0);
    m.x = device_alloc<float>(r * d);
    m.h = device_alloc<float>(r * d);
    m.q = device_alloc<float>(r * q_dim);
    m.att = device_alloc<float>(r * q_dim);
    m.kb = device_alloc<float>(r * kv_dim);
    m.vb = device_alloc<float>(r * kv_dim);
    m.router_logits = device_alloc<float>(r * hp_.n_expert);
    m.ids = device_alloc<int32_t>(r * k);
    m.route_w = device_alloc<float>(r * k);
    m.group_expert = device_alloc<int32_t>(size_t(hp_.n_expert));
    m.group_off = device_alloc<int32_t>(size_t(hp_.n_expert) + 1);
    m.n_groups = device_alloc<int32_t>(1);
    m.groups_total = device_alloc<int32_t>(1);
    TANDEM_CUDA_CHECK(cudaMemset(m.groups_total, 0, sizeof(int32_t)));
    m.pair_x = device_alloc<int32_t>(r * k);
    m.pair_y = device_alloc<int32_t>(r * k);
    m.act = device_alloc<float>(r * k * hp_.d_ff_expert);
    m.eout = device_alloc<float>(r * k * d);
    m.partial = device_alloc<float>(r * size_t(hp_.n_head) * m.n_chunks * (dh + 2));
    m.logits = device_alloc<float>(r * size_t(hp_.n_vocab));
    TANDEM_CUDA_CHECK(cudaMallocHost(&m.logits_host, r * size_t(hp_.n_vocab) * sizeof(float)));
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    log_info("cuda: {} weights {:.2f} GiB, KV {:.2f} GiB (f32)", m.device_name, m.weight_bytes / 1073741824.0,
             m.kv_bytes / 1073741824.0);
}

cuda_engine::~cuda_engine() = default;

int32_t cuda_engine::slot_length(int32_t slot) const { return slots_.length(slot); }

void cuda_engine::slot_truncate(int32_t slot, int32_t n_keep) { slots_.truncate(slot, n_keep); }

std::string cuda_engine::layout() const {
    return fmt::format("layout: cuda device={} ({}) | L0-{} all experts, head | slots={} x ctx={} kv=f32 {:.2f} GiB | "
                       "weights {:.2f} GiB | graphs for <= {} rows",
                       impl_->device, impl_->device_name, hp_.n_layer - 1, n_slots_, n_ctx_,
                       impl_->kv_bytes / 1073741824.0, impl_->weight_bytes / 1073741824.0, max_graph_rows);
}

std::map<std::string, double> cuda_engine::counters() const {
    return {{"launches_per_step", double(impl_->launches_per_step)},
            {"experts_touched_per_layer", impl_->experts_touched_per_layer}};
}

namespace {

// Every launch of one step over n rows (padding rows have slot -1) and n_out head rows.
int64_t enqueue_step(const cuda_engine::impl &m, const model_hparams &hp, int32_t n_slots, int32_t n_ctx, int32_t n,
                     int32_t n_out, cudaStream_t s) {
    int64_t launches = 0;
    const int32_t R = cuda_engine::max_step_rows;
    const int32_t *tokens = m.rows_dev, *slots = m.rows_dev + R, *positions = m.rows_dev + 2 * R, *head_rows = m.rows_dev + 3 * R;
    const int32_t d = hp.d_model, dh = hp.d_head, q_dim = hp.n_head * dh, kv_dim = hp.n_head_kv * dh;
    const int32_t k = hp.n_expert_used, ff = hp.d_ff_expert;

    cuda::embed({m.tok_embd.data, m.tok_embd.type, tokens, m.x, n, d}, s);
    cuda::rmsnorm({m.x, m.layers[0].attn_norm, m.h, n, d, hp.rms_eps}, s);
    launches += 2;
    auto dense = [&](const dev_matrix &w, const float *x, int64_t x_stride, float *y, int64_t y_stride, bool acc) {
        cuda::matvec_args a;
        a.w = w.data;
        a.type = w.type;
        a.n_in = w.n_in;
        a.n_out = w.n_out;
        a.x = x;
        a.x_stride = x_stride;
        a.y = y;
        a.y_stride = y_stride;
        a.accumulate = acc;
        a.n_pairs = n;
        cuda::matvec(a, s);
        ++launches;
    };
    const int32_t max_groups = cuda::moe_max_groups(n, hp.n_expert, k);
    for (int32_t l = 0; l < hp.n_layer; ++l) {
        const dev_layer &L = m.layers[size_t(l)];
        float *k_cache = m.kv + (size_t(l) * 2 + 0) * size_t(n_slots) * size_t(n_ctx) * size_t(kv_dim);
        float *v_cache = m.kv + (size_t(l) * 2 + 1) * size_t(n_slots) * size_t(n_ctx) * size_t(kv_dim);
        if (L.wq.type == L.wk.type && L.wq.type == L.wv.type) {
            // Q, K and V in one launch: one weight stream over the same normalised rows.
            cuda::matvec_args a;
            a.w = L.wq.data;
            a.type = L.wq.type;
            a.n_in = L.wq.n_in;
            a.n_out = L.wq.n_out;
            a.x = m.h;
            a.x_stride = d;
            a.y = m.q;
            a.y_stride = q_dim;
            a.n_pairs = n;
            a.extra[0] = {L.wk.data, L.wk.n_out, m.kb, kv_dim};
            a.extra[1] = {L.wv.data, L.wv.n_out, m.vb, kv_dim};
            a.n_extra = 2;
            cuda::matvec(a, s);
            ++launches;
        } else {
            dense(L.wq, m.h, d, m.q, q_dim, false);
            dense(L.wk, m.h, d, m.kb, kv_dim, false);
            dense(L.wv, m.h, d, m.vb, kv_dim, false);
        }
        cuda::qk_rope_kv_args qa;
        qa.q = m.q;
        qa.k = m.kb;
        qa.v = m.vb;
        qa.q_norm = L.q_norm;
        qa.k_norm = L.k_norm;
        qa.inv_freq = m.inv_freq;
        qa.slots = slots;
        qa.positions = positions;
        qa.k_cache = k_cache;
        qa.v_cache = v_cache;
        qa.n_rows = n;
        qa.n_head = hp.n_head;
        qa.n_head_kv = hp.n_head_kv;
        qa.d_head = dh;
        qa.n_ctx = n_ctx;
        qa.eps = hp.rms_eps;
        cuda::qk_rope_kv(qa, s);
        cuda::attention_args aa;
        aa.q = m.q;
        aa.k_cache = k_cache;
        aa.v_cache = v_cache;
        aa.slots = slots;
        aa.positions = positions;
        aa.partial = m.partial;
        aa.out = m.att;
        aa.n_rows = n;
        aa.n_head = hp.n_head;
        aa.n_head_kv = hp.n_head_kv;
        aa.d_head = dh;
        aa.n_ctx = n_ctx;
        aa.chunk = m.chunk;
        aa.scale = 1.0f / std::sqrt(float(dh));
        cuda::attention(aa, s);
        launches += 3;
        dense(L.wo, m.att, q_dim, m.x, d, true);
        cuda::rmsnorm({m.x, L.ffn_norm, m.h, n, d, hp.rms_eps}, s);
        ++launches;
        dense(L.router, m.h, d, m.router_logits, hp.n_expert, false);

        cuda::moe_route_args ra;
        ra.logits = m.router_logits;
        ra.slots = slots;
        ra.ids = m.ids;
        ra.weights = m.route_w;
        ra.group_expert = m.group_expert;
        ra.group_off = m.group_off;
        ra.n_groups = m.n_groups;
        ra.pair_x = m.pair_x;
        ra.pair_y = m.pair_y;
        ra.groups_total = m.groups_total;
        ra.n_rows = n;
        ra.n_expert = hp.n_expert;
        ra.k = k;
        ra.renormalise = hp.norm_topk;
        cuda::moe_route(ra, s);
        ++launches;

        cuda::matvec_args g;
        g.w = L.gate.data;
        g.w_up = L.up.data;
        g.type = L.gate.type;
        g.n_in = L.gate.n_in;
        g.n_out = L.gate.n_out;
        g.x = m.h;
        g.x_stride = d;
        g.y = m.act;
        g.y_stride = ff;
        g.x_rows = m.pair_x;
        g.y_rows = m.pair_y;
        g.group_mat = m.group_expert;
        g.group_off = m.group_off;
        g.n_groups = m.n_groups;
        g.max_groups = max_groups;
        g.max_pairs_per_group = n;  // a row routes to k distinct experts: at most n pairs per expert
        cuda::matvec(g, s);
        cuda::matvec_args dn = g;
        dn.w = L.down.data;
        dn.w_up = nullptr;
        dn.type = L.down.type;
        dn.n_in = L.down.n_in;
        dn.n_out = L.down.n_out;
        dn.x = m.act;
        dn.x_stride = ff;
        dn.y = m.eout;
        dn.y_stride = d;
        dn.x_rows = m.pair_y;
        dn.groups_settled = true;  // written by moe_route, two launches back
        cuda::matvec(dn, s);
        launches += 2;

        cuda::moe_combine_args ca;
        ca.x = m.x;
        ca.out = m.eout;
        ca.weights = m.route_w;
        ca.slots = slots;
        ca.norm = l + 1 < hp.n_layer ? m.layers[size_t(l) + 1].attn_norm : m.output_norm;
        ca.h = m.h;
        ca.n_rows = n;
        ca.k = k;
        ca.d_model = d;
        ca.eps = hp.rms_eps;
        cuda::moe_combine(ca, s);
        ++launches;
    }
    if (n_out > 0) {
        cuda::matvec_args a;
        a.w = m.output.data;
        a.type = m.output.type;
        a.n_in = m.output.n_in;
        a.n_out = m.output.n_out;
        a.x = m.h;
        a.x_stride = d;
        a.x_rows = head_rows;
        a.y = m.logits;
        a.y_stride = hp.n_vocab;
        a.n_pairs = n_out;
        cuda::matvec(a, s);
        ++launches;
    }
    return launches;
}

}  // namespace

void cuda_engine::run_step(std::span<const engine_row> rows, float *logits_out) {
    impl &m = *impl_;
    const int32_t R = max_step_rows;
    const int32_t n_real = int32_t(rows.size());
    const bool use_graph = n_real <= max_graph_rows;
    const int32_t n = use_graph ? graph_bucket(n_real) : n_real;
    int32_t n_wanted = 0;
    for (int32_t i = 0; i < n; ++i) {
        const bool real = i < n_real;
        m.rows_host[i] = real ? rows[size_t(i)].token : 0;
        m.rows_host[R + i] = real ? rows[size_t(i)].slot : -1;
        m.rows_host[2 * R + i] = real ? rows[size_t(i)].pos : 0;
        if (real && rows[size_t(i)].want_logits) m.rows_host[3 * R + n_wanted++] = i;
    }
    // A graph computes the head for all bucket rows (padding repeats row 0): its shape is fixed.
    const int32_t n_out = use_graph ? n : n_wanted;
    for (int32_t j = n_wanted; j < n_out; ++j) m.rows_host[3 * R + j] = 0;
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.rows_dev, m.rows_host, 4 * size_t(R) * sizeof(int32_t), cudaMemcpyHostToDevice, m.stream));
    if (use_graph) {
        auto it = m.graphs.find(n);
        if (it == m.graphs.end()) {
            cudaGraph_t graph = nullptr;
            TANDEM_CUDA_CHECK(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
            m.launches_per_step = enqueue_step(m, hp_, n_slots_, n_ctx_, n, n_out, m.stream);
            TANDEM_CUDA_CHECK(cudaStreamEndCapture(m.stream, &graph));
            cudaGraphExec_t exec = nullptr;
            TANDEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            TANDEM_CUDA_CHECK(cudaGraphDestroy(graph));
            it = m.graphs.emplace(n, exec).first;
        }
        TANDEM_CUDA_CHECK(cudaGraphLaunch(it->second, m.stream));
    } else {
        m.launches_per_step = enqueue_step(m, hp_, n_slots_, n_ctx_, n, n_out, m.stream);
    }
    if (n_wanted > 0)
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.logits_host, m.logits, size_t(n_wanted) * hp_.n_vocab * sizeof(float),
                                          cudaMemcpyDeviceToHost, m.stream));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(&m.rows_host[4 * R], m.groups_total, sizeof(int32_t), cudaMemcpyDeviceToHost, m.stream));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    const int32_t groups_total = m.rows_host[4 * R];
    m.experts_touched_per_layer = double(groups_total - m.groups_total_host) / hp_.n_layer;
    m.groups_total_host = groups_total;
    if (n_wanted > 0) std::memcpy(logits_out, m.logits_host, size_t(n_wanted) * hp_.n_vocab * sizeof(float));
}

void cuda_engine::forward(std::span<const engine_row> rows, std::vector<float> &logits) {
    logits.clear();
    if (rows.empty()) return;
    slots_.validate(rows);
    size_t n_wanted = 0;
    for (const engine_row &r : rows) n_wanted += r.want_logits ? 1 : 0;
    logits.resize(n_wanted * size_t(hp_.n_vocab));
    size_t written = 0;
    for (size_t begin = 0; begin < rows.size(); begin += max_step_rows) {
        const std::span<const engine_row> step = rows.subspan(begin, std::min<size_t>(max_step_rows, rows.size() - begin));
        run_step(step, logits.data() + written * size_t(hp_.n_vocab));
        for (const engine_row &r : step) written += r.want_logits ? 1 : 0;
    }
    slots_.advance(rows);
}

}  // namespace tandem
