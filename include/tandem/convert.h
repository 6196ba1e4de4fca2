// tandem/convert.h - Hugging Face checkpoint folders: the safetensors reader and the converter to
// GGUF (`tandem convert`), writing what llama.cpp's convert_hf_to_gguf.py writes for qwen3moe and
// deepseek2.
#pragma once

#include "tandem/types.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

// ---- safetensors ----

// f8_e4m3: DeepSeek's FP8 checkpoints (OCP E4M3FN), each weight scaled by its block's weight_scale_inv.
enum class st_dtype { f32, f16, bf16, f8_e4m3 };
const char *st_dtype_name(st_dtype dtype);  // "F32", "F16", "BF16", "F8_E4M3"
size_t st_dtype_bytes(st_dtype dtype);

struct st_tensor {
    std::string name;
    std::string file;              // path of the file holding it (for errors)
    st_dtype dtype = st_dtype::f32;
    std::vector<int64_t> shape;    // row-major, as stored (PyTorch order: shape.back() is contiguous)
    const uint8_t *data = nullptr; // into the file's mapping; n_bytes bytes
    uint64_t n_bytes = 0;

    int64_t n_elements() const;
};

// One mapped .safetensors file, its header validated: every tensor's dtype, shape and byte range
// are checked against the file (no overflow, nothing past the end). Throws tandem::error
// (file_format, or unsupported for a dtype other than F32/F16/BF16/F8_E4M3) naming the file and tensor.
class safetensors_file {
public:
    static std::unique_ptr<safetensors_file> open(const std::string &path);
    ~safetensors_file();
    safetensors_file(const safetensors_file &) = delete;
    safetensors_file &operator=(const safetensors_file &) = delete;

    const std::string &path() const { return path_; }
    const std::vector<st_tensor> &tensors() const { return tensors_; }

private:
    safetensors_file() = default;
    std::string path_;
    void *map_ = nullptr;
    size_t map_bytes_ = 0;
    std::vector<st_tensor> tensors_;
};

// All tensors of a checkpoint folder: model.safetensors, or the shards that
// model.safetensors.index.json names (each shard's tensors must match its weight_map entries).
class safetensors_set {
public:
    static safetensors_set open_dir(const std::string &dir);

    const st_tensor *find(const std::string &name) const;
    // Throws file_format naming the tensor when it is missing or its shape differs.
    const st_tensor &require(const std::string &name, const std::vector<int64_t> &shape) const;
    const std::map<std::string, const st_tensor *> &all() const { return by_name_; }

private:
    std::vector<std::shared_ptr<safetensors_file>> files_;
    std::map<std::string, const st_tensor *> by_name_;
};

// dst[n] <- elements [first, first + n) of t, widened to float (exact for every dtype; FP8 values
// unscaled: the converter applies their blocks' scales).
void st_read_f32(const st_tensor &t, int64_t first, int64_t n, float *dst);

// ---- the converter ----

struct convert_options {
    std::string hf_dir;                     // config.json, *.safetensors, tokenizer files
    std::string out_path;                   // the .gguf to write
    ggml_type type = ggml_type::f16;        // matrices: f32, f16, bf16, q8_0, q4_k, q6_k
    std::optional<ggml_type> expert_type;   // ffn_{gate,up,down}_exps; default: type
    std::string name;                       // general.name; default: the folder's name
    int n_threads = 0;                      // <= 0: all cores
    uint64_t split_max_bytes = 0;           // > 0: llama.cpp's split files of at most this many bytes
};

// What the converter decided, for logs and tests.
struct convert_summary {
    std::string arch = "qwen3moe";
    int64_t n_vocab = 0;            // GGUF vocab (config vocab_size, padded beyond the tokenizer)
    int64_t n_tokenizer = 0;        // tokens the tokenizer defines
    int64_t n_tensors = 0;
    uint32_t file_type = 0;         // general.file_type (llama_ftype) of the expert type: most bytes
    std::vector<std::string> fallbacks;  // "attn_q: q4_K -> q8_0 (row length 64)"
    std::vector<std::string> paths;      // the files written: out_path, or the parts of a split model
};

// Converts a Qwen3MoeForCausalLM, DeepseekV2ForCausalLM or DeepseekV3ForCausalLM checkpoint folder
// (bf16/f16/f32, or DeepSeek's FP8 with 128x128 weight_scale_inv blocks, dequantised). Throws
// tandem::error: file_format (malformed or missing files/tensors, named), config (a wrong option
// value), unsupported (architecture, dtype or feature the engine cannot run: decoder_sparse_step !=
// 1, mlp_only_layers, rope types, moe_layer_freq != 1, ...).
convert_summary convert_hf(const convert_options &opts);

// The type a tensor whose rows hold `row_len` elements gets when `wanted` is asked for: K-quants
// need rows that are a multiple of 256 (else q8_0), q8_0 a multiple of 32 (else f16); plain float
// types always fit. convert_hf logs each fallback once per tensor class and lists it in the summary.
ggml_type convert_fit_type(ggml_type wanted, int64_t row_len);

}  // namespace tandem
