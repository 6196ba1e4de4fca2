// tests/model/model_test_util.h - temp folders, converted fixtures and synth models for model tests.
#pragma once

#include "tandem/engine.h"
#include "tandem/gguf.h"
#include "tandem/types.h"

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem::test {

// A per-process scratch folder under the system temp dir, removed at exit.
const std::string &scratch_dir();

// tests/fixtures/<name> converted to GGUF with `type` (cached per process).
std::string fixture_gguf(const std::string &fixture, ggml_type type);
// A synth preset written once per process (cached by preset/type/layers); q4_k_m: llama.cpp's Q4_K_M
// mix on q4_k (synth_options::q4_k_m).
std::string synth_gguf(const std::string &preset, ggml_type type, int32_t layers = 0, bool q4_k_m = false);
// Copy of `path` with every tensor dequantised to F32 (same keys, same names).
std::string dequantized_copy(const std::string &path);

// arithmetic: the reference (exact) unless a test asks for digits.
std::unique_ptr<engine> open_cpu(const std::string &path, int32_t n_slots, int32_t n_ctx, kv_type kv = kv_type::f32,
                                 cpu_arithmetic arithmetic = cpu_arithmetic::exact);

inline row_output logits_if(bool wanted) { return wanted ? row_output::logits : row_output::none; }

// One engine call with every output row (want != none) asking for `want`, and output row j for
// draws[j] when draws are given (one an output row).
engine_outputs forward_as(engine &eng, std::span<const engine_row> rows, row_output want, std::span<const row_draw> draws = {});

// ||a - b|| / ||b|| in double.
double rel_l2(std::span<const float> a, std::span<const double> b);
double rel_l2(std::span<const float> a, std::span<const float> b);

// Prefills `ids` into `slot` (one call) and returns the logits of every row that asks.
std::vector<float> prefill(engine &eng, int32_t slot, const std::vector<int32_t> &ids, bool all_logits = false);

// n token ids drawn uniformly from [0, n_vocab) by a generator seeded with seed.
std::vector<int32_t> random_prompt(int32_t n, int32_t n_vocab, uint32_t seed);
// The slot's whole K/V as a blob (engine::slot_export of its length).
std::vector<uint8_t> slot_blob(engine &eng, int32_t slot);
// The logits of one more token fed to the slot.
std::vector<float> logits_after(engine &eng, int32_t slot, int32_t token);

// Speculative verification's engine contract: a session's decode rows fed several in one call (its
// next token and drafts, beside other sessions' rows), then cut back by slot_truncate to the rows
// kept and fed again, give every row the logits bitwise that decoding one token a call gives.
// `open` makes an engine of n_slots slots of n_ctx tokens; the check runs 4 sessions for 24 tokens.
void check_draft_rows_bitwise(const std::function<std::unique_ptr<engine>(int32_t n_slots, int32_t n_ctx)> &open, uint32_t seed);

}  // namespace tandem::test
