// src/engine/cuda_link.cpp - the transfers between logical CUDA devices (see cuda_link.h).
#include "cuda_link.h"

#include "cuda/cuda_check.h"
#include "cuda_device_state.h"
#include "tandem/error.h"

#include <fmt/format.h>

#include <set>

namespace tandem {

cuda_transport cuda_transport_parse(const std::string &name) {
    if (name == "auto") return cuda_transport::automatic;
    if (name == "p2p") return cuda_transport::p2p;
    if (name == "host") return cuda_transport::host;
    fail(error_kind::config, "--transport '{}': expected auto, p2p or host", name);
}

const char *cuda_transport_name(cuda_transport t) {
    switch (t) {
    case cuda_transport::automatic: return "auto";
    case cuda_transport::p2p: return "p2p";
    case cuda_transport::host: return "host";
    }
    return "?";
}

cuda_links::cuda_links(const std::vector<std::unique_ptr<cuda_device>> &devices, cuda_transport mode) : mode_(mode) {
    std::set<int> physical;
    for (const auto &d : devices) physical.insert(d->physical());
    for (int a : physical)
        for (int b : physical) {
            if (a == b) continue;
            int can = 0;
            TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
            if (mode_ == cuda_transport::p2p && !can)
                fail(error_kind::config, "--transport p2p: GPU {} cannot access GPU {} peer-to-peer (use --transport auto)",
                     a, b);
            if (can && mode_ != cuda_transport::host) {
                TANDEM_CUDA_CHECK(cudaSetDevice(a));
                const cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
                if (err == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
                else TANDEM_CUDA_CHECK(err);
            }
            peer_[{a, b}] = can && mode_ != cuda_transport::host;
        }
}

cuda_links::~cuda_links() {
    for (auto &[dst, buf] : staging_) cudaFreeHost(buf.first);
}

bool cuda_links::staged(const std::vector<std::unique_ptr<cuda_device>> &devices) const {
    for (const auto &a : devices)
        for (const auto &b : devices)
            if (a != b && std::string(path(*a, *b)) == "host") return true;
    return false;
}

bool cuda_links::peer(int a, int b) const {
    auto it = peer_.find({a, b});
    return it != peer_.end() && it->second;
}

const char *cuda_links::path(const cuda_device &a, const cuda_device &b) const {
    if (a.physical() == b.physical()) return mode_ == cuda_transport::host ? "host" : "same-gpu";
    return peer(a.physical(), b.physical()) ? "p2p" : "host";
}

std::string cuda_links::describe() const {
    std::string links;
    for (const auto &[ab, on] : peer_)
        if (ab.first < ab.second) links += fmt::format("{}{}<->{} {}", links.empty() ? "" : ", ", ab.first, ab.second,
                                                        on ? "p2p" : "host");
    return fmt::format("transport={}{}", cuda_transport_name(mode_), links.empty() ? "" : " (" + links + ")");
}

void cuda_links::send(cuda_device &src, const void *src_ptr, cuda_device &dst, void *dst_ptr, size_t bytes,
                      size_t capacity) {
    TANDEM_ASSERT(bytes <= capacity, "send of {} bytes over a capacity of {}", bytes, capacity);
    if (bytes == 0) return;
    cuda_device::state &s = src.impl(), &d = dst.impl();
    TANDEM_CUDA_CHECK(cudaSetDevice(s.device));
    const std::string way = path(src, dst);
    if (way == "host") {
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

}  // namespace tandem
