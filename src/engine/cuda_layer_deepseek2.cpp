// src/engine/cuda_layer_deepseek2.cpp - the deepseek2 layer of a cuda_device, in the CPU twin's
// phases and arithmetic (cpu_layer_deepseek2.cpp): multi-head latent attention in the absorbed form
// for every row (cuda/attention_mla.h), DeepSeek's grouped routing (cuda/moe_route_grouped.h), the
// routed experts as qwen3moe runs them (cuda_device::layer_experts_routed), and the always-on FFN
// (shared experts, or a leading layer's dense FFN) added in the combine (cuda/ffn_dense.h).
// Weight products go through the quantized kernels (matvec for decode rows, matmul_prompt for
// prompt rows), whose results do not depend on the step's other rows; float matrices of widths
// those kernels do not take go through the plain kernel.
#include "cuda_device_state.h"

#include "cuda/attention_mla.h"
#include "cuda/cuda_check.h"
#include "cuda/ffn_dense.h"
#include "cuda/matmul_prompt.h"
#include "cuda/matvec.h"
#include "cuda/moe.h"
#include "cuda/moe_route_grouped.h"
#include "cuda/norm.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quant.h"

namespace tandem {

bool mla_tensor_cores(const cuda_matrix &w) {
    return cuda::matvec_row_bytes(w.type, w.n_in) != 0 && w.n_in % 32 == 0 && w.n_in % cuda::matvec_block_elems(w.type) == 0;
}

namespace {

// y (+)= W x over the step's n rows (x: rows of x_stride floats; y: rows of y_stride). x_split /
// x_sums: decode rows of x split by their producer (cuda/x_split.cuh), or nullptr (the same bits).
int64_t product(cuda_device::state &m, const cuda_matrix &w, const float *x, int64_t x_stride, float *y, int64_t y_stride,
                int32_t n, bool accumulate, const uint4 *x_split = nullptr, const float *x_sums = nullptr) {
    if (!mla_tensor_cores(w)) {
        cuda::dense_plain_args a;
        a.w = w.data;
        a.type = w.type;
        a.n_in = w.n_in;
        a.n_out = w.n_out;
        a.n_rows = n;
        a.x = x;
        a.x_stride = x_stride;
        a.y = y;
        a.y_stride = y_stride;
        a.accumulate = accumulate;
        cuda::dense_plain(a, m.stream);
        return 1;
    }
    cuda::matvec_args a;
    a.w = w.data;
    a.type = w.type;
    a.n_in = w.n_in;
    a.n_out = w.n_out;
    a.x = x;
    a.x_stride = x_stride;
    a.y = y;
    a.y_stride = y_stride;
    a.n_pairs = n;
    a.accumulate = accumulate;
    if (!m.prompt_rows) {
        a.x_split = x_split;
        a.x_sums = x_sums;
    }
    return 1 + rows_product(m, a, n);
}

// The per-head products with the absorbed up-projections: decode rows in one launch
// (mla_head_product); prompt rows through the prompt GEMMs a head at a time, which read each head's
// weights once per tile of rows rather than once a row (F32 weights: matmul_prompt's exact
// dequantisation; rows of whole 32-element blocks, 16-byte aligned).
int64_t head_products(cuda_device::state &m, const cuda::mla_head_product_args &a) {
    const bool gemm = m.prompt_rows && a.n_in % 32 == 0 && a.x_stride % 4 == 0 && a.x_head_stride % 4 == 0;
    if (!gemm) {
        cuda::mla_head_product(a, m.stream);
        return 1;
    }
    for (int32_t h = 0; h < a.n_head; ++h) {
        const cuda_matrix w{a.w + int64_t(h) * a.n_out * a.n_in, ggml_type::f32, a.n_in, a.n_out};
        product(m, w, a.x + h * a.x_head_stride, a.x_stride, a.y + h * a.y_head_stride, a.y_stride, a.n_rows, false);
    }
    return a.n_head;
}

bool q4k_blocks(const cuda_matrix &w) { return w.type == ggml_type::q4_k && w.n_in % 256 == 0; }

// Rows [row0, row0 + n_rows) of t (rows of n_in elements) dequantised into dst, as the CPU reads them.
void dequantize_tensor_rows(const gguf_tensor_info *t, int64_t n_in, int64_t row0, int64_t n_rows, float *dst) {
    const size_t row_bytes = ggml_row_bytes(t->type, n_in);
    for (int64_t i = 0; i < n_rows; ++i) dequantize_row(t->type, t->data + size_t(row0 + i) * row_bytes, dst + i * n_in, n_in);
}

}  // namespace

size_t ffn_dense_width(const model_hparams &hp) {
    if (hp.arch != model_arch::deepseek2) return 0;
    return std::max(size_t(hp.n_expert_shared) * size_t(hp.d_ff_expert), hp.n_dense_lead > 0 ? size_t(hp.d_ff) : size_t(0));
}

size_t mla_floats(const model_hparams &hp) {
    if (hp.arch != model_arch::deepseek2) return 0;
    const size_t r = cuda_device::max_step_rows, nh = size_t(hp.n_head), lora = size_t(hp.kv_lora_rank);
    const size_t dv = size_t(hp.d_head_v), nope = size_t(hp.d_nope());
    const size_t rows = r * (lora + size_t(hp.d_rope) + size_t(hp.q_lora_rank) + 2 * nh * lora + nh * dv + 2 * ffn_dense_width(hp) +
                             size_t(hp.d_model));
    return rows + size_t(hp.n_layer) * nh * (lora * nope + dv * lora);
}

mla_absorbed mla_absorb(const model_hparams &hp, const layer_tensors &lt) {
    const int64_t nh = hp.n_head, nope = hp.d_nope(), lora = hp.kv_lora_rank, dv = hp.d_head_v, per_head = nope + dv;
    mla_absorbed a;
    a.k_b.resize(size_t(nh * lora * nope));
    a.v_b.resize(size_t(nh * dv * lora));
    if (lt.wk_b) {
        dequantize_tensor_rows(lt.wk_b, nope, 0, nh * lora, a.k_b.data());
        dequantize_tensor_rows(lt.wv_b, lora, 0, nh * dv, a.v_b.data());
        return a;
    }
    std::vector<float> row(static_cast<size_t>(lora));
    for (int64_t h = 0; h < nh; ++h) {
        for (int64_t j = 0; j < nope; ++j) {
            dequantize_tensor_rows(lt.wkv_b, lora, h * per_head + j, 1, row.data());
            for (int64_t c = 0; c < lora; ++c) a.k_b[size_t((h * lora + c) * nope + j)] = row[size_t(c)];
        }
        dequantize_tensor_rows(lt.wkv_b, lora, h * per_head + nope, dv, a.v_b.data() + h * dv * lora);
    }
    return a;
}

void mla_check_types(const cuda_layer &cl) {
    // The plain kernel takes float matrices of any width; the grouped expert products take no others.
    for (const cuda_matrix *cm : {&cl.wq, &cl.wq_a, &cl.wq_b, &cl.wkv_a, &cl.wo, &cl.router, &cl.ffn_gate, &cl.ffn_up, &cl.ffn_down})
        if (cm->data && !mla_tensor_cores(*cm) && !cuda::dense_plain_supported(cm->type))
            fail(error_kind::unsupported, "the CUDA backend cannot compute deepseek2 tensors of type {} with rows of {}",
                 ggml_type_name(cm->type), cm->n_in);
    for (const cuda_matrix *cm : {&cl.gate, &cl.up, &cl.down})
        if (cm->data && !mla_tensor_cores(*cm))
            fail(error_kind::unsupported, "the CUDA backend cannot compute expert tensors of type {} with rows of {}",
                 ggml_type_name(cm->type), cm->n_in);
}

void cuda_device::state::mla_alloc() {
    const size_t R = max_step_rows, lora = size_t(hp->kv_lora_rank), nh = size_t(hp->n_head), ff = ffn_dense_width(*hp);
    auto alloc = [](float *&p, size_t count) {
        void *v = nullptr;
        TANDEM_CUDA_CHECK(cudaMalloc(&v, (count ? count : 1) * sizeof(float)));
        p = static_cast<float *>(v);
    };
    alloc(mla_kv, R * (lora + size_t(hp->d_rope)));
    alloc(mla_qa, R * size_t(hp->q_lora_rank));
    alloc(mla_q_lat, R * nh * lora);
    alloc(mla_o_lat, R * nh * lora);
    alloc(ffn_g, R * ff);
    alloc(ffn_u, R * ff);
    alloc(ffn_out, R * size_t(hp->d_model));
}

int64_t cuda_device::layer_attention_mla(int32_t l, int32_t r0, int32_t n) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const cudaStream_t s = m.stream;
    const cuda_layer &L = m.layer(l);
    const int32_t d = hp.d_model, nh = hp.n_head, dh = hp.d_head, lora = hp.kv_lora_rank, rope = hp.d_rope;
    const int32_t dv = hp.d_head_v, q_dim = nh * dh, kv_w = lora + rope, qlr = hp.q_lora_rank;
    float *x = x_rows(r0), *h = h_rows(r0);
    float *q = m.q + size_t(r0) * q_dim, *kv = m.mla_kv + size_t(r0) * kv_w, *att = m.att + size_t(r0) * nh * dv;
    float *q_lat = m.mla_q_lat + size_t(r0) * nh * lora, *o_lat = m.mla_o_lat + size_t(r0) * nh * lora;
    const int32_t *slots = m.slots() + r0, *positions = m.positions() + r0;
    // h's split twin where the embedding or the combine before wrote it (decode rows).
    const uint4 *hs = m.h_split_fresh && !m.prompt_rows ? m.h_split + size_t(r0) * d / 4 : nullptr;
    const float *hm = hs ? m.h_sums + size_t(r0) * d / 32 : nullptr;
    // The only cache plane of this layer (model_kv_shape_of: the latent, then the roped key).
    void *cache = m.kv + size_t(l - m.part.layer_begin) * size_t(m.n_slots) * size_t(m.n_ctx) * m.kv_row;
    int64_t launches = 0;

    if (L.wq_a.data) {
        float *qa = m.mla_qa + size_t(r0) * qlr;
        launches += product(m, L.wq_a, h, d, qa, qlr, n, false, hs, hm);
        cuda::rmsnorm({qa, L.q_a_norm, qa, n, qlr, hp.rms_eps}, s);
        launches += 1 + product(m, L.wq_b, qa, qlr, q, q_dim, n, false);
    } else {
        launches += product(m, L.wq, h, d, q, q_dim, n, false, hs, hm);
    }
    launches += product(m, L.wkv_a, h, d, kv, kv_w, n, false, hs, hm);

    // Every row's cache entry is written before any row attends (rows of one slot see each other).
    cuda::mla_rope_cache_args rc;
    rc.kv = kv;
    rc.q = q;
    rc.kv_norm = L.kv_a_norm;
    rc.inv_freq = m.inv_freq;
    rc.slots = slots;
    rc.positions = positions;
    rc.cache = cache;
    rc.cache_f16 = m.kv_elem == kv_type::f16;
    rc.n_rows = n;
    rc.n_head = nh;
    rc.d_head = dh;
    rc.kv_lora = lora;
    rc.d_rope = rope;
    rc.n_ctx = m.n_ctx;
    rc.eps = hp.rms_eps;
    cuda::mla_rope_cache(rc, s);

    // q_lat[r][h] = W_UK[h]^T q_nope[r][h]; the attention over latents and roped keys; att = W_UV o_lat.
    launches += head_products(m, {L.k_b, q, q_lat, q_dim, dh, int64_t(nh) * lora, lora, n, nh, hp.d_nope(), lora});
    cuda::mla_attention_args aa;
    aa.q_lat = q_lat;
    aa.q = q;
    aa.q_stride = q_dim;
    aa.cache = cache;
    aa.cache_f16 = rc.cache_f16;
    aa.slots = slots;
    aa.positions = positions;
    aa.out_lat = o_lat;
    aa.n_rows = n;
    aa.n_head = nh;
    aa.d_head = dh;
    aa.kv_lora = lora;
    aa.d_rope = rope;
    aa.n_ctx = m.n_ctx;
    aa.scale = m.mla_scale;
    aa.prompt = m.prompt_rows;
    cuda::mla_attention(aa, s);
    launches += head_products(m, {L.v_b, o_lat, att, int64_t(nh) * lora, lora, int64_t(nh) * dv, dv, n, nh, lora, dv});
    launches += 2;
    launches += product(m, L.wo, att, int64_t(nh) * dv, x, d, n, true);
    m.h_split_fresh = false;
    m.h_prompt_digits_fresh = false;
    return launches;
}

int64_t cuda_device::layer_route_deepseek2(int32_t l, int32_t r0, int32_t n) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const cudaStream_t s = m.stream;
    const cuda_layer &L = m.layer(l);
    const layer_recipe recipe = model_layer_recipe(hp, l);
    const int32_t d = hp.d_model, k = recipe.n_expert_used, ne = hp.n_expert;
    float *x = x_rows(r0), *h = h_rows(r0);
    float *logits = m.router_logits + size_t(r0) * ne;
    uint4 *h_split = m.prompt_rows ? nullptr : m.h_split + size_t(r0) * d / 4;
    float *h_sums = m.prompt_rows ? nullptr : m.h_sums + size_t(r0) * d / 32;
    state::layer_route_plan &rp = m.route_plan;
    rp = {};
    int64_t launches = 0;
    const bool routed = k > 0;
    // As qwen3moe's layer_route: decode rows with an F32 router take the norm and the router in one
    // launch (the CPU's logits bitwise for the same h), and Q4_K experts take h as digits.
    const bool norm_router = routed && !m.prompt_rows && L.router.type == ggml_type::f32 && cuda::rmsnorm_router_applies(d, ne) &&
                             reinterpret_cast<uintptr_t>(L.router.data) % 16 == 0;
    rp.digits = norm_router && m.h_digits && q4k_blocks(L.gate) && L.up.type == ggml_type::q4_k;
    rp.prompt_digits_gate_up = routed && m.prompt_rows && q4k_blocks(L.gate) && L.up.type == ggml_type::q4_k;
    rp.prompt_digits_down = routed && m.prompt_rows && q4k_blocks(L.down);
    if (rp.digits)
        rp.h_dig = {m.h_digits + size_t(r0) * cuda::digits_per_element * d, m.h_digit_scales + size_t(r0) * d / 256,
                    m.h_digit_sums + size_t(r0) * d / 256 * 16};
    if (norm_router) {
        cuda::rmsnorm_router_args nr;
        nr.x = x;
        nr.w_norm = L.ffn_norm;
        nr.router = static_cast<const float *>(L.router.data);
        nr.h = h;
        if (rp.digits) {
            nr.h_digits = rp.h_dig;
        } else {
            nr.h_split = h_split;
            nr.h_sums = h_sums;
        }
        nr.logits = logits;
        nr.n_rows = n;
        nr.n = d;
        nr.n_expert = ne;
        nr.eps = hp.rms_eps;
        cuda::rmsnorm_router(nr, s);
        m.h_split_fresh = h_split && !rp.digits;
        ++launches;
    } else {
        cuda::rmsnorm_args na{x, L.ffn_norm, h, n, d, hp.rms_eps};
        na.y_split = h_split;
        na.y_sums = h_sums;
        cuda::rmsnorm(na, s);
        m.h_split_fresh = h_split != nullptr;
        ++launches;
        if (routed) launches += product(m, L.router, h, d, logits, ne, n, false);
    }
    m.h_prompt_digits_fresh = false;
    if (!routed) return launches;

    cuda::moe_route_grouped_args ga;
    ga.logits = logits;
    ga.bias = L.exp_probs_b;
    ga.slots = m.slots() + r0;
    ga.ids = m.ids + size_t(r0) * k;
    ga.weights = m.route_w + size_t(r0) * k;
    ga.n_rows = n;
    ga.n_expert = ne;
    ga.k = k;
    ga.n_group = hp.n_expert_group;
    ga.n_group_used = hp.n_expert_group_used;
    ga.sigmoid = hp.gating == expert_gating::sigmoid;
    ga.normalise = hp.norm_topk;
    ga.scale = hp.expert_weights_scale;
    cuda::moe_route_grouped(ga, s);

    cuda::moe_route_args &ra = rp.route;
    ra.logits = logits;
    ra.slots = ga.slots;
    ra.ids = ga.ids;
    ra.weights = ga.weights;
    ra.group_expert = m.group_expert;
    ra.group_off = m.group_off;
    ra.n_groups = m.n_groups;
    ra.pair_x = m.pair_x;
    ra.pair_y = m.pair_y;
    ra.groups_total = m.part.role == placement_role::partner ? nullptr : m.groups_total;  // a pair counts once
    ra.n_rows = n;
    ra.n_expert = ne;
    ra.k = k;
    ra.renormalise = hp.norm_topk;
    cuda::moe_group_pairs(ra, s);
    launches += 2;
    if (m.traffic) {
        cuda::moe_count({ra.ids, ra.slots, m.traffic + size_t(l - m.part.layer_begin) * size_t(ne), n, k}, s);
        ++launches;
    }
    return launches;
}

int64_t cuda_device::layer_experts_deepseek2(int32_t l, int32_t r0, int32_t n) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const cuda_layer &L = m.layer(l);
    const layer_recipe recipe = model_layer_recipe(hp, l);
    int64_t launches = recipe.n_expert_used > 0 ? layer_experts_routed(l, r0, n) : 0;
    if (recipe.ffn == layer_ffn::routed) return launches;
    TANDEM_ASSERT(L.ffn_gate.data, "layer {} has no shared experts or dense FFN on device {}", l, m.part.logical);
    // The always-on FFN over every row: silu(gate h) * (up h), then down.
    const int32_t d = hp.d_model, ff = L.ffn_gate.n_out;
    const float *h = h_rows(r0);
    float *g = m.ffn_g + size_t(r0) * ff, *u = m.ffn_u + size_t(r0) * ff;
    const uint4 *hs = m.h_split_fresh && !m.prompt_rows ? m.h_split + size_t(r0) * d / 4 : nullptr;  // the FFN norm's
    const float *hm = hs ? m.h_sums + size_t(r0) * d / 32 : nullptr;
    launches += product(m, L.ffn_gate, h, d, g, ff, n, false, hs, hm);
    launches += product(m, L.ffn_up, h, d, u, ff, n, false, hs, hm);
    cuda::swiglu_rows(g, u, n, ff, ff, m.stream);
    launches += 1 + product(m, L.ffn_down, g, ff, m.ffn_out + size_t(r0) * d, d, n, false);
    return launches;
}

int64_t cuda_device::combine_deepseek2(int32_t l, int32_t r0, int32_t n) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const layer_recipe recipe = model_layer_recipe(hp, l);
    const int32_t d = hp.d_model, k = recipe.n_expert_used;
    cuda::ffn_combine_args ca;
    ca.x = x_rows(r0);
    ca.out = k > 0 ? expert_out_rows(r0) : nullptr;
    ca.weights = k > 0 ? m.route_w + size_t(r0) * size_t(hp.n_expert_used) : nullptr;
    ca.dense = recipe.ffn == layer_ffn::routed ? nullptr : m.ffn_out + size_t(r0) * d;
    ca.slots = m.slots() + r0;
    ca.n_rows = n;
    ca.k = k;
    ca.d_model = d;
    cuda::ffn_combine(ca, m.stream);
    // h <- the next layer's attention norm (or the output norm), split for decode rows' products.
    cuda::rmsnorm_args na{x_rows(r0), l + 1 < m.part.layer_end ? m.layer(l + 1).attn_norm : m.next_norm, h_rows(r0), n, d,
                          hp.rms_eps};
    if (!m.prompt_rows) {
        na.y_split = m.h_split + size_t(r0) * d / 4;
        na.y_sums = m.h_sums + size_t(r0) * d / 32;
    }
    cuda::rmsnorm(na, m.stream);
    m.h_split_fresh = na.y_split != nullptr;
    m.h_prompt_digits_fresh = false;
    return 2;
}

}  // namespace tandem
