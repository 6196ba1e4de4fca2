// src/engine/cpu_device.cpp - the Qwen3-MoE layer code of one CPU device, built from the op
// families in src/cpu/. Weights are read in place from the mapped GGUF file.
#include "cpu_device.h"

#include "cpu_moe_args.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quant.h"
#include "tandem/quant_blocks.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tandem {

namespace {
const float *f32_data(const gguf_tensor_info *t) { return reinterpret_cast<const float *>(t->data); }
}  // namespace

cpu_device::cpu_device(const model_hparams &hp, const model_tensors &tensors, cpu_part part, int32_t n_slots,
                       int32_t n_ctx, int32_t n_threads, kv_type cache_type, cpu::cpu_arithmetic arithmetic)
    : hp_(hp), tensors_(tensors), part_(std::move(part)), n_slots_(n_slots), n_ctx_(n_ctx), cache_type_(cache_type) {
    ctx_.n_threads = std::max(1, n_threads);
    ctx_.arithmetic = arithmetic;
    ctx_.ws = &ws_;
    const model_kv_shape kv = model_kv_shape_of(hp_);
    kv_dim_ = kv.width;
    kv_planes_ = kv.n_planes;
    // kv_row_bytes refuses a q8_0 cache of rows that are not whole blocks.
    kv_row_ = cache_type_ == kv_type::q8_0 ? size_t(kv_row_bytes(cache_type_, kv_dim_)) : size_t(kv_dim_) * sizeof(float);
    const size_t n_layers = size_t(part_.layer_end - part_.layer_begin);
    kv_bytes_ = n_layers * size_t(kv_planes_) * size_t(n_slots_) * size_t(n_ctx_) * kv_row_;
    if (kv_bytes_ > 0) {
        // Anonymous mapping: pages cost nothing until a slot writes them.
        void *p = mmap(nullptr, kv_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            fail(error_kind::config, "cannot reserve {:.2f} GiB for the KV cache", kv_bytes_ / 1073741824.0);
        kv_ = static_cast<uint8_t *>(p);
    }
    if (hp_.arch == model_arch::deepseek2) mla_prepare();
}

cpu_device::~cpu_device() {
    if (kv_) munmap(kv_, kv_bytes_);
}

uint8_t *cpu_device::kv_plane(int32_t layer, int32_t plane, int32_t slot) const {
    const size_t l = size_t(layer - part_.layer_begin);
    return kv_ + ((l * size_t(kv_planes_) + size_t(plane)) * size_t(n_slots_) + size_t(slot)) * size_t(n_ctx_) * kv_row_;
}

// The cache's rounding: to halves, or ggml's q8_0 blocks (quantize_row_q8_0).
void cpu_device::kv_write(int32_t layer, int32_t plane, int32_t slot, int32_t pos, const float *x) const {
    uint8_t *dst = kv_plane(layer, plane, slot) + size_t(pos) * kv_row_;
    if (cache_type_ == kv_type::q8_0) return quantize_row(ggml_type::q8_0, x, dst, kv_dim_);
    float *row = reinterpret_cast<float *>(dst);
    for (int64_t i = 0; i < kv_dim_; ++i) row[i] = cache_type_ == kv_type::f16 ? fp16_to_fp32(fp32_to_fp16(x[i])) : x[i];
}

const float *cpu_device::kv_floats(int32_t layer, int32_t plane, int32_t slot, int32_t n_pos, std::vector<float> &buf) const {
    const uint8_t *src = kv_plane(layer, plane, slot);
    if (cache_type_ != kv_type::q8_0) return reinterpret_cast<const float *>(src);
    buf.resize(size_t(n_pos) * size_t(kv_dim_));
    dequantize_row(ggml_type::q8_0, src, buf.data(), int64_t(n_pos) * kv_dim_);
    return buf.data();
}

// A blob holds the cache's rows in its type: an f16 cache's floats are halves exactly, and q8_0
// rows are already the blob's blocks.
void cpu_device::kv_export(int32_t slot, int32_t n, uint8_t *blob, size_t token_bytes) const {
    const size_t width = size_t(kv_dim_), row_bytes = size_t(kv_row_bytes(cache_type_, kv_dim_));
    for (int32_t l = part_.layer_begin; l < part_.layer_end; ++l)
        for (int32_t p = 0; p < kv_planes_; ++p) {
            const uint8_t *src = kv_plane(l, p, slot);
            const size_t offset = (size_t(l) * size_t(kv_planes_) + size_t(p)) * row_bytes;
            for (int32_t t = 0; t < n; ++t) {
                uint8_t *dst = blob + size_t(t) * token_bytes + offset;
                const float *row = reinterpret_cast<const float *>(src + size_t(t) * kv_row_);
                if (cache_type_ == kv_type::q8_0) {
                    std::memcpy(dst, src + size_t(t) * kv_row_, row_bytes);
                } else if (cache_type_ == kv_type::f16) {
                    for (size_t i = 0; i < width; ++i) {
                        const uint16_t half = fp32_to_fp16(row[i]);
                        std::memcpy(dst + i * 2, &half, 2);
                    }
                } else {
                    std::memcpy(dst, row, width * sizeof(float));
                }
            }
        }
}

void cpu_device::kv_import(int32_t slot, int32_t n, const uint8_t *blob, size_t token_bytes) {
    const size_t width = size_t(kv_dim_), row_bytes = size_t(kv_row_bytes(cache_type_, kv_dim_));
    for (int32_t l = part_.layer_begin; l < part_.layer_end; ++l)
        for (int32_t p = 0; p < kv_planes_; ++p) {
            uint8_t *dst = kv_plane(l, p, slot);
            const size_t offset = (size_t(l) * size_t(kv_planes_) + size_t(p)) * row_bytes;
            for (int32_t t = 0; t < n; ++t) {
                const uint8_t *src = blob + size_t(t) * token_bytes + offset;
                float *row = reinterpret_cast<float *>(dst + size_t(t) * kv_row_);
                if (cache_type_ == kv_type::q8_0) {
                    std::memcpy(dst + size_t(t) * kv_row_, src, row_bytes);
                } else if (cache_type_ == kv_type::f16) {
                    for (size_t i = 0; i < width; ++i) {
                        uint16_t half = 0;
                        std::memcpy(&half, src + i * 2, 2);
                        row[i] = fp16_to_fp32(half);
                    }
                } else {
                    std::memcpy(row, src, width * sizeof(float));
                }
            }
        }
}

void cpu_device::kv_copy(int32_t src, int32_t dst, int32_t n) {
    for (int32_t l = part_.layer_begin; l < part_.layer_end; ++l)
        for (int32_t p = 0; p < kv_planes_; ++p)
            std::memcpy(kv_plane(l, p, dst), kv_plane(l, p, src), size_t(n) * kv_row_);
}

cpu::cpu_matrix cpu_device::matrix(const gguf_tensor_info *t, int64_t n_in, int64_t n_out) const {
    return cpu_matrix_of(t, n_in, n_out);
}

bool cpu_device::owns(int32_t layer, int32_t expert) const {
    if (part_.owned.empty()) return true;
    return part_.owned[size_t(layer - part_.layer_begin)][size_t(expert)] != 0;
}

void cpu_device::embed(std::span<const engine_row> rows, float *x) const {
    const gguf_tensor_info *t = tensors_.tok_embd;
    const size_t row_bytes = ggml_row_bytes(t->type, hp_.d_model);
    for (size_t i = 0; i < rows.size(); ++i)
        dequantize_row(t->type, t->data + size_t(rows[i].token) * row_bytes, x + i * size_t(hp_.d_model), hp_.d_model);
}

void cpu_device::layer_attention(int32_t layer, std::span<const engine_row> rows, float *x) {
    TANDEM_ASSERT(layer >= part_.layer_begin && layer < part_.layer_end, "layer {} is not on this device", layer);
    if (model_layer_recipe(hp_, layer).attention == layer_attention::mla) return layer_attention_mla(layer, rows, x);
    const layer_tensors &lt = tensors_.layers[size_t(layer)];
    const int64_t n = int64_t(rows.size()), d = hp_.d_model, dh = hp_.d_head;
    const int64_t q_dim = int64_t(hp_.n_head) * dh;
    float *h = cpu::grow(h_, size_t(n * d)), *q = cpu::grow(q_, size_t(n * q_dim));
    float *k = cpu::grow(k_, size_t(n * kv_dim_)), *v = cpu::grow(v_, size_t(n * kv_dim_));
    float *att = cpu::grow(att_, size_t(n * q_dim)), *o = cpu::grow(o_, size_t(n * d));
    int32_t *pos = cpu::grow(pos_, rows.size());
    for (size_t i = 0; i < rows.size(); ++i) pos[i] = rows[i].pos;

    cpu::rmsnorm(x, f32_data(lt.attn_norm), h, n, d, hp_.rms_eps);
    cpu::matmul(ctx_, matrix(lt.wq, d, q_dim), h, q, n);
    cpu::matmul(ctx_, matrix(lt.wk, d, kv_dim_), h, k, n);
    cpu::matmul(ctx_, matrix(lt.wv, d, kv_dim_), h, v, n);
    cpu::rmsnorm(q, f32_data(lt.q_norm), q, n * hp_.n_head, dh, hp_.rms_eps);
    cpu::rmsnorm(k, f32_data(lt.k_norm), k, n * hp_.n_head_kv, dh, hp_.rms_eps);
    cpu::rope_neox(q, pos, n, hp_.n_head, dh, hp_.rope_theta);
    cpu::rope_neox(k, pos, n, hp_.n_head_kv, dh, hp_.rope_theta);

    // Every row's K/V goes into its slot before any row attends, so rows of one slot in this call
    // see each other causally (by position), and rows of other slots never.
    const float **kc = cpu::grow(kc_, rows.size()), **vc = cpu::grow(vc_, rows.size());
    const block_q8_0 **kq = cpu::grow(kq_, rows.size()), **vq = cpu::grow(vq_, rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        kv_write(layer, 0, rows[i].slot, rows[i].pos, k + i * size_t(kv_dim_));
        kv_write(layer, 1, rows[i].slot, rows[i].pos, v + i * size_t(kv_dim_));
        const uint8_t *kd = kv_plane(layer, 0, rows[i].slot), *vd = kv_plane(layer, 1, rows[i].slot);
        kc[i] = reinterpret_cast<const float *>(kd);
        vc[i] = reinterpret_cast<const float *>(vd);
        kq[i] = reinterpret_cast<const block_q8_0 *>(kd);
        vq[i] = reinterpret_cast<const block_q8_0 *>(vd);
    }
    cpu::attention_args args{q, kc, vc, pos, att, n, hp_.n_head, hp_.n_head_kv, dh, 1.0f / std::sqrt(float(dh))};
    if (cache_type_ == kv_type::q8_0) {
        args.k_q8 = kq;
        args.v_q8 = vq;
    }
    cpu::attention(ctx_, args);
    cpu::matmul(ctx_, matrix(lt.wo, q_dim, d), att, o, n);
    for (int64_t i = 0; i < n * d; ++i) x[i] += o[size_t(i)];
}

void cpu_device::layer_route(int32_t layer, int64_t n, const float *x, float *h, int32_t *ids, float *weights) {
    const layer_tensors &lt = tensors_.layers[size_t(layer)];
    const layer_router router = model_layer_recipe(hp_, layer).router;
    cpu::rmsnorm(x, f32_data(lt.ffn_norm), h, n, hp_.d_model, hp_.rms_eps);
    if (router != layer_router::softmax_topk) {
        if (router == layer_router::grouped) layer_route_grouped(layer, n, h, ids, weights);
        return;
    }
    float *router_logits = cpu::grow(router_logits_, size_t(n * hp_.n_expert));
    cpu::matmul(ctx_, matrix(lt.router, hp_.d_model, hp_.n_expert), h, router_logits, n);
    cpu::moe_route(router_logits, n, hp_.n_expert, hp_.n_expert_used, hp_.norm_topk, ids, weights);
}

void cpu_device::layer_experts(int32_t layer, int64_t n, const float *h, const int32_t *ids, float *out) {
    const uint8_t *owned = part_.owned.empty() ? nullptr : part_.owned[size_t(layer - part_.layer_begin)].data();
    const cpu::moe_grouped_args args = cpu_moe_args(tensors_.layers[size_t(layer)], hp_, hp_.n_expert_used, n, h, ids, out, owned);
    cpu::moe_grouped(ctx_, args);
}

void cpu_device::head(std::span<const engine_row> rows, const float *x, std::vector<float> &out) {
    const int64_t d = hp_.d_model;
    picked_.clear();
    for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].want != row_output::none) picked_.push_back(i);
    const int64_t n_out = int64_t(picked_.size()), n_cols = part_.head_end - part_.head_begin;
    float *h = cpu::grow(h_, size_t(n_out * d));
    for (size_t j = 0; j < picked_.size(); ++j)
        cpu::rmsnorm(x + picked_[j] * size_t(d), f32_data(tensors_.output_norm), h + j * size_t(d), 1, d, hp_.rms_eps);
    out.resize(static_cast<size_t>(n_out * n_cols));
    const cpu::cpu_matrix w = matrix(tensors_.output, d, hp_.n_vocab).slice_rows(part_.head_begin, n_cols);
    cpu::matmul(ctx_, w, h, out.data(), n_out);
}

}  // namespace tandem
