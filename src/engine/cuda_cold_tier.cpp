// src/engine/cuda_cold_tier.cpp - the CUDA engine's host tier: the stage's rows to page-locked host
// memory, the CPU's cold slots on a host node of a side stream, their outputs merged back on every
// member. The host node's arguments (layer, rows) live as long as the tier, so captured graphs may
// replay them.
#include "cuda_cold_tier.h"

#include "cold_experts.h"
#include "cuda/cuda_check.h"
#include "cuda/moe_split.h"
#include "cuda_device.h"
#include "cuda_device_state.h"
#include "tandem/error.h"

#include <cuda_runtime.h>

#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>

namespace tandem {

struct cuda_cold_tier::impl {
    struct job {
        impl *tier = nullptr;
        int32_t layer = 0, r0 = 0, n = 0;
    };

    const model_hparams *hp = nullptr;
    std::vector<cuda_device *> members;
    int32_t layer_begin = 0;
    cold_experts cold;
    const int32_t *row_slots = nullptr;
    int32_t device = 0;             // the first member's GPU: the side stream's
    cudaStream_t side = nullptr;
    std::vector<cudaEvent_t> routed;  // [member]: its rows are routed
    cudaEvent_t done = nullptr;       // the CPU's cold slots are in host memory
    float *h = nullptr;               // page-locked [max_step_rows][d_model]
    int32_t *ids = nullptr;           // page-locked [max_step_rows][k]
    float *out = nullptr;             // page-locked, mapped [max_step_rows][k][d_model]
    float *out_dev = nullptr;         // out as the GPUs address it
    std::vector<int32_t *> hot;       // [member] device [layers][n_expert]: 0 held by the stage, -1 cold
    std::map<std::tuple<int32_t, int32_t, int32_t>, job> jobs;
    std::atomic<int64_t> pairs{0};
    std::mutex error_mutex;
    std::exception_ptr error;

    impl(const model_hparams &hp_, const model_tensors &tensors, const placement_plan &plan, int32_t begin, int32_t end,
         int32_t n_threads, const expert_tiers_spec &tiers)
        : hp(&hp_), layer_begin(begin), cold(hp_, tensors, plan, begin, end, n_threads, cpu::cpu_arithmetic::digits, tiers) {}

    void run(const job &j);
    static void CUDART_CB host_node(void *p) {
        job &j = *static_cast<job *>(p);
        try {
            j.tier->run(j);
        } catch (...) {
            std::lock_guard<std::mutex> lock(j.tier->error_mutex);
            if (!j.tier->error) j.tier->error = std::current_exception();
        }
    }
};

// The cold slots of the job's real rows (padding rows have no slot and are skipped), in runs of
// consecutive real rows.
void cuda_cold_tier::impl::run(const job &j) {
    const int64_t d = hp->d_model, k = hp->n_expert_used;
    int32_t r = 0;
    while (r < j.n) {
        if (row_slots[j.r0 + r] < 0) {
            ++r;
            continue;
        }
        int32_t e = r;
        while (e < j.n && row_slots[j.r0 + e] >= 0) ++e;
        const size_t at = size_t(j.r0 + r);
        pairs += cold.compute(j.layer, e - r, h + at * size_t(d), ids + at * size_t(k), out + at * size_t(k * d));
        r = e;
    }
}

cuda_cold_tier::cuda_cold_tier(const model_hparams &hp, const model_tensors &tensors, const placement_plan &plan,
                               std::vector<cuda_device *> members, int32_t n_threads, const int32_t *row_slots,
                               const expert_tiers_spec &tiers) {
    TANDEM_ASSERT(!members.empty());
    const placement_device_plan &first = members.front()->part();
    s_ = std::make_unique<impl>(hp, tensors, plan, first.layer_begin, first.layer_end, n_threads, tiers);
    impl &m = *s_;
    m.members = std::move(members);
    m.row_slots = row_slots;
    m.device = first.physical;
    const size_t R = cuda_device::max_step_rows, d = size_t(hp.d_model), k = size_t(hp.n_expert_used);
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&m.side, cudaStreamNonBlocking));
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&m.done, cudaEventDisableTiming));
    const unsigned flags = cudaHostAllocPortable | cudaHostAllocMapped;
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&m.h), R * d * sizeof(float), flags));
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&m.ids), R * k * sizeof(int32_t), flags));
    TANDEM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&m.out), R * k * d * sizeof(float), flags));
    TANDEM_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&m.out_dev), m.out, 0));

    // Held by the stage: on any member (a pair's experts are the union of its halves).
    const int32_t n_layers = first.layer_end - first.layer_begin;
    std::vector<int32_t> hot(size_t(n_layers) * size_t(hp.n_expert), 0);
    for (int32_t l = first.layer_begin; l < first.layer_end; ++l)
        for (int32_t e : plan.cold.experts[size_t(l)]) hot[size_t(l - first.layer_begin) * size_t(hp.n_expert) + size_t(e)] = -1;
    for (cuda_device *dev : m.members) {
        TANDEM_CUDA_CHECK(cudaSetDevice(dev->physical()));
        cudaEvent_t ev = nullptr;
        TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        m.routed.push_back(ev);
        int32_t *map = nullptr;
        TANDEM_CUDA_CHECK(cudaMalloc(&map, hot.size() * sizeof(int32_t)));
        TANDEM_CUDA_CHECK(cudaMemcpy(map, hot.data(), hot.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
        m.hot.push_back(map);
    }
}

cuda_cold_tier::~cuda_cold_tier() {
    impl &m = *s_;
    cudaSetDevice(m.device);
    if (m.side) cudaStreamSynchronize(m.side);
    for (size_t i = 0; i < m.members.size(); ++i) {
        cudaSetDevice(m.members[i]->physical());
        if (i < m.hot.size()) cudaFree(m.hot[i]);
        if (i < m.routed.size()) cudaEventDestroy(m.routed[i]);
    }
    cudaSetDevice(m.device);
    for (void *p : {static_cast<void *>(m.h), static_cast<void *>(m.ids), static_cast<void *>(m.out)})
        if (p) cudaFreeHost(p);
    if (m.done) cudaEventDestroy(m.done);
    if (m.side) cudaStreamDestroy(m.side);
}

bool cuda_cold_tier::any(int32_t layer) const { return s_->cold.any(layer); }

int64_t cuda_cold_tier::send(int32_t layer, int32_t r0, int32_t n) {
    impl &m = *s_;
    const model_hparams &hp = *m.hp;
    const size_t d = size_t(hp.d_model), k = size_t(hp.n_expert_used);
    // The side stream waits for every member: a pair's partner may still read the last layer's
    // cold outputs, which this layer's overwrite.
    for (size_t i = 0; i < m.members.size(); ++i) {
        cuda_device::state &st = m.members[i]->impl();
        TANDEM_CUDA_CHECK(cudaSetDevice(st.device));
        TANDEM_CUDA_CHECK(cudaEventRecord(m.routed[i], st.stream));
        TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(m.side, m.routed[i], 0));
    }
    cuda_device &first = *m.members.front();
    TANDEM_CUDA_CHECK(cudaSetDevice(m.device));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.h + size_t(r0) * d, first.h_rows(r0), size_t(n) * d * sizeof(float),
                                      cudaMemcpyDeviceToHost, m.side));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.ids + size_t(r0) * k, first.impl().ids + size_t(r0) * k, size_t(n) * k * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, m.side));
    impl::job &j = m.jobs[{layer, r0, n}];
    j = {&m, layer, r0, n};
    TANDEM_CUDA_CHECK(cudaLaunchHostFunc(m.side, impl::host_node, &j));
    TANDEM_CUDA_CHECK(cudaEventRecord(m.done, m.side));
    return 3;
}

int64_t cuda_cold_tier::receive(int32_t layer, int32_t r0, int32_t n) {
    impl &m = *s_;
    const model_hparams &hp = *m.hp;
    const size_t k = size_t(hp.n_expert_used);
    for (size_t i = 0; i < m.members.size(); ++i) {
        cuda_device &dev = *m.members[i];
        cuda_device::state &st = dev.impl();
        TANDEM_CUDA_CHECK(cudaSetDevice(st.device));
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(st.stream, m.done, 0));
        cuda::moe_pairs_merge_args a;
        a.out = dev.expert_out_rows(r0);
        a.other = m.out_dev + size_t(r0) * k * size_t(hp.d_model);
        a.ids = st.ids + size_t(r0) * k;
        a.slots = st.slots() + r0;
        a.local = m.hot[i] + size_t(layer - m.layer_begin) * size_t(hp.n_expert);
        a.n_rows = n;
        a.k = int32_t(k);
        a.d_model = hp.d_model;
        cuda::moe_pairs_merge(a, st.stream);
    }
    return int64_t(m.members.size());
}

int64_t cuda_cold_tier::take_pairs() { return s_->pairs.exchange(0); }

void cuda_cold_tier::check() {
    std::exception_ptr e;
    {
        std::lock_guard<std::mutex> lock(s_->error_mutex);
        std::swap(e, s_->error);
    }
    if (e) std::rethrow_exception(e);
}

}  // namespace tandem
