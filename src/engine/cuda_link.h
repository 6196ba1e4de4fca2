// src/engine/cuda_link.h - moving activations between the logical CUDA devices of a plan:
// peer-to-peer copies where two GPUs have peer access, a plain device copy when two logical
// devices share a GPU, and staged copies through pinned host memory otherwise (or everywhere
// with --transport host, the validated fallback). --transport nccl sends between GPUs with NCCL
// point-to-point calls on communicators created for all GPUs of the plan in this one process. Each send is ordered after the sender's work
// and before the receiver's next launch by an event; nothing blocks the host.
#pragma once

#include "cuda_device.h"
#include "tandem/engine.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

// Throws unsupported for a transport this build cannot make (nccl without NCCL).
void cuda_transport_check(engine_transport transport);

// Measured copy bandwidth between two GPUs (each direction): peer-to-peer when the pair has
// peer access, and through pinned host memory; `bytes` per copy, median of `repeats` after a
// warm-up, timed with CUDA events. For `tandem plan --measure-links`.
struct cuda_link_speed {
    int a = 0, b = 0;
    double p2p_gb_s = 0;   // 0: no peer access
    double host_gb_s = 0;  // device -> pinned host -> device
};
std::vector<cuda_link_speed> cuda_links_measure(const std::vector<int> &gpus, size_t bytes, int repeats);

// A GPU's memory bandwidth, the roof of a memory-bound step: the peak from its memory clock and
// bus width (two transfers a clock), and a device-to-device copy of `bytes` (bytes read plus bytes
// written a second; median of `repeats` after a warm-up).
struct cuda_memory_speed {
    int gpu = 0;
    double peak_gb_s = 0;  // 0 when the device does not report its memory clock
    double copy_gb_s = 0;
};
cuda_memory_speed cuda_memory_measure(int gpu, size_t bytes, int repeats);

class cuda_links {
public:
    cuda_links(const std::vector<std::unique_ptr<cuda_device>> &devices, engine_transport mode);
    ~cuda_links();
    cuda_links(const cuda_links &) = delete;
    cuda_links &operator=(const cuda_links &) = delete;

    // Copies bytes from src's buffer to dst's buffer after everything enqueued on src so far;
    // dst's later launches wait for it. `capacity` bounds every send to this dst_ptr (the
    // staging buffer of the host path is sized by it once).
    void send(cuda_device &src, const void *src_ptr, cuda_device &dst, void *dst_ptr, size_t bytes, size_t capacity);

    // How the two logical devices exchange data: "same-gpu", "p2p", "host" or "nccl".
    const char *path(const cuda_device &a, const cuda_device &b) const;
    // Whether any two of the devices exchange data through host memory.
    bool staged(const std::vector<std::unique_ptr<cuda_device>> &devices) const;
    bool nccl() const { return mode_ == engine_transport::nccl; }
    uint64_t bytes_moved() const { return bytes_moved_; }
    void reset_counters() { bytes_moved_ = 0; }
    std::string describe() const;  // e.g. "transport=p2p (0<->1 p2p)"

private:
    bool peer(int a, int b) const;

    int nccl_rank(int physical) const;
    enum class way { same_gpu, p2p, host, nccl };
    way route(const cuda_device &a, const cuda_device &b) const;

    engine_transport mode_;
    std::vector<int> nccl_gpus_;     // physical ids, rank order
    std::vector<void *> nccl_comms_; // ncclComm_t per rank
    std::map<std::pair<int, int>, bool> peer_;  // physical pairs with peer access enabled
    std::map<void *, std::pair<void *, size_t>> staging_;  // dst_ptr -> pinned buffer, bytes
    uint64_t bytes_moved_ = 0;
};

}  // namespace tandem
