// tests/unit/placement/test_plan_cli.cpp - `tandem plan` end to end on the tiny synthetic model:
// JSON and text agree, CPU virtual devices, topology files, traffic files, exit codes of errors.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct run_result {
    int code = -1;
    std::string out, err;
};

// Runs the tandem binary with `args`; stdout is captured, stderr goes through a file.
run_result run_tandem(const std::string &args) {
    const std::string err_path = std::string(TANDEM_BINARY_DIR) + "/test_plan_cli.stderr";
    const std::string cmd = std::string(TANDEM_BINARY_DIR) + "/tandem " + args + " 2>" + err_path;
    run_result r;
    FILE *pipe = popen(cmd.c_str(), "r");
    REQUIRE(pipe != nullptr);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
    const int status = pclose(pipe);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(err_path);
    std::stringstream ss;
    ss << in.rdbuf();
    r.err = ss.str();
    return r;
}

const std::string &tiny_model() {
    static const std::string path = [] {
        const std::string p = std::string(TANDEM_BINARY_DIR) + "/test_plan_cli_tiny.gguf";
        const run_result r = run_tandem("synth --preset tiny --seed 1 --threads 1 --out " + p);
        INFO(r.err);
        REQUIRE(r.code == 0);
        return p;
    }();
    return path;
}

std::string topo(const char *name) { return std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/topologies/" + name; }

}  // namespace

TEST_CASE("tandem plan: CPU virtual devices with pairs, JSON and text agree", "[placement][cli]") {
    const std::string base = "plan -m " + tiny_model() + " --backend cpu --devices 4 --tensor-parallel --ctx 256 "
                             "--batched-session 2 --scratch-mib 8";
    const run_result js = run_tandem(base + " --json");
    INFO(js.err);
    REQUIRE(js.code == 0);
    const nlohmann::json j = nlohmann::json::parse(js.out);
    CHECK(j["mode"] == "tp");
    CHECK(j["n_stages"] == 2);
    CHECK(j["n_ctx"] == 256);
    CHECK(j["n_sessions"] == 2);
    REQUIRE(j["devices"].size() == 4);
    CHECK(j["devices"][0]["embedding"] == true);
    CHECK(j["devices"][3]["head_end"] == j["n_vocab"]);
    const run_result text = run_tandem(base);
    REQUIRE(text.code == 0);
    CHECK(text.out.substr(0, text.out.find('\n')) == j["layout"].get<std::string>());

    // Four logical devices on one virtual device: one budget split four ways.
    const run_result shared = run_tandem("plan -m " + tiny_model() + " --backend cpu --gpu-devices 0,0,0,0 "
                                         "--tensor-parallel --ctx 256 --batched-session 2 --scratch-mib 8 --json");
    INFO(shared.err);
    REQUIRE(shared.code == 0);
    const nlohmann::json s = nlohmann::json::parse(shared.out);
    REQUIRE(s["devices"].size() == 4);
    for (const auto &d : s["devices"]) {
        CHECK(d["physical"] == 0);
        CHECK(d["budget"] == s["devices"][0]["budget"]);
    }
}

// deepseek2 caches the latent (kv_lora_rank) and the roped key (rope dims) of each token and layer,
// nothing per head: tiny-deepseek-v3 has kv_lora_rank 256 and 32 rope dims (nine q8_0 blocks).
TEST_CASE("tandem plan prices deepseek2's latent cache on every device of a plan", "[placement][cli][deepseek2]") {
    const std::string model = std::string(TANDEM_BINARY_DIR) + "/test_plan_cli_tiny_deepseek_v3.gguf";
    const run_result made = run_tandem("synth --preset tiny-deepseek-v3 --seed 1 --threads 1 --out " + model);
    INFO(made.err);
    REQUIRE(made.code == 0);
    struct kv_case { const char *kv_type; uint64_t row_bytes; const char *devices; };  // a token's row of one layer
    const kv_case c = GENERATE(values<kv_case>({{"f32", 288 * 4, "--devices 2"}, {"f16", 288 * 2, "--devices 4 --tensor-parallel"},
                                                {"q8_0", 288 / 32 * 34, "--devices 2"}}));
    const int64_t n_sessions = 3, n_ctx = 320;
    const run_result r = run_tandem("plan -m " + model + " --backend cpu " + c.devices + " --kv-type " + c.kv_type +
                                    " --ctx " + std::to_string(n_ctx) + " --batched-session " +
                                    std::to_string(n_sessions) + " --scratch-mib 8 --json");
    INFO(c.kv_type << " " << c.devices << "\n" << r.err);
    REQUIRE(r.code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    int64_t layers_seen = 0;
    for (const auto &d : j["devices"]) {
        const int64_t n_layers = d["layer_end"].get<int64_t>() - d["layer_begin"].get<int64_t>();
        layers_seen += n_layers;
        CHECK(d["bytes"]["kv"].get<uint64_t>() == uint64_t(n_layers) * c.row_bytes * n_sessions * n_ctx);
    }
    // Each layer lives on one device of a stage, or on both of a pair.
    CHECK(layers_seen == j["n_layer"].get<int64_t>() * (j["mode"] == "tp" ? 2 : 1));
}

TEST_CASE("tandem plan: topology files, traffic files and configuration errors", "[placement][cli]") {
    const std::string m = "plan -m " + tiny_model() + " ";
    const run_result ok = run_tandem(m + "--topology " + topo("l40s-8-pairs.json") + " --gpu-devices auto --tensor-parallel --json");
    INFO(ok.err);
    REQUIRE(ok.code == 0);
    const nlohmann::json j = nlohmann::json::parse(ok.out);
    std::vector<int> physical;
    for (const auto &d : j["devices"]) physical.push_back(d["physical"]);
    // The tiny model has 4 layers: 4 pairs fit, one layer each.
    CHECK(physical == std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7});

    const run_result bad_pair = run_tandem(m + "--topology " + topo("l40s-8-pairs.json") + " --gpu-devices 0,1,2,3 --tensor-parallel");
    CHECK(bad_pair.code == 2);
    CHECK(bad_pair.err.find("--gpu-devices 0,2,1,3") != std::string::npos);
    const run_result odd = run_tandem(m + "--backend cpu --devices 3 --tensor-parallel");
    CHECK(odd.code == 2);
    CHECK(odd.err.find("even") != std::string::npos);
    const run_result vram = run_tandem(m + "--backend cpu --devices 2 --gpu-vram 1,2,3");
    CHECK(vram.code == 2);
    CHECK(vram.err.find("3 values") != std::string::npos);
    const run_result small = run_tandem(m + "--backend cpu --gpu-vram 0.01");
    CHECK(small.code == 2);
    CHECK(small.err.find("GiB missing") != std::string::npos);

    // Traffic: tiny has 4 layers x 8 experts; a file of another shape is refused.
    const std::string good = std::string(TANDEM_BINARY_DIR) + "/test_plan_cli_traffic.json";
    std::ofstream(good) << R"({"n_layer": 4, "n_expert": 8, "counts": [[9,1,1,1,1,1,1,1],[1,2,3,4,5,6,7,8],
                             [0,0,0,0,0,0,0,0],[5,5,5,5,5,5,5,5]]})";
    const run_result traffic = run_tandem(m + "--backend cpu --devices 2 --tensor-parallel --json --expert-balance " + good);
    INFO(traffic.err);
    REQUIRE(traffic.code == 0);
    CHECK(nlohmann::json::parse(traffic.out)["traffic_balanced"] == true);
    const std::string wrong = std::string(TANDEM_BINARY_DIR) + "/test_plan_cli_traffic_wrong.json";
    std::ofstream(wrong) << R"({"counts": [[1,2,3]]})";
    const run_result mismatch = run_tandem(m + "--backend cpu --devices 2 --tensor-parallel --expert-balance " + wrong);
    CHECK(mismatch.code == 2);
    CHECK(mismatch.err.find("1 layers x 3 experts") != std::string::npos);
#ifndef TANDEM_HAVE_CUDA
    const run_result no_probe = run_tandem(m + "--backend cuda");
    CHECK(no_probe.code == 2);
    CHECK(no_probe.err.find("--topology") != std::string::npos);
#endif
}

TEST_CASE("tandem plan: a host tier for experts the devices cannot hold", "[placement][cli][tiers]") {
    // tiny at 2 sessions of 256 with 8 MiB of scratch needs ~13.1 MiB, 3.4 MiB of it routed experts:
    // a budget of 11.5 MiB keeps about half of them.
    const std::string m = "plan -m " + tiny_model() + " --backend cpu --ctx 256 --batched-session 2 --scratch-mib 8 "
                          "--gpu-vram 0.0112 ";
    const run_result js = run_tandem(m + "--host-experts auto --json");
    INFO(js.err);
    REQUIRE(js.code == 0);
    const nlohmann::json j = nlohmann::json::parse(js.out);
    const auto &tier = j["host_tier"];
    CHECK(tier["bytes"].get<uint64_t>() > 0);
    CHECK(tier["bytes"].get<uint64_t>() <= tier["budget"].get<uint64_t>());
    REQUIRE(tier["experts"].size() == 4);
    for (size_t l = 0; l < 4; ++l) {
        // Every expert of a layer on the device or in the host tier, never both.
        std::vector<int> all = j["devices"][0]["experts"][l].get<std::vector<int>>();
        for (int e : tier["experts"][l]) all.push_back(e);
        std::sort(all.begin(), all.end());
        CHECK(all == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
    }
    CHECK(j["devices"][0]["bytes"]["total"].get<uint64_t>() <= j["devices"][0]["budget"].get<uint64_t>());
    CHECK(j["prediction"]["tok_s"].get<double>() > 0.0);

    const run_result text = run_tandem(m + "--host-experts auto");
    CHECK(text.code == 0);
    CHECK(text.out.find("layer stage gpu experts") != std::string::npos);
    CHECK(text.out.find("predicted decode, one session") != std::string::npos);

    const run_result off = run_tandem(m);
    CHECK(off.code == 2);
    CHECK(off.err.find("--host-experts") != std::string::npos);
    const run_result small = run_tandem(m + "--host-experts 0.0001");
    CHECK(small.code == 2);
    CHECK(small.err.find("even with the host tier") != std::string::npos);
    const run_result bad = run_tandem(m + "--host-experts lots");
    CHECK(bad.code == 2);
    CHECK(bad.err.find("expected off, auto or a number") != std::string::npos);

    // Three GPUs without P2P: auto makes pipeline stages (hand-offs staged through the host), and
    // the prediction takes the file's figures.
    const run_result pcie = run_tandem("plan -m " + tiny_model() + " --topology " + topo("pcie-3x24.json") +
                                       " --gpu-devices auto --host-experts auto --json");
    INFO(pcie.err);
    REQUIRE(pcie.code == 0);
    const nlohmann::json p = nlohmann::json::parse(pcie.out);
    CHECK(p["mode"] == "pipeline");
    CHECK(p["n_stages"] == 3);
    CHECK(p["host_tier"]["bytes"] == 0);  // tiny fits: the tier stays empty
    CHECK(p["host_tier"]["budget"].get<uint64_t>() == uint64_t(120) << 30);
    CHECK(p["prediction"]["default_figures"] == false);
    CHECK(p["prediction"]["cpu_gbps"] == 60.0);
}

TEST_CASE("tandem plan --hosts: a line per host, the link, and refusals naming host and device", "[placement][cli][hosts]") {
    const std::string base = "plan -m " + tiny_model() + " --ctx 256 --batched-session 2 --scratch-mib 8";
    const run_result r = run_tandem(base + " --backend cpu --hosts a:2,b:2 --tensor-parallel --host-link 5,80");
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("[d0@a:0 ") != std::string::npos);
    CHECK(r.out.find("host a (front, rank 0): devices d0@0,d2@1 stages 0-0") != std::string::npos);
    CHECK(r.out.find("host b (worker, rank 1): devices d1@0,d3@1 stages 1-1") != std::string::npos);
    CHECK(r.out.find("host link: 5.00 GB/s, 80 us (given)") != std::string::npos);

    const run_result js = run_tandem(base + " --backend cpu --hosts a:1,b:1 --json");
    REQUIRE(js.code == 0);
    const auto j = nlohmann::json::parse(js.out);
    CHECK(j["hosts"].size() == 2);
    CHECK(j["devices"][1]["host"] == 1);
    CHECK(j["host_link"]["source"] == "default");

    // Host b's GPU budget holds neither scratch nor the head.
    const run_result small = run_tandem("plan -m " + tiny_model() + " --ctx 256 --batched-session 2 --topology " +
                                        topo("h200-8-nvlink.json") + " --hosts a:1,b:1 --gpu-devices 0,0 --gpu-vram 100,0.001");
    INFO(small.err);
    CHECK(small.code == 2);
    CHECK(small.err.find("host 'b' device d1") != std::string::npos);
    const run_result odd = run_tandem(base + " --backend cpu --hosts a:1,b:1 --tensor-parallel");
    CHECK(odd.code == 2);
    CHECK(odd.err.find("host 'a' has 1 devices; pairs never span hosts") != std::string::npos);
    const run_result both = run_tandem(base + " --backend cpu --hosts a:1 --hosts-file x.json");
    CHECK(both.code == 2);
}
