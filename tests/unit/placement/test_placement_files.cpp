// tests/unit/placement/test_placement_files.cpp - topology and expert-traffic files, flag parsing,
// CPU virtual devices and the probe hook.
#include "placement_test_util.h"
#include "tandem/error.h"

#include <catch2/catch.hpp>

#include <string>

using namespace tandem;
using namespace tandem::test;

namespace {

// Runs `f`, which must throw tandem::error of `kind`; returns the message for further checks.
template <class F>
std::string error_of(F &&f, error_kind kind = error_kind::config) {
    try {
        f();
    } catch (const error &e) {
        CHECK(e.kind() == kind);
        return e.what();
    }
    FAIL("expected a tandem::error");
    return {};
}

bool same_topology(const topology &a, const topology &b) {
    if (a.devices.size() != b.devices.size() || a.links.size() != b.links.size()) return false;
    for (size_t i = 0; i < a.devices.size(); ++i) {
        const auto &x = a.devices[i], &y = b.devices[i];
        if (x.id != y.id || x.name != y.name || x.memory_gib != y.memory_gib || x.sm_count != y.sm_count ||
            x.reserve_gib != y.reserve_gib)
            return false;
    }
    for (size_t i = 0; i < a.links.size(); ++i) {
        const auto &x = a.links[i], &y = b.links[i];
        if (x.a != y.a || x.b != y.b || x.p2p != y.p2p || x.rank != y.rank || x.kind != y.kind) return false;
    }
    return true;
}

}  // namespace

TEST_CASE("topology fixtures load and round-trip through JSON", "[placement]") {
    for (const char *name : {"l40s-8-pairs.json", "h200-8-nvlink.json", "mixed-4.json", "odd-3.json", "h200-1.json"}) {
        INFO(name);
        const topology t = topology_load(fixture(name));
        REQUIRE(!t.devices.empty());
        const topology again = topology_parse(topology_to_json(t), "round trip");
        CHECK(same_topology(t, again));
    }
    const topology l40s = topology_load(fixture("l40s-8-pairs.json"));
    CHECK(l40s.devices.size() == 8);
    CHECK(l40s.p2p(0, 1));
    CHECK(l40s.p2p(1, 0));
    CHECK_FALSE(l40s.p2p(1, 2));
    CHECK(l40s.p2p(3, 3));  // a device with itself
    const topology mixed = topology_load(fixture("mixed-4.json"));
    REQUIRE(mixed.find(2)->reserve_gib.has_value());
    CHECK(*mixed.find(2)->reserve_gib == 2.5);
    CHECK(topology_reserve_bytes(*mixed.find(2)) == uint64_t(2.5 * double(gib)));
    // Default reserve: 1 GiB for small devices, 5% for big ones.
    CHECK(topology_reserve_bytes(*mixed.find(0)) == uint64_t(24 * 0.05 * double(gib)));
    CHECK(topology_reserve_bytes({0, "x", 8.0, 0, std::nullopt}) == gib);
}

TEST_CASE("topology files with mistakes are config errors naming the problem", "[placement]") {
    struct bad_case {
        const char *json;
        const char *mentions;
    };
    const bad_case cases[] = {
        {R"({"devices": [{"id": 0, "name": "L40S", "memory_gib": 48}], "links": [)", "not valid JSON"},
        {R"([1, 2])", "expected a JSON object"},
        {R"({"links": []})", "\"devices\""},
        {R"({"devices": []})", "no devices"},
        {R"({"devices": [{"id": 0, "memory_gb": 48}]})", "memory_gb"},
        {R"({"devices": [{"id": 0}]})", "memory_gib"},
        {R"({"devices": [{"id": 0, "memory_gib": -1}]})", "memory_gib"},
        {R"({"devices": [{"id": -3, "memory_gib": 8}]})", "id"},
        {R"({"devices": [{"id": 0, "memory_gib": 8}, {"id": 0, "memory_gib": 8}]})", "appears twice"},
        {R"({"devices": [{"id": 0, "memory_gib": 8}], "links": [{"a": 0, "b": 5}]})", "0-5"},
        {R"({"devices": [{"id": 0, "memory_gib": 8}], "links": [{"a": 0, "b": 0}]})", "itself"},
        {R"({"devices": [{"id": 0, "memory_gib": 8}, {"id": 1, "memory_gib": 8}],
             "links": [{"a": 0, "b": 1}, {"a": 1, "b": 0}]})", "twice"},
        {R"({"devices": [{"id": 0, "memory_gib": 8}, {"id": 1, "memory_gib": 8}],
             "links": [{"a": 0, "b": 1, "p2p": "yes"}]})", "p2p"},
        {R"({"devices": [{"id": 0, "memory_gib": 8, "reserve_gib": 9}]})", "reserve_gib"},
        {R"({"devices": [{"id": 0, "memory_gib": 8}], "extra": 1})", "extra"},
    };
    for (const auto &c : cases) {
        INFO(c.json);
        const std::string msg = error_of([&] { topology_parse(c.json, "t.json"); });
        CHECK(msg.find("t.json") != std::string::npos);
        CHECK(msg.find(c.mentions) != std::string::npos);
    }
    const std::string missing = error_of([] { topology_load("/nonexistent/topo.json"); });
    CHECK(missing.find("/nonexistent/topo.json") != std::string::npos);
}

TEST_CASE("missing pairs mean no P2P; p2p false is honoured", "[placement]") {
    const topology t = topology_parse(R"({"devices": [{"id": 0, "memory_gib": 8}, {"id": 1, "memory_gib": 8},
        {"id": 2, "memory_gib": 8}], "links": [{"a": 0, "b": 1, "p2p": false, "rank": 0}]})", "t");
    CHECK_FALSE(t.p2p(0, 1));
    CHECK_FALSE(t.p2p(0, 2));
    CHECK(t.link(1, 0) != nullptr);
    CHECK(t.link(1, 2) == nullptr);
}

TEST_CASE("--gpu-devices and --gpu-vram parse or name the bad value", "[placement]") {
    CHECK(placement_parse_devices("auto").auto_order);
    CHECK(placement_parse_devices("0, 2,1").ids == std::vector<int32_t>{0, 2, 1});
    CHECK(placement_parse_devices("0,0,0,0").ids == std::vector<int32_t>{0, 0, 0, 0});
    for (const char *bad : {"", "0,,1", "-1", "a", "1.5", "0,"}) {
        INFO(bad);
        const std::string msg = error_of([&] { placement_parse_devices(bad); });
        CHECK(msg.find("--gpu-devices") != std::string::npos);
    }
    CHECK(placement_parse_vram("auto", 4).empty());
    CHECK(placement_parse_vram("40", 3) == std::vector<uint64_t>(3, 40 * gib));
    CHECK(placement_parse_vram("1.5,2", 2) == std::vector<uint64_t>{3 * gib / 2, 2 * gib});
    const std::string wrong_len = error_of([] { placement_parse_vram("40,40,40", 4); });
    CHECK(wrong_len.find("3 values") != std::string::npos);
    CHECK(wrong_len.find("4 devices") != std::string::npos);
    for (const char *bad : {"0", "-4", "x", "4,,4", "inf", "nan"}) {
        INFO(bad);
        error_of([&] { placement_parse_vram(bad, 2); });
    }
}

TEST_CASE("expert traffic files parse strictly", "[placement]") {
    const expert_traffic t = expert_traffic_parse(R"({"n_layer": 2, "n_expert": 3, "counts": [[1, 2, 3], [0, 0, 7]]})", "x");
    REQUIRE(t.counts.size() == 2);
    CHECK(t.counts[1] == std::vector<uint64_t>{0, 0, 7});
    const char *bad[] = {
        R"({"counts": []})",
        R"({"counts": [[1, -2]]})",
        R"({"counts": [[1, 2], [3]]})",
        R"({"counts": [[1, 2.5]]})",
        R"({"n_layer": 3, "counts": [[1, 2]]})",
        R"({"n_expert": 3, "counts": [[1, 2]]})",
        R"({"counts": [[1, 2]], "layers": 1})",
        R"({"counts": "many"})",
    };
    for (const char *j : bad) {
        INFO(j);
        const std::string msg = error_of([&] { expert_traffic_parse(j, "traffic.json"); });
        CHECK(msg.find("traffic.json") != std::string::npos);
    }
}

TEST_CASE("CPU virtual devices are all-to-all P2P and split the host's memory", "[placement]") {
    const topology t = topology_cpu_virtual(4, 64 * gib);
    REQUIRE(t.devices.size() == 4);
    for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) CHECK(t.p2p(a, b));
    for (const auto &d : t.devices) {
        CHECK(d.memory_gib == 16.0);
        CHECK(topology_reserve_bytes(d) == 0);
    }
    error_of([] { topology_cpu_virtual(0, gib); });
}

TEST_CASE("the topology probe hook: absent is a clear error, registered is used", "[placement]") {
    topology_probe_register(nullptr);
    CHECK_FALSE(topology_probe_available());
    const std::string msg = error_of([] { topology_probe(); });
    CHECK(msg.find("--topology") != std::string::npos);
    topology_probe_register([] { return topology_cpu_virtual(2, 8 * gib); });
    CHECK(topology_probe_available());
    CHECK(topology_probe().devices.size() == 2);
    topology_probe_register([] { return topology{}; });  // a broken probe is validated too
    error_of([] { topology_probe(); });
    topology_probe_register(nullptr);
}
