// src/engine/cuda_device.cpp - one logical CUDA device: uploads its part of the model in the file's
// types, keeps the K/V of its layers, and enqueues the launches of the cuda/ families for its
// share of each step. The launch sequence of a whole-model device is the single-GPU forward.
#include "cuda_device_state.h"

#include "cuda/attention.h"
#include "cuda/attention_prompt.h"
#include "cuda/logits_top.h"
#include "cuda/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/matmul_prompt.h"
#include "cuda/matvec.h"
#include "cuda/matvec_digits.h"
#include "cuda/moe.h"
#include "cuda/moe_split.h"
#include "cuda/norm.h"
#include "tandem/error.h"

#include <cmath>
#include <map>

namespace tandem {

namespace {

constexpr int32_t router_k_parts = 4;  // the router's K parts when its n_in allows (layer_experts)
// Decode steps of more pairs than this split the SwiGLU outputs once for down (cuda::split_rows).
// Measured (docs/perf-notes.md, session 9): 16 sessions +2.5%, 4 even; one session's 8 pairs keep
// the split inside down (-2% with the launch).
constexpr int32_t split_act_min_pairs = 8;
// Decode steps of more pairs than this quantise the SwiGLU outputs to digits once for a Q4_K down
// (digits_quantize, then solo warps, staged); smaller ones let down's blocks make them. Measured
// (docs/perf-notes.md, session 12, down alone, us at 1 / 2 sessions): made in the kernel 5.3 /
// 8.6, with the launch 6.6 / 7.8; end to end at 2 sessions +1.3% (call 15).
constexpr int32_t down_quantize_min_pairs = 8;
// Prompt steps whose experts are Q4_K take the grouped products on digits too (quantised once per
// product by digits_quantize): the 32-pair tiles (cuda::matmul_digits) from this many pairs per
// expert on average, the decode kernels below it. Both give the same bits, so how a prompt is
// chunked changes nothing. Measured on the 30b synth (docs/perf-notes.md, session 14, calls 17-18,
// `bench --prefill-chunk C`, prefill tok/s, decode kernels / tiles): chunks of 32 rows (2 pairs an
// expert) 2,310 / 1,734, 64 rows 3,472 / 2,778, 128 rows 4,704 / 4,256, 256 rows (16) 6,931 /
// 6,955, 512 rows 9,637 / 10,507, 2,048 rows 12,620 / 15,035.
constexpr int32_t prompt_tile_min_pairs_per_expert = 16;
// The grouped digit products' shapes by the step's pairs (cuda/matvec_digits.h; every shape gives
// the same bits). Measured (docs/perf-notes.md, session 13, call 6, each product alone, us at 1 /
// 2 / 4 / 8 / 16 sessions): gate/up streamed blocks 6.3 / 11.4 / 20.9 / 36.7 / 57.2, staged 9.1 /
// 12.6 / 20.5 / 35.1 / 54.0, solo warps streamed 8.6 / 12.6 / 24.8 / 40.1 / 55.9; down above 8
// pairs with its quantise launch: staged blocks - / 9.0 / 12.3 / 23.6 / 37.9, solo warps staged
// - / 7.0 / 10.6 / 18.7 / 30.7.
// In the engine the experts' weights come from DRAM, not from L2 as in those benches: staged gate/up
// at every step size measured one session 445-452 -> 458-461 tok/s, 2 and 4 sessions the same
// (session 13, call 18), so gate/up is always staged (streamed where the GPU has no bulk copies).

template <class T>
T *device_alloc(size_t count) {
    void *p = nullptr;
    if (count == 0) count = 1;
    TANDEM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    return static_cast<T *>(p);
}

// Floats a step row's widest prompt-product input takes: h (d_model), att (heads x d_head) or
// its k SwiGLU outputs (k x d_ff); rounded up to 128-element multiples (matmul_prompt_q4k rows).
size_t prompt_split_width(const model_hparams &hp) {
    const size_t w = std::max({size_t(hp.d_model), size_t(hp.n_head) * size_t(hp.d_head), size_t(hp.n_expert_used) * size_t(hp.d_ff_expert)});
    return (w + 127) / 128 * 128;
}

// The step buffers in floats (ints counted as floats): max_step_rows rows, chunk partials for
// max_logit_rows.
size_t step_floats(const model_hparams &hp, int32_t n_ctx) {
    const size_t r = cuda_device::max_step_rows, k = size_t(hp.n_expert_used), d = size_t(hp.d_model);
    const size_t r_partial = cuda_device::max_logit_rows;
    const size_t dh = size_t(hp.d_head), q_dim = size_t(hp.n_head) * dh, kv_dim = size_t(hp.n_head_kv) * dh;
    const int32_t chunk = cuda::attention_chunk(n_ctx);
    const size_t n_chunks = size_t((n_ctx + chunk - 1) / chunk);
    // Decode rows' split twins (cuda/x_split.cuh): h, att and the SwiGLU outputs with their
    // 32-element sums; the prompt rows' split input of a Q4_K product.
    const size_t act = k * size_t(hp.d_ff_expert);
    const size_t split = r_partial * (d + d / 32 + q_dim + q_dim / 32 + act + act / 32);
    auto digit_floats = [](size_t n) { return n % 256 == 0 ? cuda::digits_per_element * n / 4 + n / 256 + n / 256 * 16 / 2 : 0; };
    const size_t digits = r_partial * (digit_floats(d) + k * digit_floats(size_t(hp.d_ff_expert)));  // bytes / 4
    const size_t prompt_split = r * prompt_split_width(hp) * 33 / 32;
    return r * (2 * d + 2 * q_dim + 2 * kv_dim + router_k_parts * size_t(hp.n_expert) + 2 * k + k * size_t(hp.d_ff_expert) + k * d + 4) +
           r_partial * size_t(hp.n_head) * n_chunks * (dh + 2) + split + digits + prompt_split;
}

// The weights of one device as regions of one allocation; a region concatenates slices of the
// mapped file (all of a tensor, a run of its experts, or its head rows).
struct upload_plan {
    struct slice {
        const uint8_t *src;
        size_t bytes;
    };
    struct region {
        std::vector<slice> slices;
        size_t offset = 0, bytes = 0;
    };
    std::vector<region> regions;
    std::map<std::pair<const uint8_t *, size_t>, size_t> whole;  // tensors uploaded whole: once
    size_t total = 0;

    size_t add(std::vector<slice> slices) {
        if (slices.size() == 1) {
            auto it = whole.find({slices[0].src, slices[0].bytes});
            if (it != whole.end()) return it->second;
        }
        region r;
        r.offset = total;
        for (const slice &s : slices) r.bytes += s.bytes;
        r.slices = std::move(slices);
        total += (r.bytes + 255) / 256 * 256;
        if (r.slices.size() == 1) whole[{r.slices[0].src, r.slices[0].bytes}] = r.offset;
        regions.push_back(std::move(r));
        return regions.back().offset;
    }
};

}  // namespace

uint64_t cuda_device::scratch_bytes(const model_hparams &hp, int32_t n_ctx, bool has_head, bool paired) {
    const size_t r = max_step_rows, k = size_t(hp.n_expert_used), d = size_t(hp.d_model);
    size_t floats = step_floats(hp, n_ctx);
    if (has_head) {
        floats += size_t(max_logit_rows) * size_t(hp.n_vocab);
        // The summaries: 64 candidate keys (two floats each), max, sum (two) and flag per slice and row.
        floats += size_t(max_logit_rows) * (size_t(cuda::logits_top_slices(hp.n_vocab)) * (2 * cuda::logits_top_n + 4) +
                                           sizeof(cuda::logits_top_row) / 4);
    }
    if (paired) floats += 2 * r * k * d + 2 * r * k + 2 * size_t(hp.n_expert) + 2;
    return uint64_t(floats) * 4 + (uint64_t(64) << 20);  // + allocator slack and the graphs
}

cuda_device::cuda_device(const model_hparams &hp, const model_tensors &tensors, const placement_device_plan &part,
                         int32_t n_slots, int32_t n_ctx, bool record_traffic)
    : s_(std::make_unique<state>()) {
    state &m = *s_;
    m.hp = &hp;
    m.part = part;
    m.n_slots = n_slots;
    m.n_ctx = n_ctx;
    m.device = part.physical;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    cuda::pdl_supported();  // asked here, not first inside a graph capture
    cudaDeviceProp prop{};
    TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, m.device));
    m.name = prop.name;
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&m.event, cudaEventDisableTiming));

    const int64_t d = hp.d_model, dh = hp.d_head, kv_dim = int64_t(hp.n_head_kv) * dh, q_dim = int64_t(hp.n_head) * dh;
    const size_t k = size_t(hp.n_expert_used), R = max_step_rows;
    const bool split = m.paired() && !part.experts.empty();
    if (split && hp.n_expert > cuda::moe_split_max_experts)
        fail(error_kind::unsupported, "the CUDA tensor-parallel split handles at most {} experts per layer, the model has {}",
             cuda::moe_split_max_experts, hp.n_expert);

    // Which bytes go where.
    upload_plan up;
    auto whole = [&](const gguf_tensor_info *t) { return up.add({{t->data, t->n_bytes}}); };
    auto experts = [&](const gguf_tensor_info *t, const std::vector<int32_t> &held) {
        if (!split) return whole(t);
        const size_t each = t->n_bytes / size_t(hp.n_expert);
        std::vector<upload_plan::slice> slices;
        for (int32_t e : held) slices.push_back({t->data + size_t(e) * each, each});
        return up.add(std::move(slices));
    };
    struct layer_offsets {
        size_t attn_norm, q_norm, k_norm, ffn_norm, wq, wk, wv, wo, router, gate, up, down;
    };
    std::vector<layer_offsets> offs;
    std::vector<std::vector<int32_t>> local;  // per layer here: expert -> matrix index
    for (int32_t l = part.layer_begin; l < part.layer_end; ++l) {
        const layer_tensors &lt = tensors.layers[size_t(l)];
        const std::vector<int32_t> held = split ? part.experts[size_t(l - part.layer_begin)] : std::vector<int32_t>{};
        if (split) {
            std::vector<int32_t> map(size_t(hp.n_expert), -1);
            for (size_t i = 0; i < held.size(); ++i) map[size_t(held[i])] = int32_t(i);
            local.push_back(std::move(map));
        }
        offs.push_back({whole(lt.attn_norm), whole(lt.q_norm), whole(lt.k_norm), whole(lt.ffn_norm), whole(lt.wq),
                        whole(lt.wk), whole(lt.wv), whole(lt.wo), whole(lt.router), experts(lt.gate_exps, held),
                        experts(lt.up_exps, held), experts(lt.down_exps, held)});
    }
    const bool last = part.layer_end == hp.n_layer;
    const bool has_head = part.head_end > part.head_begin;
    const size_t next_norm_off = last ? whole(tensors.output_norm)
                                       : whole(tensors.layers[size_t(part.layer_end)].attn_norm);
    const size_t output_norm_off = has_head ? whole(tensors.output_norm) : 0;
    const size_t embd_off = part.embedding ? whole(tensors.tok_embd) : 0;
    size_t head_off = 0;
    if (has_head) {
        const size_t row = size_t(ggml_row_bytes(tensors.output->type, d));
        head_off = up.add({{tensors.output->data + size_t(part.head_begin) * row,
                            size_t(part.head_end - part.head_begin) * row}});
    }

    // Upload.
    m.weight_bytes = up.total;
    m.weights = device_alloc<uint8_t>(m.weight_bytes);
    for (const upload_plan::region &r : up.regions) {
        size_t at = r.offset;
        for (const upload_plan::slice &s : r.slices) {
            TANDEM_CUDA_CHECK(cudaMemcpy(m.weights + at, s.src, s.bytes, cudaMemcpyHostToDevice));
            at += s.bytes;
        }
    }
    auto vec = [&](size_t off) { return reinterpret_cast<const float *>(m.weights + off); };
    auto mat = [&](size_t off, const gguf_tensor_info *t, int32_t n_out) {
        cuda_matrix cm;
        cm.data = m.weights + off;
        cm.type = t->type;
        cm.n_in = int32_t(t->ne[0]);
        cm.n_out = n_out;
        return cm;
    };
    auto rows_of = [](const gguf_tensor_info *t) { return int32_t(t->ne.size() > 1 ? t->ne[1] : 1); };
    int32_t *local_dev = nullptr;
    if (split) {
        local_dev = device_alloc<int32_t>(local.size() * size_t(hp.n_expert));
        for (size_t i = 0; i < local.size(); ++i)
            TANDEM_CUDA_CHECK(cudaMemcpy(local_dev + i * size_t(hp.n_expert), local[i].data(),
                                         size_t(hp.n_expert) * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
    for (int32_t l = part.layer_begin; l < part.layer_end; ++l) {
        const size_t i = size_t(l - part.layer_begin);
        const layer_tensors &lt = tensors.layers[size_t(l)];
        const layer_offsets &o = offs[i];
        cuda_layer cl;
        cl.attn_norm = vec(o.attn_norm);
        cl.q_norm = vec(o.q_norm);
        cl.k_norm = vec(o.k_norm);
        cl.ffn_norm = vec(o.ffn_norm);
        cl.wq = mat(o.wq, lt.wq, rows_of(lt.wq));
        cl.wk = mat(o.wk, lt.wk, rows_of(lt.wk));
        cl.wv = mat(o.wv, lt.wv, rows_of(lt.wv));
        cl.wo = mat(o.wo, lt.wo, rows_of(lt.wo));
        cl.router = mat(o.router, lt.router, rows_of(lt.router));
        cl.gate = mat(o.gate, lt.gate_exps, rows_of(lt.gate_exps));
        cl.up = mat(o.up, lt.up_exps, rows_of(lt.up_exps));
        cl.down = mat(o.down, lt.down_exps, rows_of(lt.down_exps));
        cl.local = split ? local_dev + i * size_t(hp.n_expert) : nullptr;
        for (const cuda_matrix *cm : {&cl.wq, &cl.wk, &cl.wv, &cl.wo, &cl.router, &cl.gate, &cl.up, &cl.down})
            if (cuda::matvec_row_bytes(cm->type, cm->n_in) == 0)
                fail(error_kind::unsupported, "the CUDA backend cannot compute tensors of type {}", ggml_type_name(cm->type));
        if (cl.gate.type != cl.up.type)
            fail(error_kind::unsupported, "the CUDA backend needs gate and up experts of one type ({} vs {})",
                 ggml_type_name(cl.gate.type), ggml_type_name(cl.up.type));
        m.layers.push_back(cl);
    }
    m.next_norm = vec(next_norm_off);
    if (has_head) {
        m.output_norm = vec(output_norm_off);
        m.head = mat(head_off, tensors.output, part.head_end - part.head_begin);
        if (cuda::matvec_row_bytes(m.head.type, m.head.n_in) == 0)
            fail(error_kind::unsupported, "the CUDA backend cannot compute tensors of type {}", ggml_type_name(m.head.type));
    }
    if (part.embedding) m.tok_embd = mat(embd_off, tensors.tok_embd, rows_of(tensors.tok_embd));

    // K/V of the layers here (F32, like the CPU twin); RoPE frequencies computed as the CPU does.
    m.chunk = cuda::attention_chunk(n_ctx);
    m.n_chunks = (n_ctx + m.chunk - 1) / m.chunk;
    m.kv_bytes = size_t(part.layer_end - part.layer_begin) * 2 * size_t(n_slots) * size_t(n_ctx) * size_t(kv_dim) * sizeof(float);
    m.kv = device_alloc<float>(m.kv_bytes / sizeof(float));
    std::vector<float> inv_freq(size_t(dh / 2));
    for (int64_t i = 0; i < dh / 2; ++i)
        inv_freq[size_t(i)] = 1.0f / static_cast<float>(std::pow(double(hp.rope_theta), double(float(2 * i) / float(dh))));
    m.inv_freq = device_alloc<float>(inv_freq.size());
    TANDEM_CUDA_CHECK(cudaMemcpy(m.inv_freq, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));

    m.rows = device_alloc<int32_t>(4 * R);
    TANDEM_CUDA_CHECK(cudaMemset(m.rows, 0, 4 * R * sizeof(int32_t)));
    m.x = device_alloc<float>(R * d);
    m.h = device_alloc<float>(R * d);
    m.q = device_alloc<float>(R * q_dim);
    m.att = device_alloc<float>(R * q_dim);
    m.kb = device_alloc<float>(R * kv_dim);
    m.vb = device_alloc<float>(R * kv_dim);
    m.router_logits = device_alloc<float>(R * router_k_parts * hp.n_expert);  // [parts][max_step_rows][n_expert]
    m.ids = device_alloc<int32_t>(R * k);
    m.route_w = device_alloc<float>(R * k);
    m.group_expert = device_alloc<int32_t>(size_t(hp.n_expert));
    m.group_off = device_alloc<int32_t>(size_t(hp.n_expert) + 1);
    m.n_groups = device_alloc<int32_t>(1);
    m.groups_total = device_alloc<int32_t>(1);
    TANDEM_CUDA_CHECK(cudaMemset(m.groups_total, 0, sizeof(int32_t)));
    m.pair_x = device_alloc<int32_t>(R * k);
    m.pair_y = device_alloc<int32_t>(R * k);
    m.act = device_alloc<float>(R * k * hp.d_ff_expert);
    m.eout = device_alloc<float>(R * k * d);
    m.partial = device_alloc<float>(size_t(max_logit_rows) * size_t(hp.n_head) * m.n_chunks * (dh + 2));
    const size_t D = max_logit_rows;
    m.h_split = device_alloc<uint4>(D * d / 4);
    m.h_sums = device_alloc<float>(D * d / 32);
    if (d % 256 == 0) {
        m.h_digits = device_alloc<int8_t>(D * cuda::digits_per_element * d);
        m.h_digit_scales = device_alloc<float>(D * d / 256);
        m.h_digit_sums = device_alloc<uint16_t>(D * d / 256 * 16);
    }
    if (hp.d_ff_expert % 256 == 0) {
        const size_t act = k * size_t(hp.d_ff_expert);
        m.act_digits = device_alloc<int8_t>(D * cuda::digits_per_element * act);
        m.act_digit_scales = device_alloc<float>(D * act / 256);
        m.act_digit_sums = device_alloc<uint16_t>(D * act / 256 * 16);
    }
    m.att_split = device_alloc<uint4>(D * q_dim / 4);
    m.att_sums = device_alloc<float>(D * q_dim / 32);
    m.act_split = device_alloc<uint4>(D * k * size_t(hp.d_ff_expert) / 4);
    m.act_sums = device_alloc<float>(D * k * size_t(hp.d_ff_expert) / 32);
    m.prompt_split = device_alloc<uint4>(R * prompt_split_width(hp) / 4);
    m.prompt_sums = device_alloc<float>(R * prompt_split_width(hp) / 32);
    if (split) {
        for (float *&e : m.exchange) e = device_alloc<float>(R * k * d);
        m.own_mat = device_alloc<int32_t>(size_t(hp.n_expert));
        m.own_off = device_alloc<int32_t>(size_t(hp.n_expert) + 1);
        m.own_n = device_alloc<int32_t>(1);
        m.own_x = device_alloc<int32_t>(R * k);
        m.own_y = device_alloc<int32_t>(R * k);
    }
    if (has_head) {
        const int32_t cols = part.head_end - part.head_begin, slices = cuda::logits_top_slices(cols);
        m.logits = device_alloc<float>(D * size_t(cols));
        if (slices > 0) {
            m.top_keys = device_alloc<uint64_t>(D * size_t(slices) * cuda::logits_top_n);
            m.top_slice_max = device_alloc<float>(D * size_t(slices));
            m.top_slice_sum = device_alloc<double>(D * size_t(slices));
            m.top_slice_nan = device_alloc<int32_t>(D * size_t(slices));
            m.top_rows = device_alloc<cuda::logits_top_row>(D);
        }
    }
    if (record_traffic && part.role != placement_role::partner) {
        const size_t n = size_t(part.layer_end - part.layer_begin) * size_t(hp.n_expert);
        m.traffic = device_alloc<unsigned long long>(n);
        TANDEM_CUDA_CHECK(cudaMemset(m.traffic, 0, n * sizeof(unsigned long long)));
    }
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
}

cuda_device::~cuda_device() {
    state &m = *s_;
    cudaSetDevice(m.device);
    if (m.stream) cudaStreamSynchronize(m.stream);
    const int32_t *local = m.layers.empty() ? nullptr : m.layers.front().local;
    for (const void *p : std::initializer_list<const void *>{
             m.weights, m.kv, m.inv_freq, m.rows, m.x, m.h, m.q, m.kb, m.vb, m.att, m.router_logits, m.route_w, m.act,
             m.eout, m.partial, m.exchange[0], m.exchange[1], m.ids, m.group_expert, m.group_off, m.n_groups, m.pair_x,
             m.pair_y, m.groups_total, m.own_mat, m.own_off, m.own_n, m.own_x, m.own_y, m.logits, m.top_keys, m.top_slice_max,
             m.top_slice_sum, m.top_slice_nan, m.top_rows, m.h_split, m.h_sums, m.h_digits, m.h_digit_scales, m.h_digit_sums, m.act_digits,
             m.act_digit_scales, m.act_digit_sums, m.att_split,
             m.att_sums, m.act_split, m.act_sums, m.prompt_split, m.prompt_sums, m.traffic, local})
        if (p) cudaFree(const_cast<void *>(p));
    if (m.event) cudaEventDestroy(m.event);
    if (m.stream) cudaStreamDestroy(m.stream);
}

const placement_device_plan &cuda_device::part() const { return s_->part; }
int32_t cuda_device::physical() const { return s_->device; }
const std::string &cuda_device::name() const { return s_->name; }
uint64_t cuda_device::weight_bytes() const { return s_->weight_bytes; }
uint64_t cuda_device::kv_bytes() const { return s_->kv_bytes; }
size_t cuda_device::d_model_bytes() const { return size_t(s_->hp->d_model) * sizeof(float); }
size_t cuda_device::pair_row_bytes() const { return size_t(s_->hp->d_model) * size_t(s_->hp->n_expert_used) * sizeof(float); }
float *cuda_device::x_rows(int32_t r0) { return s_->x + size_t(r0) * size_t(s_->hp->d_model); }
float *cuda_device::h_rows(int32_t r0) { return s_->h + size_t(r0) * size_t(s_->hp->d_model); }
float *cuda_device::expert_out_rows(int32_t r0) { return s_->eout + size_t(r0) * pair_row_bytes() / sizeof(float); }
float *cuda_device::exchange_rows(int32_t parity, int32_t r0) {
    TANDEM_ASSERT(s_->exchange[parity & 1], "device {} has no exchange buffers", s_->part.logical);
    return s_->exchange[parity & 1] + size_t(r0) * pair_row_bytes() / sizeof(float);
}

void cuda_device::upload_rows(const int32_t *rows_host_pinned) {
    TANDEM_CUDA_CHECK(cudaSetDevice(s_->device));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(s_->rows, rows_host_pinned, 4 * size_t(max_step_rows) * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s_->stream));
}

int32_t cuda_device::step_rows_limit(const model_hparams &hp, bool prompt) {
    return prompt && cuda::attention_prompt_native(hp.n_head, hp.n_head_kv, hp.d_head) ? max_step_rows : max_logit_rows;
}

void cuda_device::set_prompt_rows(bool prompt) { s_->prompt_rows = prompt; }
void cuda_device::set_distinct_slots(bool distinct) { s_->distinct_slots = distinct; }

void cuda_device::h_received() { s_->h_split_fresh = false; }

int64_t cuda_device::embed(int32_t r0, int32_t n) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_ASSERT(m.part.embedding, "device {} holds no embedding", m.part.logical);
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    cuda::embed({m.tok_embd.data, m.tok_embd.type, m.tokens() + r0, x_rows(r0), n, hp.d_model}, m.stream);
    cuda::rmsnorm_args na{x_rows(r0), m.layer(m.part.layer_begin).attn_norm, h_rows(r0), n, hp.d_model, hp.rms_eps};
    if (!m.prompt_rows) {
        na.y_split = m.h_split + size_t(r0) * hp.d_model / 4;
        na.y_sums = m.h_sums + size_t(r0) * hp.d_model / 32;
    }
    m.h_split_fresh = na.y_split != nullptr;
    cuda::rmsnorm(na, m.stream);
    return 2;
}

int64_t cuda_device::layer_experts(int32_t l, int32_t r0, int32_t n) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const cudaStream_t s = m.stream;
    int64_t launches = 0;
    const int32_t d = hp.d_model, dh = hp.d_head, q_dim = hp.n_head * dh, kv_dim = hp.n_head_kv * dh;
    const int32_t k = hp.n_expert_used, ff = hp.d_ff_expert;
    const int32_t *slots = m.slots() + r0, *positions = m.positions() + r0;
    float *x = x_rows(r0), *h = h_rows(r0);
    float *q = m.q + size_t(r0) * q_dim, *kb = m.kb + size_t(r0) * kv_dim, *vb = m.vb + size_t(r0) * kv_dim;
    float *att = m.att + size_t(r0) * q_dim, *eout = expert_out_rows(r0);
    float *route_w = m.route_w + size_t(r0) * k, *router_logits = m.router_logits + size_t(r0) * hp.n_expert;
    int32_t *ids = m.ids + size_t(r0) * k;
    float *act = m.act + size_t(r0) * k * ff;
    // Decode rows: the producers below also write their outputs split (cuda/x_split.cuh).
    const bool split = !m.prompt_rows;
    uint4 *h_split = split ? m.h_split + size_t(r0) * d / 4 : nullptr;
    float *h_sums = split ? m.h_sums + size_t(r0) * d / 32 : nullptr;
    const cuda_layer &L = m.layer(l);
    const size_t layer_here = size_t(l - m.part.layer_begin);
    float *k_cache = m.kv + (layer_here * 2 + 0) * size_t(m.n_slots) * size_t(m.n_ctx) * size_t(kv_dim);
    float *v_cache = m.kv + (layer_here * 2 + 1) * size_t(m.n_slots) * size_t(m.n_ctx) * size_t(kv_dim);

    // Prompt rows' digit rows of n elements (n a multiple of 256), in the prompt split scratch
    // (each row's 2n digit bytes, n / 8 sum bytes and n / 64 scale bytes fit in the 4n it has):
    // digits, then sums (16-byte aligned), then scales.
    auto prompt_digit_rows = [&](int32_t rows, int32_t n_el) {
        uint8_t *base = reinterpret_cast<uint8_t *>(m.prompt_split);
        const size_t digit_bytes = size_t(rows) * cuda::digits_per_element * size_t(n_el), sum_bytes = size_t(rows) * size_t(n_el) / 8;
        TANDEM_ASSERT(digit_bytes + sum_bytes + size_t(rows) * size_t(n_el) / 64 <= size_t(max_step_rows) * prompt_split_width(hp) * 4,
                      "prompt digit rows exceed the split scratch");
        return cuda::digit_rows{reinterpret_cast<int8_t *>(base), reinterpret_cast<float *>(base + digit_bytes + sum_bytes),
                                reinterpret_cast<uint16_t *>(base + digit_bytes)};
    };
    // A grouped Q4_K product of prompt rows on digits: the tiles for large steps, else the decode kernels.
    auto prompt_digit_product = [&](cuda::matvec_digits_args da, int32_t pairs) {
        da.n_pairs = pairs;
        da.stage = true;
        if (pairs >= prompt_tile_min_pairs_per_expert * hp.n_expert)
            cuda::matmul_digits(da, s);
        else
            cuda::matvec_digits(da, s);
    };
    // Prompt rows: the tiled GEMMs; decode rows: the matrix-vector products (engine_row::prompt).
    // split_rows: rows of a.x its x_rows can name (prompt rows' Q4_K products split them first).
    auto product = [&](const cuda::matvec_args &a, int32_t split_rows) {
        if (!m.prompt_rows) {
            cuda::matvec(a, s);
            return;
        }
        cuda::matvec_args b = a;
        if (b.type == ggml_type::q4_k && size_t(split_rows) * size_t(b.x_stride) <= size_t(max_step_rows) * prompt_split_width(hp)) {
            b.prompt_split = m.prompt_split;
            b.prompt_sums = m.prompt_sums;
            b.prompt_split_rows = split_rows;
            if (cuda::matmul_prompt_q4k_applies(b)) ++launches;  // the split
        }
        cuda::matmul_prompt(b, s);
    };
    auto dense = [&](const cuda_matrix &w, const float *in, int64_t in_stride, const uint4 *in_split, const float *in_sums,
                     float *out, int64_t out_stride, bool acc, int32_t k_parts = 1, int64_t part_stride = 0) {
        cuda::matvec_args a;
        a.k_parts = k_parts;
        a.y_part_stride = part_stride;
        a.x_split = in_split;
        a.x_sums = in_sums;
        a.w = w.data;
        a.type = w.type;
        a.n_in = w.n_in;
        a.n_out = w.n_out;
        a.x = in;
        a.x_stride = in_stride;
        a.y = out;
        a.y_stride = out_stride;
        a.accumulate = acc;
        a.n_pairs = n;
        product(a, n);
        ++launches;
    };
    if (L.wq.type == L.wk.type && L.wq.type == L.wv.type) {
        // Q, K and V in one launch: one weight stream over the same normalised rows.
        cuda::matvec_args a;
        a.w = L.wq.data;
        a.type = L.wq.type;
        a.n_in = L.wq.n_in;
        a.n_out = L.wq.n_out;
        a.x = h;
        a.x_stride = d;
        a.y = q;
        a.y_stride = q_dim;
        a.n_pairs = n;
        if (m.h_split_fresh) {
            a.x_split = h_split;
            a.x_sums = h_sums;
        }
        a.extra[0] = {L.wk.data, L.wk.n_out, kb, kv_dim};
        a.extra[1] = {L.wv.data, L.wv.n_out, vb, kv_dim};
        a.n_extra = 2;
        product(a, n);
        ++launches;
    } else {
        const uint4 *hs = m.h_split_fresh ? h_split : nullptr;
        const float *hm = m.h_split_fresh ? h_sums : nullptr;
        dense(L.wq, h, d, hs, hm, q, q_dim, false);
        dense(L.wk, h, d, hs, hm, kb, kv_dim, false);
        dense(L.wv, h, d, hs, hm, vb, kv_dim, false);
    }
    cuda::qk_rope_kv_args qa;
    qa.q = q;
    qa.k = kb;
    qa.v = vb;
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
    qa.n_ctx = m.n_ctx;
    qa.eps = hp.rms_eps;
    // Decode rows of distinct slots (one per session): the norm, RoPE and cache write run inside
    // the attention launch (attention_args::k_new).
    const bool fused = !m.prompt_rows && m.distinct_slots;
    if (!fused) {
        cuda::qk_rope_kv(qa, s);
        ++launches;
    }
    cuda::attention_args aa;
    aa.q = q;
    aa.k_cache = k_cache;
    aa.v_cache = v_cache;
    aa.slots = slots;
    aa.positions = positions;
    aa.out = att;
    aa.n_rows = n;
    aa.n_head = hp.n_head;
    aa.n_head_kv = hp.n_head_kv;
    aa.d_head = dh;
    aa.n_ctx = m.n_ctx;
    aa.chunk = m.chunk;
    aa.scale = 1.0f / std::sqrt(float(dh));
    if (r0 < max_logit_rows)  // decode steps, and prompt steps that fall back (step_rows_limit)
        aa.partial = m.partial + size_t(r0) * size_t(hp.n_head) * m.n_chunks * (dh + 2);
    if (split) {
        aa.out_split = m.att_split + size_t(r0) * q_dim / 4;
        aa.out_sums = m.att_sums + size_t(r0) * q_dim / 32;
    }
    if (m.prompt_rows) {
        cuda::attention_prompt(aa, s);  // tensor cores, keys in tiles shared by a chunk's rows
        launches += 1;
    } else {
        if (fused) {
            aa.k_new = kb;
            aa.v_new = vb;
            aa.q_norm = L.q_norm;
            aa.k_norm = L.k_norm;
            aa.inv_freq = m.inv_freq;
            aa.eps = hp.rms_eps;
        }
        cuda::attention(aa, s);
        launches += 2;  // partial and combine
    }
    dense(L.wo, att, q_dim, aa.out_split, aa.out_sums, x, d, true);
    // Decode rows with an F32 router: the FFN norm and the router in one launch, the logits in
    // dot_f32's order (the CPU's bits for the same h). Otherwise the norm, then the router (8 row
    // tiles of 16 for 128 experts) in K parts on their own blocks, 4 when every part gets at least
    // one 256-element chunk: decode rows (part stride max_logit_rows rows) and prompt rows
    // (max_step_rows; every prompt launch the same parts, so chunking changes nothing).
    const bool norm_router = !m.prompt_rows && L.router.type == ggml_type::f32 && cuda::rmsnorm_router_applies(d, hp.n_expert) &&
                             reinterpret_cast<uintptr_t>(L.router.data) % 16 == 0;
    // Decode rows whose experts' gate and up are Q4_K: the gate/up product on int8 digits of h
    // (cuda/matvec_digits.h), written by the norm + router launch instead of h's split twin. One
    // arithmetic at every step size (batch invariant); session 11 measured it 1.2-1.45x faster than
    // the bf16-split kernels, with products ~6x less precise (docs/perf-notes.md).
    const bool digits = norm_router && m.h_digits && L.gate.type == ggml_type::q4_k && L.up.type == ggml_type::q4_k &&
                        L.gate.n_in % 256 == 0;
    // Prompt rows whose experts are Q4_K: gate/up and down on digits too, quantised by one launch
    // before each (prompt_digit_product). On a 2,048-row step of the 30b shapes the tiles with their
    // quantise launch took gate/up 1.15 -> 0.90 ms and down 0.63 -> 0.56 ms against the exact-quant
    // bf16 tiles; a 2,048-token prefill 13.7k -> 15.1k tok/s (docs/perf-notes.md, session 14).
    const bool prompt_digits_gate_up = m.prompt_rows && L.gate.type == ggml_type::q4_k && L.up.type == ggml_type::q4_k &&
                                       L.gate.n_in % 256 == 0;
    const bool prompt_digits_down = m.prompt_rows && L.down.type == ggml_type::q4_k && L.down.n_in % 256 == 0;
    cuda::digit_rows h_dig;
    if (digits)
        h_dig = {m.h_digits + size_t(r0) * cuda::digits_per_element * d, m.h_digit_scales + size_t(r0) * d / 256,
                 m.h_digit_sums + size_t(r0) * d / 256 * 16};
    int32_t router_parts = 1;
    int64_t part_stride = 0;
    if (norm_router) {
        cuda::rmsnorm_router_args nr;
        nr.x = x;
        nr.w_norm = L.ffn_norm;
        nr.router = static_cast<const float *>(L.router.data);
        nr.h = h;
        if (digits) {
            nr.h_digits = h_dig;
        } else {
            nr.h_split = h_split;
            nr.h_sums = h_sums;
        }
        nr.logits = router_logits;
        nr.n_rows = n;
        nr.n = d;
        nr.n_expert = hp.n_expert;
        nr.eps = hp.rms_eps;
        cuda::rmsnorm_router(nr, s);
        m.h_split_fresh = split && !digits;
        ++launches;
    } else {
        cuda::rmsnorm_args na{x, L.ffn_norm, h, n, d, hp.rms_eps};
        na.y_split = h_split;
        na.y_sums = h_sums;
        cuda::rmsnorm(na, s);
        m.h_split_fresh = split;
        ++launches;
        router_parts = L.router.n_in / 256 >= router_k_parts ? router_k_parts : 1;
        part_stride = int64_t(m.prompt_rows ? max_step_rows : max_logit_rows) * hp.n_expert;
        dense(L.router, h, d, h_split, h_sums, router_logits, hp.n_expert, false, router_parts, part_stride);
    }

    cuda::moe_route_args ra;
    ra.logits = router_logits;
    ra.n_logit_parts = router_parts;
    ra.logit_part_stride = part_stride;
    ra.slots = slots;
    ra.ids = ids;
    ra.weights = route_w;
    ra.group_expert = m.group_expert;
    ra.group_off = m.group_off;
    ra.n_groups = m.n_groups;
    ra.pair_x = m.pair_x;
    ra.pair_y = m.pair_y;
    // Statistics count each layer's groups once: on the host of a pair.
    ra.groups_total = m.part.role == placement_role::partner ? nullptr : m.groups_total;
    ra.n_rows = n;
    ra.n_expert = hp.n_expert;
    ra.k = k;
    ra.renormalise = hp.norm_topk;
    cuda::moe_route(ra, s);
    ++launches;
    if (m.traffic) {
        cuda::moe_count({ids, slots, m.traffic + layer_here * size_t(hp.n_expert), n, k}, s);
        ++launches;
    }
    const int32_t max_groups = cuda::moe_max_groups(n, hp.n_expert, k);

    cuda::matvec_args g;
    g.w = L.gate.data;
    g.w_up = L.up.data;
    g.type = L.gate.type;
    g.n_in = L.gate.n_in;
    g.n_out = L.gate.n_out;
    g.x = h;
    g.x_stride = d;
    g.y = act;
    g.y_stride = ff;
    g.x_rows = m.pair_x;
    g.y_rows = m.pair_y;
    g.group_mat = m.group_expert;
    g.group_off = m.group_off;
    g.n_groups = m.n_groups;
    g.max_groups = max_groups;
    g.n_pairs = n * k;          // all groups together (matmul_prompt's grid; matvec ignores it)
    g.x_split = h_split;
    g.x_sums = h_sums;
    if (L.local) {
        // Only the experts held here: narrow the groups (matrix index = position in the upload).
        cuda::moe_groups_filter_args fa;
        fa.group_expert = m.group_expert;
        fa.group_off = m.group_off;
        fa.n_groups = m.n_groups;
        fa.pair_x = m.pair_x;
        fa.pair_y = m.pair_y;
        fa.local = L.local;
        fa.out_group_mat = m.own_mat;
        fa.out_group_off = m.own_off;
        fa.out_n_groups = m.own_n;
        fa.out_pair_x = m.own_x;
        fa.out_pair_y = m.own_y;
        fa.max_groups = max_groups;
        cuda::moe_groups_filter(fa, s);
        ++launches;
        g.x_rows = m.own_x;
        g.y_rows = m.own_y;
        g.group_mat = m.own_mat;
        g.group_off = m.own_off;
        g.n_groups = m.own_n;
    }
    if (digits) {
        cuda::matvec_digits_args da = cuda::digit_args_of(g, h_dig);
        da.stage = true;
        cuda::matvec_digits(da, s);
    } else if (prompt_digits_gate_up) {
        const cuda::matvec_digits_args da = cuda::digit_args_of(g, prompt_digit_rows(n, d));
        cuda::digits_quantize({h, n, d, da.x}, s);
        ++launches;
        prompt_digit_product(da, n * k);
    } else {
        product(g, n);
    }
    cuda::matvec_args dn = g;
    dn.w = L.down.data;
    dn.w_up = nullptr;
    dn.type = L.down.type;
    dn.n_in = L.down.n_in;
    dn.n_out = L.down.n_out;
    dn.x = act;
    dn.x_stride = ff;
    dn.y = eout;
    dn.y_stride = d;
    dn.x_rows = g.y_rows;
    if (prompt_digits_down) {
        cuda::matvec_digits_args da = cuda::digit_args_of(dn, prompt_digit_rows(n * k, ff));
        da.groups_settled = true;  // written before the gate/up launch
        cuda::digits_quantize({act, n * k, ff, da.x}, s);
        prompt_digit_product(da, n * k);
        launches += 3;
        return launches;
    }
    if (!m.prompt_rows && m.act_digits && L.down.type == ggml_type::q4_k && L.down.n_in % 256 == 0) {
        // Decode rows' Q4_K down on digits of the SwiGLU outputs: made by each block of the product
        // from act up to down_quantize_min_pairs pairs, by one digits_quantize launch above (the
        // same bits either way; batch invariant).
        cuda::matvec_digits_args da = cuda::digit_args_of(dn, {});
        da.groups_settled = true;  // written by the launch before the gate/up launch
        // Weights staged by the copy engine before the PDL wait (down alone at one row 5.10 ->
        // 4.62 us, one session +1%: docs/perf-notes.md, session 13, call 16).
        da.stage = true;
        if (n * k > down_quantize_min_pairs) {
            const size_t act_rows = size_t(r0) * size_t(k);
            da.x = {m.act_digits + act_rows * cuda::digits_per_element * ff, m.act_digit_scales + act_rows * ff / 256,
                    m.act_digit_sums + act_rows * ff / 256 * 16};
            cuda::digits_quantize({act, n * k, ff, da.x}, s);
            ++launches;
            da.solo_warps = 4;
        } else {
            da.x_f32 = act;
            da.x_f32_stride = ff;
        }
        cuda::matvec_digits(da, s);
        launches += 2;
        return launches;
    }
    // The SwiGLU outputs' 32-element sums span four gate/up blocks, so gate/up cannot write them
    // split. Steps of more than 8 pairs split them once (split_rows) instead of in every block of
    // down: 64 blocks a group read the same rows. Bitwise the same outputs either way.
    dn.x_split = nullptr;
    dn.x_sums = nullptr;
    if (!m.prompt_rows && n * k > split_act_min_pairs && ff % 32 == 0) {
        cuda::split_rows_args sa;
        sa.x = act;
        sa.n_rows = n * k;
        sa.n = ff;
        sa.stride = ff;
        sa.split = m.act_split + size_t(r0) * k * ff / 4;
        sa.sums = m.act_sums + size_t(r0) * k * ff / 32;
        cuda::split_rows(sa, s);
        ++launches;
        dn.x_split = sa.split;
        dn.x_sums = sa.sums;
    }
    dn.groups_settled = true;  // written by the launch before the gate/up launch
    product(dn, n * k);
    launches += 2;
    return launches;
}

int64_t cuda_device::merge_partner(int32_t l, int32_t r0, int32_t n, int32_t parity) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    cuda::moe_pairs_merge_args a;
    a.out = expert_out_rows(r0);
    a.other = exchange_rows(parity, r0);
    a.ids = m.ids + size_t(r0) * size_t(hp.n_expert_used);
    a.slots = m.slots() + r0;
    a.local = m.layer(l).local;
    a.n_rows = n;
    a.k = hp.n_expert_used;
    a.d_model = hp.d_model;
    cuda::moe_pairs_merge(a, m.stream);
    return 1;
}

int64_t cuda_device::combine(int32_t l, int32_t r0, int32_t n) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    cuda::moe_combine_args ca;
    ca.x = x_rows(r0);
    ca.out = expert_out_rows(r0);
    ca.weights = m.route_w + size_t(r0) * size_t(hp.n_expert_used);
    ca.slots = m.slots() + r0;
    ca.norm = l + 1 < m.part.layer_end ? m.layer(l + 1).attn_norm : m.next_norm;
    ca.h = h_rows(r0);
    ca.n_rows = n;
    ca.k = hp.n_expert_used;
    ca.d_model = hp.d_model;
    ca.eps = hp.rms_eps;
    if (!m.prompt_rows) {
        ca.h_split = m.h_split + size_t(r0) * hp.d_model / 4;
        ca.h_sums = m.h_sums + size_t(r0) * hp.d_model / 32;
    }
    m.h_split_fresh = ca.h_split != nullptr;
    cuda::moe_combine(ca, m.stream);
    return 1;
}

int64_t cuda_device::head(int32_t r0, int32_t n_out, int32_t out0) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_ASSERT(m.logits, "device {} holds no head rows", m.part.logical);
    if (n_out == 0) return 0;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const int32_t cols = m.head.n_out;
    cuda::matvec_args a;
    a.w = m.head.data;
    a.type = m.head.type;
    a.n_in = m.head.n_in;
    a.n_out = cols;
    a.x = h_rows(r0);
    a.x_stride = hp.d_model;
    a.x_rows = m.head_rows() + r0;
    if (m.h_split_fresh) {
        a.x_split = m.h_split + size_t(r0) * hp.d_model / 4;
        a.x_sums = m.h_sums + size_t(r0) * hp.d_model / 32;
    }
    a.y = m.logits + size_t(out0) * size_t(cols);
    a.y_stride = cols;
    a.n_pairs = n_out;
    cuda::matvec(a, m.stream);
    return 1;
}

void cuda_device::download_logits(float *host_pinned, int32_t n_out) {
    state &m = *s_;
    if (n_out == 0 || !m.logits) return;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const size_t cols = size_t(m.head.n_out), vocab = size_t(m.hp->n_vocab);
    TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(host_pinned + m.part.head_begin, vocab * sizeof(float), m.logits,
                                        cols * sizeof(float), cols * sizeof(float), size_t(n_out),
                                        cudaMemcpyDeviceToHost, m.stream));
}

bool cuda_device::has_logits_top() const { return s_->top_rows != nullptr; }

int64_t cuda_device::logits_top(int32_t n_out) {
    state &m = *s_;
    TANDEM_ASSERT(m.top_rows, "device {} does not reduce logits rows", m.part.logical);
    if (n_out == 0) return 0;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    cuda::logits_top_args a;
    a.logits = m.logits;
    a.n_rows = n_out;
    a.n_cols = m.head.n_out;
    a.first_id = m.part.head_begin;
    a.scratch = m.top_keys;
    a.slice_max = m.top_slice_max;
    a.slice_sum = m.top_slice_sum;
    a.slice_nan = m.top_slice_nan;
    a.out = m.top_rows;
    cuda::logits_top(a, m.stream);
    return 2;
}

void cuda_device::download_logits_top(void *host_pinned, int32_t n_out) {
    state &m = *s_;
    if (n_out == 0 || !m.top_rows) return;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(host_pinned, m.top_rows, size_t(n_out) * sizeof(cuda::logits_top_row),
                                      cudaMemcpyDeviceToHost, m.stream));
}

void cuda_device::download_groups_total(int32_t *host_pinned) {
    TANDEM_CUDA_CHECK(cudaSetDevice(s_->device));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(host_pinned, s_->groups_total, sizeof(int32_t), cudaMemcpyDeviceToHost, s_->stream));
}

void cuda_device::add_traffic(std::vector<std::vector<uint64_t>> &traffic) const {
    const state &m = *s_;
    if (!m.traffic) return;
    const size_t ne = size_t(m.hp->n_expert), layers = size_t(m.part.layer_end - m.part.layer_begin);
    std::vector<unsigned long long> host(layers * ne);
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    TANDEM_CUDA_CHECK(cudaMemcpy(host.data(), m.traffic, host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    for (size_t l = 0; l < layers; ++l)
        for (size_t e = 0; e < ne; ++e) traffic[size_t(m.part.layer_begin) + l][e] += host[l * ne + e];
}

void cuda_device::synchronize() {
    TANDEM_CUDA_CHECK(cudaSetDevice(s_->device));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(s_->stream));
}

}  // namespace tandem
