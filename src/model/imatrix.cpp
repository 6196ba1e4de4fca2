// src/model/imatrix.cpp - importance matrices in llama-imatrix's two file formats, turned into
// the per-column weights llama-quantize passes to the quantizers.
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quantize.h"

#include <cstring>
#include <fstream>
#include <map>

namespace tandem {
namespace {

// GGUF: NAME.in_sum2 [ne0][n_mat] sums of squared activations and NAME.counts [n_mat] rows seen;
// a matrix that saw no rows gets weight 1 everywhere (llama-quantize's choice).
imatrix_data read_gguf(const std::string &path) {
    const auto file = gguf_file::open(path);
    if (file->get_string("general.type", "") != "imatrix")
        fail(error_kind::file_format, "{}: a GGUF file but not an importance matrix (general.type is not 'imatrix')", path);
    std::map<std::string, std::pair<const gguf_tensor_info *, const gguf_tensor_info *>> pairs;
    for (const gguf_tensor_info &t : file->tensors()) {
        if (t.name.ends_with(".in_sum2")) pairs[t.name.substr(0, t.name.size() - 8)].first = &t;
        else if (t.name.ends_with(".counts")) pairs[t.name.substr(0, t.name.size() - 7)].second = &t;
    }
    imatrix_data out;
    for (const auto &[name, p] : pairs) {
        const auto [sums, counts] = p;
        if (!sums || !counts) fail(error_kind::file_format, "{}: {} has sums without counts or counts without sums", path, name);
        if (sums->type != ggml_type::f32 || counts->type != ggml_type::f32)
            fail(error_kind::file_format, "{}: {}'s sums and counts must be f32", path, name);
        const int64_t ne0 = sums->ne[0], n_mat = sums->n_rows();
        if (counts->n_elements() != n_mat)
            fail(error_kind::file_format, "{}: {} has {} counts for {} matrices", path, name, counts->n_elements(), n_mat);
        std::vector<float> s(static_cast<size_t>(ne0 * n_mat)), c(static_cast<size_t>(n_mat));
        std::memcpy(s.data(), sums->data, s.size() * sizeof(float));
        std::memcpy(c.data(), counts->data, c.size() * sizeof(float));
        std::vector<float> &v = out.values[name];
        v.resize(s.size());
        for (size_t j = 0; j < c.size(); ++j)
            for (size_t i = 0; i < size_t(ne0); ++i) v[j * size_t(ne0) + i] = c[j] > 0 ? s[j * size_t(ne0) + i] / c[j] : 1.0f;
    }
    if (out.values.empty()) fail(error_kind::file_format, "{}: an importance matrix without entries", path);
    if (const gguf_value *d = file->find("imatrix.datasets"); d && d->type == gguf_type::array)
        out.datasets = std::get<gguf_array>(d->data).strings;
    out.chunk_count = int32_t(file->get_int("imatrix.chunk_count", 0));
    return out;
}

// Legacy .dat: i32 n_entries, then per entry i32 name length, name, i32 ncall, i32 nval,
// f32 values[nval] (sums over ncall calls); then optionally i32 chunks, i32 length, dataset.
imatrix_data read_legacy(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    auto i32 = [&](const char *what) {
        int32_t v = 0;
        if (!in.read(reinterpret_cast<char *>(&v), 4)) fail(error_kind::file_format, "{}: truncated at {}", path, what);
        return v;
    };
    auto bytes = [&](int32_t n, const char *what) {
        std::string s(size_t(n), '\0');
        if (!in.read(s.data(), n)) fail(error_kind::file_format, "{}: truncated in {}", path, what);
        return s;
    };
    const int32_t n_entries = i32("the entry count");
    if (n_entries <= 0) fail(error_kind::file_format, "{}: {} entries: not an importance matrix", path, n_entries);
    imatrix_data out;
    for (int32_t e = 0; e < n_entries; ++e) {
        const int32_t len = i32("a name length");
        if (len <= 0 || len > 4096) fail(error_kind::file_format, "{}: entry {} has a name of {} bytes", path, e, len);
        const std::string name = bytes(len, "a name");
        const int32_t ncall = i32("a call count"), nval = i32("a value count");
        if (nval <= 0 || nval > (1 << 28)) fail(error_kind::file_format, "{}: {} has {} values", path, name, nval);
        std::vector<float> &v = out.values[name];
        v.resize(size_t(nval));
        if (!in.read(reinterpret_cast<char *>(v.data()), std::streamsize(nval) * 4))
            fail(error_kind::file_format, "{}: truncated in {}'s values", path, name);
        if (ncall > 0)
            for (float &x : v) x /= float(ncall);
    }
    if (in.peek() != std::char_traits<char>::eof()) {
        out.chunk_count = i32("the chunk count");
        const int32_t len = i32("the dataset name length");
        if (len > 0 && len <= 4096) out.datasets.push_back(bytes(len, "the dataset name"));
    }
    return out;
}

}  // namespace

imatrix_data imatrix_read(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(error_kind::config, "cannot open importance matrix {}", path);
    char magic[4] = {};
    in.read(magic, 4);
    return std::memcmp(magic, "GGUF", 4) == 0 ? read_gguf(path) : read_legacy(path);
}

}  // namespace tandem
