// src/model/quantize_model.cpp - `tandem quantize`: a GGUF file to one of llama.cpp's quant mixes,
// laid out as llama-quantize lays it out (its tensor order, its metadata keys).
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/quant.h"
#include "tandem/quantize.h"

#include <atomic>
#include <cstring>
#include <memory>

namespace tandem {
namespace {

quant_mix_model mix_model_read(const gguf_file &file) {
    quant_mix_model m;
    m.arch = file.get_string("general.architecture", "");
    const std::string a = m.arch + ".";
    m.n_layer = int32_t(file.get_int(a + "block_count", 0));
    m.n_head = int32_t(file.get_int(a + "attention.head_count", 1));
    m.n_head_kv = int32_t(file.get_int(a + "attention.head_count_kv", m.n_head));
    m.n_expert = int32_t(file.get_int(a + "expert_count", 0));
    return m;
}

// The input's keys (less split.* and the two llama-quantize sets), then general.quantization_version,
// general.file_type and the quantize.imatrix.* keys: gguf_set_val moves a key to the end.
void metadata_write(gguf_writer &w, const gguf_file &in, llama_ftype ftype, const std::string &imatrix_path,
                    const imatrix_data *im) {
    for (const gguf_kv &kv : in.kvs()) {
        if (kv.key.starts_with("split.") || kv.key == "general.quantization_version" || kv.key == "general.file_type")
            continue;
        w.set_value(kv.key, kv.value);
    }
    w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION
    w.set_u32("general.file_type", uint32_t(ftype));
    if (!im) return;
    // llama-quantize stores the override strings in 128-byte buffers.
    w.set_string("quantize.imatrix.file", imatrix_path.substr(0, 127));
    if (!im->datasets.empty()) w.set_string("quantize.imatrix.dataset", im->datasets.front().substr(0, 127));
    w.set_u32("quantize.imatrix.entries_count", uint32_t(im->values.size()));
    if (im->chunk_count > 0) w.set_u32("quantize.imatrix.chunks_count", uint32_t(im->chunk_count));
}

// The importance of tensor t (ne[0] * n_expert values), or nullptr; refuses what llama-quantize refuses.
const float *importance_of(const gguf_tensor_info &t, ggml_type to, llama_ftype ftype, const imatrix_data *im) {
    const float *w = nullptr;
    const int64_t n_mat = t.ne.size() > 2 ? t.ne[2] : 1;
    if (im) {
        if (auto it = im->values.find(t.name); it != im->values.end()) {
            if (int64_t(it->second.size()) == t.ne[0] * n_mat) w = it->second.data();
            else if (t.name != "token_embd.weight" && t.name != "per_layer_token_embd.weight")
                fail(error_kind::config, "quantize: the importance matrix has {} values for {}, which needs {}",
                     it->second.size(), t.name, t.ne[0] * n_mat);
        }
    }
    if (!w && quant_mix_requires_imatrix(t.name, to, ftype))
        fail(error_kind::config, "quantize: tensor {} as {} needs an importance matrix{}", t.name, ggml_type_name(to),
             im ? " and the file has no entry for it" : " (--imatrix FILE)");
    return w;
}

// Converts one tensor: per matrix (expert) of ne[0] x ne[1], to float and then to `to`.
void convert_tensor(const gguf_tensor_info &t, ggml_type to, const float *importance, uint8_t *dst) {
    if (t.type == to) {
        std::memcpy(dst, t.data, t.n_bytes);
        return;
    }
    const int64_t row_len = t.ne[0], n_rows = t.ne.size() > 1 ? t.ne[1] : 1;
    const int64_t n_mat = t.n_rows() / n_rows;
    const size_t in_bytes = ggml_row_bytes(t.type, row_len) * size_t(n_rows);
    const size_t out_bytes = ggml_row_bytes(to, row_len) * size_t(n_rows);
    std::vector<float> f(size_t(row_len * n_rows));
    for (int64_t e = 0; e < n_mat; ++e) {
        dequantize_rows(t.type, t.data + size_t(e) * in_bytes, f.data(), n_rows, row_len);
        const float *w = importance ? importance + e * row_len : nullptr;
        quantize_rows(to, f.data(), dst + size_t(e) * out_bytes, n_rows, row_len, w);
    }
}

}  // namespace

quantize_report quantize_model(const std::string &in_path, const std::string &out_path, const quantize_options &options) {
    const std::optional<quant_ftype> ftype = quant_ftype_find(options.ftype_name);
    if (!ftype) {
        std::string names;
        for (const std::string &n : quant_ftype_names()) names += (names.empty() ? "" : ", ") + n;
        fail(error_kind::config, "unknown quantization type '{}' (known: {})", options.ftype_name, names);
    }
    const auto in = gguf_file::open(in_path);
    std::unique_ptr<imatrix_data> im;
    if (!options.imatrix_path.empty()) im = std::make_unique<imatrix_data>(imatrix_read(options.imatrix_path));

    std::vector<std::string> names;
    for (const gguf_tensor_info &t : in->tensors()) names.push_back(t.name);
    const std::vector<size_t> order = quant_mix_order(names);
    std::vector<quant_mix_tensor> mix_tensors;
    for (size_t i : order) mix_tensors.push_back({in->tensors()[i].name, in->tensors()[i].ne, in->tensors()[i].type});
    quant_mix_options mo{ftype->ftype, options.output_type, options.token_embd_type, options.overrides, im != nullptr,
                         options.pure};
    const std::vector<quant_mix_choice> choices = quant_mix_types(mix_model_read(*in), mo, mix_tensors);

    quantize_report report;
    gguf_writer w;
    metadata_write(w, *in, ftype->ftype, options.imatrix_path, im.get());
    auto done = std::make_shared<std::atomic<int>>(0);
    const int n_tensors = int(order.size());
    for (size_t k = 0; k < order.size(); ++k) {
        const gguf_tensor_info &t = in->tensors()[order[k]];
        const ggml_type to = choices[k].type;
        report.n_fallback += choices[k].fallback;
        // Dequantizing (to f32/f16/bf16) is allowed; requantizing loses twice, as llama-quantize warns.
        if (t.type != to && ggml_type_info(t.type).block_elems > 1 && ggml_type_info(to).block_elems > 1)
            fail(error_kind::config, "quantize: tensor {} is already {}: requantizing to {} is not supported", t.name,
                 ggml_type_name(t.type), ggml_type_name(to));
        report.tensors.push_back({t.name, t.type, to, t.n_bytes, ggml_row_bytes(to, t.ne[0]) * uint64_t(t.n_rows())});
        if (options.dry_run) {
            // As llama-quantize's --dry-run: sizes only, with a warning where the real run would stop.
            if (!im && t.type != to && quant_mix_requires_imatrix(t.name, to, ftype->ftype))
                log_warn("quantize: {} as {} will need an importance matrix (--imatrix)", t.name, ggml_type_name(to));
            continue;
        }
        const float *importance = t.type == to ? nullptr : importance_of(t, to, ftype->ftype, im.get());
        w.add_tensor(t.name, to, t.ne, [&t, to, importance, done, n_tensors](uint8_t *dst) {
            convert_tensor(t, to, importance, dst);
            log_info("quantize: [{}/{}] {} {} -> {}", ++*done, n_tensors, t.name, ggml_type_name(t.type), ggml_type_name(to));
        });
    }
    if (report.n_fallback > 0)
        log_warn("quantize: {} of {} tensors fell back to another type (rows not a multiple of the block)",
                 report.n_fallback, n_tensors);
    if (!options.dry_run) report.paths = w.write(out_path, options.n_threads, options.split_max_bytes);
    return report;
}

}  // namespace tandem
