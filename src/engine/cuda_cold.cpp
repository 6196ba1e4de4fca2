// src/engine/cuda_cold.cpp - the CUDA engine's host tier: per layer with cold experts, a device
// ships its h rows and routing to pinned host memory on a side stream, a host function computes
// the cold slots with the CPU engine's quantized products (cold_experts), and every member of the
// stage copies them back and merges them into its expert outputs by expert, before the slot-order
// combine. The GPU's own experts run on the main stream meanwhile.
#include "cold_experts.h"
#include "cuda/cuda_check.h"
#include "cuda/moe_split.h"
#include "cuda_device_state.h"
#include "tandem/error.h"

#include <algorithm>
#include <cstdio>
#include <exception>

namespace tandem {

namespace {

// Runs on a CUDA runtime thread in stream order: no CUDA calls here. An exception cannot cross the
// runtime, and a missing slot would silently corrupt logits, so any failure ends the process.
void CUDART_CB cold_job_run(void *p) {
    const cold_job &j = *static_cast<const cold_job *>(p);
    try {
        j.cpu->compute(j.layer, j.n_rows, j.h, j.ids, j.out);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tandem: host tier, layer %d: %s\n", j.layer, e.what());
        std::terminate();
    }
}

template <typename T>
T *pinned_alloc(size_t count) {
    void *p = nullptr;
    TANDEM_CUDA_CHECK(cudaHostAlloc(&p, count * sizeof(T), cudaHostAllocPortable));
    return static_cast<T *>(p);
}

}  // namespace

void cold_setup(cuda_device::state &m, const placement_cold_plan &cold) {
    const model_hparams &hp = *m.hp;
    const int32_t n_here = m.part.layer_end - m.part.layer_begin;
    std::vector<int32_t> keep(size_t(n_here) * size_t(hp.n_expert), 0);
    m.cold_layers.assign(size_t(n_here), false);
    for (int32_t l = m.part.layer_begin; l < m.part.layer_end && size_t(l) < cold.experts.size(); ++l)
        for (int32_t e : cold.experts[size_t(l)]) {
            keep[size_t(l - m.part.layer_begin) * size_t(hp.n_expert) + size_t(e)] = -1;
            m.cold_layers[size_t(l - m.part.layer_begin)] = true;
        }
    if (std::find(m.cold_layers.begin(), m.cold_layers.end(), true) == m.cold_layers.end()) return;
    TANDEM_ASSERT(!m.layers.empty() && m.layers.front().local, "a device beside a host tier holds part of its experts");
    const size_t R = cuda_device::max_step_rows, k = size_t(hp.n_expert_used), d = size_t(hp.d_model);
    TANDEM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void **>(&m.cold_keep), keep.size() * sizeof(int32_t)));
    TANDEM_CUDA_CHECK(cudaMemcpy(m.cold_keep, keep.data(), keep.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    TANDEM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void **>(&m.cold_out), R * k * d * sizeof(float)));
    if (m.part.role == placement_role::partner) return;  // it receives what its pair's first member sends
    m.cold_h_host = pinned_alloc<float>(R * d);
    m.cold_ids_host = pinned_alloc<int32_t>(R * k);
    m.cold_out_host = pinned_alloc<float>(R * k * d);
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&m.cold_stream, cudaStreamNonBlocking));
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&m.cold_routed, cudaEventDisableTiming));
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&m.cold_done, cudaEventDisableTiming));
}

void cold_free(cuda_device::state &m) {
    if (m.cold_stream) cudaStreamSynchronize(m.cold_stream);
    if (m.cold_keep) cudaFree(m.cold_keep);
    if (m.cold_out) cudaFree(m.cold_out);
    for (void *p : {static_cast<void *>(m.cold_h_host), static_cast<void *>(m.cold_ids_host), static_cast<void *>(m.cold_out_host)})
        if (p) cudaFreeHost(p);
    if (m.cold_routed) cudaEventDestroy(m.cold_routed);
    if (m.cold_done) cudaEventDestroy(m.cold_done);
    if (m.cold_stream) cudaStreamDestroy(m.cold_stream);
}

bool cuda_device::has_cold(int32_t layer) const {
    const state &m = *s_;
    return !m.cold_layers.empty() && m.cold_layers[size_t(layer - m.part.layer_begin)];
}

void cuda_device::cold_send(int32_t layer, int32_t r0, int32_t n, cold_experts &cpu) {
    state &m = *s_;
    TANDEM_ASSERT(has_cold(layer), "layer {} has no cold experts on device {}", layer, m.part.logical);
    const size_t k = size_t(m.hp->n_expert_used), d = size_t(m.hp->d_model);
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    // h and the routing are final once the main stream gets here; the experts' launches follow.
    TANDEM_CUDA_CHECK(cudaEventRecord(m.cold_routed, m.stream));
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(m.cold_stream, m.cold_routed, 0));
    float *h = m.cold_h_host + size_t(r0) * d;
    int32_t *ids = m.cold_ids_host + size_t(r0) * k;
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(h, h_rows(r0), size_t(n) * d * sizeof(float), cudaMemcpyDeviceToHost, m.cold_stream));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(ids, m.ids + size_t(r0) * k, size_t(n) * k * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                      m.cold_stream));
    m.cold_jobs.push_back({&cpu, layer, n, h, ids, m.cold_out_host + size_t(r0) * k * d});
    TANDEM_CUDA_CHECK(cudaLaunchHostFunc(m.cold_stream, cold_job_run, &m.cold_jobs.back()));
    TANDEM_CUDA_CHECK(cudaEventRecord(m.cold_done, m.cold_stream));
}

int64_t cuda_device::cold_receive(int32_t layer, int32_t r0, int32_t n, const cuda_device &sender) {
    state &m = *s_;
    const state &src = *sender.s_;
    const model_hparams &hp = *m.hp;
    const size_t k = size_t(hp.n_expert_used), d = size_t(hp.d_model);
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(m.stream, src.cold_done, 0));
    // Every slot of the rows comes back (the stale ones are never merged): one copy, no gather.
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.cold_out + size_t(r0) * k * d, src.cold_out_host + size_t(r0) * k * d,
                                      size_t(n) * k * d * sizeof(float), cudaMemcpyHostToDevice, m.stream));
    cuda::moe_pairs_merge_args a;
    a.out = expert_out_rows(r0);
    a.other = m.cold_out + size_t(r0) * k * d;
    a.ids = m.ids + size_t(r0) * k;
    a.slots = m.slots() + r0;
    a.local = m.cold_keep + size_t(layer - m.part.layer_begin) * size_t(hp.n_expert);
    a.n_rows = n;
    a.k = int32_t(k);
    a.d_model = hp.d_model;
    cuda::moe_pairs_merge(a, m.stream);
    return 1;
}

void cuda_device::cold_reset() {
    state &m = *s_;
    if (!m.cold_stream) return;
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(m.cold_stream));
    m.cold_jobs.clear();
}

}  // namespace tandem
