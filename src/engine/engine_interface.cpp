// src/engine/engine_interface.cpp - what tandem/engine.h declares for every backend and caller:
// the option enums' names, and whole-row outputs completed on the host.
#include "tandem/engine.h"
#include "tandem/error.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

namespace tandem {

namespace {

template <typename E, size_t N>
E enum_parse(const std::array<std::pair<const char *, E>, N> &names, const std::string &name, const char *what) {
    for (const auto &[text, value] : names)
        if (name == text) return value;
    std::string allowed;
    for (const auto &[text, value] : names) allowed += (allowed.empty() ? "" : ", ") + std::string(text);
    fail(error_kind::config, "unknown {} '{}' (allowed: {})", what, name, allowed);
}

template <typename E, size_t N>
const char *enum_name(const std::array<std::pair<const char *, E>, N> &names, E value) {
    for (const auto &[text, v] : names)
        if (v == value) return text;
    return "?";
}

constexpr std::array<std::pair<const char *, engine_backend>, 3> backend_names{
    {{"auto", engine_backend::automatic}, {"cpu", engine_backend::cpu}, {"cuda", engine_backend::cuda}}};
constexpr std::array<std::pair<const char *, kv_type>, 4> kv_names{
    {{"auto", kv_type::automatic}, {"f32", kv_type::f32}, {"f16", kv_type::f16}, {"q8_0", kv_type::q8_0}}};
constexpr std::array<std::pair<const char *, engine_transport>, 4> transport_names{
    {{"auto", engine_transport::automatic}, {"p2p", engine_transport::p2p}, {"host", engine_transport::host},
     {"nccl", engine_transport::nccl}}};

constexpr std::array<std::pair<const char *, cpu_arithmetic>, 2> arithmetic_names{
    {{"digits", cpu_arithmetic::digits}, {"exact", cpu_arithmetic::exact}}};

}  // namespace

double engine_load_progress::percent() const {
    const uint64_t t = total.load(), d = done.load();
    return t == 0 ? 0.0 : 100.0 * double(std::min(d, t)) / double(t);
}

cpu_arithmetic cpu_arithmetic_parse(const std::string &name) { return enum_parse(arithmetic_names, name, "CPU arithmetic"); }
const char *cpu_arithmetic_name(cpu_arithmetic arithmetic) { return enum_name(arithmetic_names, arithmetic); }
engine_backend engine_backend_parse(const std::string &name) { return enum_parse(backend_names, name, "backend"); }
const char *engine_backend_name(engine_backend backend) { return enum_name(backend_names, backend); }
kv_type kv_type_parse(const std::string &name) { return enum_parse(kv_names, name, "KV cache type"); }
const char *kv_type_name(kv_type type) { return enum_name(kv_names, type); }
engine_transport engine_transport_parse(const std::string &name) { return enum_parse(transport_names, name, "transport"); }
const char *engine_transport_name(engine_transport transport) { return enum_name(transport_names, transport); }

void row_rules_apply(const row_rules &rules, std::span<float> logits) {
    const int64_t n = int64_t(logits.size());
    for (const token_adjust &a : rules.adjust) {
        TANDEM_ASSERT(a.id >= 0 && a.id < n, "logit rule for token {} of a {}-token row", a.id, n);
        logits[size_t(a.id)] = token_adjust_apply(a, logits[size_t(a.id)]);
    }
    if (rules.allowed.empty()) return;
    TANDEM_ASSERT(int64_t(rules.allowed.size()) * 32 >= n, "a mask of {} words for a {}-token row", rules.allowed.size(), n);
    for (int64_t i = 0; i < n; ++i)
        if (!token_allowed(rules.allowed.data(), int32_t(i))) logits[size_t(i)] = -std::numeric_limits<float>::infinity();
}

bool engine_rows_have_rules(std::span<const engine_row> rows) {
    return std::any_of(rows.begin(), rows.end(),
                       [](const engine_row &r) { return r.want != row_output::none && r.rules && !r.rules->empty(); });
}

void engine_outputs_from_logits(std::span<const engine_row> rows, int32_t n_vocab, bool tops_done, engine_outputs &out) {
    const size_t vocab = size_t(n_vocab);
    std::vector<row_draw> draws;
    bool want_logits = false;
    for (const engine_row &r : rows) {
        if (r.want == row_output::none) continue;
        draws.push_back(r.draw);
        want_logits = want_logits || r.want == row_output::logits;
    }
    TANDEM_ASSERT(out.logits.size() == draws.size() * vocab, "{} logits for {} output rows", out.logits.size(), draws.size());
    size_t j = 0;
    for (const engine_row &r : rows) {
        if (r.want == row_output::none) continue;
        if (r.rules && !r.rules->empty()) {
            row_rules_apply(*r.rules, {out.logits.data() + j * vocab, vocab});
            tops_done = false;  // the summaries must be of the changed logits
        }
        ++j;
    }
    if (!tops_done) {
        out.top.clear();
        for (size_t i = 0; i < draws.size(); ++i) out.top.push_back(logits_top_of({out.logits.data() + i * vocab, vocab}));
    }
    if (draws_any(draws)) draw_rows_exact(out.logits, draws, out.top);
    if (!want_logits) out.logits.clear();
}

void engine::slot_export(int32_t, int32_t, std::span<uint8_t>) {
    fail(error_kind::unsupported, "this engine cannot copy a slot's KV out");
}

void engine::slot_import(int32_t, std::span<const uint8_t>) {
    fail(error_kind::unsupported, "this engine cannot copy KV into a slot");
}

void engine::slot_copy(int32_t, int32_t, int32_t) { fail(error_kind::unsupported, "this engine cannot copy KV between slots"); }

void engine_forward_logits(engine &eng, std::span<const engine_row> rows, std::vector<float> &logits) {
    TANDEM_ASSERT(std::all_of(rows.begin(), rows.end(), [](const engine_row &r) {
                      return r.want == row_output::none || r.want == row_output::logits;
                  }),
                  "engine_forward_logits takes rows that want logits or nothing");
    engine_outputs out;
    eng.forward(rows, out);
    logits = std::move(out.logits);
}

}  // namespace tandem
