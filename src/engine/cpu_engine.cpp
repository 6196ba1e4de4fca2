// src/engine/cpu_engine.cpp - the CPU reference engine: Qwen3-MoE forward over rows from any
// number of sessions, per-slot F32 KV caches, grouped MoE, head; weights read in place (mmap).
#include "cpu_engine.h"

#include "host_memory.h"
#include "tandem/error.h"
#include "tandem/log.h"
#include "tandem/quant.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <thread>

namespace tandem {

namespace {

const float *f32_data(const gguf_tensor_info *t) { return reinterpret_cast<const float *>(t->data); }

}  // namespace

cpu_engine::cpu_engine(std::shared_ptr<const gguf_file> file, const engine_options &options)
    : file_(std::move(file)) {
    hp_ = model_hparams_read(*file_);
    tensors_ = model_tensors_bind(*file_, hp_);
    if (options.n_slots < 1 || options.n_slots > 1024)
        fail(error_kind::config, "number of sessions (KV slots) must be in 1..1024, got {}", options.n_slots);
    if (options.n_ctx < 1)
        fail(error_kind::config, "context size must be at least 1, got {}", options.n_ctx);
    if (options.n_ctx > hp_.n_ctx_train)
        fail(error_kind::config, "context size {} exceeds the model's trained context {} (no RoPE scaling yet)",
             options.n_ctx, hp_.n_ctx_train);
    n_slots_ = options.n_slots;
    n_ctx_ = options.n_ctx;
    ctx_.n_threads = options.n_threads > 0 ? options.n_threads : int32_t(std::max(1u, std::thread::hardware_concurrency()));
    kv_dim_ = int64_t(hp_.n_head_kv) * hp_.d_head;
    kv_bytes_ = size_t(hp_.n_layer) * 2 * size_t(n_slots_) * size_t(n_ctx_) * size_t(kv_dim_) * sizeof(float);
    const host_memory mem = host_memory_read();
    if (mem.total_bytes && kv_bytes_ > mem.total_bytes)
        fail(error_kind::config, "KV cache for {} slots x {} tokens needs {:.2f} GiB, more than this machine's {:.2f} GiB "
             "of RAM: lower --ctx or --batched-session", n_slots_, n_ctx_, kv_bytes_ / 1073741824.0,
             mem.total_bytes / 1073741824.0);
    // Anonymous mapping: pages cost nothing until a slot writes them.
    void *p = mmap(nullptr, kv_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail(error_kind::config, "cannot reserve {:.2f} GiB for the KV cache", kv_bytes_ / 1073741824.0);
    kv_ = static_cast<float *>(p);
    slot_len_.assign(size_t(n_slots_), 0);
}

cpu_engine::~cpu_engine() {
    if (kv_) munmap(kv_, kv_bytes_);
}

float *cpu_engine::k_cache(int32_t layer, int32_t slot) const {
    return kv_ + ((size_t(layer) * 2 + 0) * n_slots_ + slot) * size_t(n_ctx_) * kv_dim_;
}
float *cpu_engine::v_cache(int32_t layer, int32_t slot) const {
    return kv_ + ((size_t(layer) * 2 + 1) * n_slots_ + slot) * size_t(n_ctx_) * kv_dim_;
}

cpu::cpu_matrix cpu_engine::matrix(const gguf_tensor_info *t, int64_t n_in, int64_t n_out) const {
    return {t->data, t->type, n_in, n_out, ggml_row_bytes(t->type, n_in)};
}

int32_t cpu_engine::slot_length(int32_t slot) const {
    if (slot < 0 || slot >= n_slots_) fail(error_kind::invalid_request, "slot {} out of range 0..{}", slot, n_slots_ - 1);
    return slot_len_[slot];
}

void cpu_engine::slot_truncate(int32_t slot, int32_t n_keep) {
    const int32_t len = slot_length(slot);
    if (n_keep < 0 || n_keep > len)
        fail(error_kind::invalid_request, "cannot keep {} tokens of slot {} which holds {}", n_keep, slot, len);
    slot_len_[slot] = n_keep;
}

std::string cpu_engine::layout() const {
    return fmt::format("layout: cpu devices=1 threads={} | L0-{} all experts, head | slots={} x ctx={} kv=f32 {:.2f} GiB",
                       ctx_.n_threads, hp_.n_layer - 1, n_slots_, n_ctx_, kv_bytes_ / 1073741824.0);
}

std::map<std::string, double> cpu_engine::counters() const {
    return {{"experts_touched_per_layer", experts_touched_}, {"threads", double(ctx_.n_threads)}};
}

void cpu_engine::validate(std::span<const engine_row> rows) const {
    std::vector<int32_t> next = slot_len_;
    for (size_t i = 0; i < rows.size(); ++i) {
        const engine_row &r = rows[i];
        if (r.slot < 0 || r.slot >= n_slots_)
            fail(error_kind::invalid_request, "row {}: slot {} out of range 0..{}", i, r.slot, n_slots_ - 1);
        if (r.token < 0 || r.token >= hp_.n_vocab)
            fail(error_kind::invalid_request, "row {}: token {} out of range 0..{}", i, r.token, hp_.n_vocab - 1);
        if (r.pos != next[r.slot])
            fail(error_kind::invalid_request, "row {}: slot {} expects position {}, got {}", i, r.slot, next[r.slot], r.pos);
        if (r.pos >= n_ctx_)
            fail(error_kind::too_large, "row {}: position {} does not fit the context of {} tokens", i, r.pos, n_ctx_);
        ++next[r.slot];
    }
}

void cpu_engine::embed(std::span<const engine_row> rows, float *x) const {
    const gguf_tensor_info *t = tensors_.tok_embd;
    const size_t row_bytes = ggml_row_bytes(t->type, hp_.d_model);
    for (size_t i = 0; i < rows.size(); ++i)
        dequantize_row(t->type, t->data + size_t(rows[i].token) * row_bytes, x + i * hp_.d_model, hp_.d_model);
}

void cpu_engine::layer_attention(int32_t layer, std::span<const engine_row> rows, float *x) {
    const layer_tensors &lt = tensors_.layers[layer];
    const int64_t n = int64_t(rows.size()), d = hp_.d_model, dh = hp_.d_head;
    const int64_t q_dim = int64_t(hp_.n_head) * dh;
    std::vector<float> h(static_cast<size_t>(n * d)), q(static_cast<size_t>(n * q_dim)), k(static_cast<size_t>(n * kv_dim_)), v(static_cast<size_t>(n * kv_dim_));
    std::vector<float> att(static_cast<size_t>(n * q_dim)), o(static_cast<size_t>(n * d));
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[i] = rows[i].pos;

    cpu::rmsnorm(x, f32_data(lt.attn_norm), h.data(), n, d, hp_.rms_eps);
    cpu::matmul(ctx_, matrix(lt.wq, d, q_dim), h.data(), q.data(), n);
    cpu::matmul(ctx_, matrix(lt.wk, d, kv_dim_), h.data(), k.data(), n);
    cpu::matmul(ctx_, matrix(lt.wv, d, kv_dim_), h.data(), v.data(), n);
    cpu::rmsnorm(q.data(), f32_data(lt.q_norm), q.data(), n * hp_.n_head, dh, hp_.rms_eps);
    cpu::rmsnorm(k.data(), f32_data(lt.k_norm), k.data(), n * hp_.n_head_kv, dh, hp_.rms_eps);
    cpu::rope_neox(q.data(), pos.data(), n, hp_.n_head, dh, hp_.rope_theta);
    cpu::rope_neox(k.data(), pos.data(), n, hp_.n_head_kv, dh, hp_.rope_theta);

    // Every row's K/V goes into its slot before any row attends, so rows of one slot in this call
    // see each other causally (position order), and rows of other slots never.
    std::vector<const float *> kc(static_cast<size_t>(n)), vc(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        float *kd = k_cache(layer, rows[i].slot), *vd = v_cache(layer, rows[i].slot);
        std::copy_n(k.data() + i * kv_dim_, kv_dim_, kd + int64_t(rows[i].pos) * kv_dim_);
        std::copy_n(v.data() + i * kv_dim_, kv_dim_, vd + int64_t(rows[i].pos) * kv_dim_);
        kc[i] = kd;
        vc[i] = vd;
    }
    cpu::attention_args args{q.data(), kc.data(), vc.data(), pos.data(), att.data(),
                             n, hp_.n_head, hp_.n_head_kv, dh, 1.0f / std::sqrt(float(dh))};
    cpu::attention(ctx_, args);
    cpu::matmul(ctx_, matrix(lt.wo, q_dim, d), att.data(), o.data(), n);
    for (int64_t i = 0; i < n * d; ++i) x[i] += o[i];
}

void cpu_engine::layer_route(int32_t layer, int64_t n, const float *x, float *h, int32_t *ids, float *weights) {
    const layer_tensors &lt = tensors_.layers[layer];
    std::vector<float> router_logits(static_cast<size_t>(n * hp_.n_expert));
    cpu::rmsnorm(x, f32_data(lt.ffn_norm), h, n, hp_.d_model, hp_.rms_eps);
    cpu::matmul(ctx_, matrix(lt.router, hp_.d_model, hp_.n_expert), h, router_logits.data(), n);
    cpu::moe_route(router_logits.data(), n, hp_.n_expert, hp_.n_expert_used, hp_.norm_topk, ids, weights);
}

void cpu_engine::layer_experts(int32_t layer, int64_t n, const float *h, const int32_t *ids, const uint8_t *owned,
                               float *out) {
    const layer_tensors &lt = tensors_.layers[layer];
    const int64_t d = hp_.d_model, ff = hp_.d_ff_expert, ne = hp_.n_expert;
    cpu::moe_grouped_args args;
    args.gate_exps = matrix(lt.gate_exps, d, ff * ne);
    args.up_exps = matrix(lt.up_exps, d, ff * ne);
    args.down_exps = matrix(lt.down_exps, ff, d * ne);
    args.x = h;
    args.ids = ids;
    args.out = out;
    args.n_rows = n;
    args.k = hp_.n_expert_used;
    args.n_expert = ne;
    args.d_model = d;
    args.d_ff = ff;
    args.owned = owned;
    cpu::moe_grouped(ctx_, args);
}

void cpu_engine::head(std::span<const engine_row> rows, const float *x, int64_t row_begin, int64_t row_end,
                      std::vector<float> &out) {
    const int64_t d = hp_.d_model;
    std::vector<int64_t> picked;
    for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].want_logits) picked.push_back(int64_t(i));
    const int64_t n_out = int64_t(picked.size()), n_cols = row_end - row_begin;
    std::vector<float> h(static_cast<size_t>(n_out * d));
    for (int64_t j = 0; j < n_out; ++j)
        cpu::rmsnorm(x + picked[j] * d, f32_data(tensors_.output_norm), h.data() + j * d, 1, d, hp_.rms_eps);
    out.resize(static_cast<size_t>(n_out * n_cols));
    const cpu::cpu_matrix w = matrix(tensors_.output, d, hp_.n_vocab).slice_rows(row_begin, n_cols);
    cpu::matmul(ctx_, w, h.data(), out.data(), n_out);
}

void cpu_engine::forward(std::span<const engine_row> rows, std::vector<float> &logits) {
    logits.clear();
    if (rows.empty()) return;
    validate(rows);
    const int64_t n = int64_t(rows.size()), d = hp_.d_model, k = hp_.n_expert_used;
    std::vector<float> x(static_cast<size_t>(n * d)), h(static_cast<size_t>(n * d)), out(static_cast<size_t>(n * k * d)), weights(static_cast<size_t>(n * k));
    std::vector<int32_t> ids(static_cast<size_t>(n * k));
    embed(rows, x.data());
    int64_t touched = 0;
    for (int32_t l = 0; l < hp_.n_layer; ++l) {
        layer_attention(l, rows, x.data());
        layer_route(l, n, x.data(), h.data(), ids.data(), weights.data());
        touched += cpu::moe_count_experts(ids.data(), n * k, hp_.n_expert, nullptr);
        layer_experts(l, n, h.data(), ids.data(), nullptr, out.data());
        cpu::moe_combine(x.data(), out.data(), weights.data(), n, k, d);
    }
    experts_touched_ = double(touched) / hp_.n_layer;
    head(rows, x.data(), 0, hp_.n_vocab, logits);
    for (const engine_row &r : rows) slot_len_[r.slot] = std::max(slot_len_[r.slot], r.pos + 1);
}

}  // namespace tandem
