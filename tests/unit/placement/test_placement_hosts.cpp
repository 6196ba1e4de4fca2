// tests/unit/placement/test_placement_hosts.cpp - plans over several hosts: the --hosts list, the
// hosts file and link figure, stages contiguous per host, pairs inside a host, budgets per host
// (a device id on two hosts is two devices), refusals naming host and device, the link's price.
#include "placement_test_util.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace tandem;
using namespace tandem::test;

namespace {

placement_request hosts_request(placement_mode mode, std::vector<int32_t> ids, const std::string &hosts) {
    placement_request r = request(mode, std::move(ids));
    r.hosts = placement_parse_hosts(hosts).hosts;
    return r;
}

std::string error_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const error &e) {
        CHECK(e.kind() == error_kind::config);
        return e.what();
    }
    FAIL("expected a config error");
    return {};
}

}  // namespace

TEST_CASE("--hosts and --host-link parse, and bad lists are refused by name", "[placement][hosts]") {
    const placement_hosts h = placement_parse_hosts(" a:2, host-b.lan:3 ");
    REQUIRE(h.hosts.size() == 2);
    CHECK(h.hosts[0].name == "a");
    CHECK(h.hosts[0].n_devices == 2);
    CHECK(h.hosts[1].name == "host-b.lan");
    CHECK(h.hosts[1].n_devices == 3);
    CHECK(h.link.source.empty());
    CHECK_THAT(error_of([] { placement_parse_hosts("a"); }), Catch::Contains("'a' is not NAME:DEVICES"));
    CHECK_THAT(error_of([] { placement_parse_hosts("a:0"); }), Catch::Contains("host 'a' has '0' devices"));
    CHECK_THAT(error_of([] { placement_parse_hosts("a:x"); }), Catch::Contains("host 'a' has 'x' devices"));
    CHECK_THAT(error_of([] { placement_parse_hosts("a:1,a:2"); }), Catch::Contains("host 'a' is listed twice"));
    CHECK_THAT(error_of([] { placement_parse_hosts("a b:1"); }), Catch::Contains("may hold only letters"));

    const placement_host_link l = placement_parse_host_link("12.5,40");
    CHECK(l.gbps == 12.5);
    CHECK(l.latency_us == 40.0);
    CHECK(l.source == "given");
    CHECK(placement_parse_host_link("3").latency_us == 0.0);
    CHECK_THAT(error_of([] { placement_parse_host_link("0"); }), Catch::Contains("is not a positive number"));
    CHECK_THAT(error_of([] { placement_parse_host_link("10,x"); }), Catch::Contains("latency (us) 'x'"));
}

TEST_CASE("the hosts file: names, devices, memory and link figures; unknown keys are errors", "[placement][hosts]") {
    const placement_hosts h = placement_hosts_parse(
        R"({"hosts": [{"name": "front", "devices": 2, "memory_gib": 64}, {"devices": 1}], "link_gbps": 5, "link_latency_us": 80})",
        "hosts.json");
    REQUIRE(h.hosts.size() == 2);
    CHECK(h.hosts[0].memory_gib == 64.0);
    CHECK(h.hosts[1].name == "host1");
    CHECK(h.hosts[1].memory_gib == 0.0);
    CHECK(h.link.gbps == 5.0);
    CHECK(h.link.latency_us == 80.0);
    CHECK(h.link.source == "given");
    CHECK_THAT(error_of([] { placement_hosts_parse(R"({"hosts": [{"devices": 1, "gpus": 2}]})", "f"); }),
               Catch::Contains("f: hosts[0]: unknown key \"gpus\""));
    CHECK_THAT(error_of([] { placement_hosts_parse(R"({"hosts": [{"name": "a"}]})", "f"); }), Catch::Contains("devices"));
    CHECK_THAT(error_of([] { placement_hosts_parse(R"({"hosts": []})", "f"); }), Catch::Contains("no hosts given"));
}

TEST_CASE("pipeline over hosts: each host's stages are contiguous and the layout names the hosts", "[placement][hosts]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    const placement_plan p = placement_plan_make(hosts_request(placement_mode::pipeline, {0, 1, 0, 1, 2}, "a:2,b:3"), t, m);
    REQUIRE(p.devices.size() == 5);
    const int32_t want_host[5] = {0, 0, 1, 1, 1};
    for (const auto &d : p.devices) {
        CHECK(d.host == want_host[d.logical]);
        CHECK(p.stage_host(d.stage) == d.host);
    }
    CHECK(p.devices[2].physical == 0);  // host b's device 0
    const std::string line = placement_layout_line(p);
    CHECK_THAT(line, Catch::Contains("[d0@a:0 ") && Catch::Contains("[d2@b:0 ") && Catch::Contains("[d4@b:2 "));
    const std::string table = placement_hosts_table(p);
    CHECK_THAT(table, Catch::Contains("host a (front, rank 0): devices d0@0,d1@1 stages 0-1"));
    CHECK_THAT(table, Catch::Contains("host b (worker, rank 1): devices d2@0,d3@1,d4@2 stages 2-4"));
    CHECK_THAT(table, Catch::Contains("host link: 10.00 GB/s, 50 us (default)"));
    CHECK_THAT(placement_plan_json(p), Catch::Contains("\"host\": 1"));
}

TEST_CASE("pairs over hosts: every pair stays on its host, stage hosts contiguous", "[placement][hosts]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const placement_model m = model_of(qwen3_235b_a22b);
    const placement_plan p =
        placement_plan_make(hosts_request(placement_mode::tensor_parallel, {0, 1, 2, 3, 4, 5, 6, 7}, "a:4,b:4"), t, m);
    REQUIRE(p.n_stages == 4);
    for (const auto &d : p.devices) {
        const placement_device_plan &partner = p.devices[size_t(d.partner)];
        CHECK(partner.host == d.host);
        CHECK(d.host == (d.stage < 2 ? 0 : 1));
    }
    // Host a's devices 0,1 host stages 0,1 with partners 2,3; host b's 4,5 with 6,7.
    CHECK(p.devices[0].physical == 0);
    CHECK(p.devices[1].physical == 1);
    CHECK(p.devices[2].physical == 4);
    CHECK(p.devices[4].physical == 2);
    CHECK(p.devices[6].physical == 6);
    CHECK_THAT(error_of([&] { placement_plan_make(hosts_request(placement_mode::tensor_parallel, {0, 1, 2, 3}, "a:1,b:3"), t, m); }),
               Catch::Contains("host 'a' has 1 devices; pairs never span hosts"));
}

TEST_CASE("budgets are per host: the same id on two hosts is two devices; refusals name host and device",
          "[placement][hosts]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    const placement_model m = model_of(qwen3_30b_a3b);
    placement_request r = hosts_request(placement_mode::pipeline, {0, 0}, "a:1,b:1");
    r.budgets = {uint64_t(100) * gib};  // 2 x 100 GiB would not fit one 139.8 GiB GPU
    CHECK_NOTHROW(placement_plan_make(r, t, m));
    placement_request one = request(placement_mode::pipeline, {0, 0});
    one.budgets = r.budgets;
    CHECK_THAT(error_of([&] { placement_plan_make(one, t, m); }), Catch::Contains("sum to 200.00 GiB"));

    r.budgets = {uint64_t(100) * gib, uint64_t(600) << 20};  // host b: scratch and the head do not fit
    CHECK_THAT(error_of([&] { placement_plan_make(r, t, m); }),
               Catch::Contains("host 'b' device d1 (physical 0 H200, stage 1"));
    r.budgets.clear();
    r.hosts = placement_parse_hosts("a:1,b:2").hosts;
    CHECK_THAT(error_of([&] { placement_plan_make(r, t, m); }), Catch::Contains("--hosts lists 3 devices in all but the plan has 2"));
    r.hosts = placement_parse_hosts("a:1,b:1").hosts;
    r.auto_order = true;
    CHECK_THAT(error_of([&] { placement_plan_make(r, t, m); }), Catch::Contains("auto cannot be combined with --hosts"));
    r.auto_order = false;
    r.host_experts = uint64_t(10) * gib;
    CHECK_THAT(error_of([&] { placement_plan_make(r, t, m); }), Catch::Contains("--host-experts cannot be combined"));
}

TEST_CASE("the inter-host link is priced: a slower link predicts fewer tokens a second", "[placement][hosts]") {
    const topology t = topology_load(fixture("h200-8-nvlink.json"));
    placement_model m = model_of(qwen3_30b_a3b);
    m.n_expert_used = qwen3_30b_a3b.n_expert_used;
    m.d_model = qwen3_30b_a3b.d_model;
    placement_request r = hosts_request(placement_mode::pipeline, {0, 1}, "a:1,b:1");
    r.host_link = placement_parse_host_link("100,1");
    const placement_plan fast = placement_plan_make(r, t, m);
    r.host_link = placement_parse_host_link("0.1,5000");
    const placement_plan slow = placement_plan_make(r, t, m);
    CHECK(fast.prediction.host_link_gbps == 100.0);
    CHECK(slow.prediction.host_link_latency_us == 5000.0);
    CHECK(slow.prediction.tok_s < fast.prediction.tok_s);
    // The same layers either way: the link prices the plan, it does not move layers.
    CHECK(slow.devices[1].layer_begin == fast.devices[1].layer_begin);
    CHECK_THAT(placement_hosts_table(slow), Catch::Contains("host link: 0.10 GB/s, 5000 us (given)"));
}

TEST_CASE("CPU virtual devices on hosts: each host's memory split among its devices", "[placement][hosts]") {
    placement_hosts h = placement_parse_hosts("a:2,b:1");
    h.hosts[1].memory_gib = 3.0;
    placement_request r;
    const topology t = placement_cpu_hosts(h.hosts, uint64_t(8) * gib, r);
    CHECK(r.devices == std::vector<int32_t>{0, 1, 0});
    CHECK(r.budgets == std::vector<uint64_t>{4 * gib, 4 * gib, 3 * gib});
    CHECK(t.devices.size() == 2);
    for (const auto &d : t.devices) CHECK(d.memory_gib * double(gib) >= double(4 * gib));
}
