// src/tools/cmd_bench.cpp - `tandem bench`: prefill and multi-session decode throughput, bytes a
// decode step must read, achieved bandwidth and share of the roof; optional JSON for the gate.
#include "commands.h"
#include "engine_flags.h"
#include "src/scheduler/draft_lookup.h"
#include "src/scheduler/session_rules.h"
#include "src/server/api_controls.h"

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/model.h"
#include "tandem/sampler.h"
#include "tandem/tokenizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#ifndef TANDEM_GIT_COMMIT
#define TANDEM_GIT_COMMIT "unknown"
#endif

namespace {

using clock_type = std::chrono::steady_clock;

struct bench_cli {
    tandem::engine_options engine;
    std::string model, sessions = "1,4,16", json_path, traffic_path, schema_path;
    int constrained = -1;  // sessions under --schema a session count (-1: all)
    int prompt = 2048, gen = 128, decode_prompt = 16, prefill_chunk = 2048, repeats = 3, draft = 0, draft_step_rows = 16;
    double bandwidth_gbps = 0;
    float temperature = 0.0f, top_p = 1.0f;
    bool full_logits = false, summaries = false, draft_oracle = false;
};

std::vector<int> parse_list(const std::string &text) {
    std::vector<int> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ','))
        try {
            out.push_back(std::stoi(item));
            if (out.back() < 1) throw std::invalid_argument(item);
        } catch (const std::exception &) {
            tandem::fail(tandem::error_kind::config, "--sessions: '{}' is not a positive count", item);
        }
    if (out.empty()) tandem::fail(tandem::error_kind::config, "--sessions is empty");
    return out;
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown cpu";
}

// Bytes one decode step reads: every replicated weight, the head, and the routed experts the
// step touches (measured by the engine when it reports it, else the uniform-routing estimate).
double step_bytes(const tandem::model_hparams &hp, const tandem::model_bytes &bytes, int n_rows,
                  double experts_touched_per_layer) {
    double rep = 0, exp = 0;
    for (uint64_t b : bytes.layer_replicated) rep += double(b);
    for (uint64_t b : bytes.layer_experts) exp += double(b);
    double touched = experts_touched_per_layer;
    if (touched <= 0)
        touched = hp.n_expert * (1.0 - std::pow(1.0 - double(hp.n_expert_used) / hp.n_expert, n_rows));
    return rep + double(bytes.head) + exp * touched / hp.n_expert;
}

// The bandwidth a memory-bound step could reach: --bandwidth when given, else on CUDA the sum of a
// measured device copy on each GPU of the plan (what kernels can actually stream; the peak from
// the memory clock is reported beside it), and none for the CPU backend.
struct bench_roof {
    double gb_s = 0, peak_gb_s = 0;
    std::string source;
};

bench_roof bench_roof_measure(const tandem::engine &eng, double flag_gb_s) {
    bench_roof roof;
    if (flag_gb_s > 0) {
        roof.gb_s = flag_gb_s;
        roof.source = "--bandwidth";
        return roof;
    }
    const std::vector<int32_t> gpus = eng.gpus();
    for (const int32_t gpu : gpus) {
        const tandem::engine_memory_speed sp = tandem::engine_memory_measure(gpu);
        roof.gb_s += sp.copy_gb_s;
        roof.peak_gb_s += sp.peak_gb_s;
    }
    if (!gpus.empty())
        roof.source = fmt::format("measured device copy, 1 GiB, on {} GPU{}", gpus.size(), gpus.size() == 1 ? "" : "s");
    return roof;
}

// One engine call whose output rows want summaries (or their best token): their logits_top.
void forward_tops(tandem::engine &eng, std::span<const tandem::engine_row> rows, std::vector<tandem::logits_top> &tops) {
    tandem::engine_outputs out;
    eng.forward(rows, out);
    tops = std::move(out.top);
}

tandem::row_output summary_if(bool wanted) { return wanted ? tandem::row_output::summary : tandem::row_output::none; }

// --schema: the first sessions of a decode run generate under the schema's grammar, as the server's
// constrained requests do (each row's mask filled on the host, applied where the backend applies
// rules); a session whose output completes starts a new one in the same slot.
struct bench_constraints {
    std::shared_ptr<const tandem::grammar_constraint> constraint;  // null: no --schema
    std::optional<tandem::tokenizer> tok;
    std::vector<std::unique_ptr<tandem::session_rules>> rules;     // [constrained sessions]
    double rules_seconds = 0;                                       // filling masks, this run
    uint64_t outputs_completed = 0;

    void start(size_t n, int32_t n_vocab) {
        rules.clear();
        for (size_t s = 0; s < n; ++s)
            rules.push_back(std::make_unique<tandem::session_rules>(tandem::sampling_params{}, std::span<const int32_t>{}, n_vocab,
                                                                   tandem::session_constraint{constraint, {}, nullptr}));
        rules_seconds = 0;
        outputs_completed = 0;
    }
    void attach(std::vector<tandem::engine_row> &rows) {
        const auto t0 = clock_type::now();
        for (size_t s = 0; s < rules.size(); ++s) rows[s].rules = rules[s]->next_row(INT64_MAX);
        rules_seconds += seconds_since(t0);
    }
    void accept(const std::vector<int32_t> &picked, int32_t n_vocab) {
        const auto t0 = clock_type::now();
        for (size_t s = 0; s < rules.size(); ++s) {
            if (!rules[s]->accept(picked[s])) tandem::fail(tandem::error_kind::internal, "session {} drew token {} outside its grammar", s, picked[s]);
            if (tok->is_eog(picked[s])) {
                rules[s] = std::make_unique<tandem::session_rules>(tandem::sampling_params{}, std::span<const int32_t>{}, n_vocab,
                                                                   tandem::session_constraint{constraint, {}, nullptr});
                ++outputs_completed;
            }
        }
        rules_seconds += seconds_since(t0);
    }
};

}  // namespace

// Greedy decode of n sessions with drafts (draft_options' default n-grams, as the server's), fed
// as the scheduler feeds them: each session's next token, then its drafts while the step's rows
// stay within step_rows; the drafts each session's greedy draws confirm are kept, the slot
// truncated past them. Drafts come from prompt lookup
// (draft_lookup, as tandem-server --draft), or with `oracle` from the session's own greedy
// continuation, decoded one row a step beforehand: every draft is then right (the engine's rows are
// batch invariant, bitwise), which measures what a step of 1 + draft rows a session can give.
// Tokens a second over `gen` steps after two warm-up steps, rows a step and the drafts kept.
template <class RandomIds>
nlohmann::json decode_with_drafts(tandem::engine &eng, int n, int decode_prompt, int gen, int draft, int step_rows, bool oracle,
                                  RandomIds &random_ids) {
    using namespace tandem;
    const size_t ns = static_cast<size_t>(n);
    std::vector<draft_lookup> history;
    std::vector<draft_length> lengths;
    std::vector<std::vector<int32_t>> prompts(ns), continuation(ns);
    std::vector<int32_t> next(ns);
    std::vector<size_t> emitted_by(ns, 0);  // tokens each session has emitted (its first included)
    std::vector<logits_top> tops;
    auto start = [&](int s) {
        eng.slot_truncate(s, 0);
        std::vector<engine_row> rows;
        for (int i = 0; i < decode_prompt; ++i) rows.push_back({s, i, prompts[size_t(s)][size_t(i)], summary_if(i + 1 == decode_prompt), true});
        forward_tops(eng, rows, tops);
        return tops[0].top[0].id;
    };
    for (int s = 0; s < n; ++s) prompts[size_t(s)] = random_ids(decode_prompt);
    if (oracle) {
        // The greedy continuation, one row a step (not timed).
        const size_t needed = size_t(gen + 2) * size_t(1 + draft) + 1;
        for (int s = 0; s < n; ++s) continuation[size_t(s)].push_back(start(s));
        for (size_t i = 1; i < needed && decode_prompt + int(i) < eng.n_ctx(); ++i) {
            std::vector<engine_row> rows;
            for (int s = 0; s < n; ++s) rows.push_back({s, decode_prompt + int32_t(i) - 1, continuation[size_t(s)].back(), row_output::summary});
            forward_tops(eng, rows, tops);
            for (int s = 0; s < n; ++s) continuation[size_t(s)].push_back(tops[size_t(s)].top[0].id);
        }
    }
    double seconds = 0;
    uint64_t emitted = 0, drafted = 0, accepted = 0, rows_total = 0;
    // Two passes over the same prompts, the second timed: the same greedy tokens give the same
    // steps, so every step shape (CUDA graph) the timed pass meets was captured by the first.
    for (int pass = 0; pass < 2; ++pass) {
        const bool timed = pass == 1;
        history.clear();
        lengths.clear();
        for (int s = 0; s < n; ++s) {
            history.emplace_back(draft_options{draft});
            history.back().append(prompts[size_t(s)]);
            next[size_t(s)] = start(s);
            history.back().append(next[size_t(s)]);
            emitted_by[size_t(s)] = 1;
            lengths.emplace_back(draft);
        }
        auto propose = [&](int s, int room) {
            if (!oracle) return history[size_t(s)].propose(room);
            const std::vector<int32_t> &c = continuation[size_t(s)];
            const size_t from = std::min(emitted_by[size_t(s)], c.size());
            return std::vector<int32_t>(c.begin() + std::ptrdiff_t(from), c.begin() + std::ptrdiff_t(std::min(c.size(), from + size_t(room))));
        };
        for (int step = 0; step < gen + 2; ++step) {
            std::vector<engine_row> rows;
            std::vector<std::vector<int32_t>> drafts(ns);
            int spare = step_rows - n;
            for (int s = 0; s < n; ++s) {
                const int32_t pos = eng.slot_length(s);
                rows.push_back({s, pos, next[size_t(s)], row_output::summary});
                const int room = std::min({spare, oracle ? draft : lengths[size_t(s)].next(), eng.n_ctx() - 1 - pos});
                if (room > 0) drafts[size_t(s)] = propose(s, room);
                for (size_t i = 0; i < drafts[size_t(s)].size(); ++i) rows.push_back({s, pos + 1 + int32_t(i), drafts[size_t(s)][i], row_output::summary});
                spare -= int(drafts[size_t(s)].size());
            }
            const auto t0 = clock_type::now();
            forward_tops(eng, rows, tops);
            const double dt = seconds_since(t0);
            size_t row = 0;
            uint64_t step_emitted = 0;
            for (int s = 0; s < n; ++s) {
                const std::vector<int32_t> &d = drafts[size_t(s)];
                std::vector<int32_t> sampled;
                for (size_t j = 0; j <= d.size(); ++j) sampled.push_back(tops[row + j].top[0].id);
                row += d.size() + 1;
                const size_t kept = draft_accepted(d, sampled);
                const int32_t pos = eng.slot_length(s) - int32_t(d.size()) - 1;  // next token's row
                if (kept < d.size()) eng.slot_truncate(s, pos + 1 + int32_t(kept));
                history[size_t(s)].append(std::span<const int32_t>(sampled.data(), kept + 1));
                next[size_t(s)] = sampled[kept];
                emitted_by[size_t(s)] += kept + 1;
                lengths[size_t(s)].record(d.size(), kept);
                step_emitted += kept + 1;
                if (timed && step >= 2) {
                    drafted += d.size();
                    accepted += kept;
                }
            }
            if (timed && step >= 2) {
                seconds += dt;
                emitted += step_emitted;
                rows_total += rows.size();
            }
        }
    }
    return {{"sessions", n}, {"draft", draft}, {"oracle", oracle}, {"tok_per_s", double(emitted) / seconds},
            {"ms_per_step", seconds * 1e3 / gen}, {"rows_per_step", double(rows_total) / gen},
            {"tokens_per_step", double(emitted) / gen}, {"drafted", drafted}, {"accepted", accepted}};
}

TANDEM_COMMAND(bench, "Measure prefill and multi-session decode throughput", [](CLI::App &sub) {
    auto cli = std::make_shared<bench_cli>();
    sub.add_option("-m,--model", cli->model, "GGUF file")->required();
    sub.add_option("--prompt", cli->prompt, "Prefill benchmark prompt length (0: skip)");
    sub.add_option("--gen", cli->gen, "Decode steps per session count");
    sub.add_option("--sessions", cli->sessions, "Comma-separated session counts for decode");
    sub.add_option("--decode-prompt", cli->decode_prompt, "Tokens each decoding session starts with");
    sub.add_option("--prefill-chunk", cli->prefill_chunk, "Rows per prefill call");
    sub.add_option("--repeats", cli->repeats, "Prefill repeats (median)");
    sub.add_option("--bandwidth", cli->bandwidth_gbps,
                   "Memory bandwidth roof in GB/s for % of roof (default on CUDA: a measured device copy on each GPU of the plan, summed)");
    sub.add_flag("--full-logits", cli->full_logits,
                 "Decode steps take whole logits rows (as a temperature draw with --no-device-draws does) instead of each row's best tokens");
    sub.add_flag("--summaries", cli->summaries,
                 "Decode steps reduce each row to its 64 best tokens and normaliser (what requests with logprobs or a top_k "
                 "up to 64 take) instead of its best token alone beside the draw (the server's other requests)");
    sub.add_option("--temperature", cli->temperature,
                   "Decode steps draw each session's token at this temperature (an exact draw beside each row's best token, "
                   "or its summary with --summaries; on the GPU unless --no-device-draws, else from whole rows on the host) "
                   "instead of taking the best");
    sub.add_option("--top-p", cli->top_p, "With --temperature: draw from the nucleus of this mass (0, 1]")->check(CLI::Range(0.0f, 1.0f));
    sub.add_option("--draft", cli->draft,
                   "Also decode with up to this many prompt-lookup drafts a session a step (greedy; as tandem-server --draft)");
    sub.add_option("--draft-step-rows", cli->draft_step_rows, "Drafts only while a step's decode rows stay within this");
    sub.add_flag("--draft-oracle", cli->draft_oracle,
                 "With --draft, also decode with each session's own greedy continuation as its drafts (all kept): "
                 "what steps of 1 + draft rows a session give at full acceptance");
    sub.add_option("--schema", cli->schema_path,
                   "Decode with sessions constrained by this JSON Schema file (as response_format json_schema): each "
                   "step fills their grammar masks, which the engine applies with their rows");
    sub.add_option("--constrained", cli->constrained, "With --schema: this many of each session count constrained (default: all)")
        ->check(CLI::Range(0, 1 << 20));
    sub.add_option("--json", cli->json_path, "Also write the results as JSON to this file");
    sub.add_option("--expert-traffic-out", cli->traffic_path,
                   "Record the rows routed to each expert and write them here (the --expert-balance format)");
    // The KV type the server runs (auto: f16 on CUDA, f32 on the CPU), so the bench measures what a
    // server serves; `logits` and `generate`, the reference tools, keep f32 (engine_options).
    cli->engine.kv = tandem::kv_type::automatic;
    tandem::tools::add_engine_flags(sub, cli->engine);
    const CLI::Option *ctx_flag = sub.get_option("--ctx");
    return [cli, ctx_flag] {
        using namespace tandem;
        const std::vector<int> counts = parse_list(cli->sessions);
        if (cli->gen < 2 || cli->prompt < 0 || cli->decode_prompt < 1 || cli->prefill_chunk < 1 || cli->repeats < 1)
            fail(error_kind::config, "--gen must be >= 2; --prompt >= 0; --decode-prompt, --prefill-chunk, --repeats >= 1");
        if (cli->draft < 0 || cli->draft > 16 || cli->draft_step_rows < 2)
            fail(error_kind::config, "--draft must be between 0 and 16 and --draft-step-rows >= 2");
        auto file = gguf_file::open(cli->model);
        const model_hparams hp = model_hparams_read(*file);
        const model_bytes bytes = model_bytes_read(*file, hp, 4);
        engine_options opt = cli->engine;
        opt.n_slots = *std::max_element(counts.begin(), counts.end());
        // Slots of the run's length (+2 warm-up steps), or --ctx when larger: decode as a server with
        // --ctx 32768 runs it (the attention's chunk grid covers the whole slot).
        const int32_t needed = std::max(cli->prompt, cli->decode_prompt + (cli->gen + 2) * (1 + cli->draft)) + 1;
        opt.n_ctx = std::min(hp.n_ctx_train, ctx_flag->count() > 0 ? std::max(cli->engine.n_ctx, needed) : needed);
        opt.backend = engine_backend_resolve(opt);
        opt.record_expert_traffic = !cli->traffic_path.empty();
        auto eng = engine_open(file, opt);
        bench_constraints constraints;
        if (!cli->schema_path.empty()) {
            std::ifstream in(cli->schema_path);
            if (!in) fail(error_kind::config, "--schema {}: cannot read it", cli->schema_path);
            std::stringstream text;
            text << in.rdbuf();
            constraints.tok.emplace(tokenizer::from_gguf(*file));
            const grammar g = grammar::from_json_schema_text(text.str());
            constraints.constraint = std::make_shared<const grammar_constraint>(g, server::grammar_vocab_of(*constraints.tok));
        } else if (cli->constrained >= 0) {
            fail(error_kind::config, "--constrained needs --schema");
        }
        const bench_roof roof_info = bench_roof_measure(*eng, cli->bandwidth_gbps);
        const double roof = roof_info.gb_s;
        std::mt19937 rng(1234);
        auto random_ids = [&](int n) {
            std::vector<int32_t> ids(static_cast<size_t>(n));
            for (auto &t : ids) t = int32_t(rng() % uint32_t(hp.n_vocab));
            return ids;
        };
        std::vector<logits_top> tops;  // prompt rows' summaries
        engine_outputs outputs;        // a decode step's rows as the server takes them
        // --temperature: each decode row's exact draw, from a fixed stream of uniform numbers.
        row_draw draw;
        draw.temperature = cli->temperature;
        draw.inv_temp = cli->temperature > 0.0f ? float(1.0 / double(cli->temperature)) : 0.0f;
        draw.top_p = cli->top_p;
        if (!(cli->top_p > 0.0f)) fail(error_kind::config, "--top-p must be in (0, 1]");
        std::mt19937_64 draw_rng(99);
        if (int(cli->full_logits) + int(cli->temperature > 0.0f || cli->summaries) > 1)
            fail(error_kind::config, "--full-logits takes whole rows: not with --temperature or --summaries");
        nlohmann::json result;
        if (roof > 0) {
            result["roof"] = {{"gb_per_s", roof}, {"source", roof_info.source}};
            if (roof_info.peak_gb_s > 0) result["roof"]["peak_gb_per_s"] = roof_info.peak_gb_s;
            fmt::print("roof     {:.0f} GB/s ({}{})\n", roof, roof_info.source,
                       roof_info.peak_gb_s > 0 ? fmt::format("; peak from memory clock and bus width {:.0f} GB/s", roof_info.peak_gb_s) : "");
        }

        // Prefill: one session, the prompt in chunks; median over repeats (first one warms up).
        if (cli->prompt > 0) {
            const std::vector<int32_t> ids = random_ids(cli->prompt);
            std::vector<double> times;
            for (int rep = 0; rep <= cli->repeats; ++rep) {
                eng->slot_truncate(0, 0);
                const auto t0 = clock_type::now();
                for (int begin = 0; begin < cli->prompt; begin += cli->prefill_chunk) {
                    const int end = std::min(cli->prompt, begin + cli->prefill_chunk);
                    std::vector<engine_row> rows;
                    for (int i = begin; i < end; ++i) rows.push_back({0, i, ids[size_t(i)], summary_if(i + 1 == cli->prompt), true});
                    forward_tops(*eng, rows, tops);
                }
                if (rep > 0 || cli->repeats == 0) times.push_back(seconds_since(t0));
            }
            const double t = median(times);
            result["prefill"] = {{"tokens", cli->prompt}, {"seconds", t}, {"tok_per_s", cli->prompt / t}};
            fmt::print("prefill  {:6} tokens  {:9.2f} ms  {:10.1f} tok/s\n", cli->prompt, t * 1e3, cli->prompt / t);
        }

        // Decode: n sessions, each starting from a short prompt; one engine call per step with
        // every session's row; tokens from each row's best token or draw (what the server asks for
        // requests without logprobs; --summaries: the 64-token summaries that logprobs and small
        // top_k requests take); median step time after two warm-up steps.
        result["decode"] = nlohmann::json::array();
        for (int n : counts) {
            for (int s = 0; s < n; ++s) {
                eng->slot_truncate(s, 0);
                const std::vector<int32_t> ids = random_ids(cli->decode_prompt);
                std::vector<engine_row> rows;
                for (int i = 0; i < cli->decode_prompt; ++i)
                    rows.push_back({s, i, ids[size_t(i)], summary_if(i + 1 == cli->decode_prompt), true});
                forward_tops(*eng, rows, tops);
            }
            std::vector<int32_t> next(static_cast<size_t>(n));
            for (int s = 0; s < n; ++s) next[size_t(s)] = int32_t(rng() % uint32_t(hp.n_vocab));
            std::vector<double> step_times;
            uint64_t tokens_fnv = 1469598103934665603ull;  // the tokens decoded (runs that should agree compare it)
            const int n_constrained = constraints.constraint ? (cli->constrained < 0 ? n : std::min(n, cli->constrained)) : 0;
            constraints.start(size_t(n_constrained), hp.n_vocab);
            double rules_seconds_timed = 0;
            double touched_sum = 0;
            int touched_n = 0;
            for (int step = 0; step < cli->gen + 2; ++step) {
                const row_output want = cli->full_logits ? row_output::logits
                                        : cli->summaries     ? row_output::summary
                                                             : row_output::best;
                std::vector<engine_row> rows;
                for (int s = 0; s < n; ++s) {
                    rows.push_back({s, cli->decode_prompt + step, next[size_t(s)], want});
                    if (cli->temperature > 0.0f && !cli->full_logits) {
                        rows.back().draw = draw;
                        rows.back().draw.u = std::generate_canonical<double, 53>(draw_rng);
                    }
                }
                const auto t0 = clock_type::now();
                const double rules_before = constraints.rules_seconds;
                constraints.attach(rows);
                eng->forward(rows, outputs);
                for (int s = 0; s < n; ++s)
                    next[size_t(s)] = cli->full_logits ? argmax({outputs.logits.data() + size_t(s) * size_t(hp.n_vocab), size_t(hp.n_vocab)})
                                      : cli->temperature > 0.0f ? outputs.top[size_t(s)].drawn
                                                                : outputs.top[size_t(s)].top[0].id;
                for (int s = 0; s < n; ++s)
                    if (next[size_t(s)] < 0) fail(error_kind::internal, "decode row {} was not drawn (NaN logits?)", s);
                constraints.accept(next, hp.n_vocab);
                const double dt = seconds_since(t0);  // a constrained step's time includes its masks
                if (step >= 2) rules_seconds_timed += constraints.rules_seconds - rules_before;
                for (int s = 0; s < n; ++s) tokens_fnv = (tokens_fnv ^ uint64_t(uint32_t(next[size_t(s)]))) * 1099511628211ull;
                if (step >= 2) {
                    step_times.push_back(dt);
                    const auto c = eng->counters();
                    if (auto it = c.find("experts_touched_per_layer"); it != c.end()) {
                        touched_sum += it->second;
                        ++touched_n;
                    }
                }
            }
            const double t = median(step_times);
            const double b = step_bytes(hp, bytes, n, touched_n ? touched_sum / touched_n : 0.0);
            const double gbps = b / t / 1e9;
            nlohmann::json row = {{"sessions", n}, {"ms_per_step", t * 1e3}, {"tok_per_s", n / t},
                                  {"tok_per_s_per_session", 1.0 / t}, {"bytes_per_step", b}, {"gb_per_s", gbps}};
            if (roof > 0) row["pct_of_roof"] = 100.0 * gbps / roof;
            const auto counters = eng->counters();
            for (const auto &[k, v] : counters) row[k] = v;
            if (cli->temperature > 0.0f) {
                row["temperature"] = cli->temperature;
                row["top_p"] = cli->top_p;
            }
            row["tokens_fnv"] = fmt::format("{:016x}", tokens_fnv);
            if (constraints.constraint) {
                row["constrained"] = n_constrained;
                row["rules_ms_per_step"] = rules_seconds_timed * 1e3 / cli->gen;
                row["constrained_outputs_completed"] = constraints.outputs_completed;
            }
            result["decode"].push_back(row);
            const auto launches = counters.find("launches_per_step");
            fmt::print("decode   {:3} sessions  {:8.2f} ms/step  {:9.1f} tok/s aggregate  {:8.1f} tok/s/session  "
                       "{:7.3f} GB/step  {:8.1f} GB/s{}{}{}\n",
                       n, t * 1e3, n / t, 1.0 / t, b / 1e9, gbps,
                       constraints.constraint ? fmt::format("  {} constrained ({:.3f} ms/step of masks)", n_constrained,
                                                            rules_seconds_timed * 1e3 / cli->gen)
                                              : std::string(),
                       roof > 0 ? fmt::format("  {:.1f}% of {:.0f} GB/s", 100.0 * gbps / roof, roof) : "",
                       launches != counters.end() && launches->second > 0 ? fmt::format("  {:.0f} launches/step", launches->second) : "");
            for (const bool oracle : {false, true}) {
                if (cli->draft == 0 || (oracle && !cli->draft_oracle)) continue;
                const nlohmann::json dr =
                    decode_with_drafts(*eng, n, cli->decode_prompt, cli->gen, cli->draft, cli->draft_step_rows, oracle, random_ids);
                result[oracle ? "decode_draft_oracle" : "decode_draft"].push_back(dr);
                const double n_drafted = dr["drafted"].get<double>();
                fmt::print("{} {:3} sessions  {:8.2f} ms/step  {:9.1f} tok/s aggregate  {:8.1f} tok/s/session  "
                           "{:5.2f} rows/step  {:.1f}% of {} drafts kept\n",
                           oracle ? "oracle  " : "draft   ", n, dr["ms_per_step"].get<double>(), dr["tok_per_s"].get<double>(),
                           dr["tok_per_s"].get<double>() / n, dr["rows_per_step"].get<double>(),
                           n_drafted > 0 ? 100.0 * dr["accepted"].get<double>() / n_drafted : 0.0, dr["drafted"].get<uint64_t>());
            }
        }
        const auto &d = result["decode"];
        if (d.size() >= 2)
            result["aggregate_ratio_last_vs_first"] = d.back()["tok_per_s"].get<double>() / d.front()["tok_per_s"].get<double>();
        result["commit"] = TANDEM_GIT_COMMIT;
        result["backend"] = engine_backend_name(opt.backend);
        result["layout"] = eng->layout();
        result["hardware"] = {{"cpu", cpu_model_name()}};
        result["model"] = {{"file", cli->model}, {"arch", hp.arch_name}, {"name", hp.name}, {"layers", hp.n_layer},
                           {"d_model", hp.d_model}, {"experts", hp.n_expert}, {"experts_used", hp.n_expert_used},
                           {"file_type", file->get_int("general.file_type", -1)}, {"bytes", bytes.total()}};
        result["flags"] = {{"prompt", cli->prompt}, {"gen", cli->gen}, {"sessions", counts},
                           {"decode_prompt", cli->decode_prompt}, {"prefill_chunk", cli->prefill_chunk}, {"full_logits", cli->full_logits}, {"summaries", cli->summaries}, {"temperature", cli->temperature}, {"top_p", cli->top_p}, {"device_draws", opt.device_draws},
                           {"draft", cli->draft}, {"draft_step_rows", cli->draft_step_rows}, {"schema", cli->schema_path}, {"constrained", cli->constrained}, {"draft_oracle", cli->draft_oracle}, {"threads", opt.n_threads}, {"devices", opt.n_devices}, {"n_ctx", opt.n_ctx}, {"kv_type", kv_type_name(eng->kv_cache_type())}};
        fmt::print("{}\n", eng->layout());
        if (!cli->traffic_path.empty()) engine_write_expert_traffic(*eng, cli->traffic_path);
        if (!cli->json_path.empty()) {
            std::ofstream out(cli->json_path);
            out << result.dump(2) << "\n";
            if (!out) fail(error_kind::config, "cannot write {}", cli->json_path);
        }
        return 0;
    };
});
