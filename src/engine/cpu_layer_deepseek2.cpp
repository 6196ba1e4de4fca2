// src/engine/cpu_layer_deepseek2.cpp - the deepseek2 layer code of one CPU device: multi-head
// latent attention over the cached latent, DeepSeek's grouped routing, and the FFN every row takes
// (shared experts, or a leading layer's dense FFN).
//
// Every row, prompt or decode, is computed in the absorbed form: its nope query goes through W_UK
// into the latent space, attends to the cached latents and roped keys, and the weighted latent goes
// through W_UV. One form for every row keeps a row's result independent of the others in its call
// (batch invariance) and of how a prompt is chunked; the cache holds only what the absorbed form
// reads, kv_lora_rank + d_rope values a token per layer.
#include "cpu_device.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quant.h"

#include <algorithm>
#include <cmath>

namespace tandem {

namespace {

const float *f32_data(const gguf_tensor_info *t) { return reinterpret_cast<const float *>(t->data); }

}  // namespace

void cpu_device::mla_prepare() {
    const rope_yarn &y = hp_.yarn_params;
    rope_freq_ = cpu::rope_inv_freq(hp_.rope_theta, hp_.d_rope, hp_.yarn ? y.factor : 0.0f, y.n_ctx_orig, y.beta_fast,
                                    y.beta_slow);
    mla_scale_ = model_mla_softmax_scale(hp_);
    // attn_kv_b's key rows run over the latent; the absorbed query needs them per latent dim.
    const int64_t nh = hp_.n_head, nope = hp_.d_nope(), lora = hp_.kv_lora_rank, per_head = nope + hp_.d_head_v;
    mla_k_b_.assign(size_t(part_.layer_end - part_.layer_begin), {});
    std::vector<float> row(static_cast<size_t>(lora));
    for (int32_t l = part_.layer_begin; l < part_.layer_end; ++l) {
        const gguf_tensor_info *kv_b = tensors_.layers[size_t(l)].wkv_b;
        if (!kv_b) continue;
        std::vector<float> &kb = mla_k_b_[size_t(l - part_.layer_begin)];
        kb.resize(size_t(nh * lora * nope));
        const size_t row_bytes = ggml_row_bytes(kv_b->type, lora);
        for (int64_t h = 0; h < nh; ++h)
            for (int64_t j = 0; j < nope; ++j) {
                dequantize_row(kv_b->type, kv_b->data + size_t(h * per_head + j) * row_bytes, row.data(), lora);
                for (int64_t c = 0; c < lora; ++c) kb[size_t((h * lora + c) * nope + j)] = row[size_t(c)];
            }
    }
}

void cpu_device::layer_attention_mla(int32_t layer, std::span<const engine_row> rows, float *x) {
    const layer_tensors &lt = tensors_.layers[size_t(layer)];
    const int64_t n = int64_t(rows.size()), d = hp_.d_model, nh = hp_.n_head, dh = hp_.d_head, nope = hp_.d_nope();
    const int64_t rope = hp_.d_rope, lora = hp_.kv_lora_rank, dv = hp_.d_head_v, q_dim = nh * dh, kv_w = lora + rope;
    std::vector<float> h(size_t(n * d)), q(size_t(n * q_dim)), kv(size_t(n * kv_w));
    std::vector<float> q_lat(size_t(n * nh * lora)), q_rope(size_t(n * nh * rope)), o_lat(size_t(n * nh * lora));
    std::vector<float> att(size_t(n * nh * dv)), o(size_t(n * d));
    std::vector<int32_t> pos(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) pos[i] = rows[i].pos;

    cpu::rmsnorm(x, f32_data(lt.attn_norm), h.data(), n, d, hp_.rms_eps);
    if (lt.wq_a) {
        std::vector<float> qa(size_t(n * hp_.q_lora_rank));
        cpu::matmul(ctx_, matrix(lt.wq_a, d, hp_.q_lora_rank), h.data(), qa.data(), n);
        cpu::rmsnorm(qa.data(), f32_data(lt.q_a_norm), qa.data(), n, hp_.q_lora_rank, hp_.rms_eps);
        cpu::matmul(ctx_, matrix(lt.wq_b, hp_.q_lora_rank, q_dim), qa.data(), q.data(), n);
    } else {
        cpu::matmul(ctx_, matrix(lt.wq, d, q_dim), h.data(), q.data(), n);
    }
    // The latent is normalised; the rope key is taken before the norm, then rotated.
    cpu::matmul(ctx_, matrix(lt.wkv_a, d, kv_w), h.data(), kv.data(), n);
    for (int64_t r = 0; r < n; ++r)
        cpu::rmsnorm(kv.data() + r * kv_w, f32_data(lt.kv_a_norm), kv.data() + r * kv_w, 1, lora, hp_.rms_eps);
    cpu::rope_pairs(kv.data() + lora, pos.data(), n, kv_w, 1, 0, rope_freq_.data(), rope, 1.0f);
    cpu::rope_pairs(q.data() + nope, pos.data(), n, q_dim, nh, dh, rope_freq_.data(), rope, 1.0f);
    TANDEM_ASSERT(kv_w == kv_dim_, "the latent cache's rows are {} wide, not {}", kv_dim_, kv_w);

    // Every row's cache entry is written before any row attends (rows of one slot see each other by
    // position). Every head reads the whole latent, so a q8_0 cache is dequantized once a slot
    // (positions up to its last row's) rather than at each load.
    for (size_t i = 0; i < rows.size(); ++i) kv_write(layer, 0, rows[i].slot, rows[i].pos, kv.data() + i * size_t(kv_w));
    std::vector<const float *> cache(rows.size());
    std::vector<std::vector<float>> dequantized(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        size_t first = 0;  // the call's first row of this slot holds the slot's floats
        while (rows[first].slot != rows[i].slot) ++first;
        if (first < i) {
            cache[i] = cache[first];
            continue;
        }
        int32_t n_pos = 0;
        for (const engine_row &row : rows)
            if (row.slot == rows[i].slot) n_pos = std::max(n_pos, row.pos + 1);
        cache[i] = kv_floats(layer, 0, rows[i].slot, n_pos, dequantized[i]);
    }
    for (int64_t r = 0; r < n; ++r)
        for (int64_t hh = 0; hh < nh; ++hh)
            std::copy_n(q.data() + r * q_dim + hh * dh + nope, rope, q_rope.data() + (r * nh + hh) * rope);

    // q_lat[r][h] = W_UK[h]^T q_nope[r][h]: rows of attn_k_b (or the transposed attn_kv_b) are latent dims.
    const std::vector<float> &kb = mla_k_b_[size_t(layer - part_.layer_begin)];
    std::vector<const float *> xs(rows.size());
    std::vector<float *> ys(rows.size());
    for (int64_t hh = 0; hh < nh; ++hh) {
        const cpu::cpu_matrix w_uk =
            lt.wk_b ? matrix(lt.wk_b, nope, nh * lora).slice_rows(hh * lora, lora)
                    : cpu::cpu_matrix{reinterpret_cast<const uint8_t *>(kb.data() + hh * lora * nope), ggml_type::f32,
                                      nope, lora, size_t(nope) * sizeof(float)};
        for (int64_t r = 0; r < n; ++r) {
            xs[size_t(r)] = q.data() + r * q_dim + hh * dh;
            ys[size_t(r)] = q_lat.data() + (r * nh + hh) * lora;
        }
        cpu::matmul(ctx_, cpu::matmul_args{w_uk, xs.data(), ys.data(), n});
    }
    const cpu::attention_mla_args args{q_lat.data(), q_rope.data(), cache.data(), pos.data(), o_lat.data(),
                                       n, nh, lora, rope, mla_scale_};
    cpu::attention_mla(ctx_, args);
    // att[r][h] = W_UV[h] o_lat[r][h]: attn_v_b, or the value rows of attn_kv_b.
    for (int64_t hh = 0; hh < nh; ++hh) {
        const cpu::cpu_matrix w_uv = lt.wv_b ? matrix(lt.wv_b, lora, nh * dv).slice_rows(hh * dv, dv)
                                             : matrix(lt.wkv_b, lora, nh * (nope + dv)).slice_rows(hh * (nope + dv) + nope, dv);
        for (int64_t r = 0; r < n; ++r) {
            xs[size_t(r)] = o_lat.data() + (r * nh + hh) * lora;
            ys[size_t(r)] = att.data() + r * nh * dv + hh * dv;
        }
        cpu::matmul(ctx_, cpu::matmul_args{w_uv, xs.data(), ys.data(), n});
    }
    cpu::matmul(ctx_, matrix(lt.wo, nh * dv, d), att.data(), o.data(), n);
    for (int64_t i = 0; i < n * d; ++i) x[i] += o[size_t(i)];
}

void cpu_device::layer_route_grouped(int32_t layer, int64_t n, const float *h, int32_t *ids, float *weights) {
    const layer_tensors &lt = tensors_.layers[size_t(layer)];
    std::vector<float> logits(size_t(n * hp_.n_expert));
    cpu::matmul(ctx_, matrix(lt.router, hp_.d_model, hp_.n_expert), h, logits.data(), n);
    cpu::moe_route_grouped_args a;
    a.logits = logits.data();
    a.bias = lt.exp_probs_b ? f32_data(lt.exp_probs_b) : nullptr;
    a.ids = ids;
    a.weights = weights;
    a.n_rows = n;
    a.n_expert = hp_.n_expert;
    a.k = hp_.n_expert_used;
    a.n_group = hp_.n_expert_group;
    a.n_group_used = hp_.n_expert_group_used;
    a.sigmoid = hp_.gating == expert_gating::sigmoid;
    a.normalise = hp_.norm_topk;
    a.scale = hp_.expert_weights_scale;
    cpu::moe_route_grouped(a);
}

void cpu_device::layer_dense(int32_t layer, int64_t n, const float *h, float *out) {
    const layer_tensors &lt = tensors_.layers[size_t(layer)];
    const int64_t d = hp_.d_model;
    cpu::ffn_swiglu_args a;
    if (model_layer_recipe(hp_, layer).ffn == layer_ffn::dense) {
        a.gate = matrix(lt.ffn_gate, d, hp_.d_ff);
        a.up = matrix(lt.ffn_up, d, hp_.d_ff);
        a.down = matrix(lt.ffn_down, hp_.d_ff, d);
    } else {
        TANDEM_ASSERT(lt.gate_shexp, "layer {} has no shared experts", layer);
        const int64_t sh = int64_t(hp_.n_expert_shared) * hp_.d_ff_expert;
        a.gate = matrix(lt.gate_shexp, d, sh);
        a.up = matrix(lt.up_shexp, d, sh);
        a.down = matrix(lt.down_shexp, sh, d);
    }
    a.x = h;
    a.out = out;
    a.n_rows = n;
    cpu::ffn_swiglu(ctx_, a);
}

}  // namespace tandem
