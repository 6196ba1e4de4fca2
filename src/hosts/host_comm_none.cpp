// src/hosts/host_comm_none.cpp - a build without MPI: running over several hosts is refused.
#include "host_comm.h"

#include "tandem/error.h"

namespace tandem {

struct host_comm::pending {};

host_comm::host_comm() = default;
host_comm::~host_comm() = default;

bool host_comm::available() { return false; }

host_comm &host_comm::world() {
    fail(error_kind::config, "this build has no MPI, so it cannot run over several hosts: install Open MPI "
         "(apt-get install libopenmpi-dev openmpi-bin) and build again");
}

void host_comm::send(int32_t, host_tag, std::span<const uint8_t>) {}
void host_comm::flush(double) {}
void host_comm::heartbeat_begin(std::vector<int32_t>, double) {}
void host_comm::heartbeat_end() {}
std::vector<uint8_t> host_comm::recv(int32_t, host_tag, double) { return {}; }
void host_comm::mark_lost(int32_t, const std::string &) {}
void host_comm::set_names(std::vector<std::string>) {}
std::string host_comm::who(int32_t rank) const { return std::to_string(rank); }
std::vector<std::pair<int32_t, std::string>> host_comm::lost() const { return {}; }
void host_comm::finalize() {}

}  // namespace tandem
