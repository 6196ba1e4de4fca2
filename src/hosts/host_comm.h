// src/hosts/host_comm.h - the processes of a run over several hosts (one each, started together by
// mpirun; rank 0 is the front) and the byte messages between them. Every wait has a deadline, so a
// host that dies or stalls becomes an error naming it, never a hang.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

// What a message carries; messages of one tag from one rank arrive in the order they were sent.
enum class host_tag : int32_t { config = 1, ready = 2, command = 3, activations = 4, logits = 5, kv = 6, ping = 7, alive = 8 };

class host_comm {
public:
    // This process's place in the run (MPI initialised on first use). Throws config when the build
    // has no MPI.
    static host_comm &world();
    static bool available();  // this build has MPI
    ~host_comm();

    int32_t rank() const { return rank_; }
    int32_t size() const { return size_; }
    // Host names by rank, for errors ("host 'b' (rank 1) ..."); set by the engine from its plan.
    void set_names(std::vector<std::string> names);
    std::string who(int32_t rank) const;

    // Starts sending a copy of `bytes` to rank `to` and returns at once; flush() completes them.
    void send(int32_t to, host_tag tag, std::span<const uint8_t> bytes);
    // Waits until every send has completed, at most timeout_s; throws error(unavailable) naming the
    // rank that did not take its message (and marks it lost).
    void flush(double timeout_s);
    // One message from rank `from` with `tag` (any size); timeout_s <= 0 waits without limit.
    // Throws error(unavailable) naming the rank when it is silent for timeout_s (and marks it lost):
    // each heartbeat from it starts the time again, so a long step is not a lost host.
    std::vector<uint8_t> recv(int32_t from, host_tag tag, double timeout_s);
    // While a step runs, a thread sends a heartbeat to each of `to` every period_s (a process that
    // is stopped or dead sends none); end stops it. Without MPI_THREAD_MULTIPLE there are none.
    void heartbeat_begin(std::vector<int32_t> to, double period_s);
    void heartbeat_end();

    // Ranks that missed a deadline, with why; thread-safe (HTTP threads read it for /health).
    void mark_lost(int32_t rank, const std::string &why);
    std::vector<std::pair<int32_t, std::string>> lost() const;
    // MPI_Finalize, skipped when a rank was lost (finalising waits for every rank).
    void finalize();

private:
    host_comm();
    struct pending;
    int32_t rank_ = 0, size_ = 1;
    std::vector<std::unique_ptr<pending>> pending_;
    std::vector<std::string> names_;
    mutable std::mutex lost_mu_;
    std::vector<std::pair<int32_t, std::string>> lost_;
    bool finalized_ = false;
    bool threads_ = false;  // MPI_THREAD_MULTIPLE: a heartbeat thread may send beside the engine's
    std::thread beat_;
    std::mutex beat_mu_;
    std::condition_variable beat_cv_;
    bool beat_stop_ = false;
};

}  // namespace tandem
