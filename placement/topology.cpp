// placement/topology.cpp - device topologies: the JSON file format (parse, validate, write),
// CPU virtual devices, the probe hook the CUDA backend registers, and the auto reserve.
#include "placement/json_util.h"
#include "tandem/error.h"
#include "tandem/placement.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

namespace tandem {

const topology_device *topology::find(int32_t id) const {
    for (const auto &d : devices)
        if (d.id == id) return &d;
    return nullptr;
}

const topology_link *topology::link(int32_t a, int32_t b) const {
    for (const auto &l : links)
        if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return &l;
    return nullptr;
}

bool topology::p2p(int32_t a, int32_t b) const {
    if (a == b) return true;  // logical devices sharing one GPU talk through its own memory
    const topology_link *l = link(a, b);
    return l && l->p2p;
}

namespace {

using nlohmann::json;

// A speed or size figure: positive and finite (1e6 GiB or GB/s is far beyond any machine).
double positive_figure(const json &j, const char *key, const std::string &where) {
    const double v = placement_json::get_number(j, key, where);
    if (!(v > 0.0) || v > 1e6) fail(error_kind::config, "{}: {} = {} must be a positive number", where, key, v);
    return v;
}

topology_device device_from_json(const json &j, std::string_view source, size_t index) {
    const std::string where = fmt::format("{}: devices[{}]", source, index);
    placement_json::require_object(j, where);
    placement_json::reject_unknown_keys(j, {"id", "name", "memory_gib", "sm_count", "reserve_gib", "bandwidth_gbps"}, where);
    topology_device d;
    d.id = placement_json::get_int(j, "id", where, 0, 1 << 20);
    d.name = j.contains("name") ? placement_json::get_string(j, "name", where) : std::string("gpu");
    d.memory_gib = placement_json::get_number(j, "memory_gib", where);
    if (!(d.memory_gib > 0.0) || d.memory_gib > 1e6)
        fail(error_kind::config, "{}: memory_gib = {} must be a positive number of GiB", where, d.memory_gib);
    if (j.contains("sm_count")) d.sm_count = placement_json::get_int(j, "sm_count", where, 0, 1 << 20);
    if (j.contains("reserve_gib")) {
        const double r = placement_json::get_number(j, "reserve_gib", where);
        if (!(r >= 0.0) || r >= d.memory_gib)
            fail(error_kind::config, "{}: reserve_gib = {} must be >= 0 and below memory_gib {}", where, r,
                 d.memory_gib);
        d.reserve_gib = r;
    }
    if (j.contains("bandwidth_gbps")) d.bandwidth_gbps = positive_figure(j, "bandwidth_gbps", where);
    return d;
}

topology_host host_from_json(const json &j, std::string_view source) {
    const std::string where = fmt::format("{}: host", source);
    placement_json::require_object(j, where);
    placement_json::reject_unknown_keys(j, {"memory_gib", "reserve_gib", "bandwidth_gbps", "link_gbps", "link_latency_us"},
                                        where);
    topology_host h;
    if (j.contains("memory_gib")) h.memory_gib = positive_figure(j, "memory_gib", where);
    if (j.contains("reserve_gib")) {
        const double r = placement_json::get_number(j, "reserve_gib", where);
        if (!(r >= 0.0) || (h.memory_gib > 0.0 && r >= h.memory_gib))
            fail(error_kind::config, "{}: reserve_gib = {} must be >= 0 and below memory_gib {}", where, r, h.memory_gib);
        h.reserve_gib = r;
    }
    if (j.contains("bandwidth_gbps")) h.bandwidth_gbps = positive_figure(j, "bandwidth_gbps", where);
    if (j.contains("link_gbps")) h.link_gbps = positive_figure(j, "link_gbps", where);
    if (j.contains("link_latency_us")) h.link_latency_us = positive_figure(j, "link_latency_us", where);
    return h;
}

topology_link link_from_json(const json &j, std::string_view source, size_t index) {
    const std::string where = fmt::format("{}: links[{}]", source, index);
    placement_json::require_object(j, where);
    placement_json::reject_unknown_keys(j, {"a", "b", "p2p", "rank", "kind"}, where);
    topology_link l;
    l.a = placement_json::get_int(j, "a", where, 0, 1 << 20);
    l.b = placement_json::get_int(j, "b", where, 0, 1 << 20);
    if (j.contains("p2p")) {
        if (!j["p2p"].is_boolean()) fail(error_kind::config, "{}: p2p must be true or false", where);
        l.p2p = j["p2p"].get<bool>();
    }
    if (j.contains("rank")) l.rank = placement_json::get_int(j, "rank", where, 0, 1 << 20);
    if (j.contains("kind")) l.kind = placement_json::get_string(j, "kind", where);
    return l;
}

void topology_validate(const topology &topo, std::string_view source) {
    if (topo.devices.empty()) fail(error_kind::config, "{}: the topology lists no devices", source);
    std::set<int32_t> ids;
    for (const auto &d : topo.devices)
        if (!ids.insert(d.id).second) fail(error_kind::config, "{}: device id {} appears twice", source, d.id);
    std::set<std::pair<int32_t, int32_t>> pairs;
    for (const auto &l : topo.links) {
        if (!ids.count(l.a) || !ids.count(l.b))
            fail(error_kind::config, "{}: link {}-{} names a device that is not in devices", source, l.a, l.b);
        if (l.a == l.b) fail(error_kind::config, "{}: link {}-{} joins a device to itself", source, l.a, l.b);
        if (!pairs.insert(std::minmax(l.a, l.b)).second)
            fail(error_kind::config, "{}: link {}-{} is listed twice (links are symmetric)", source, l.a, l.b);
    }
}

std::string read_text_file(const std::string &path, const char *what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(error_kind::config, "cannot open {} file '{}'", what, path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

std::string placement_read_text(const std::string &path, const char *what) { return read_text_file(path, what); }

topology topology_parse(std::string_view json_text, std::string_view source) {
    const json j = placement_json::parse(json_text, source);
    placement_json::require_object(j, std::string(source));
    placement_json::reject_unknown_keys(j, {"devices", "links", "host"}, std::string(source));
    if (!j.contains("devices") || !j["devices"].is_array())
        fail(error_kind::config, "{}: \"devices\" must be an array of device objects", source);
    topology topo;
    for (size_t i = 0; i < j["devices"].size(); ++i) topo.devices.push_back(device_from_json(j["devices"][i], source, i));
    if (j.contains("links")) {
        if (!j["links"].is_array()) fail(error_kind::config, "{}: \"links\" must be an array", source);
        for (size_t i = 0; i < j["links"].size(); ++i) topo.links.push_back(link_from_json(j["links"][i], source, i));
    }
    if (j.contains("host")) topo.host = host_from_json(j["host"], source);
    topology_validate(topo, source);
    return topo;
}

topology topology_load(const std::string &path) { return topology_parse(read_text_file(path, "topology"), path); }

std::string topology_to_json(const topology &topo) {
    json j;
    j["devices"] = json::array();
    for (const auto &d : topo.devices) {
        json dj = {{"id", d.id}, {"name", d.name}, {"memory_gib", d.memory_gib}, {"sm_count", d.sm_count}};
        if (d.reserve_gib) dj["reserve_gib"] = *d.reserve_gib;
        if (d.bandwidth_gbps > 0.0) dj["bandwidth_gbps"] = d.bandwidth_gbps;
        j["devices"].push_back(std::move(dj));
    }
    j["links"] = json::array();
    for (const auto &l : topo.links) {
        json lj = {{"a", l.a}, {"b", l.b}, {"p2p", l.p2p}, {"rank", l.rank}};
        if (!l.kind.empty()) lj["kind"] = l.kind;
        j["links"].push_back(std::move(lj));
    }
    if (topo.host) {
        const topology_host &h = *topo.host;
        json hj = json::object();
        if (h.memory_gib > 0.0) hj["memory_gib"] = h.memory_gib;
        if (h.reserve_gib) hj["reserve_gib"] = *h.reserve_gib;
        if (h.bandwidth_gbps > 0.0) hj["bandwidth_gbps"] = h.bandwidth_gbps;
        if (h.link_gbps > 0.0) hj["link_gbps"] = h.link_gbps;
        if (h.link_latency_us > 0.0) hj["link_latency_us"] = h.link_latency_us;
        j["host"] = std::move(hj);
    }
    return j.dump(2);
}

uint64_t topology_reserve_bytes(const topology_device &dev) {
    const double memory = dev.memory_gib * double(gib);
    if (dev.reserve_gib) return uint64_t(std::llround(*dev.reserve_gib * double(gib)));
    // 1 GiB covers a CUDA context plus cuBLAS and NCCL workspaces; 5% is allocator slack on big
    // devices, where fragmentation grows with the number of buffers.
    return std::max<uint64_t>(gib, uint64_t(memory * 0.05));
}

topology topology_cpu_virtual(int32_t n_devices, uint64_t host_available_bytes) {
    if (n_devices < 1 || n_devices > 1024)
        fail(error_kind::config, "--devices {} is out of range (1..1024)", n_devices);
    if (host_available_bytes == 0) fail(error_kind::config, "the host reports no available memory");
    topology topo;
    const double each = double(host_available_bytes) / double(n_devices) / double(gib);
    for (int32_t i = 0; i < n_devices; ++i)
        topo.devices.push_back({i, "cpu", each, 0, 0.0, 0.0});
    topology_host host;
    host.memory_gib = double(host_available_bytes) / double(gib);
    host.reserve_gib = 0.0;  // already what the host can spare
    topo.host = host;
    for (int32_t a = 0; a < n_devices; ++a)
        for (int32_t b = a + 1; b < n_devices; ++b) topo.links.push_back({a, b, true, 0, "memory"});
    return topo;
}

namespace {

std::mutex &probe_mutex() {
    static std::mutex m;
    return m;
}
topology_probe_fn &probe_slot() {
    static topology_probe_fn fn;
    return fn;
}

}  // namespace

void topology_probe_register(topology_probe_fn probe) {
    std::lock_guard<std::mutex> lock(probe_mutex());
    probe_slot() = std::move(probe);
}

bool topology_probe_available() {
    std::lock_guard<std::mutex> lock(probe_mutex());
    return static_cast<bool>(probe_slot());
}

topology topology_probe() {
    topology_probe_fn fn;
    {
        std::lock_guard<std::mutex> lock(probe_mutex());
        fn = probe_slot();
    }
    if (!fn)
        fail(error_kind::config, "no GPU topology probe in this build (CUDA backend absent or not initialised): "
                                 "pass --topology FILE, or use --backend cpu --devices N");
    topology topo = fn();
    topology_validate(topo, "probed topology");
    return topo;
}

}  // namespace tandem
