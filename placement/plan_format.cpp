// placement/plan_format.cpp - how a plan reads: the one start-up layout line, the per-device
// table of bytes by class, and the full JSON.
#include "tandem/placement.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace tandem {

namespace {

double to_gib(uint64_t bytes) { return double(bytes) / double(gib); }

// Describes the routed experts a paired device holds: "E0-63" when every layer holds the same
// contiguous range, else the per-layer count range ("E~62-66/layer"), as with a traffic split.
std::string experts_summary(const placement_device_plan &d) {
    if (d.experts.empty()) return "E-";
    const auto &first = d.experts.front();
    const bool same = std::all_of(d.experts.begin(), d.experts.end(), [&](const auto &v) { return v == first; });
    const bool contiguous = !first.empty() && first.back() - first.front() + 1 == int32_t(first.size());
    if (same && contiguous) return fmt::format("E{}-{}", first.front(), first.back());
    size_t lo = first.size(), hi = 0;
    for (const auto &v : d.experts) lo = std::min(lo, v.size()), hi = std::max(hi, v.size());
    return lo == hi ? fmt::format("E~{}/layer", lo) : fmt::format("E~{}-{}/layer", lo, hi);
}

std::string device_summary(const placement_plan &plan, const placement_device_plan &d) {
    std::string s = plan.hosts.empty() ? fmt::format("d{}@{}", d.logical, d.physical)
                                       : fmt::format("d{}@{}:{}", d.logical, plan.hosts[size_t(d.host)].name, d.physical);
    if (d.role != placement_role::single) s += " " + experts_summary(d);
    if (d.embedding) s += " emb";
    if (d.head_end > d.head_begin) s += fmt::format(" head {}-{}", d.head_begin, d.head_end - 1);
    s += fmt::format(" {:.1f}/{:.1f}G", to_gib(d.total()), to_gib(d.budget));
    return s;
}

// "host E~40-64/layer 12.3/100.0G rows 31.2%": cold experts per layer, bytes/budget, expected share
// of all routed rows (layers weigh alike: every token passes each once).
std::string cold_summary(const placement_plan &plan) {
    size_t lo = size_t(plan.n_expert), hi = 0;
    for (const auto &v : plan.cold.experts) lo = std::min(lo, v.size()), hi = std::max(hi, v.size());
    double share = 0.0;
    for (double r : plan.cold.row_share) share += r;
    share /= double(std::max<size_t>(1, plan.cold.row_share.size()));
    return fmt::format("host {} {:.1f}/{:.1f}G rows {:.1f}%",
                       lo == hi ? fmt::format("E~{}/layer", lo) : fmt::format("E~{}-{}/layer", lo, hi),
                       to_gib(plan.cold.bytes), to_gib(plan.cold.budget), share * 100.0);
}

}  // namespace

std::string placement_layout_line(const placement_plan &plan) {
    std::string line = fmt::format("layout: {}", placement_mode_name(plan.mode));
    if (plan.mode == placement_mode::tensor_parallel) line += fmt::format(" pairs={}", plan.n_stages);
    line += fmt::format(" stages={} devices={} kv={}x{}", plan.n_stages, plan.devices.size(), plan.n_sessions,
                        plan.n_ctx);
    if (plan.traffic_balanced && !plan.host_row_share.empty()) {
        const auto [lo, hi] = std::minmax_element(plan.host_row_share.begin(), plan.host_row_share.end());
        line += fmt::format(" experts=traffic(host rows {:.1f}-{:.1f}%)", *lo * 100.0, *hi * 100.0);
    }
    for (int32_t s = 0; s < plan.n_stages; ++s) {
        std::string members;
        const placement_device_plan *first = nullptr;
        for (const auto &d : plan.devices) {
            if (d.stage != s) continue;
            if (!first) first = &d;
            members += (members.empty() ? "" : " + ") + device_summary(plan, d);
        }
        if (!first) continue;
        line += fmt::format(" | s{} L{}-{} [{}]", s, first->layer_begin, first->layer_end - 1, members);
    }
    if (plan.cold.used()) line += " | " + cold_summary(plan);
    return line;
}

std::string placement_table(const placement_plan &plan) {
    // GiB for real models; MiB when every device stays under 1 GiB (tiny test and demo models),
    // where GiB with two decimals would print only zeros.
    uint64_t largest = 0;
    for (const auto &d : plan.devices) largest = std::max(largest, d.total());
    const bool mib = largest < gib;
    const char *unit = mib ? "MiB" : "GiB";
    auto v = [&](uint64_t bytes) { return mib ? double(bytes) / double(uint64_t{1} << 20) : to_gib(bytes); };
    std::string t = fmt::format("{:>4} {:>4} {:<8} {:>5} {:<7} {:>9} {:>9} {:>3} {:>13} {:>8} {:>8} {:>7} {:>7} "
                                "{:>7} {:>7} {:>8} {:>9} {:>8}\n",
                                "dev", "phys", "name", "stage", "role", "layers", "experts/L", "emb", "head rows",
                                "repl", "experts", "emb", "head", "kv", "scratch", "total", "budget", "free");
    for (const auto &d : plan.devices) {
        size_t lo = plan.n_expert, hi = 0;
        for (const auto &e : d.experts) lo = std::min(lo, e.size()), hi = std::max(hi, e.size());
        const std::string experts = d.experts.empty() ? "-" : lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi);
        const std::string head = d.head_end > d.head_begin ? fmt::format("{}-{}", d.head_begin, d.head_end - 1) : "-";
        t += fmt::format("{:>4} {:>4} {:<8} {:>5} {:<7} {:>9} {:>9} {:>3} {:>13} {:>8.2f} {:>8.2f} {:>7.2f} "
                         "{:>7.2f} {:>7.2f} {:>7.2f} {:>8.2f} {:>9.2f} {:>8.2f}\n",
                         d.logical, d.physical, d.name.substr(0, 8), d.stage, placement_role_name(d.role),
                         fmt::format("{}-{}", d.layer_begin, d.layer_end - 1), experts, d.embedding ? "yes" : "-",
                         head, v(d.bytes_replicated), v(d.bytes_experts), v(d.bytes_embedding), v(d.bytes_head),
                         v(d.bytes_kv), v(d.bytes_scratch), v(d.total()), v(d.budget), v(d.free()));
    }
    t += fmt::format("({}; layers and head rows inclusive; experts/L = routed experts held per layer)\n", unit);
    for (const auto &note : plan.notes) t += "note: " + note + "\n";
    return t;
}

std::string placement_tier_table(const placement_plan &plan) {
    if (!plan.cold.used()) return {};
    std::string t = fmt::format("{:>5} {:>5} {:>11} {:>9} {:>12} {:>10}\n", "layer", "stage", "gpu experts", "gpu rows",
                                "host experts", "host rows");
    for (int32_t l = 0; l < plan.n_layer; ++l) {
        const size_t cold = plan.cold.experts[size_t(l)].size();
        const double share = plan.cold.row_share[size_t(l)];
        t += fmt::format("{:>5} {:>5} {:>11} {:>8.1f}% {:>12} {:>9.1f}%\n", l, plan.stage_of_layer(l),
                         size_t(plan.n_expert) - cold, (1.0 - share) * 100.0, cold, share * 100.0);
    }
    t += fmt::format("({}; rows = expected share of the layer's routed rows)\n", cold_summary(plan));
    return t;
}

std::string placement_prediction_line(const placement_plan &plan) {
    const placement_prediction &p = plan.prediction;
    if (!(p.tok_s > 0.0)) return {};
    return fmt::format("predicted decode, one session (bandwidth model): {:.1f} tok/s; per token GPUs {:.3f} ms, host "
                       "tier {:.3f} ms (overlapped per layer); figures GPU {:.0f} GB/s, CPU {:.0f} GB/s, link {:.0f} "
                       "GB/s + {:.0f} us{}\n",
                       p.tok_s, p.gpu_ms, p.cold_ms, p.gpu_gbps, p.cpu_gbps, p.link_gbps, p.link_latency_us,
                       p.default_figures ? " (some are defaults: give the topology's figures)" : "");
}

std::string placement_plan_json(const placement_plan &plan) {
    using nlohmann::json;
    json j = {{"mode", placement_mode_name(plan.mode)},
              {"n_stages", plan.n_stages},
              {"n_layer", plan.n_layer},
              {"n_expert", plan.n_expert},
              {"n_vocab", plan.n_vocab},
              {"n_sessions", plan.n_sessions},
              {"n_ctx", plan.n_ctx},
              {"traffic_balanced", plan.traffic_balanced},
              {"host_row_share", plan.host_row_share},
              {"notes", plan.notes},
              {"layout", placement_layout_line(plan)}};
    j["host_tier"] = {{"allowed", plan.cold.allowed},
                      {"budget", plan.cold.budget},
                      {"bytes", plan.cold.bytes},
                      {"experts", plan.cold.experts},
                      {"row_share", plan.cold.row_share}};
    const placement_prediction &p = plan.prediction;
    j["prediction"] = {{"tok_s", p.tok_s},           {"gpu_ms", p.gpu_ms},       {"cold_ms", p.cold_ms},
                       {"gpu_gbps", p.gpu_gbps},     {"cpu_gbps", p.cpu_gbps},   {"link_gbps", p.link_gbps},
                       {"link_latency_us", p.link_latency_us}, {"default_figures", p.default_figures}};
    j["hosts"] = json::array();
    for (const placement_host &h : plan.hosts)
        j["hosts"].push_back({{"name", h.name}, {"devices", h.n_devices}, {"memory_gib", h.memory_gib}});
    j["host_link"] = {{"gbps", p.host_link_gbps}, {"latency_us", p.host_link_latency_us},
                      {"source", plan.host_link.source.empty() ? "default" : plan.host_link.source}};
    j["devices"] = json::array();
    for (const auto &d : plan.devices) {
        j["devices"].push_back({{"logical", d.logical},
                                {"physical", d.physical},
                                {"name", d.name},
                                {"stage", d.stage},
                                {"host", d.host},
                                {"role", placement_role_name(d.role)},
                                {"partner", d.partner},
                                {"layer_begin", d.layer_begin},
                                {"layer_end", d.layer_end},
                                {"experts", d.experts},
                                {"embedding", d.embedding},
                                {"head_begin", d.head_begin},
                                {"head_end", d.head_end},
                                {"bytes", {{"replicated", d.bytes_replicated},
                                           {"experts", d.bytes_experts},
                                           {"embedding", d.bytes_embedding},
                                           {"head", d.bytes_head},
                                           {"kv", d.bytes_kv},
                                           {"scratch", d.bytes_scratch},
                                           {"total", d.total()}}},
                                {"budget", d.budget},
                                {"free", d.free()}});
    }
    return j.dump(2);
}

}  // namespace tandem
