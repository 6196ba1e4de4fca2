// src/engine/cuda_device.cpp - one logical CUDA device: uploads its part of the model in the file's
// types, keeps the K/V of its layers, and enqueues the launches of the cuda/ families for its
// share of each step. The launch sequence of a whole-model device is the single-GPU forward. A
// layer's launches (attention and experts) are in cuda_layer.cpp.
#include "cuda_device_state.h"
#include "load_meter.h"

#include "cuda/attention.h"
#include "src/cpu/cpu_ops.h"
#include "cuda/attention_prompt.h"
#include "cuda/logits_top.h"
#include "cuda/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/matvec.h"
#include "cuda/matvec_digits.h"
#include "cuda/moe.h"
#include "cuda/moe_split.h"
#include "cuda/norm.h"
#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace tandem {

namespace {

// A Q4_K head on digits: the decode kernel up to this many rows, the prompt tiles above (a 151,936
// x 2,048 head on an H200: the tiles take ~112 us at any row count, the decode kernel less up to 8).
constexpr int32_t head_digit_tile_rows = 8;

template <class T>
T *device_alloc(size_t count) {
    void *p = nullptr;
    if (count == 0) count = 1;
    TANDEM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    return static_cast<T *>(p);
}

// The step buffers in floats (ints counted as floats): max_step_rows rows, chunk partials for
// max_logit_rows.
size_t step_floats(const model_hparams &hp, int32_t n_ctx) {
    const size_t r = cuda_device::max_step_rows, k = size_t(hp.n_expert_used), d = size_t(hp.d_model);
    const size_t r_partial = cuda_device::max_logit_rows;
    const size_t dh = size_t(hp.d_head), q_dim = size_t(hp.n_head) * dh, kv_dim = size_t(hp.n_head_kv) * dh;
    const size_t n_chunks = size_t(cuda::attention_chunks(n_ctx));
    // Decode rows' split twins (cuda/x_split.cuh): h, att and the SwiGLU outputs with their
    // 32-element sums; the prompt rows' split input of a Q4_K product.
    const size_t act = k * size_t(hp.d_ff_expert);
    const size_t split = r_partial * (d + d / 32 + q_dim + q_dim / 32 + act + act / 32);
    auto digit_floats = [](size_t n) { return n % 256 == 0 ? cuda::digits_per_element * n / 4 + n / 256 + n / 256 * 16 / 2 : 0; };
    const size_t digits = r_partial * (digit_floats(d) + k * digit_floats(size_t(hp.d_ff_expert)));  // bytes / 4
    const size_t prompt_split = r * prompt_split_width(hp) * 33 / 32;
    return mla_floats(hp) + r * (2 * d + 2 * q_dim + 2 * kv_dim + router_k_parts * size_t(hp.n_expert) + 2 * k + k * size_t(hp.d_ff_expert) + k * d + 4) +
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

// deepseek2's tensors of a layer beyond qwen3moe's, as offsets into the upload (SIZE_MAX: absent).
struct mla_offsets {
    size_t wq_a, wq_b, wkv_a, ffn_gate, ffn_up, ffn_down, q_a_norm, kv_a_norm, exp_probs_b, k_b, v_b;
};

// Adds a deepseek2 layer's tensors to the upload, the absorbed up-projections in F32 (mla_absorb).
mla_offsets mla_upload(const model_hparams &hp, const layer_tensors &lt, upload_plan &up,
                       std::vector<std::vector<float>> &absorbed) {
    constexpr size_t none = SIZE_MAX;
    auto whole = [&](const gguf_tensor_info *t) { return t ? up.add({{t->data, t->n_bytes}}) : none; };
    mla_absorbed abs = mla_absorb(hp, lt);
    auto host = [&](std::vector<float> &&v) {
        absorbed.push_back(std::move(v));
        const std::vector<float> &a = absorbed.back();
        return up.add({{reinterpret_cast<const uint8_t *>(a.data()), a.size() * sizeof(float)}});
    };
    const bool dense = lt.ffn_gate != nullptr;
    mla_offsets o;
    o.wq_a = whole(lt.wq_a);
    o.wq_b = whole(lt.wq_b);
    o.wkv_a = whole(lt.wkv_a);
    o.ffn_gate = whole(dense ? lt.ffn_gate : lt.gate_shexp);
    o.ffn_up = whole(dense ? lt.ffn_up : lt.up_shexp);
    o.ffn_down = whole(dense ? lt.ffn_down : lt.down_shexp);
    o.q_a_norm = whole(lt.q_a_norm);
    o.kv_a_norm = whole(lt.kv_a_norm);
    o.exp_probs_b = whole(lt.exp_probs_b);
    o.k_b = host(std::move(abs.k_b));
    o.v_b = host(std::move(abs.v_b));
    return o;
}

}  // namespace

size_t prompt_split_width(const model_hparams &hp) {
    size_t w = std::max({size_t(hp.d_model), size_t(hp.n_head) * size_t(hp.d_head), size_t(hp.n_expert_used) * size_t(hp.d_ff_expert)});
    if (hp.arch == model_arch::deepseek2)  // the q LoRA's rows, the value heads, the always-on FFN
        w = std::max({w, size_t(hp.q_lora_rank), size_t(hp.n_head) * size_t(hp.d_head_v), ffn_dense_width(hp)});
    return (w + 127) / 128 * 128;
}

uint64_t cuda_device::scratch_bytes(const model_hparams &hp, int32_t n_ctx, bool has_head, bool paired) {
    const size_t r = max_step_rows, k = size_t(hp.n_expert_used), d = size_t(hp.d_model);
    size_t floats = step_floats(hp, n_ctx);
    if (has_head) {
        floats += size_t(max_logit_rows) * size_t(hp.n_vocab);
        // The summaries: 64 candidate keys (two floats each), max, sum (two) and flag per slice and row.
        floats += size_t(max_logit_rows) * (size_t(cuda::logits_top_slices(hp.n_vocab)) * (2 * cuda::logits_top_n + 4) +
                                           sizeof(cuda::logits_top_row) / 4);
        // The draws (a whole head): a request a row; the rows' rule descriptors (their pool, sized
        // by the requests, grows from 1 MiB: the slack below).
        floats += size_t(max_logit_rows) * (sizeof(row_draw) / 4 + sizeof(cuda::logits_rules_row) / 4);
    }
    if (paired) floats += 2 * r * k * d + 2 * r * k + 2 * size_t(hp.n_expert) + 2;
    return uint64_t(floats) * 4 + (uint64_t(64) << 20);  // + allocator slack and the graphs
}

cuda_device::cuda_device(const model_hparams &hp, const model_tensors &tensors, const placement_device_plan &part,
                         int32_t n_slots, int32_t n_ctx, bool record_traffic, kv_type kv, load_meter *meter)
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
    // Layers whose routed experts are a subset here: a pair's halves, or the hot experts of a plan
    // with a host tier (the cold ones are computed by the CPU, cuda_cold_tier.h).
    const bool split = m.paired() && !part.experts.empty();
    auto subset = [&](int32_t l) {
        return split || (!part.experts.empty() && part.experts[size_t(l - part.layer_begin)].size() < size_t(hp.n_expert));
    };
    bool any_subset = false;
    for (int32_t l = part.layer_begin; l < part.layer_end; ++l) any_subset = any_subset || subset(l);
    if (any_subset && hp.n_expert > cuda::moe_split_max_experts)
        fail(error_kind::unsupported, "the CUDA engine splits the experts of layers of at most {} experts, the model has {}",
             cuda::moe_split_max_experts, hp.n_expert);

    // Which bytes go where.
    upload_plan up;
    // Tensors a layer kind does not have (deepseek2's dense layers: no experts; no K/V norms) upload nothing.
    constexpr size_t none = SIZE_MAX;
    auto whole = [&](const gguf_tensor_info *t) { return t ? up.add({{t->data, t->n_bytes}}) : none; };
    auto experts = [&](const gguf_tensor_info *t, const std::vector<int32_t> &held, bool sub) {
        if (!sub || !t) return whole(t);
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
        const std::vector<int32_t> held = subset(l) ? part.experts[size_t(l - part.layer_begin)] : std::vector<int32_t>{};
        std::vector<int32_t> map(size_t(hp.n_expert), -1);
        for (size_t i = 0; i < held.size(); ++i) map[size_t(held[i])] = int32_t(i);
        local.push_back(std::move(map));
        offs.push_back({whole(lt.attn_norm), whole(lt.q_norm), whole(lt.k_norm), whole(lt.ffn_norm), whole(lt.wq),
                        whole(lt.wk), whole(lt.wv), whole(lt.wo), whole(lt.router), experts(lt.gate_exps, held, subset(l)),
                        experts(lt.up_exps, held, subset(l)), experts(lt.down_exps, held, subset(l))});
    }
    m.mla = hp.arch == model_arch::deepseek2;
    std::vector<mla_offsets> mla_offs;
    std::vector<std::vector<float>> absorbed;  // host copies of the F32 up-projections until they upload
    if (m.mla)
        for (int32_t l = part.layer_begin; l < part.layer_end; ++l)
            mla_offs.push_back(mla_upload(hp, tensors.layers[size_t(l)], up, absorbed));
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
        for (const upload_plan::slice &s : r.slices)
            for (size_t done = 0; done < s.bytes;) {
                const size_t n = std::min(load_meter::piece_bytes, s.bytes - done);
                TANDEM_CUDA_CHECK(cudaMemcpy(m.weights + at, s.src + done, n, cudaMemcpyHostToDevice));
                if (meter != nullptr) meter->add(n);
                at += n;
                done += n;
            }
    }
    auto vec = [&](size_t off) { return off == none ? nullptr : reinterpret_cast<const float *>(m.weights + off); };
    auto mat = [&](size_t off, const gguf_tensor_info *t, int32_t n_out) {
        cuda_matrix cm;
        if (!t) return cm;
        cm.data = m.weights + off;
        cm.type = t->type;
        cm.n_in = int32_t(t->ne[0]);
        cm.n_out = n_out;
        return cm;
    };
    auto rows_of = [](const gguf_tensor_info *t) { return !t ? 0 : int32_t(t->ne.size() > 1 ? t->ne[1] : 1); };
    int32_t *local_dev = nullptr;
    if (any_subset) {
        local_dev = m.local_maps = device_alloc<int32_t>(local.size() * size_t(hp.n_expert));
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
        cl.local = subset(l) ? local_dev + i * size_t(hp.n_expert) : nullptr;
        if (m.mla) {
            const mla_offsets &mo = mla_offs[i];
            cl.wq_a = mat(mo.wq_a, lt.wq_a, rows_of(lt.wq_a));
            cl.wq_b = mat(mo.wq_b, lt.wq_b, rows_of(lt.wq_b));
            cl.wkv_a = mat(mo.wkv_a, lt.wkv_a, rows_of(lt.wkv_a));
            const bool dense = lt.ffn_gate != nullptr;
            const gguf_tensor_info *fg = dense ? lt.ffn_gate : lt.gate_shexp, *fu = dense ? lt.ffn_up : lt.up_shexp;
            const gguf_tensor_info *fd = dense ? lt.ffn_down : lt.down_shexp;
            cl.ffn_gate = mat(mo.ffn_gate, fg, rows_of(fg));
            cl.ffn_up = mat(mo.ffn_up, fu, rows_of(fu));
            cl.ffn_down = mat(mo.ffn_down, fd, rows_of(fd));
            cl.q_a_norm = vec(mo.q_a_norm);
            cl.kv_a_norm = vec(mo.kv_a_norm);
            cl.exp_probs_b = vec(mo.exp_probs_b);
            cl.k_b = vec(mo.k_b);
            cl.v_b = vec(mo.v_b);
            mla_check_types(cl);
        }
        for (const cuda_matrix *cm : {&cl.wq, &cl.wk, &cl.wv, &cl.wo, &cl.router, &cl.gate, &cl.up, &cl.down})
            if (!m.mla && cuda::matvec_row_bytes(cm->type, cm->n_in) == 0)
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

    // K/V of the layers here (F32 like the CPU twin, F16 or Q8_0: engine_options::kv); RoPE
    // frequencies computed as the CPU does.
    m.n_chunks = cuda::attention_chunks(n_ctx);
    m.kv_elem = kv;
    const model_kv_shape kv_shape = model_kv_shape_of(hp);
    m.kv_planes = kv_shape.n_planes;
    m.kv_row = size_t(kv_row_bytes(kv, kv_shape.width));
    m.kv_bytes = size_t(part.layer_end - part.layer_begin) * size_t(m.kv_planes) * size_t(n_slots) * size_t(n_ctx) * m.kv_row;
    m.kv = device_alloc<uint8_t>(m.kv_bytes);
    std::vector<float> inv_freq(size_t(dh / 2));
    for (int64_t i = 0; i < dh / 2; ++i)
        inv_freq[size_t(i)] = 1.0f / static_cast<float>(std::pow(double(hp.rope_theta), double(float(2 * i) / float(dh))));
    if (m.mla) {  // the rope part's frequencies with YaRN, computed as the CPU twin computes them
        const rope_yarn &y = hp.yarn_params;
        inv_freq = cpu::rope_inv_freq(hp.rope_theta, hp.d_rope, hp.yarn ? y.factor : 0.0f, y.n_ctx_orig, y.beta_fast, y.beta_slow);
        m.mla_scale = model_mla_softmax_scale(hp);
    }
    m.inv_freq = device_alloc<float>(inv_freq.size());
    TANDEM_CUDA_CHECK(cudaMemcpy(m.inv_freq, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));

    m.rows = device_alloc<int32_t>(4 * R);
    TANDEM_CUDA_CHECK(cudaMemset(m.rows, 0, 4 * R * sizeof(int32_t)));
    m.x = device_alloc<float>(R * d);
    m.h = device_alloc<float>(R * d);
    m.q = device_alloc<float>(R * q_dim);
    m.att = device_alloc<float>(R * size_t(std::max<int64_t>(q_dim, int64_t(hp.n_head) * hp.d_head_v)));
    if (m.mla) m.mla_alloc();
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
    if (split)
        for (float *&e : m.exchange) e = device_alloc<float>(R * k * d);
    if (any_subset) {
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
            m.rule_rows = device_alloc<cuda::logits_rules_row>(D);
            if (part.head_begin == 0) {
                m.draws = device_alloc<row_draw>(D);
                if (cols < hp.n_vocab) m.logits_rest = device_alloc<float>(D * size_t(hp.n_vocab - cols));
            }
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
    for (const void *p : std::initializer_list<const void *>{
             m.weights, m.kv, m.inv_freq, m.rows, m.x, m.h, m.q, m.kb, m.vb, m.att, m.router_logits, m.route_w, m.act,
             m.eout, m.partial, m.exchange[0], m.exchange[1], m.ids, m.group_expert, m.group_off, m.n_groups, m.pair_x,
             m.pair_y, m.groups_total, m.own_mat, m.own_off, m.own_n, m.own_x, m.own_y, m.logits, m.top_keys, m.top_slice_max,
             m.top_slice_sum, m.top_slice_nan, m.top_rows, m.rule_rows, m.rule_pool, m.draws, m.logits_rest, m.h_split, m.h_sums, m.h_digits, m.h_digit_scales, m.h_digit_sums, m.act_digits,
             m.act_digit_scales, m.act_digit_sums, m.att_split,
             m.att_sums, m.act_split, m.act_sums, m.prompt_split, m.prompt_sums, m.traffic, m.local_maps, m.mla_kv, m.mla_qa,
             m.mla_q_lat, m.mla_o_lat, m.ffn_g, m.ffn_u, m.ffn_out})
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
float *cuda_device::logits_rows() { return s_->logits; }
float *cuda_device::logits_rest_rows() { return s_->logits_rest; }
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
    if (hp.arch == model_arch::deepseek2) return prompt ? max_step_rows : max_logit_rows;  // one attention kernel for any rows
    return prompt && cuda::attention_prompt_native(hp.n_head, hp.n_head_kv, hp.d_head) ? max_step_rows : max_logit_rows;
}

void cuda_device::set_prompt_rows(bool prompt) { s_->prompt_rows = prompt; }
void cuda_device::set_distinct_slots(bool distinct) { s_->distinct_slots = distinct; }

void cuda_device::h_received() {
    s_->h_split_fresh = false;
    s_->h_prompt_digits_fresh = false;
}

cuda::digit_rows cuda_device::state::prompt_digit_rows(int32_t n_rows, int32_t n_el) const {
    // Each row's 2 n_el digit bytes, n_el / 8 sum bytes and n_el / 64 scale bytes fit in the 4 n_el
    // bytes a row of the widest input has.
    uint8_t *base = reinterpret_cast<uint8_t *>(prompt_split);
    const size_t digit_bytes = size_t(n_rows) * cuda::digits_per_element * size_t(n_el), sum_bytes = size_t(n_rows) * size_t(n_el) / 8;
    TANDEM_ASSERT(n_el % 256 == 0 && digit_bytes + sum_bytes + size_t(n_rows) * size_t(n_el) / 64 <=
                                         size_t(max_step_rows) * prompt_split_width(*hp) * 4,
                  "prompt digit rows exceed the split scratch");
    return cuda::digit_rows{reinterpret_cast<int8_t *>(base), reinterpret_cast<float *>(base + digit_bytes + sum_bytes),
                            reinterpret_cast<uint16_t *>(base + digit_bytes)};
}

bool cuda_device::state::prompt_dense_on_digits(const cuda_matrix &w) const {
    return prompt_rows && w.type == ggml_type::q4_k && w.n_in % 256 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

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
    m.h_prompt_digits_fresh = false;
    cuda::rmsnorm(na, m.stream);
    return 2;
}

int64_t cuda_device::merge_partner(int32_t l, int32_t r0, int32_t n, int32_t parity) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    if (m.mla && model_layer_recipe(hp, l).n_expert_used == 0) return 0;  // a dense layer: no pairs to merge
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
    if (s_->mla) return combine_deepseek2(l, r0, n);
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
    // Prompt rows whose next layer (here) takes Q/K/V on digits: h's digits written by this launch
    // (one digits_quantize launch fewer a layer; the same bits).
    m.h_prompt_digits_fresh = l + 1 < m.part.layer_end && m.prompt_dense_on_digits(m.layer(l + 1).wq) &&
                              m.prompt_dense_on_digits(m.layer(l + 1).wk) && cuda::moe_combine_digits_applies(ca);
    if (m.h_prompt_digits_fresh) ca.h_digits = m.prompt_digit_rows(n, hp.d_model);
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
    float *const y = m.logits + size_t(out0) * size_t(cols);
    if (m.h_digits && m.head.type == ggml_type::q4_k && m.head.n_in % 256 == 0) {
        // A Q4_K head on int8 digits, as one group: the rows' digits gathered once, then the
        // decode kernel for up to 8 rows and the prompt tiles above (the same bits either way, so
        // a row's logits stay batch invariant). Twice as fast as the bf16-split product at 1-4 rows
        // and 1.8x at 16, at the digits' precision.
        const cuda::digit_rows dig{m.h_digits, m.h_digit_scales, m.h_digit_sums};
        cuda::digits_quantize_args q{h_rows(r0), n_out, hp.d_model, dig, m.head_rows() + r0};
        cuda::digits_quantize(q, m.stream);
        const cuda::matvec_digits_args b = cuda::one_group_args(m.head.data, m.head.n_in, cols, dig, n_out, y, cols);
        if (n_out > head_digit_tile_rows)
            cuda::matmul_digits(b, m.stream);
        else
            cuda::matvec_digits(b, m.stream);
        return 2;
    }
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
    a.y = y;
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

int64_t cuda_device::logits_top(int32_t n_out, bool best_only) {
    state &m = *s_;
    TANDEM_ASSERT(m.top_rows, "device {} does not reduce logits rows", m.part.logical);
    if (n_out == 0) return 0;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    if (best_only) {
        cuda::logits_best({.logits = m.logits, .n_rows = n_out, .n_cols = m.head.n_out, .first_id = m.part.head_begin, .out = m.top_rows},
                          m.stream);
        return 1;
    }
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

bool cuda_device::can_draw() const { return s_->draws != nullptr; }

void cuda_device::upload_draws(const row_draw *host_pinned, int32_t n_out) {
    state &m = *s_;
    TANDEM_ASSERT(m.draws, "device {} does not draw from logits rows", m.part.logical);
    TANDEM_ASSERT(n_out >= 0 && n_out <= max_logit_rows);
    if (n_out == 0) return;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.draws, host_pinned, size_t(n_out) * sizeof(row_draw), cudaMemcpyHostToDevice, m.stream));
}

int64_t cuda_device::logits_draw(int32_t n_out) {
    state &m = *s_;
    TANDEM_ASSERT(m.draws, "device {} does not draw from logits rows", m.part.logical);
    if (n_out == 0) return 0;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    cuda::logits_draw_args a;
    a.logits = m.logits;
    a.n_rows = n_out;
    a.n_cols = m.hp->n_vocab;
    if (m.logits_rest) {
        a.logits_rest = m.logits_rest;
        a.split = m.head.n_out;
    }
    a.draws = m.draws;
    a.rows = m.top_rows;
    cuda::logits_draw(a, m.stream);
    return 1;
}

uint8_t *cuda_device::rules_pool(size_t n_bytes) {
    state &m = *s_;
    TANDEM_ASSERT(m.rule_rows, "device {} applies no logit rules", m.part.logical);
    if (n_bytes <= m.rule_pool_bytes) return m.rule_pool;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // a launch may still read the old pool
    if (m.rule_pool) TANDEM_CUDA_CHECK(cudaFree(m.rule_pool));
    m.rule_pool = nullptr;
    // Doubling from 1 MiB: a few growths cover any step (16 rows of a 152 K mask are 0.3 MB).
    size_t bytes = std::max<size_t>(m.rule_pool_bytes * 2, size_t(1) << 20);
    while (bytes < n_bytes) bytes *= 2;
    m.rule_pool = device_alloc<uint8_t>(bytes);
    m.rule_pool_bytes = bytes;
    return m.rule_pool;
}

void cuda_device::upload_rules(const void *rows_host_pinned, int32_t n_rows, const void *pool_host_pinned, size_t n_bytes) {
    state &m = *s_;
    TANDEM_ASSERT(m.rule_rows && n_rows >= 0 && n_rows <= max_logit_rows && n_bytes <= m.rule_pool_bytes,
                  "device {}: rules of {} rows, {} bytes (pool {})", m.part.logical, n_rows, n_bytes, m.rule_pool_bytes);
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    if (n_bytes > 0)
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.rule_pool, pool_host_pinned, n_bytes, cudaMemcpyHostToDevice, m.stream));
    if (n_rows > 0)
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.rule_rows, rows_host_pinned, size_t(n_rows) * sizeof(cuda::logits_rules_row),
                                          cudaMemcpyHostToDevice, m.stream));
}

int64_t cuda_device::logits_rules(int32_t n_out) {
    state &m = *s_;
    TANDEM_ASSERT(m.rule_rows, "device {} applies no logit rules", m.part.logical);
    if (n_out == 0) return 0;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    cuda::logits_rules({.logits = m.logits, .n_rows = n_out, .n_cols = m.head.n_out, .first_id = m.part.head_begin, .rules = m.rule_rows},
                       m.stream);
    return 1;
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
