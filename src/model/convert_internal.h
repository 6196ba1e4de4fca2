// src/model/convert_internal.h - what the Hugging Face converters share: config.json reading, the
// tokenizer's vocabulary, the plan of GGUF tensors gathered from checkpoint rows (FP8 blocks scaled,
// blocks transposed where llama.cpp stores them so), and writing the file into place.
#pragma once

#include "tandem/convert.h"
#include "tandem/gguf.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tandem::convert_detail {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- config.json ----

json read_json_file(const fs::path &path);
const json *member(const json &obj, const char *key);  // nullptr when absent or null
// Integer in min..2^31-1; fallback when absent (else file_format naming the key).
int64_t get_int(const json &obj, const std::string &path, const char *key, std::optional<int64_t> fallback = {},
                int64_t min = 1);
double get_num(const json &obj, const std::string &path, const char *key, double fallback);
bool get_bool(const json &obj, const std::string &path, const char *key, bool fallback);
std::optional<int64_t> get_token_id(const json &obj, const char *key);

// What every architecture's config.json says the same way.
struct hf_common {
    std::string path;
    int64_t d_model = 0, n_layer = 0, n_head = 0, n_vocab = 0, n_ctx = 0;
    double rms_eps = 1e-6, rope_theta = 10000.0;
    std::string rope_type = "default";      // default, linear, yarn
    double rope_factor = 0.0;
    int64_t rope_orig_ctx = 0;
    std::optional<double> rope_mscale, rope_mscale_all_dim, rope_beta_fast, rope_beta_slow;
    bool tied = false;
    std::optional<int64_t> bos_id, eos_id, pad_id;
};
// hidden_size, num_hidden_layers, num_attention_heads, vocab_size, max_position_embeddings,
// rms_norm_eps, tie_word_embeddings, token ids, and the rope in either transformers style.
void read_common(const json &cfg, hf_common &c);

// ---- tokenizer.json / tokenizer_config.json ----

struct hf_vocab {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    std::vector<std::string> merges;
    int64_t n_tokenizer = 0;
    std::optional<int64_t> bos_id, eos_id, pad_id;
    std::optional<bool> add_bos, add_eos;
    std::string chat_template;
    json pre_tokenizer;  // tokenizer.json's, for naming it (tokenizer.ggml.pre)
};
hf_vocab read_vocab(const fs::path &dir, const hf_common &cfg);

// ---- the tensors ----

// The rows of one GGUF tensor, gathered from checkpoint tensors in order: segment k contributes
// rows [first_row, first_row + n_rows) of its tensor (rows of shape.back() elements), or with
// `transpose` that block's columns, each n_rows long (llama.cpp's attn_k_b).
struct row_segment {
    const st_tensor *tensor = nullptr;
    int64_t first_row = 0, n_rows = 0;
    const st_tensor *scale = nullptr;  // FP8: weight_scale_inv [ceil(rows / block)][ceil(cols / block)]
    int64_t scale_block = 0;
    bool transpose = false;
};

struct planned_tensor {
    std::string name;
    ggml_type type;
    std::vector<int64_t> ne;
    std::vector<row_segment> rows;
};

// Every GGUF tensor, planned (checkpoint names, shapes and FP8 scales checked) before anything is
// written; tracks which checkpoint tensors were used so the leftovers can be refused by name.
class tensor_plan {
public:
    // fp8_block: quantization_config.weight_block_size of an FP8 checkpoint (0: none).
    tensor_plan(const safetensors_set &st, convert_summary &summary, int64_t fp8_block);
    bool has(const std::string &hf_name) const { return st_.find(hf_name) != nullptr; }
    // The checkpoint tensor of exactly `shape`, marked used.
    const st_tensor &require(const std::string &hf_name, const std::vector<int64_t> &shape);
    // A whole checkpoint tensor as one segment (FP8: with its scales).
    row_segment whole(const std::string &hf_name, const std::vector<int64_t> &shape);
    // "<name>.weight" (or name as given when it has a suffix) in `wanted`, or the type its rows fit.
    void add(std::string name, ggml_type wanted, std::vector<int64_t> ne, std::vector<row_segment> rows);
    void mark_used(const std::string &hf_name) { used_.insert(hf_name); }
    // Refuses the first unused checkpoint tensor that `skip` does not excuse, naming it.
    void check_all_used(const std::function<bool(const std::string &)> &skip, const std::string &what) const;
    const std::vector<planned_tensor> &tensors() const { return plan_; }

private:
    const safetensors_set &st_;
    convert_summary &summary_;
    int64_t fp8_block_;
    std::set<std::string> used_, logged_;
    std::vector<planned_tensor> plan_;
};

// ffn_{gate,up,down}_exps of one layer from the checkpoint's routed experts (prefix p, e.g.
// "model.layers.3."): one by one as published, or fused as transformers 5 saves them
// (experts.gate_up_proj [E, 2F, D], experts.down_proj [E, D, F]).
void plan_routed_experts(tensor_plan &plan, const std::string &p, const std::string &b, int64_t n_expert, int64_t d_ff,
                         int64_t d_model, ggml_type type);

// general.name: the option, else the folder's name.
std::string model_name(const convert_options &opts, const fs::path &dir);
uint32_t llama_ftype(ggml_type t);
// FP8 block size from config.json's quantization_config (0 when the checkpoint is not FP8).
int64_t fp8_block_size(const json &cfg, const std::string &path);

// Appends the tokenizer keys and the tensors to `w` (architecture keys already set) and writes the
// file beside opts.out_path, renamed into place so a failure never leaves a truncated .gguf.
void write_model(gguf_writer &w, const hf_vocab &voc, const std::string &pre, const tensor_plan &plan,
                 const convert_options &opts, convert_summary &sum);

// The architectures (convert_hf.cpp, convert_deepseek2.cpp).
convert_summary convert_qwen3moe(const convert_options &opts, const fs::path &dir, const json &cfg);
convert_summary convert_deepseek2(const convert_options &opts, const fs::path &dir, const json &cfg);

}  // namespace tandem::convert_detail
