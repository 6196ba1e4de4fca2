// tests/unit/grammar/bench_grammar.cpp - token mask cost per generation step over a Qwen-sized
// synthetic vocabulary (151,936 ids), for a JSON schema (default: schemas/nested_objects.json).
// Built with the tests, never run by ctest: `build-cpu/tests/unit/grammar/bench_grammar [schema.json]
// [--walks N] [--seed S]`. Reports the vocabulary index build, the schema compile, and per-step
// fill_mask times: with a fresh constraint per generation (cold per-state caches) and with one
// constraint shared by all generations (as a server that caches compiled schemas would).
#include "grammar_walk.h"
#include "synth_vocab.h"

#include "tandem/grammar.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

using clock_type = std::chrono::steady_clock;

namespace {

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// This thread's CPU time: steps are timed on one core, unaffected by other processes' load.
double thread_us() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

struct step_stats {
    std::vector<double> us;
    void report(const char *what) {
        std::sort(us.begin(), us.end());
        double sum = 0;
        for (double x : us) sum += x;
        const auto q = [&](double p) { return us[std::min(us.size() - 1, size_t(p * double(us.size())))]; };
        std::printf("%-28s steps %6zu  mean %8.1f us  p50 %7.1f  p90 %7.1f  p99 %8.1f  max %8.1f\n", what, us.size(),
                    sum / double(us.size()), q(0.5), q(0.9), q(0.99), us.back());
    }
};

// One generation: times every fill_mask; tokens drawn as grammar_walk draws them.
void run_walk(const tandem::grammar_constraint &c, const grammar_test::synth_vocab &sv, uint64_t seed, step_stats &stats,
              size_t &bytes) {
    tandem::grammar_matcher m(c);
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> mask(size_t(c.vocab().n_mask_words()));
    grammar_test::walk_options opt;
    opt.cap_tokens = 400;
    opt.progress_pct = 20;  // strings of about five tokens, as model outputs have
    for (size_t step = 0; !m.is_terminated(); ++step) {
        const double t0 = thread_us();
        m.fill_mask(mask);
        stats.us.push_back(thread_us() - t0);
        const std::vector<int32_t> allowed = grammar_test::mask_ids(mask, c.vocab().n_vocab());
        const bool progress = step >= opt.cap_tokens || rng() % 100 < opt.progress_pct;
        const int32_t id = progress ? grammar_test::progress_token(m, allowed, sv.tokens, sv.eog_ids, rng)
                                    : allowed[size_t(rng() % allowed.size())];
        m.accept_token(id);
        if (!m.is_terminated()) bytes += sv.tokens[size_t(id)].size();
    }
}

}  // namespace

int main(int argc, char **argv) {
    std::string schema_path = std::string(TANDEM_SOURCE_DIR) + "/tests/unit/grammar/schemas/nested_objects.json";
    int walks = 20;
    uint64_t seed = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--walks" && i + 1 < argc) {
            walks = std::atoi(argv[++i]);
        } else if (a == "--seed" && i + 1 < argc) {
            seed = std::strtoull(argv[++i], nullptr, 10);
        } else {
            schema_path = a;
        }
    }
    std::ifstream in(schema_path);
    if (!in) {
        std::fprintf(stderr, "cannot read %s\n", schema_path.c_str());
        return 2;
    }
    std::stringstream text;
    text << in.rdbuf();

    auto t0 = clock_type::now();
    const grammar_test::synth_vocab sv = grammar_test::make_synth_vocab(151643, 293);
    const double t_synth = ms_since(t0);
    t0 = clock_type::now();
    const tandem::grammar_vocab vocab(sv.tokens, sv.special_ids, sv.eog_ids);
    const double t_vocab = ms_since(t0);
    t0 = clock_type::now();
    const tandem::grammar g = tandem::grammar::from_json_schema_text(text.str());
    const double t_compile = ms_since(t0);
    std::printf("vocabulary: %d ids (synthetic, %.0f ms to make); index built in %.1f ms\n", vocab.n_vocab(), t_synth, t_vocab);
    std::printf("schema %s: compiled in %.2f ms (%d rules, %d states)\n", schema_path.c_str(), t_compile, g.n_rules(), g.n_states());

    step_stats cold, shared;
    size_t bytes = 0;
    t0 = clock_type::now();
    for (int w = 0; w < walks; ++w) {
        const tandem::grammar_constraint c(g, vocab);
        run_walk(c, sv, seed + uint64_t(w), cold, bytes);
    }
    const double t_cold = ms_since(t0);
    const tandem::grammar_constraint c(g, vocab);
    for (int w = 0; w < walks; ++w) run_walk(c, sv, seed + uint64_t(w), shared, bytes);
    std::printf("%d generations, %.0f bytes each on average (%.0f ms wall for the cold ones, walk overhead included)\n",
                walks, double(bytes) / double(2 * walks), t_cold);
    cold.report("fresh constraint each:");
    shared.report("one shared constraint:");
    std::printf("cached state sets in the shared constraint: %zu\n", c.n_cached_states());
    return 0;
}
