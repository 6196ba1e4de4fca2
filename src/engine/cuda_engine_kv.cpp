// src/engine/cuda_engine_kv.cpp - the CUDA engine's K/V moves: a slot's cache to and from host
// memory (page-locked memory directly, other memory through pinned staging in chunks), and a
// prefix copied from one slot to another on each device. Copies of bytes only, so a restored slot
// is bitwise the slot that was saved.
#include "cuda/cuda_check.h"
#include "cuda_device_state.h"
#include "cuda_engine.h"
#include "cuda_engine_host.h"
#include "tandem/error.h"
#include "tandem/log.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

namespace tandem {

namespace {

// Pinned staging for K/V moves: big enough that a chunk's copies dwarf their launch cost, small
// enough to take from pinned memory at any time.
constexpr size_t kv_staging_target = size_t(64) << 20;

// Layer l's plane (0: K, 1: V; deepseek2: the one latent plane) of the slot: [n_ctx] rows of
// m.kv_row bytes (floats, halves or q8_0 blocks).
uint8_t *kv_plane(const cuda_device::state &m, int32_t layer, int32_t plane, int32_t slot) {
    const size_t row = m.kv_row, cache = size_t(m.n_slots) * size_t(m.n_ctx) * row;
    const size_t l = size_t(layer - m.part.layer_begin);
    return m.kv + (l * size_t(m.kv_planes) + size_t(plane)) * cache + size_t(slot) * size_t(m.n_ctx) * row;
}

// Where layer l's plane starts inside one token of a blob.
size_t kv_blob_offset(const cuda_device::state &m, int32_t layer, int32_t plane) {
    return (size_t(layer) * size_t(m.kv_planes) + size_t(plane)) * m.kv_row;
}

}  // namespace

void cuda_device::kv_download(int32_t slot, int32_t t0, int32_t n, uint8_t *host_pinned, size_t token_bytes) {
    state &m = *s_;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const size_t row = m.kv_row;
    for (int32_t l = m.part.layer_begin; l < m.part.layer_end; ++l)
        for (int32_t p = 0; p < m.kv_planes; ++p)
            TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(host_pinned + kv_blob_offset(m, l, p), token_bytes,
                                                kv_plane(m, l, p, slot) + size_t(t0) * row, row, row, size_t(n),
                                                cudaMemcpyDeviceToHost, m.stream));
}

void cuda_device::kv_upload(int32_t slot, int32_t t0, int32_t n, const uint8_t *host_pinned, size_t token_bytes) {
    state &m = *s_;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const size_t row = m.kv_row;
    for (int32_t l = m.part.layer_begin; l < m.part.layer_end; ++l)
        for (int32_t p = 0; p < m.kv_planes; ++p)
            TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(kv_plane(m, l, p, slot) + size_t(t0) * row, row,
                                                host_pinned + kv_blob_offset(m, l, p), token_bytes, row, size_t(n),
                                                cudaMemcpyHostToDevice, m.stream));
}

void cuda_device::kv_copy(int32_t src, int32_t dst, int32_t n) {
    state &m = *s_;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    const size_t bytes = size_t(n) * m.kv_row;
    for (int32_t l = m.part.layer_begin; l < m.part.layer_end; ++l)
        for (int32_t p = 0; p < m.kv_planes; ++p)
            TANDEM_CUDA_CHECK(cudaMemcpyAsync(kv_plane(m, l, p, dst), kv_plane(m, l, p, src), bytes,
                                              cudaMemcpyDeviceToDevice, m.stream));
}

uint64_t cuda_engine::kv_token_bytes() const {
    const model_kv_shape kv = model_kv_shape_of(hp_);
    return uint64_t(hp_.n_layer) * uint64_t(kv.n_planes) * kv_row_bytes(kv_, kv.width);
}

int32_t cuda_engine::kv_staging_tokens() {
    host_state &h = *host_;
    const size_t token = size_t(kv_token_bytes());
    if (h.kv_staging == nullptr) {
        h.kv_staging_bytes = std::max(kv_staging_target / token, size_t(1)) * token;
        TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&h.kv_staging), h.kv_staging_bytes, cudaHostAllocPortable));
    }
    return int32_t(std::min(h.kv_staging_bytes / token, size_t(n_ctx_)));
}

void cuda_engine::synchronize_all() {
    for (const auto &d : devices_) d->synchronize();
}

std::shared_ptr<uint8_t> cuda_engine::host_pinned(size_t bytes) {
    uint8_t *p = nullptr;
    if (cudaHostAlloc(reinterpret_cast<void **>(&p), std::max<size_t>(bytes, 1), cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        log_warn("could not lock {:.2f} GiB of host memory: the prompt cache copies through staging", double(bytes) / double(1ull << 30));
        return nullptr;
    }
    return std::shared_ptr<uint8_t>(p, [](uint8_t *q) { cudaFreeHost(q); });
}

namespace {
// Whether the copies can use the memory directly (page-locked), with no staging.
bool page_locked(const void *p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}
}  // namespace

// Each stage's host writes its layers of the blob once: a tensor-parallel partner holds the same K/V.
void cuda_engine::slot_export(int32_t slot, int32_t n_tokens, std::span<uint8_t> out) {
    const size_t token = size_t(kv_token_bytes());
    slots_.check_export(slot, n_tokens, out.size(), token);
    if (n_tokens > 0 && page_locked(out.data())) {
        for (const std::vector<int32_t> &members : stage_members_)
            devices_[size_t(members[0])]->kv_download(slot, 0, n_tokens, out.data(), token);
        synchronize_all();
        return;
    }
    const int32_t chunk = kv_staging_tokens();
    for (int32_t t0 = 0; t0 < n_tokens; t0 += chunk) {
        const int32_t n = std::min(chunk, n_tokens - t0);
        for (const std::vector<int32_t> &members : stage_members_)
            devices_[size_t(members[0])]->kv_download(slot, t0, n, host_->kv_staging, token);
        synchronize_all();
        std::memcpy(out.data() + size_t(t0) * token, host_->kv_staging, size_t(n) * token);
    }
}

// Every device is written: both members of a pair attend with their own copy.
void cuda_engine::slot_import(int32_t slot, std::span<const uint8_t> in) {
    const size_t token = size_t(kv_token_bytes());
    const int32_t n_tokens = slots_.check_import(slot, in.size(), token);
    if (n_tokens > 0 && page_locked(in.data())) {
        for (const auto &d : devices_) d->kv_upload(slot, 0, n_tokens, in.data(), token);
        synchronize_all();
        slots_.set_length(slot, n_tokens);
        return;
    }
    const int32_t chunk = kv_staging_tokens();
    for (int32_t t0 = 0; t0 < n_tokens; t0 += chunk) {
        const int32_t n = std::min(chunk, n_tokens - t0);
        std::memcpy(host_->kv_staging, in.data() + size_t(t0) * token, size_t(n) * token);
        for (const auto &d : devices_) d->kv_upload(slot, t0, n, host_->kv_staging, token);
        synchronize_all();
    }
    slots_.set_length(slot, n_tokens);
}

void cuda_engine::slot_copy(int32_t src, int32_t dst, int32_t n_tokens) {
    slots_.check_export(src, n_tokens, size_t(n_tokens) * size_t(kv_token_bytes()), kv_token_bytes());
    slots_.length(dst);
    if (src == dst) return slots_.truncate(dst, n_tokens);
    for (const auto &d : devices_) d->kv_copy(src, dst, n_tokens);
    synchronize_all();
    slots_.set_length(dst, n_tokens);
}

}  // namespace tandem
