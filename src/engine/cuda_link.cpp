// src/engine/cuda_link.cpp - the transfers between logical CUDA devices (see cuda_link.h).
#include "cuda_link.h"

#include "cuda/cuda_check.h"
#include "cuda_device_state.h"
#include "tandem/error.h"

#include <fmt/format.h>
#ifdef TANDEM_HAVE_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <cstdlib>

#include <set>

namespace tandem {

void cuda_transport_check(engine_transport transport) {
#ifndef TANDEM_HAVE_NCCL
    if (transport == engine_transport::nccl)
        fail(error_kind::unsupported, "--transport nccl: this build has no NCCL (use auto, p2p or host)");
#else
    (void)transport;
#endif
}

cuda_links::cuda_links(const std::vector<std::unique_ptr<cuda_device>> &devices, engine_transport mode) : mode_(mode) {
    std::set<int> physical;
    for (const auto &d : devices) physical.insert(d->physical());
    for (int a : physical)
        for (int b : physical) {
            if (a == b) continue;
            int can = 0;
            TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
            if (mode_ == engine_transport::p2p && !can)
                fail(error_kind::config, "--transport p2p: GPU {} cannot access GPU {} peer-to-peer (use --transport auto)",
                     a, b);
            if (can && mode_ != engine_transport::host) {
                TANDEM_CUDA_CHECK(cudaSetDevice(a));
                const cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
                if (err == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
                else TANDEM_CUDA_CHECK(err);
            }
            peer_[{a, b}] = can && mode_ != engine_transport::host;
        }
#ifdef TANDEM_HAVE_NCCL
    if (mode_ == engine_transport::nccl && physical.size() > 1) {
        // One communicator per GPU, all made here; NVLink multicast stays off (DEVICE.md).
        setenv("NCCL_NVLS_ENABLE", "0", 0);
        nccl_gpus_.assign(physical.begin(), physical.end());
        std::vector<ncclComm_t> comms(nccl_gpus_.size());
        const ncclResult_t r = ncclCommInitAll(comms.data(), int(comms.size()), nccl_gpus_.data());
        if (r != ncclSuccess)
            fail(error_kind::config, "--transport nccl: ncclCommInitAll over GPUs {} failed: {}",
                 fmt::join(nccl_gpus_, ","), ncclGetErrorString(r));
        for (ncclComm_t c : comms) nccl_comms_.push_back(c);
    }
#endif
}

cuda_links::~cuda_links() {
    for (auto &[dst, buf] : staging_) cudaFreeHost(buf.first);
#ifdef TANDEM_HAVE_NCCL
    for (void *c : nccl_comms_) ncclCommDestroy(static_cast<ncclComm_t>(c));
#endif
}

int cuda_links::nccl_rank(int physical) const {
    const auto it = std::find(nccl_gpus_.begin(), nccl_gpus_.end(), physical);
    TANDEM_ASSERT(it != nccl_gpus_.end(), "GPU {} has no NCCL communicator", physical);
    return int(it - nccl_gpus_.begin());
}

bool cuda_links::staged(const std::vector<std::unique_ptr<cuda_device>> &devices) const {
    for (const auto &a : devices)
        for (const auto &b : devices)
            if (a != b && route(*a, *b) == way::host) return true;
    return false;
}

bool cuda_links::peer(int a, int b) const {
    auto it = peer_.find({a, b});
    return it != peer_.end() && it->second;
}

cuda_links::way cuda_links::route(const cuda_device &a, const cuda_device &b) const {
    if (a.physical() == b.physical()) return mode_ == engine_transport::host ? way::host : way::same_gpu;
    if (mode_ == engine_transport::nccl) return way::nccl;
    return peer(a.physical(), b.physical()) ? way::p2p : way::host;
}

const char *cuda_links::path(const cuda_device &a, const cuda_device &b) const {
    switch (route(a, b)) {
    case way::same_gpu: return "same-gpu";
    case way::p2p: return "p2p";
    case way::host: return "host";
    case way::nccl: return "nccl";
    }
    return "?";
}

std::string cuda_links::describe() const {
    std::string links;
    for (const auto &[ab, on] : peer_)
        if (ab.first < ab.second) links += fmt::format("{}{}<->{} {}", links.empty() ? "" : ", ", ab.first, ab.second,
                                                        nccl() ? "nccl" : on ? "p2p" : "host");
    return fmt::format("transport={}{}", engine_transport_name(mode_), links.empty() ? "" : " (" + links + ")");
}

void cuda_links::send(cuda_device &src, const void *src_ptr, cuda_device &dst, void *dst_ptr, size_t bytes,
                      size_t capacity) {
    TANDEM_ASSERT(bytes <= capacity, "send of {} bytes over a capacity of {}", bytes, capacity);
    if (bytes == 0) return;
    cuda_device::state &s = src.impl(), &d = dst.impl();
    TANDEM_CUDA_CHECK(cudaSetDevice(s.device));
    const way w = route(src, dst);
    if (w == way::nccl) {
#ifdef TANDEM_HAVE_NCCL
        // One group: the send on the sender's stream, the receive on the receiver's; the
        // receiver's later launches follow the receive in its stream.
        auto check = [](ncclResult_t r, const char *what) {
            if (r != ncclSuccess) fail(error_kind::internal, "NCCL {} failed: {}", what, ncclGetErrorString(r));
        };
        const int rs = nccl_rank(s.device), rd = nccl_rank(d.device);
        check(ncclGroupStart(), "group start");
        check(ncclSend(src_ptr, bytes, ncclUint8, rd, static_cast<ncclComm_t>(nccl_comms_[size_t(rs)]), s.stream), "send");
        check(ncclRecv(dst_ptr, bytes, ncclUint8, rs, static_cast<ncclComm_t>(nccl_comms_[size_t(rd)]), d.stream), "recv");
        check(ncclGroupEnd(), "group end");
#endif
    } else if (w == way::host) {
        // Through pinned host memory: one staging buffer per destination buffer. A destination is
        // reused only after the receiver has consumed its previous contents (the engine's order).
        auto it = staging_.find(dst_ptr);
        if (it == staging_.end()) {
            void *p = nullptr;
            TANDEM_CUDA_CHECK(cudaHostAlloc(&p, capacity, cudaHostAllocPortable));
            it = staging_.emplace(dst_ptr, std::make_pair(p, capacity)).first;
        }
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(it->second.first, src_ptr, bytes, cudaMemcpyDeviceToHost, s.stream));
        TANDEM_CUDA_CHECK(cudaEventRecord(s.event, s.stream));
        TANDEM_CUDA_CHECK(cudaSetDevice(d.device));
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(d.stream, s.event, 0));
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst_ptr, it->second.first, bytes, cudaMemcpyHostToDevice, d.stream));
    } else {
        // Peer access is enabled, so unified addressing routes a plain copy over the link (and,
        // unlike cudaMemcpyPeerAsync, it can be captured into a graph).
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst_ptr, src_ptr, bytes, cudaMemcpyDefault, s.stream));
        TANDEM_CUDA_CHECK(cudaEventRecord(s.event, s.stream));
        TANDEM_CUDA_CHECK(cudaSetDevice(d.device));
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(d.stream, s.event, 0));
    }
    bytes_moved_ += bytes;
}

namespace {

// Median milliseconds of `repeats` runs of `copy` on `stream` (one warm-up first).
template <class F>
double median_ms(cudaStream_t stream, int repeats, F copy) {
    cudaEvent_t start = nullptr, stop = nullptr;
    TANDEM_CUDA_CHECK(cudaEventCreate(&start));
    TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
    copy();
    std::vector<float> ms;
    for (int i = 0; i < repeats; ++i) {
        TANDEM_CUDA_CHECK(cudaEventRecord(start, stream));
        copy();
        TANDEM_CUDA_CHECK(cudaEventRecord(stop, stream));
        TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0;
        TANDEM_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace

std::vector<cuda_link_speed> cuda_links_measure(const std::vector<int> &gpus, size_t bytes, int repeats) {
    std::vector<cuda_link_speed> out;
    std::vector<void *> buf(gpus.size(), nullptr);
    std::vector<cudaStream_t> streams(gpus.size(), nullptr);
    for (size_t i = 0; i < gpus.size(); ++i) {
        TANDEM_CUDA_CHECK(cudaSetDevice(gpus[i]));
        TANDEM_CUDA_CHECK(cudaMalloc(&buf[i], bytes));
        TANDEM_CUDA_CHECK(cudaMemset(buf[i], 1, bytes));
        TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    }
    void *host = nullptr;
    TANDEM_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
    for (size_t i = 0; i < gpus.size(); ++i)
        for (size_t j = 0; j < gpus.size(); ++j) {
            if (i == j || gpus[i] == gpus[j]) continue;
            cuda_link_speed sp;
            sp.a = gpus[i];
            sp.b = gpus[j];
            int can = 0;
            TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, sp.a, sp.b));
            TANDEM_CUDA_CHECK(cudaSetDevice(sp.a));
            if (can) {
                const cudaError_t err = cudaDeviceEnablePeerAccess(sp.b, 0);
                if (err == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
                else TANDEM_CUDA_CHECK(err);
                const double ms = median_ms(streams[i], repeats, [&] {
                    TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(buf[j], sp.b, buf[i], sp.a, bytes, streams[i]));
                });
                sp.p2p_gb_s = double(bytes) / (ms * 1e6);
            }
            const double ms = median_ms(streams[i], repeats, [&] {
                TANDEM_CUDA_CHECK(cudaMemcpyAsync(host, buf[i], bytes, cudaMemcpyDeviceToHost, streams[i]));
                TANDEM_CUDA_CHECK(cudaMemcpyAsync(buf[j], host, bytes, cudaMemcpyHostToDevice, streams[i]));
            });
            sp.host_gb_s = double(bytes) / (ms * 1e6);
            out.push_back(sp);
        }
    cudaFreeHost(host);
    for (size_t i = 0; i < gpus.size(); ++i) {
        cudaSetDevice(gpus[i]);
        cudaFree(buf[i]);
        cudaStreamDestroy(streams[i]);
    }
    return out;
}

cuda_memory_speed cuda_memory_measure(int gpu, size_t bytes, int repeats) {
    cuda_memory_speed sp;
    sp.gpu = gpu;
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, gpu) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, gpu) != cudaSuccess) {
        cudaGetLastError();
        clock_khz = bus_bits = 0;
    }
    sp.peak_gb_s = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;
    TANDEM_CUDA_CHECK(cudaSetDevice(gpu));
    void *src = nullptr, *dst = nullptr;
    cudaStream_t stream = nullptr;
    TANDEM_CUDA_CHECK(cudaMalloc(&src, bytes));
    TANDEM_CUDA_CHECK(cudaMalloc(&dst, bytes));
    TANDEM_CUDA_CHECK(cudaMemset(src, 1, bytes));
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double ms = median_ms(stream, repeats, [&] {
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    sp.copy_gb_s = 2.0 * double(bytes) / (ms * 1e6);
    cudaFree(src);
    cudaFree(dst);
    cudaStreamDestroy(stream);
    return sp;
}

}  // namespace tandem
