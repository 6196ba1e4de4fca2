// tests/hosts/test_hosts_mpi.cpp - the CPU engine over two processes under mpirun (rank 0 runs the
// cases, rank 1 is the worker): decode logits, KV moves and truncation bitwise equal to one process.
#define CATCH_CONFIG_RUNNER
#include "../model/model_test_util.h"

#include "src/hosts/host_comm.h"
#include "tandem/error.h"
#include "tandem/sampler.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <random>

using namespace tandem;
using namespace tandem::test;

namespace {

struct hosts_case {
    std::string hosts;  // empty: one process
    int32_t devices = 1;
    bool tensor_parallel = false;
    int32_t micro_batches = 0;
};

std::unique_ptr<engine> open(const std::string &model, const hosts_case &c) {
    engine_options opt;
    opt.n_slots = 4;
    opt.n_ctx = 128;
    opt.n_threads = 1;
    opt.n_devices = c.devices;
    opt.tensor_parallel = c.tensor_parallel;
    opt.micro_batches = c.micro_batches;
    opt.hosts = c.hosts;
    opt.host_link = c.hosts.empty() ? "" : "10,50";  // skip the start-up measurement
    opt.host_timeout_s = 20.0;
    return engine_open(gguf_file::open(model), opt);
}

// Three sessions prefilled together (lengths 7, 1, 23), six decode steps of all three, then slot 2's
// K/V exported, imported into slot 3 and a copy of slot 0 made in place of slot 1 cut back, and two
// more steps over all four. Every logits vector and the blob, in order.
std::vector<std::vector<float>> run_sessions(engine &eng, uint32_t seed) {
    std::mt19937 rng(seed);
    const int32_t nv = eng.hparams().n_vocab;
    std::vector<engine_row> rows;
    const int lengths[3] = {7, 1, 23};
    for (int32_t s = 0; s < 3; ++s)
        for (int32_t i = 0; i < lengths[s]; ++i)
            rows.push_back({s, i, int32_t(rng() % uint32_t(nv)), logits_if(i + 1 == lengths[s])});
    std::vector<std::vector<float>> out;
    std::vector<float> logits;
    engine_forward_logits(eng, rows, logits);
    out.push_back(logits);
    auto step = [&](int32_t n_sessions) {
        rows.clear();
        for (int32_t s = 0; s < n_sessions; ++s) {
            const int32_t next = argmax({logits.data() + size_t(s % 3) * size_t(nv), size_t(nv)});
            rows.push_back({s, eng.slot_length(s), next, row_output::logits});
        }
        engine_forward_logits(eng, rows, logits);
        out.push_back(logits);
    };
    for (int i = 0; i < 6; ++i) step(3);
    const std::vector<uint8_t> blob = slot_blob(eng, 2);
    out.emplace_back(blob.size() / sizeof(float));
    std::memcpy(out.back().data(), blob.data(), out.back().size() * sizeof(float));
    eng.slot_import(3, blob);
    eng.slot_truncate(1, 1);
    eng.slot_copy(0, 1, eng.slot_length(0) - 2);
    std::vector<float> last(logits.begin(), logits.begin() + 3 * nv);
    logits = last;
    for (int i = 0; i < 2; ++i) step(4);
    return out;
}

}  // namespace

TEST_CASE("two processes give bitwise the logits and K/V of one process", "[hosts][mpi]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    auto single = open(model, {});
    const auto want = run_sessions(*single, 11);
    const hosts_case c = GENERATE(values<hosts_case>({{"a:1,b:1", 1, false, 0},
                                                      {"a:2,b:1", 1, false, 3},
                                                      {"a:1,b:2", 1, false, 1},
                                                      {"a:2,b:2", 1, true, 0}}));
    INFO("--hosts " << c.hosts << (c.tensor_parallel ? " --tensor-parallel" : "") << " micro-batches " << c.micro_batches);
    auto eng = open(model, c);
    REQUIRE(eng->layout().find("@b:") != std::string::npos);  // the plan spans both processes
    const auto got = run_sessions(*eng, 11);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        INFO("output " << i);
        REQUIRE(got[i].size() == want[i].size());
        CHECK(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)) == 0);
    }
    CHECK(eng->lost_hosts().empty());
}

TEST_CASE("bad host lists are refused before anything is sent", "[hosts][mpi]") {
    const std::string model = synth_gguf("tiny", ggml_type::q4_k, 4);
    CHECK_THROWS_WITH(open(model, {"a:1,b:1,c:1"}), Catch::Contains("the run has 2 processes but the hosts list names 3"));
    CHECK_THROWS_WITH(open(model, {"a:1,b:1", 1, true}), Catch::Contains("host 'a' has 1 devices; pairs never span hosts"));
}

// Rank 0 runs the cases; the others serve engine after engine until rank 0 sends an empty configuration.
int main(int argc, char **argv) {
    if (!host_comm::available()) {
        std::puts("SKIPPED: this build has no MPI");
        return TANDEM_SKIP_RETURN_CODE;
    }
    host_comm &comm = host_comm::world();
    if (comm.size() != 2) {
        std::fprintf(stderr, "run under mpirun -np 2 (got %d processes)\n", comm.size());
        return 2;
    }
    if (comm.rank() != 0) return engine_worker_run("", 1, true);
    const int rc = Catch::Session().run(argc, argv);
    comm.send(1, host_tag::config, {});
    comm.flush(30.0);
    return rc;
}
