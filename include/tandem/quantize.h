// tandem/quantize.h - llama.cpp's quant mixes (llama_ftype and the per-tensor type rules of
// llama-quantize), importance matrices in llama.cpp's formats, and `tandem quantize`.
#pragma once

#include "tandem/types.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem {

// llama.cpp's llama_ftype: the values written to general.file_type.
enum class llama_ftype : uint32_t {
    all_f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q8_0 = 7, q5_0 = 8, q5_1 = 9,
    q2_k = 10, q3_k_s = 11, q3_k_m = 12, q3_k_l = 13, q4_k_s = 14, q4_k_m = 15, q5_k_s = 16, q5_k_m = 17,
    q6_k = 18, iq2_xxs = 19, iq2_xs = 20, q2_k_s = 21, iq3_xs = 22, iq3_xxs = 23, iq1_s = 24, iq4_nl = 25,
    iq3_s = 26, iq3_m = 27, iq2_s = 28, iq2_m = 29, iq4_xs = 30, iq1_m = 31, bf16 = 32, mxfp4_moe = 38,
};

struct quant_ftype {
    const char *name;    // llama-quantize's spelling (Q4_K_M)
    llama_ftype ftype;
    ggml_type base;      // llama_ftype_get_default_type: the type of tensors no rule changes
};
// By llama-quantize's name, any case, with its aliases Q3_K, Q4_K, Q5_K (the _M mixes).
std::optional<quant_ftype> quant_ftype_find(std::string_view name);
std::vector<std::string> quant_ftype_names();

// The model facts llama_tensor_get_type reads.
struct quant_mix_model {
    std::string arch;                   // general.architecture (falcon and 70B llama have rules of their own)
    int32_t n_layer = 0;
    int32_t n_head = 1, n_head_kv = 1;  // n_gqa = n_head / n_head_kv
    int32_t n_expert = 0;
};

struct quant_mix_options {
    llama_ftype ftype = llama_ftype::q8_0;
    std::optional<ggml_type> output_type;       // --output-tensor-type
    std::optional<ggml_type> token_embd_type;   // --token-embedding-type
    // --tensor-type PATTERN=TYPE: the first ECMAScript regex found in the name wins (the
    // pattern lowercased, as llama-quantize does).
    std::vector<std::pair<std::string, ggml_type>> overrides;
    bool has_imatrix = false;
    bool pure = false;                          // no mix rules: every matrix gets the base type
};

struct quant_mix_tensor {
    std::string name;
    std::vector<int64_t> ne;  // ggml order
    ggml_type type;           // in the input file
};

struct quant_mix_choice {
    ggml_type type;          // in the output file
    bool fallback = false;   // the rule's type did not fit the row length (tensor_type_fallback)
};

// llama_tensor_get_type for every tensor, visited in `tensors`' order (the per-layer counters
// of attn_v depend on it: pass quant_mix_order's order). Throws error(config) where
// llama-quantize fails (a layer number out of range, a row no fallback fits).
std::vector<quant_mix_choice> quant_mix_types(const quant_mix_model &model, const quant_mix_options &options,
                                              const std::vector<quant_mix_tensor> &tensors);
// llama.cpp's order of a model's weights (llama_model_loader's weight_name_comparer): tensors
// outside blk.N first, then by layer number, by name within one. Returns indices into names.
std::vector<size_t> quant_mix_order(const std::vector<std::string> &names);
// Whether llama-quantize refuses to write this tensor of this type without an importance
// matrix (tensor_requires_imatrix).
bool quant_mix_requires_imatrix(const std::string &name, ggml_type type, llama_ftype ftype);

// An importance matrix as llama-quantize uses it: per tensor name, ne[0] * n_expert values
// (the mean of squared activations per column, expert after expert).
struct imatrix_data {
    std::unordered_map<std::string, std::vector<float>> values;
    std::vector<std::string> datasets;
    int32_t chunk_count = 0;
};
// llama-imatrix's GGUF format (general.type "imatrix", NAME.in_sum2 and NAME.counts tensors)
// or the legacy .dat format. Throws error(file_format) naming the file and what is wrong.
imatrix_data imatrix_read(const std::string &path);

struct quantize_options {
    std::string ftype_name;                     // quant_ftype_find
    std::string imatrix_path;                   // empty: none
    std::optional<ggml_type> output_type, token_embd_type;
    std::vector<std::pair<std::string, ggml_type>> overrides;
    bool pure = false;
    bool dry_run = false;                       // plan and sizes only, no file written
    int32_t n_threads = 0;                      // 0: all cores
    uint64_t split_max_bytes = 0;               // > 0: llama.cpp's split files
};

struct quantize_tensor_report {
    std::string name;
    ggml_type from, to;
    uint64_t bytes_in, bytes_out;
};

struct quantize_report {
    std::vector<quantize_tensor_report> tensors;  // in output order
    std::vector<std::string> paths;               // files written (none for a dry run)
    int32_t n_fallback = 0;
};

// `tandem quantize`: reads a GGUF (a split set by its first file), chooses each tensor's type
// with quant_mix_types, quantizes with quantize_rows (per expert with its importance), and
// writes llama-quantize's metadata (the input's keys, then general.quantization_version,
// general.file_type and the quantize.imatrix.* keys). Tensors already of the chosen type are
// copied; a quantized input tensor is only dequantized (to F32/F16/BF16), never requantized.
quantize_report quantize_model(const std::string &in_path, const std::string &out_path,
                               const quantize_options &options);

}  // namespace tandem
