// src/engine/cpu_engine_hosts.cpp - the CPU engine over several hosts, one process each: the front
// (rank 0) sends each step's rows to the workers, every process runs its own stages, and only the
// hand-offs move: a stage's hidden rows to the next host, the head's logits back to the front. The
// arithmetic is the one-process engine's, so logits are bitwise those of one process.
#include "cpu_engine.h"

#include "host_memory.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>

namespace tandem {

namespace {

using nlohmann::json;

// A model loads within this long on a worker (its whole file read once from disk).
constexpr double ready_timeout_s = 600.0;

std::span<const uint8_t> bytes_of(const std::string &s) { return {reinterpret_cast<const uint8_t *>(s.data()), s.size()}; }
template <typename T> std::span<const uint8_t> bytes_of(const std::vector<T> &v) {
    return {reinterpret_cast<const uint8_t *>(v.data()), v.size() * sizeof(T)};
}
template <typename T> std::vector<T> values_of(const std::vector<uint8_t> &b) {
    std::vector<T> v(b.size() / sizeof(T));
    std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
    return v;
}

placement_hosts hosts_resolve(const engine_options &o) {
    if (!o.hosts.empty() && !o.hosts_json.empty()) fail(error_kind::config, "give --hosts or --hosts-file, not both");
    placement_hosts h = !o.hosts.empty() ? placement_parse_hosts(o.hosts) : placement_hosts_parse(o.hosts_json, "--hosts-file");
    if (!o.host_link.empty()) h.link = placement_parse_host_link(o.host_link);
    if (!(o.host_timeout_s > 0.0)) fail(error_kind::config, "--host-timeout must be > 0 seconds, got {}", o.host_timeout_s);
    return h;
}

// What a worker needs to build the same plan as the front.
json options_json(const engine_options &o, const gguf_file &file) {
    return {{"model", file.path()},          {"model_bytes", std::filesystem::file_size(file.path())},       {"n_slots", o.n_slots},
            {"n_ctx", o.n_ctx},              {"tensor_parallel", o.tensor_parallel}, {"micro_batches", o.micro_batches},
            {"kv", kv_type_name(o.kv)},      {"arithmetic", cpu_arithmetic_name(o.arithmetic)},
            {"expert_balance", o.expert_balance}, {"record_expert_traffic", o.record_expert_traffic},
            {"hosts", o.hosts},              {"hosts_json", o.hosts_json},       {"host_link", o.host_link},
            {"host_timeout_s", o.host_timeout_s}, {"host_memory_bytes", o.host_memory_bytes}};
}

engine_options options_from_json(const json &j) {
    engine_options o;
    o.backend = engine_backend::cpu;
    o.n_slots = j.at("n_slots");
    o.n_ctx = j.at("n_ctx");
    o.tensor_parallel = j.at("tensor_parallel");
    o.micro_batches = j.at("micro_batches");
    o.kv = kv_type_parse(j.at("kv"));
    o.arithmetic = cpu_arithmetic_parse(j.at("arithmetic"));
    o.expert_balance = j.at("expert_balance");
    o.record_expert_traffic = j.at("record_expert_traffic");
    o.hosts = j.at("hosts");
    o.hosts_json = j.at("hosts_json");
    o.host_link = j.at("host_link");
    o.host_timeout_s = j.at("host_timeout_s");
    o.host_memory_bytes = j.at("host_memory_bytes");
    return o;
}

// Round trips of a small and a large message: the latency is half the small one's, the rate the
// large one's bytes over its time less that latency (the best of a few).
placement_host_link link_measure(host_comm &comm, int32_t worker, double timeout_s) {
    using clock_type = std::chrono::steady_clock;
    auto round_trip = [&](size_t bytes) {
        double best = 1e30;
        const std::vector<uint8_t> msg(bytes, 1);
        for (int i = 0; i < 5; ++i) {
            const auto t0 = clock_type::now();
            comm.send(worker, host_tag::ping, msg);
            comm.recv(worker, host_tag::ping, timeout_s);
            comm.flush(timeout_s);
            best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
        }
        return best;
    };
    const double small = round_trip(8), large = round_trip(size_t(4) << 20);
    placement_host_link link;
    link.latency_us = std::max(0.1, small / 2.0 * 1e6);
    link.gbps = double(size_t(4) << 20) / std::max(1e-9, large / 2.0 - small / 2.0) / 1e9;
    link.source = "measured";
    return link;
}

}  // namespace

void cpu_engine::hosts_start(const engine_options &options, placement_request &req, topology &topo) {
    placement_hosts hosts = hosts_resolve(options);
    comm_ = &host_comm::world();
    rank_ = comm_->rank();
    std::vector<std::string> names;
    for (const placement_host &h : hosts.hosts) names.push_back(h.name);
    comm_->set_names(std::move(names));
    host_timeout_s_ = options.host_timeout_s;
    if (comm_->size() != int32_t(hosts.hosts.size()))
        fail(error_kind::config, "the run has {} processes but the hosts list names {} hosts: start one process per "
             "host under mpirun (tandem-server first)", comm_->size(), hosts.hosts.size());
    host_memory_bytes_ = options.host_memory_bytes ? options.host_memory_bytes : host_memory_read().available_bytes;
    topo = placement_cpu_hosts(hosts.hosts, host_memory_bytes_, req);
    req.hosts = hosts.hosts;
    req.host_link = hosts.link;
    req.mode = options.tensor_parallel ? placement_mode::tensor_parallel
               : req.devices.size() == 1 ? placement_mode::single : placement_mode::pipeline;
}

void cpu_engine::hosts_handshake(const engine_options &options, placement_request &req, const topology &topo,
                                 const placement_model &pm) {
    engine_options sent = options;
    sent.host_memory_bytes = host_memory_bytes_;  // workers plan with the front's figure: the same plan everywhere
    sent.kv = kv_;
    const std::string config = options_json(sent, *file_).dump();
    for (int32_t w = 1; w < comm_->size(); ++w) comm_->send(w, host_tag::config, bytes_of(config));
    comm_->flush(host_timeout_s_);
    if (!req.host_link.source.empty() || comm_->size() < 2) return;
    req.host_link = link_measure(*comm_, 1, host_timeout_s_);
    for (int32_t w = 1; w < comm_->size(); ++w) comm_->send(w, host_tag::ping, {});  // measuring is over
    comm_->flush(host_timeout_s_);
    log_info("host link to {}: {:.2f} GB/s, {:.1f} us (measured)", req.hosts[1].name, req.host_link.gbps,
             req.host_link.latency_us);
    plan_ = placement_plan_make(req, topo, pm);  // the same layers, priced with the measured link
}

void cpu_engine::hosts_wait_ready() {
    for (int32_t w = 1; w < comm_->size(); ++w) {
        const json j = json::parse(values_of<char>(comm_->recv(w, host_tag::ready, ready_timeout_s)), nullptr, false);
        const std::string &name = plan_.hosts[size_t(w)].name;
        if (!j.is_object()) fail(error_kind::internal, "host '{}' answered start-up with something else than JSON", name);
        if (j.contains("error"))
            fail(error_kind::config, "host '{}' (rank {}) could not start: {}", name, w, j["error"].get<std::string>());
        log_info("host '{}' (rank {}) ready: {}", name, w, j.value("layout", std::string()));
    }
}

cpu_engine::~cpu_engine() {
    if (!comm_ || rank_ != 0 || !comm_->lost().empty()) return;
    try {
        hosts_send({op_stop, 0, 0, 0});
        comm_->flush(host_timeout_s_);
    } catch (const std::exception &e) {
        log_error("stopping the workers: {}", e.what());
    }
}

std::vector<std::string> cpu_engine::lost_hosts() const {
    std::vector<std::string> out;
    if (!comm_) return out;
    for (const auto &[rank, why] : comm_->lost()) out.push_back(fmt::format("{}: {}", comm_->who(rank), why));
    return out;
}

void cpu_engine::hosts_check() const {
    const auto lost = lost_hosts();
    if (!lost.empty()) fail(error_kind::unavailable, "lost {}; restart the run (tandem-server and its workers)", lost.front());
}

void cpu_engine::hosts_send(host_command cmd, std::span<const engine_row> rows) {
    if (!comm_->lost().empty()) return;  // the run is over: nothing more reaches the workers
    std::vector<int32_t> msg = {cmd.op, cmd.a, cmd.b, cmd.c};
    for (const engine_row &r : rows) msg.insert(msg.end(), {r.slot, r.pos, r.token, int32_t(r.want)});
    for (int32_t w = 1; w < comm_->size(); ++w) comm_->send(w, host_tag::command, bytes_of(msg));
}

// Each worker writes its layers into the blob in turn.
void cpu_engine::hosts_export(int32_t slot, int32_t n_tokens, std::span<uint8_t> out) {
    hosts_check();
    for (int32_t w = 1; w < comm_->size(); ++w) {
        const std::vector<int32_t> msg = {op_export, slot, n_tokens, 0};
        comm_->send(w, host_tag::command, bytes_of(msg));
        comm_->send(w, host_tag::kv, {out.data(), out.size()});
        const std::vector<uint8_t> back = comm_->recv(w, host_tag::kv, host_timeout_s_);
        TANDEM_ASSERT(back.size() == out.size(), "host rank {} returned {} KV bytes for {}", w, back.size(), out.size());
        std::memcpy(out.data(), back.data(), out.size());
    }
    comm_->flush(host_timeout_s_);
}

void cpu_engine::hosts_import(int32_t slot, std::span<const uint8_t> in) {
    hosts_check();
    hosts_send({op_import, slot, 0, 0});
    for (int32_t w = 1; w < comm_->size(); ++w) comm_->send(w, host_tag::kv, in);
    comm_->flush(host_timeout_s_);
}

void cpu_engine::forward_hosts(std::span<const engine_row> rows, std::vector<float> &logits) {
    if (rank_ == 0) {
        hosts_check();
        hosts_send({op_forward, 0, 0, 0}, rows);
    }
    // Heartbeats while this process works, so the others wait on silence, not on the step's length.
    std::vector<int32_t> others;
    for (int32_t r = 0; r < comm_->size(); ++r)
        if (r != rank_) others.push_back(r);
    comm_->heartbeat_begin(std::move(others), host_timeout_s_ / 4.0);
    struct beat_end {
        host_comm *comm;
        ~beat_end() { comm->heartbeat_end(); }
    } ending{comm_};
    slots_.validate(rows);
    const size_t d = size_t(hp_.d_model), nv = size_t(hp_.n_vocab);
    const std::vector<std::span<const engine_row>> groups = micro_batches(rows);
    const int32_t n_stages = plan_.n_stages, head_host = plan_.stage_host(n_stages - 1);
    std::vector<stage_stats> stats(static_cast<size_t>(n_stages));
    if (rank_ == 0) logits.assign(cpu_output_rows(rows) * nv, 0.0f);
    size_t out_row = 0;
    // Every process takes the micro-batches in order through its stages; sends do not wait, so the
    // front starts the next batch while the next host runs this one.
    for (size_t m = 0; m < groups.size(); ++m) {
        std::vector<float> x(groups[m].size() * d, 0.0f);
        for (const auto &dev : devices_)
            if (dev && dev->part().embedding) dev->embed(groups[m], x.data());
        for (int32_t s = 0; s < n_stages; ++s) {
            if (!stage_local(s)) continue;
            if (s > 0 && !stage_local(s - 1)) {
                x = values_of<float>(comm_->recv(plan_.stage_host(s - 1), host_tag::activations, host_timeout_s_));
                TANDEM_ASSERT(x.size() == groups[m].size() * d, "stage {} received {} floats for {} rows", s, x.size(),
                              groups[m].size());
            }
            run_stage(s, groups[m], x, stats[size_t(s)]);
            if (s + 1 < n_stages && !stage_local(s + 1)) comm_->send(plan_.stage_host(s + 1), host_tag::activations, bytes_of(x));
        }
        const size_t n_out = cpu_output_rows(groups[m]);
        if (head_host == rank_ && n_out > 0) {
            std::vector<float> part(n_out * nv, 0.0f);
            head_rows(groups[m], x.data(), part.data(), n_out);
            if (rank_ == 0) std::memcpy(logits.data() + out_row * nv, part.data(), part.size() * sizeof(float));
            else comm_->send(0, host_tag::logits, bytes_of(part));
        }
        out_row += n_out;
    }
    if (rank_ == 0 && head_host != 0) {
        out_row = 0;
        for (size_t m = 0; m < groups.size(); ++m) {
            const size_t n_out = cpu_output_rows(groups[m]);
            if (n_out == 0) continue;
            const std::vector<float> part = values_of<float>(comm_->recv(head_host, host_tag::logits, host_timeout_s_));
            TANDEM_ASSERT(part.size() == n_out * nv, "host rank {} sent {} logits for {} rows", head_host, part.size(), n_out);
            std::memcpy(logits.data() + out_row * nv, part.data(), part.size() * sizeof(float));
            out_row += n_out;
        }
    }
    comm_->flush(host_timeout_s_);
    experts_touched_ = 0;
    for (const stage_stats &st : stats) experts_touched_ += double(st.experts_touched);
    experts_touched_ /= hp_.n_layer;
    slots_.advance(rows);
}

void cpu_engine::serve() {
    std::vector<float> unused;
    while (true) {
        const std::vector<int32_t> msg = values_of<int32_t>(comm_->recv(0, host_tag::command, 0.0));
        TANDEM_ASSERT(msg.size() >= 4 && (msg.size() - 4) % 4 == 0, "a command of {} words", msg.size());
        const int32_t op = msg[0], a = msg[1], b = msg[2], c = msg[3];
        switch (op) {
        case op_forward: {
            std::vector<engine_row> rows((msg.size() - 4) / 4);
            for (size_t i = 0; i < rows.size(); ++i)
                rows[i] = {msg[4 + 4 * i], msg[5 + 4 * i], msg[6 + 4 * i], row_output(msg[7 + 4 * i])};
            forward_hosts(rows, unused);
            break;
        }
        case op_truncate: slot_truncate(a, b); break;
        case op_copy: slot_copy(a, b, c); break;
        case op_import: slot_import(a, comm_->recv(0, host_tag::kv, host_timeout_s_)); break;
        case op_export: {
            std::vector<uint8_t> blob = comm_->recv(0, host_tag::kv, host_timeout_s_);
            for (const std::vector<int32_t> &members : stage_members_)
                if (local(members[0])) devices_[size_t(members[0])]->kv_export(a, b, blob.data(), kv_token_bytes());
            comm_->send(0, host_tag::kv, blob);
            comm_->flush(host_timeout_s_);
            break;
        }
        case op_stop: return;
        default: fail(error_kind::internal, "unknown command {} from the front", op);
        }
    }
}

int engine_worker_run(const std::string &model_path, int32_t n_threads, bool many) {
    host_comm &comm = host_comm::world();
    if (comm.rank() == 0)
        fail(error_kind::config, "tandem worker runs as a later process of mpirun; the first is tandem-server");
    const std::vector<uint8_t> text = comm.recv(0, host_tag::config, 0.0);
    if (text.empty()) return 0;
    const json config = json::parse(values_of<char>(text));
    engine_options options = options_from_json(config);
    if (n_threads > 0) options.n_threads = n_threads;
    // The front measures the link first unless it was given: answer its pings until an empty one.
    if (options.host_link.empty() && comm.size() > 1) {
        while (true) {
            const std::vector<uint8_t> ping = comm.recv(0, host_tag::ping, options.host_timeout_s);
            if (ping.empty()) break;
            comm.send(0, host_tag::ping, ping);
            comm.flush(options.host_timeout_s);
        }
    }
    std::unique_ptr<cpu_engine> eng;
    try {
        const std::string path = model_path.empty() ? config.at("model").get<std::string>() : model_path;
        auto file = gguf_file::open(path);
        const uintmax_t here = std::filesystem::file_size(path), there = config.at("model_bytes").get<uintmax_t>();
        if (here != there)
            fail(error_kind::config, "the model file {} has {} bytes here but {} on the front", path, here, there);
        eng = std::make_unique<cpu_engine>(std::move(file), options);
    } catch (const std::exception &e) {
        comm.send(0, host_tag::ready, bytes_of(json{{"error", e.what()}}.dump()));
        comm.flush(options.host_timeout_s);
        throw;
    }
    log_info("worker rank {}: {}", comm.rank(), eng->layout());
    comm.send(0, host_tag::ready, bytes_of(json{{"layout", eng->layout()}}.dump()));
    comm.flush(options.host_timeout_s);
    eng->serve();
    eng.reset();
    return many ? engine_worker_run(model_path, n_threads, true) : 0;
}

}  // namespace tandem
