// src/engine/cuda_layer.cpp - one layer's launches on a cuda_device, in the CPU twin's phases:
// layer_attention (Q/K/V, QK norm + RoPE + cache write, attention, wo), layer_route (FFN norm and
// router, routing; for one-row steps inside the gate/up launch) and layer_experts (the experts'
// gate/up and down). Which kernel family computes each quantized product is chosen in one place,
// layer_products (prompt rows through the tiled GEMMs and the digit tiles, every Q4_K product of
// theirs on digits; decode rows through the matrix-vector and digit products). The rest of the
// device (uploads, scratch, embedding, head, transfers) is in cuda_device.cpp.
#include "cuda_device_state.h"

#include "cuda/attention.h"
#include "cuda/attention_prompt.h"
#include "cuda/cuda_check.h"
#include "cuda/matmul_prompt.h"
#include "cuda/matvec.h"
#include "cuda/matvec_digits.h"
#include "cuda/matvec_plan.h"
#include "cuda/moe.h"
#include "cuda/moe_split.h"
#include "cuda/norm.h"
#include "tandem/error.h"

#include <initializer_list>

namespace tandem {

namespace {

// Decode steps of more pairs than this split the SwiGLU outputs once for down (cuda::split_rows):
// `bench --prompt 0 --sessions 1,4,16` +2.5% at 16, even at 4; one session's 8 pairs keep the split
// inside down (the launch costs them 2%).
constexpr int32_t split_act_min_pairs = 8;
// The same for a Q6_K down (a Q4_K_M file's, staged one-warp blocks): on the Q4_K_M mix the launch
// pays from 65 pairs (same bench: 16 sessions +1.2%, 4 sessions -1%).
constexpr int32_t split_act_min_pairs_q6_k = 64;
// Decode steps of more pairs than this quantise the SwiGLU outputs to digits once for a Q4_K down
// (digits_quantize, then solo warps, staged); smaller ones let down's blocks make them (down alone:
// the launch costs 1.3 us at one row and saves 0.8 at two; `bench --prompt 0 --sessions 2` +1.3%).
constexpr int32_t down_quantize_min_pairs = 8;
// Prompt steps whose experts are Q4_K take the grouped products on digits too (quantised once per
// product by digits_quantize): the 32-pair tiles (cuda::matmul_digits) from this many pairs per
// expert on average, the decode kernels below it. Both give the same bits, so how a prompt is
// chunked changes nothing. `bench --prompt 2048 --prefill-chunk C`: the tiles win from 256-row
// chunks (16 pairs an expert).
constexpr int32_t prompt_tile_min_pairs_per_expert = 16;
// Prompt steps whose Q, K, V and wo are Q4_K take them on digits as well, each a dense product with
// the grouped arithmetic (matvec_digits_args::one_group): the tiles from this many rows (Q, K and V
// in one launch), the decode kernels below it (the same bits, so chunking changes nothing).
// `bench --prompt 2048 --prefill-chunk C` with the tiles from 16 / 32 / 64 rows: 32 wins at 32-row
// chunks and ties elsewhere (the small tiles split K over clusters).
constexpr int32_t prompt_dense_tile_min_rows = 32;
// The grouped digit products' shapes by the step's pairs (cuda/matvec_digits.h; every shape gives
// the same bits): solo warps staged for down above 8 pairs. Gate/up is always staged (streamed where
// the GPU has no bulk copies): in the engine the experts' weights come from DRAM, not L2, and
// `bench --prompt 0 --sessions 1,2,4` gains 2% at one session and ties above.

// The rows [r0, r0 + n) of one step on a device and the buffers a layer's launches address.
struct layer_rows {
    layer_rows(cuda_device::state &m, int32_t r0_, int32_t n_) : r0(r0_), n(n_) {
        const model_hparams &hp = *m.hp;
        d = hp.d_model;
        q_dim = hp.n_head * hp.d_head;
        kv_dim = hp.n_head_kv * hp.d_head;
        k = hp.n_expert_used;
        ff = hp.d_ff_expert;
        slots = m.slots() + r0;
        positions = m.positions() + r0;
        q = m.q + size_t(r0) * q_dim;
        kb = m.kb + size_t(r0) * kv_dim;
        vb = m.vb + size_t(r0) * kv_dim;
        att = m.att + size_t(r0) * q_dim;
        route_w = m.route_w + size_t(r0) * k;
        router_logits = m.router_logits + size_t(r0) * hp.n_expert;
        ids = m.ids + size_t(r0) * k;
        act = m.act + size_t(r0) * k * ff;
        // Decode rows: the producers below also write their outputs split (cuda/x_split.cuh).
        split = !m.prompt_rows;
        h_split = split ? m.h_split + size_t(r0) * d / 4 : nullptr;
        h_sums = split ? m.h_sums + size_t(r0) * d / 32 : nullptr;
    }
    int32_t r0, n;
    int32_t d = 0, q_dim = 0, kv_dim = 0, k = 0, ff = 0;
    const int32_t *slots = nullptr, *positions = nullptr;
    float *q = nullptr, *kb = nullptr, *vb = nullptr, *att = nullptr, *route_w = nullptr, *router_logits = nullptr, *act = nullptr;
    int32_t *ids = nullptr;
    bool split = false;
    uint4 *h_split = nullptr;
    float *h_sums = nullptr;
};

// The engine's choice of kernel family for each quantized product of a layer (decode or prompt
// rows, dense or grouped, bf16 split or digits), and the count of launches it made.
class layer_products {
public:
    layer_products(cuda_device::state &m, int32_t n) : m_(m), n_(n), s_(m.stream) {}

    int64_t launches = 0;

    // A product of the step's rows (rows_product below).
    void product(const cuda::matvec_args &a, int32_t split_rows) { launches += rows_product(m_, a, split_rows); }
    // A dense product's arguments: matrix w over the step's rows of `in` (with their split twin, or nullptr).
    cuda::matvec_args dense_args(const cuda_matrix &w, const float *in, int64_t in_stride, const uint4 *in_split,
                                 const float *in_sums, float *out, int64_t out_stride) const {
        cuda::matvec_args a;
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
        a.n_pairs = n_;
        return a;
    }
    void dense(const cuda_matrix &w, const float *in, int64_t in_stride, const uint4 *in_split, const float *in_sums, float *out,
               int64_t out_stride, bool acc, int32_t k_parts = 1, int64_t part_stride = 0) {
        cuda::matvec_args a = dense_args(w, in, in_stride, in_split, in_sums, out, out_stride);
        a.k_parts = k_parts;
        a.y_part_stride = part_stride;
        a.accumulate = acc;
        product(a, n_);
        ++launches;
    }
    // Prompt rows' dense Q4_K products on digits of their input rows (quantised once per input):
    // the tiles from prompt_dense_tile_min_rows rows (extras: more matrices over the same rows, K
    // and V beside Q, in the tiles' launch), the decode kernels below.
    void prompt_dense_digits(const cuda_matrix &w, const cuda::digit_rows &xd, float *out, int64_t out_stride, bool acc,
                             std::initializer_list<cuda::matvec_part> extras = {}) {
        cuda::matvec_digits_args da = cuda::one_group_args(w.data, w.n_in, w.n_out, xd, n_, out, out_stride);
        da.accumulate = acc;
        da.stage = true;
        if (n_ >= prompt_dense_tile_min_rows) {
            for (const cuda::matvec_part &e : extras) da.extra[da.n_extra++] = e;
            cuda::matmul_digits(da, s_);
            ++launches;
            return;
        }
        cuda::matvec_digits(da, s_);
        ++launches;
        for (const cuda::matvec_part &e : extras) {
            da.w = e.w;
            da.n_out = e.n_out;
            da.y = e.y;
            da.y_stride = e.y_stride;
            cuda::matvec_digits(da, s_);
            ++launches;
        }
    }
    // A grouped Q4_K product of prompt rows on digits: the tiles for large steps, else the decode kernels.
    void prompt_digit_product(cuda::matvec_digits_args da, int32_t pairs) {
        da.n_pairs = pairs;
        da.stage = true;
        if (pairs >= prompt_tile_min_pairs_per_expert * m_.hp->n_expert)
            cuda::matmul_digits(da, s_);
        else
            cuda::matvec_digits(da, s_);
    }

private:
    cuda_device::state &m_;
    int32_t n_;
    cudaStream_t s_;
};

}  // namespace

// Prompt rows' grouped plain Q6_K products of three 256-element blocks a row (a Q4_K_M file's
// experts' down in half its layers) take the matrix-vector kernels at every prompt size, so
// chunking changes no bit: staged, they beat the bf16 prompt tiles at every chunk size (`bench
// --prompt 2048 --prefill-chunk C` on the Q4_K_M mix).
int64_t rows_product(cuda_device::state &m, const cuda::matvec_args &a, int32_t split_rows) {
    const bool q6_three_blocks = a.group_off && a.type == ggml_type::q6_k && !a.w_up && cuda::three_superblocks(a.n_in);
    if (!m.prompt_rows || q6_three_blocks) {
        cuda::matvec(a, m.stream);
        return 0;
    }
    cuda::matvec_args b = a;
    int64_t split = 0;
    if (b.type == ggml_type::q4_k &&
        size_t(split_rows) * size_t(b.x_stride) <= size_t(cuda_device::max_step_rows) * prompt_split_width(*m.hp)) {
        b.prompt_split = m.prompt_split;
        b.prompt_sums = m.prompt_sums;
        b.prompt_split_rows = split_rows;
        split = cuda::matmul_prompt_q4k_applies(b) ? 1 : 0;
    }
    cuda::matmul_prompt(b, m.stream);
    return split;
}

namespace {

// Whether a matrix's products can take int8 digits of their input (whole 256-element Q4_K blocks).
bool q4k_digits(const cuda_matrix &w) { return w.type == ggml_type::q4_k && w.n_in % 256 == 0; }

}  // namespace

int64_t cuda_device::layer_attention(int32_t l, int32_t r0, int32_t n) {
    if (s_->mla) return layer_attention_mla(l, r0, n);
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const cudaStream_t s = m.stream;
    const layer_rows r(m, r0, n);
    layer_products pr(m, n);
    const int32_t d = r.d, q_dim = r.q_dim, kv_dim = r.kv_dim, dh = hp.d_head;
    float *x = x_rows(r0), *h = h_rows(r0);
    const cuda_layer &L = m.layer(l);
    const size_t layer_here = size_t(l - m.part.layer_begin);
    const size_t cache_bytes = size_t(m.n_slots) * size_t(m.n_ctx) * m.kv_row;
    void *k_cache = m.kv + (layer_here * 2 + 0) * cache_bytes;
    void *v_cache = m.kv + (layer_here * 2 + 1) * cache_bytes;
    // Whether the combine + norm before this layer left h's digits in the scratch (read once).
    const bool h_digits_ready = m.h_prompt_digits_fresh;
    m.h_prompt_digits_fresh = false;
    const uint4 *hs = m.h_split_fresh ? r.h_split : nullptr;
    const float *hm = m.h_split_fresh ? r.h_sums : nullptr;

    if (m.prompt_dense_on_digits(L.wq) && m.prompt_dense_on_digits(L.wk)) {
        const cuda::digit_rows hd = m.prompt_digit_rows(n, d);
        if (!h_digits_ready) {  // else the combine + norm before wrote them (cuda_device::combine)
            cuda::digits_quantize({h, n, d, hd}, s);
            ++pr.launches;
        }
        if (m.prompt_dense_on_digits(L.wv)) {
            pr.prompt_dense_digits(L.wq, hd, r.q, q_dim, false,
                                   {{L.wk.data, L.wk.n_out, r.kb, kv_dim}, {L.wv.data, L.wv.n_out, r.vb, kv_dim}});
        } else {
            // A V of more bits (Q4_K_M's Q6_K in some layers): Q and K on the digit tiles, V on its own.
            pr.prompt_dense_digits(L.wq, hd, r.q, q_dim, false, {{L.wk.data, L.wk.n_out, r.kb, kv_dim}});
            // h was written before the digits launch, so V's tiles run beside Q and K's and wait on
            // them only before leaving (matvec_args::inputs_settled): `bench --prompt 2048
            // --prefill-chunk 128` on the Q4_K_M mix +7%, less for larger chunks.
            cuda::matvec_args va = pr.dense_args(L.wv, h, d, hs, hm, r.vb, kv_dim);
            va.inputs_settled = true;
            cuda::matmul_prompt(va, s);
            ++pr.launches;
        }
    } else if (L.wq.type == L.wk.type) {
        // Q, K and V in one launch: one weight stream over the same normalised rows. A V of another
        // type (Q4_K_M's Q6_K V in half the layers) joins decode rows' launch where the pair is
        // supported (cuda/matvec_mixed.cu; `bench --prompt 0 --sessions 1,4,16` on the Q4_K_M mix
        // +4-5%); otherwise, and for prompt rows, Q and K share one launch and V runs on its own.
        const bool v_same = L.wq.type == L.wv.type;
        const bool v_typed =
            !v_same && !m.prompt_rows && cuda::matvec_mixed_supported(L.wq.type, L.wv.type) && L.wv.n_in == L.wq.n_in;
        cuda::matvec_args a = pr.dense_args(L.wq, h, d, hs, hm, r.q, q_dim);
        a.extra[0] = {L.wk.data, L.wk.n_out, r.kb, kv_dim};
        a.extra[1] = {L.wv.data, L.wv.n_out, r.vb, kv_dim, v_typed, L.wv.type};
        a.n_extra = v_same || v_typed ? 2 : 1;
        pr.product(a, n);
        ++pr.launches;
        if (a.n_extra == 1) pr.dense(L.wv, h, d, hs, hm, r.vb, kv_dim, false);
    } else {
        pr.dense(L.wq, h, d, hs, hm, r.q, q_dim, false);
        pr.dense(L.wk, h, d, hs, hm, r.kb, kv_dim, false);
        pr.dense(L.wv, h, d, hs, hm, r.vb, kv_dim, false);
    }
    cuda::qk_rope_kv_args qa;
    qa.q = r.q;
    qa.k = r.kb;
    qa.v = r.vb;
    qa.q_norm = L.q_norm;
    qa.k_norm = L.k_norm;
    qa.inv_freq = m.inv_freq;
    qa.slots = r.slots;
    qa.positions = r.positions;
    qa.k_cache = k_cache;
    qa.v_cache = v_cache;
    qa.kv_f16 = m.kv_elem == kv_type::f16;
    qa.kv_q8_0 = m.kv_elem == kv_type::q8_0;
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
        ++pr.launches;
    }
    cuda::attention_args aa;
    aa.q = r.q;
    aa.k_cache = k_cache;
    aa.v_cache = v_cache;
    aa.kv_f16 = qa.kv_f16;
    aa.kv_q8_0 = qa.kv_q8_0;
    aa.slots = r.slots;
    aa.positions = r.positions;
    aa.out = r.att;
    aa.n_rows = n;
    aa.n_head = hp.n_head;
    aa.n_head_kv = hp.n_head_kv;
    aa.d_head = dh;
    aa.n_ctx = m.n_ctx;
    aa.scale = 1.0f / std::sqrt(float(dh));
    if (r0 < max_logit_rows)  // decode steps, and prompt steps that fall back (step_rows_limit)
        aa.partial = m.partial + size_t(r0) * size_t(hp.n_head) * m.n_chunks * (dh + 2);
    if (r.split) {
        aa.out_split = m.att_split + size_t(r0) * q_dim / 4;
        aa.out_sums = m.att_sums + size_t(r0) * q_dim / 32;
    }
    if (m.prompt_rows) {
        cuda::attention_prompt(aa, s);  // tensor cores, keys in tiles shared by a chunk's rows
        ++pr.launches;
    } else {
        if (fused) {
            aa.k_new = r.kb;
            aa.v_new = r.vb;
            aa.q_norm = L.q_norm;
            aa.k_norm = L.k_norm;
            aa.inv_freq = m.inv_freq;
            aa.eps = hp.rms_eps;
        }
        cuda::attention(aa, s);
        pr.launches += 2;  // partial and combine
    }
    if (m.prompt_dense_on_digits(L.wo)) {
        const cuda::digit_rows ad = m.prompt_digit_rows(n, q_dim);
        cuda::digits_quantize({r.att, n, q_dim, ad}, s);
        ++pr.launches;
        pr.prompt_dense_digits(L.wo, ad, x, d, true);
    } else {
        pr.dense(L.wo, r.att, q_dim, aa.out_split, aa.out_sums, x, d, true);
    }
    return pr.launches;
}

int64_t cuda_device::layer_route(int32_t l, int32_t r0, int32_t n) {
    if (s_->mla) return layer_route_deepseek2(l, r0, n);
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const cudaStream_t s = m.stream;
    const layer_rows r(m, r0, n);
    layer_products pr(m, n);
    const int32_t d = r.d;
    float *x = x_rows(r0), *h = h_rows(r0);
    const cuda_layer &L = m.layer(l);
    const size_t layer_here = size_t(l - m.part.layer_begin);
    state::layer_route_plan &rp = m.route_plan;
    rp = {};
    // Decode rows with an F32 router: the FFN norm and the router in one launch, the logits in
    // dot_f32's order (the CPU's bits for the same h). Otherwise the norm, then the router (8 row
    // tiles of 16 for 128 experts) in K parts on their own blocks, 4 when every part gets at least
    // one 256-element chunk: decode rows (part stride max_logit_rows rows) and prompt rows
    // (max_step_rows; every prompt launch the same parts, so chunking changes nothing).
    const bool norm_router = !m.prompt_rows && L.router.type == ggml_type::f32 && cuda::rmsnorm_router_applies(d, hp.n_expert) &&
                             reinterpret_cast<uintptr_t>(L.router.data) % 16 == 0;
    // Decode rows whose experts' gate and up are Q4_K: the gate/up product on int8 digits of h
    // (cuda/matvec_digits.h), written by the norm + router launch instead of h's split twin. One
    // arithmetic at every step size (batch invariant); 1.2-1.45x faster than the bf16-split kernels,
    // with products ~6x less precise.
    rp.digits = norm_router && m.h_digits && q4k_digits(L.gate) && L.up.type == ggml_type::q4_k;
    // Prompt rows whose experts are Q4_K: gate/up and down on digits too, quantised by one launch
    // before each (prompt_digit_product): `bench --prompt 2048 --sessions 1` 1.1x the exact-quant
    // bf16 tiles' prefill.
    rp.prompt_digits_gate_up = m.prompt_rows && q4k_digits(L.gate) && L.up.type == ggml_type::q4_k;
    rp.prompt_digits_down = m.prompt_rows && q4k_digits(L.down);
    // Prompt rows: the FFN norm writes h's digits for gate/up itself (one launch fewer), unless the
    // router's product would use the scratch they sit in (a Q4_K router splits its input there).
    rp.ffn_digits = rp.prompt_digits_gate_up && !norm_router && L.router.type != ggml_type::q4_k &&
                    cuda::rmsnorm_digits_applies({x, L.ffn_norm, h, n, d, hp.rms_eps, r.h_split, r.h_sums});
    if (rp.digits)
        rp.h_dig = {m.h_digits + size_t(r0) * cuda::digits_per_element * d, m.h_digit_scales + size_t(r0) * d / 256,
                    m.h_digit_sums + size_t(r0) * d / 256 * 16};
    int32_t router_parts = 1;
    int64_t part_stride = 0;
    if (norm_router) {
        cuda::rmsnorm_router_args nr;
        nr.x = x;
        nr.w_norm = L.ffn_norm;
        nr.router = static_cast<const float *>(L.router.data);
        nr.h = h;
        if (rp.digits) {
            nr.h_digits = rp.h_dig;
        } else {
            nr.h_split = r.h_split;
            nr.h_sums = r.h_sums;
        }
        nr.logits = r.router_logits;
        nr.n_rows = n;
        nr.n = d;
        nr.n_expert = hp.n_expert;
        nr.eps = hp.rms_eps;
        cuda::rmsnorm_router(nr, s);
        m.h_split_fresh = r.split && !rp.digits;
        ++pr.launches;
    } else {
        cuda::rmsnorm_args na{x, L.ffn_norm, h, n, d, hp.rms_eps};
        na.y_split = r.h_split;
        na.y_sums = r.h_sums;
        if (rp.ffn_digits) na.y_digits = m.prompt_digit_rows(n, d);
        cuda::rmsnorm(na, s);
        m.h_split_fresh = r.split;
        ++pr.launches;
        router_parts = L.router.n_in / 256 >= router_k_parts ? router_k_parts : 1;
        part_stride = int64_t(m.prompt_rows ? max_step_rows : max_logit_rows) * hp.n_expert;
        pr.dense(L.router, h, d, r.h_split, r.h_sums, r.router_logits, hp.n_expert, false, router_parts, part_stride);
    }

    cuda::moe_route_args &ra = rp.route;
    ra.logits = r.router_logits;
    ra.n_logit_parts = router_parts;
    ra.logit_part_stride = part_stride;
    ra.slots = r.slots;
    ra.ids = r.ids;
    ra.weights = r.route_w;
    ra.group_expert = m.group_expert;
    ra.group_off = m.group_off;
    ra.n_groups = m.n_groups;
    ra.pair_x = m.pair_x;
    ra.pair_y = m.pair_y;
    // Statistics count each layer's groups once: on the host of a pair.
    ra.groups_total = m.part.role == placement_role::partner ? nullptr : m.groups_total;
    ra.n_rows = n;
    ra.n_expert = hp.n_expert;
    ra.k = r.k;
    ra.renormalise = hp.norm_topk;
    // One-row steps whose gate/up routes the row itself: its blocks route it (the same experts,
    // bitwise) and the launch's first block publishes moe_route's outputs for down and the combine,
    // so moe_route is not launched. Not where the groups are filtered to the experts held here (a
    // pair's partner) or counted (--expert-balance launches between).
    rp.route_in_gate_up = rp.digits && n == 1 && !L.local && !m.traffic && router_parts == 1 &&
                          cuda::matvec_digits_route_applies(hp.n_expert, r.k);
    if (!rp.route_in_gate_up) {
        cuda::moe_route(ra, s);
        ++pr.launches;
    }
    if (m.traffic) {
        cuda::moe_count({r.ids, r.slots, m.traffic + layer_here * size_t(hp.n_expert), n, r.k}, s);
        ++pr.launches;
    }
    return pr.launches;
}

int64_t cuda_device::layer_experts(int32_t l, int32_t r0, int32_t n) {
    return s_->mla ? layer_experts_deepseek2(l, r0, n) : layer_experts_routed(l, r0, n);
}

int64_t cuda_device::layer_experts_routed(int32_t l, int32_t r0, int32_t n) {
    state &m = *s_;
    const model_hparams &hp = *m.hp;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const cudaStream_t s = m.stream;
    const layer_rows r(m, r0, n);
    layer_products pr(m, n);
    const int32_t d = r.d, k = r.k, ff = r.ff;
    float *h = h_rows(r0), *eout = expert_out_rows(r0), *act = r.act;
    const cuda_layer &L = m.layer(l);
    const state::layer_route_plan &rp = m.route_plan;
    const cuda::moe_route_args &ra = rp.route;
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
    g.x_split = r.h_split;
    g.x_sums = r.h_sums;
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
        ++pr.launches;
        g.x_rows = m.own_x;
        g.y_rows = m.own_y;
        g.group_mat = m.own_mat;
        g.group_off = m.own_off;
        g.n_groups = m.own_n;
    }
    if (rp.digits) {
        cuda::matvec_digits_args da = cuda::digit_args_of(g, rp.h_dig);
        da.stage = true;
        // One-row steps: the gate/up blocks route the row themselves instead of waiting for
        // moe_route's groups, and publish its outputs in its place (`bench --prompt 0 --sessions 1`:
        // +4%).
        if (rp.route_in_gate_up) {
            da.route_logits = r.router_logits;
            da.route_slots = r.slots;
            da.route_n_expert = hp.n_expert;
            da.route_k = k;
            da.route_out = {ra.ids, ra.weights, ra.group_expert, ra.group_off, ra.n_groups, ra.pair_x, ra.pair_y, ra.groups_total,
                            ra.renormalise};
        }
        cuda::matvec_digits(da, s);
    } else if (rp.prompt_digits_gate_up) {
        const cuda::matvec_digits_args da = cuda::digit_args_of(g, m.prompt_digit_rows(n, d));
        if (!rp.ffn_digits) {
            cuda::digits_quantize({h, n, d, da.x}, s);
            ++pr.launches;
        }
        pr.prompt_digit_product(da, n * k);
    } else {
        pr.product(g, n);
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
    if (rp.prompt_digits_down) {
        cuda::matvec_digits_args da = cuda::digit_args_of(dn, m.prompt_digit_rows(n * k, ff));
        da.groups_settled = true;  // written before the gate/up launch
        cuda::digits_quantize({act, n * k, ff, da.x}, s);
        pr.prompt_digit_product(da, n * k);
        pr.launches += 3;
        return pr.launches;
    }
    if (!m.prompt_rows && m.act_digits && q4k_digits(L.down)) {
        // Decode rows' Q4_K down on digits of the SwiGLU outputs: made by each block of the product
        // from act up to down_quantize_min_pairs pairs, by one digits_quantize launch above (the
        // same bits either way; batch invariant).
        cuda::matvec_digits_args da = cuda::digit_args_of(dn, {});
        da.groups_settled = true;  // written before the gate/up launch, or by its first block before it triggers this one
        // Weights staged by the copy engine before the PDL wait (down alone at one row 4.62 us
        // against 5.10 streamed; one session +1%).
        da.stage = true;
        if (n * k > down_quantize_min_pairs) {
            const size_t act_rows = size_t(r0) * size_t(k);
            da.x = {m.act_digits + act_rows * cuda::digits_per_element * ff, m.act_digit_scales + act_rows * ff / 256,
                    m.act_digit_sums + act_rows * ff / 256 * 16};
            cuda::digits_quantize({act, n * k, ff, da.x}, s);
            ++pr.launches;
            da.solo_warps = 4;
        } else {
            da.x_f32 = act;
            da.x_f32_stride = ff;
        }
        cuda::matvec_digits(da, s);
        pr.launches += 2;
        return pr.launches;
    }
    // The SwiGLU outputs' 32-element sums span four gate/up blocks, so gate/up cannot write them
    // split. Steps of more than 8 pairs split them once (split_rows) instead of in every block of
    // down: 64 blocks a group read the same rows. Bitwise the same outputs either way.
    dn.x_split = nullptr;
    dn.x_sums = nullptr;
    const int32_t split_min = L.down.type == ggml_type::q6_k ? split_act_min_pairs_q6_k : split_act_min_pairs;
    if (!m.prompt_rows && n * k > split_min && ff % 32 == 0) {
        cuda::split_rows_args sa;
        sa.x = act;
        sa.n_rows = n * k;
        sa.n = ff;
        sa.stride = ff;
        sa.split = m.act_split + size_t(r0) * k * ff / 4;
        sa.sums = m.act_sums + size_t(r0) * k * ff / 32;
        cuda::split_rows(sa, s);
        ++pr.launches;
        dn.x_split = sa.split;
        dn.x_sums = sa.sums;
    }
    dn.groups_settled = true;  // written before the gate/up launch, or by its first block before it triggers this one
    pr.product(dn, n * k);
    pr.launches += 2;
    return pr.launches;
}

}  // namespace tandem
