// src/tools/cmd_worker.cpp - `tandem worker`: a later process of an mpirun that started tandem-server
// with --hosts; it runs its host's pipeline stages until the server stops.
#include "commands.h"

#include "tandem/engine.h"

#include <memory>
#include <string>

namespace {

struct worker_cli {
    std::string model;  // empty: the server's path
    int32_t n_threads = 0;
};

}  // namespace

TANDEM_COMMAND(worker, "Run this host's stages for a tandem-server started with --hosts (under mpirun)", [](CLI::App &sub) {
    auto cli = std::make_shared<worker_cli>();
    sub.add_option("-m,--model", cli->model, "GGUF file on this host (default: the server's path; the sizes must match)");
    sub.add_option("-t,--threads", cli->n_threads, "CPU threads (default: all cores)");
    return [cli] { return tandem::engine_worker_run(cli->model, cli->n_threads); };
});
