// tests/unit/grammar/grammar_probe.cpp - a command-line probe of tandem_grammar for the Python
// checks beside it (their oracles: json, jsonschema, re).
//   grammar_probe walk  SOURCE [--seeds N] [--first S] [--vocab small|qwen] [--cap T] [--progress P]
//       one JSON line per seed: {"seed": S, "text": "<the generated text>"}; P% of the steps
//       before the cap also step towards completion (shorter strings, more of the structure)
//   grammar_probe match SOURCE
//       reads one JSON string per stdin line, prints 1 when the grammar accepts it whole, else 0
// SOURCE: --schema FILE | --gbnf FILE | --gbnf-text TEXT | --pattern REGEX | --json-object,
// optionally --compact (no whitespace in JSON grammars).
#include "grammar_walk.h"
#include "synth_vocab.h"

#include "tandem/error.h"
#include "tandem/grammar.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

std::string read_file(const std::string &path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

struct probe_args {
    std::string command, source_kind, source;
    bool compact = false;
    int seeds = 1;
    uint64_t first = 1;
    std::string vocab = "small";
    size_t cap = 64;
    unsigned progress = 0;
};

probe_args parse_args(int argc, char **argv) {
    probe_args a;
    if (argc < 2) throw std::runtime_error("usage: grammar_probe walk|match SOURCE [options]");
    a.command = argv[1];
    for (int i = 2; i < argc; ++i) {
        const std::string k = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
            return argv[++i];
        };
        if (k == "--schema" || k == "--gbnf" || k == "--gbnf-text" || k == "--pattern") {
            a.source_kind = k, a.source = value();
        } else if (k == "--json-object") {
            a.source_kind = k;
        } else if (k == "--compact") {
            a.compact = true;
        } else if (k == "--seeds") {
            a.seeds = std::stoi(value());
        } else if (k == "--first") {
            a.first = std::stoull(value());
        } else if (k == "--vocab") {
            a.vocab = value();
        } else if (k == "--cap") {
            a.cap = std::stoull(value());
        } else if (k == "--progress") {
            a.progress = unsigned(std::stoul(value()));
        } else {
            throw std::runtime_error("unknown argument " + k);
        }
    }
    return a;
}

tandem::grammar load_grammar(const probe_args &a) {
    const tandem::json_schema_options opt{a.compact ? tandem::json_whitespace::compact : tandem::json_whitespace::flexible};
    if (a.source_kind == "--schema") return tandem::grammar::from_json_schema_text(read_file(a.source), opt);
    if (a.source_kind == "--gbnf") return tandem::grammar::from_gbnf(read_file(a.source));
    if (a.source_kind == "--gbnf-text") return tandem::grammar::from_gbnf(a.source);
    if (a.source_kind == "--pattern") {
        nlohmann::ordered_json s = {{"type", "string"}, {"pattern", a.source}};
        return tandem::grammar::from_json_schema(s, opt);
    }
    if (a.source_kind == "--json-object") return tandem::grammar::json_object(opt);
    throw std::runtime_error("no grammar source given");
}

int walk(const probe_args &a, const tandem::grammar &g) {
    const grammar_test::synth_vocab sv =
        a.vocab == "qwen" ? grammar_test::make_synth_vocab(151643, 293) : grammar_test::make_synth_vocab(20000, 16);
    const tandem::grammar_vocab vocab(sv.tokens, sv.special_ids, sv.eog_ids);
    const tandem::grammar_constraint c(g, vocab);
    grammar_test::walk_options opt;
    opt.cap_tokens = a.cap;
    opt.progress_pct = a.progress;
    for (int i = 0; i < a.seeds; ++i) {
        const uint64_t seed = a.first + uint64_t(i);
        std::mt19937_64 rng(seed);
        tandem::grammar_matcher m(c);
        const std::string text = grammar_test::random_walk(m, vocab, sv.tokens, sv.eog_ids, rng, opt);
        // dump() refuses ill-formed UTF-8: every output must be well-formed text.
        std::printf("%s\n", nlohmann::json({{"seed", seed}, {"text", text}}).dump().c_str());
    }
    return 0;
}

int match(const tandem::grammar &g) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
    const tandem::grammar_vocab vocab(tokens, {}, {});
    const tandem::grammar_constraint c(g, vocab);
    std::string line;
    while (std::getline(std::cin, line)) {
        const std::string text = nlohmann::json::parse(line).get<std::string>();
        tandem::grammar_matcher m(c);
        std::printf("%d\n", m.accept_bytes(text) && m.is_complete() ? 1 : 0);
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    try {
        const probe_args a = parse_args(argc, argv);
        const tandem::grammar g = load_grammar(a);
        if (a.command == "walk") return walk(a, g);
        if (a.command == "match") return match(g);
        throw std::runtime_error("unknown command " + a.command);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "grammar_probe: %s\n", e.what());
        return 1;
    }
}
