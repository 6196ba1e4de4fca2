// src/hosts/host_comm_mpi.cpp - host_comm on MPI: nonblocking sends and probes polled against a
// deadline, errors returned rather than fatal, so the front outlives a worker that dies.
#include "host_comm.h"

#include "tandem/error.h"
#include "tandem/log.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

namespace tandem {

struct host_comm::pending {
    int32_t to = 0;
    std::vector<uint8_t> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
};

namespace {

using clock_type = std::chrono::steady_clock;

// Polls without sleeping for the first spins (a stage hand-off usually arrives within microseconds),
// then yields the core in 50 us naps so a waiting process does not steal a busy one's core.
void nap(int64_t &spins) {
    if (++spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

bool past(clock_type::time_point deadline, double timeout_s) {
    return timeout_s > 0.0 && clock_type::now() > deadline;
}

clock_type::time_point deadline_of(double timeout_s) {
    return clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                   std::chrono::duration<double>(timeout_s > 0.0 ? timeout_s : 0.0));
}

}  // namespace

host_comm::host_comm() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
        int provided = 0;
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
        if (provided < MPI_THREAD_SERIALIZED)
            fail(error_kind::unsupported, "this MPI library serialises no threads (level {}); Tandem's engine thread "
                 "needs MPI_THREAD_SERIALIZED", provided);
    }
    int level = 0;
    MPI_Query_thread(&level);
    threads_ = level >= MPI_THREAD_MULTIPLE;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

host_comm::~host_comm() { heartbeat_end(); }

void host_comm::heartbeat_begin(std::vector<int32_t> to, double period_s) {
    heartbeat_end();
    if (!threads_ || to.empty()) return;
    beat_stop_ = false;
    const auto period = std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(period_s));
    beat_ = std::thread([this, to = std::move(to), period] {
        std::unique_lock lock(beat_mu_);
        while (!beat_cv_.wait_for(lock, period, [this] { return beat_stop_; }))
            for (int32_t r : to) {
                // Never waits: a stalled peer's buffers may be full; MPI completes or drops it.
                MPI_Request q;
                if (MPI_Isend(nullptr, 0, MPI_BYTE, r, int(host_tag::alive), MPI_COMM_WORLD, &q) == MPI_SUCCESS)
                    MPI_Request_free(&q);
            }
    });
}

void host_comm::heartbeat_end() {
    if (!beat_.joinable()) return;
    {
        std::lock_guard lock(beat_mu_);
        beat_stop_ = true;
    }
    beat_cv_.notify_all();
    beat_.join();
}

bool host_comm::available() { return true; }

host_comm &host_comm::world() {
    static host_comm *comm = [] {
        auto *c = new host_comm();  // lives until exit: finalize() runs from atexit
        std::atexit([] { world().finalize(); });
        return c;
    }();
    return *comm;
}

void host_comm::send(int32_t to, host_tag tag, std::span<const uint8_t> bytes) {
    TANDEM_ASSERT(bytes.size() <= size_t(INT_MAX), "message of {} bytes", bytes.size());
    auto p = std::make_unique<pending>();
    p->to = to;
    p->bytes.assign(bytes.begin(), bytes.end());
    if (MPI_Isend(p->bytes.data(), int(p->bytes.size()), MPI_BYTE, to, int(tag), MPI_COMM_WORLD, &p->request) != MPI_SUCCESS) {
        mark_lost(to, "a send failed");
        fail(error_kind::unavailable, "{}: a send failed", who(to));
    }
    pending_.push_back(std::move(p));
}

void host_comm::flush(double timeout_s) {
    const auto deadline = deadline_of(timeout_s);
    int64_t spins = 0;
    while (!pending_.empty()) {
        pending &p = *pending_.front();
        int done = 0;
        const bool ok = MPI_Test(&p.request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS;
        if (ok && done) {
            pending_.erase(pending_.begin());
            continue;
        }
        if (!ok || past(deadline, timeout_s)) {
            const int32_t to = p.to;
            // The request stays with its buffer: MPI may still write from it.
            std::vector<std::unique_ptr<pending>> stuck = std::move(pending_);
            pending_.clear();
            static std::vector<std::unique_ptr<pending>> abandoned;
            for (auto &s : stuck) abandoned.push_back(std::move(s));
            const std::string why = ok ? fmt::format("did not take a message within {:.1f} s", timeout_s) : "a send failed";
            mark_lost(to, why);
            fail(error_kind::unavailable, "{} {}", who(to), why);
        }
        nap(spins);
    }
}

std::vector<uint8_t> host_comm::recv(int32_t from, host_tag tag, double timeout_s) {
    auto deadline = deadline_of(timeout_s);
    int64_t spins = 0;
    MPI_Status status;
    while (true) {
        int found = 0;
        if (MPI_Iprobe(from, int(tag), MPI_COMM_WORLD, &found, &status) != MPI_SUCCESS) {
            mark_lost(from, "its connection failed");
            fail(error_kind::unavailable, "{}: its connection failed", who(from));
        }
        if (found) break;
        for (int beat = 1; beat;) {  // heartbeats from `from`: it is alive and working
            MPI_Iprobe(from, int(host_tag::alive), MPI_COMM_WORLD, &beat, MPI_STATUS_IGNORE);
            if (beat) {
                MPI_Recv(nullptr, 0, MPI_BYTE, from, int(host_tag::alive), MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                deadline = deadline_of(timeout_s);
            }
        }
        if (past(deadline, timeout_s)) {
            const std::string why = fmt::format("sent nothing within {:.1f} s", timeout_s);
            mark_lost(from, why);
            fail(error_kind::unavailable, "{} {}", who(from), why);
        }
        nap(spins);
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<uint8_t> bytes(static_cast<size_t>(count));
    if (MPI_Recv(bytes.data(), count, MPI_BYTE, from, int(tag), MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        mark_lost(from, "a receive failed");
        fail(error_kind::unavailable, "{}: a receive failed", who(from));
    }
    return bytes;
}

void host_comm::set_names(std::vector<std::string> names) { names_ = std::move(names); }

std::string host_comm::who(int32_t rank) const {
    return rank >= 0 && size_t(rank) < names_.size() ? fmt::format("host '{}' (rank {})", names_[size_t(rank)], rank)
                                                     : fmt::format("host rank {}", rank);
}

void host_comm::mark_lost(int32_t rank, const std::string &why) {
    std::lock_guard lock(lost_mu_);
    for (const auto &l : lost_)
        if (l.first == rank) return;
    log_error("{} lost: {}", who(rank), why);
    lost_.emplace_back(rank, why);
}

std::vector<std::pair<int32_t, std::string>> host_comm::lost() const {
    std::lock_guard lock(lost_mu_);
    return lost_;
}

void host_comm::finalize() {
    if (finalized_) return;
    finalized_ = true;
    int done = 0;
    MPI_Finalized(&done);
    if (done || !lost().empty()) return;
    MPI_Finalize();
}

}  // namespace tandem
