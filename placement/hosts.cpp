// placement/hosts.cpp - several hosts in one plan: the --hosts list, the hosts file, the inter-host
// link figure, and the table `tandem plan` prints per host.
#include "placement/json_util.h"
#include "tandem/error.h"
#include "tandem/placement.h"

#include <cmath>
#include <set>

namespace tandem {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// A host name travels in logs and /health: letters, digits and ".-_" only.
void check_host_name(std::string_view name, std::string_view where) {
    if (name.empty() || name.size() > 64)
        fail(error_kind::config, "{}: a host name must have 1 to 64 characters, got '{}'", where, name);
    for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
            fail(error_kind::config, "{}: host name '{}' may hold only letters, digits, '.', '-' and '_'", where, name);
}

void check_unique(const std::vector<placement_host> &hosts, std::string_view where) {
    std::set<std::string> seen;
    for (const auto &h : hosts)
        if (!seen.insert(h.name).second) fail(error_kind::config, "{}: host '{}' is listed twice", where, h.name);
    if (hosts.empty()) fail(error_kind::config, "{}: no hosts given", where);
}

double positive(std::string_view text, std::string_view what, std::string_view where) {
    const std::string s(trim(text));
    char *end = nullptr;
    const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(v > 0.0) || v > 1e9)
        fail(error_kind::config, "{}: {} '{}' is not a positive number", where, what, s);
    return v;
}

}  // namespace

placement_hosts placement_parse_hosts(std::string_view spec) {
    const std::string where = fmt::format("--hosts '{}'", spec);
    placement_hosts out;
    std::string_view rest = spec;
    while (true) {
        const size_t comma = rest.find(',');
        const std::string_view item = trim(rest.substr(0, comma));
        const size_t colon = item.rfind(':');
        if (colon == std::string_view::npos)
            fail(error_kind::config, "{}: '{}' is not NAME:DEVICES (e.g. host0:2)", where, item);
        placement_host h;
        h.name = std::string(trim(item.substr(0, colon)));
        check_host_name(h.name, where);
        const std::string count(trim(item.substr(colon + 1)));
        char *end = nullptr;
        const long n = count.empty() ? 0 : std::strtol(count.c_str(), &end, 10);
        if (count.empty() || *end != '\0' || n < 1 || n > 64)
            fail(error_kind::config, "{}: host '{}' has '{}' devices; give a count in 1..64", where, h.name, count);
        h.n_devices = int32_t(n);
        out.hosts.push_back(std::move(h));
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
    }
    check_unique(out.hosts, where);
    return out;
}

placement_hosts placement_hosts_parse(std::string_view json_text, std::string_view source) {
    const nlohmann::json j = placement_json::parse(json_text, source);
    const std::string where(source);
    placement_json::require_object(j, where);
    placement_json::reject_unknown_keys(j, {"hosts", "link_gbps", "link_latency_us"}, where);
    if (!j.contains("hosts") || !j["hosts"].is_array()) fail(error_kind::config, "{}: \"hosts\" must be an array", where);
    placement_hosts out;
    for (size_t i = 0; i < j["hosts"].size(); ++i) {
        const nlohmann::json &e = j["hosts"][i];
        const std::string at = fmt::format("{}: hosts[{}]", source, i);
        placement_json::require_object(e, at);
        placement_json::reject_unknown_keys(e, {"name", "devices", "memory_gib"}, at);
        placement_host h;
        h.name = e.contains("name") ? placement_json::get_string(e, "name", at) : fmt::format("host{}", i);
        check_host_name(h.name, at);
        h.n_devices = placement_json::get_int(e, "devices", at, 1, 64);
        if (e.contains("memory_gib")) {
            h.memory_gib = placement_json::get_number(e, "memory_gib", at);
            if (!(h.memory_gib > 0.0) || h.memory_gib > 1e6)
                fail(error_kind::config, "{}: memory_gib = {} must be a positive number of GiB", at, h.memory_gib);
        }
        out.hosts.push_back(std::move(h));
    }
    check_unique(out.hosts, where);
    for (const char *key : {"link_gbps", "link_latency_us"})
        if (j.contains(key)) {
            const double v = placement_json::get_number(j, key, where);
            if (!(v > 0.0) || v > 1e9) fail(error_kind::config, "{}: {} = {} must be a positive number", where, key, v);
            (std::string_view(key) == "link_gbps" ? out.link.gbps : out.link.latency_us) = v;
        }
    if (out.link.gbps > 0.0 || out.link.latency_us > 0.0) out.link.source = "given";
    return out;
}

placement_hosts placement_hosts_load(const std::string &path) {
    return placement_hosts_parse(placement_read_text(path, "--hosts-file"), path);
}

std::string placement_hosts_file_text(const std::string &path) {
    std::string text = placement_read_text(path, "--hosts-file");
    placement_hosts_parse(text, path);
    return text;
}

placement_host_link placement_parse_host_link(std::string_view spec) {
    const std::string where = fmt::format("--host-link '{}'", spec);
    placement_host_link link;
    const size_t comma = spec.find(',');
    link.gbps = positive(spec.substr(0, comma), "GB/s", where);
    if (comma != std::string_view::npos) link.latency_us = positive(spec.substr(comma + 1), "latency (us)", where);
    link.source = "given";
    return link;
}

int32_t placement_plan::stage_host(int32_t stage) const {
    for (const placement_device_plan &d : devices)
        if (d.stage == stage) return d.host;
    return 0;
}

std::string placement_hosts_table(const placement_plan &plan) {
    if (plan.hosts.empty()) return {};
    std::string t;
    for (int32_t h = 0; h < int32_t(plan.hosts.size()); ++h) {
        std::string devices;
        int32_t s_lo = plan.n_stages, s_hi = -1, l_lo = plan.n_layer, l_hi = -1;
        uint64_t used = 0, budget = 0;
        for (const placement_device_plan &d : plan.devices) {
            if (d.host != h) continue;
            devices += fmt::format("{}d{}@{}", devices.empty() ? "" : ",", d.logical, d.physical);
            s_lo = std::min(s_lo, d.stage), s_hi = std::max(s_hi, d.stage);
            l_lo = std::min(l_lo, d.layer_begin), l_hi = std::max(l_hi, d.layer_end - 1);
            used += d.total();
            budget += d.budget;
        }
        t += fmt::format("host {} ({}, rank {}): devices {} stages {}-{} layers {}-{} {:.2f}/{:.2f} GiB\n",
                         plan.hosts[size_t(h)].name, h == 0 ? "front" : "worker", h, devices, s_lo, s_hi, l_lo, l_hi,
                         double(used) / double(gib), double(budget) / double(gib));
    }
    const placement_host_link &l = plan.host_link;
    const placement_prediction &p = plan.prediction;
    t += fmt::format("host link: {:.2f} GB/s, {:.0f} us ({})\n", l.gbps > 0.0 ? l.gbps : p.host_link_gbps,
                     l.latency_us > 0.0 ? l.latency_us : p.host_link_latency_us, l.source.empty() ? "default" : l.source);
    return t;
}

}  // namespace tandem

namespace tandem {

topology placement_cpu_hosts(const std::vector<placement_host> &hosts, uint64_t local_available_bytes,
                             placement_request &req) {
    int32_t widest = 0;
    uint64_t largest = 0;
    req.devices.clear();
    req.budgets.clear();
    for (const placement_host &h : hosts) {
        const uint64_t memory = h.memory_gib > 0.0 ? uint64_t(std::llround(h.memory_gib * double(gib))) : local_available_bytes;
        for (int32_t k = 0; k < h.n_devices; ++k) {
            req.devices.push_back(k);
            req.budgets.push_back(memory / uint64_t(h.n_devices));
        }
        widest = std::max(widest, h.n_devices);
        largest = std::max(largest, memory / uint64_t(h.n_devices));
    }
    // One device entry per local id, as large as the largest budget: each host checks its own.
    topology topo = topology_cpu_virtual(widest, (largest + (uint64_t{1} << 20)) * uint64_t(widest));
    topo.host->memory_gib = double(local_available_bytes) / double(gib);
    return topo;
}

}  // namespace tandem
