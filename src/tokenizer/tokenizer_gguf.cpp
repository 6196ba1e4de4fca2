// src/tokenizer/tokenizer_gguf.cpp - reads the tokenizer.ggml.* keys of a GGUF into a
// tokenizer_vocab (kept apart so that code using from_vocab does not need the GGUF reader).
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/tokenizer.h"

namespace tandem {

namespace {

const gguf_array &string_array(const gguf_file &file, std::string_view key) {
    const gguf_array &a = file.get_array(key);
    if (a.type != gguf_type::string)
        fail(error_kind::file_format, "{} is an array of {}, expected strings", key, gguf_type_name(a.type));
    return a;
}

int32_t optional_id(const gguf_file &file, std::string_view key) {
    if (!file.has(key)) return -1;
    const int64_t id = file.get_int(key);
    if (id < 0 || id > INT32_MAX) fail(error_kind::file_format, "{} = {} is not a token id", key, id);
    return static_cast<int32_t>(id);
}

}  // namespace

tokenizer tokenizer::from_gguf(const gguf_file &file) {
    tokenizer_vocab v;
    if (!file.has("tokenizer.ggml.model")) fail(error_kind::file_format, "tokenizer.ggml.model is missing: the file has no vocabulary");
    v.model = file.get_string("tokenizer.ggml.model");
    if (v.model != "gpt2")
        fail(error_kind::unsupported, "tokenizer.ggml.model '{}' is not supported (only 'gpt2' byte-level BPE)", v.model);
    v.pre = file.get_string("tokenizer.ggml.pre", "default");
    v.tokens = string_array(file, "tokenizer.ggml.tokens").strings;
    if (file.has("tokenizer.ggml.token_type")) {
        const gguf_array &types = file.get_array("tokenizer.ggml.token_type");
        if (types.type == gguf_type::string || types.type == gguf_type::f32 || types.type == gguf_type::f64)
            fail(error_kind::file_format, "tokenizer.ggml.token_type is an array of {}, expected integers",
                 gguf_type_name(types.type));
        v.types.reserve(types.ints.size());
        for (size_t i = 0; i < types.ints.size(); ++i) {
            const int64_t t = types.ints[i];
            if (t < 0 || t > 6) fail(error_kind::file_format, "tokenizer.ggml.token_type[{}] = {} is not a token type", i, t);
            v.types.push_back(static_cast<token_type>(t));
        }
    }
    if (!file.has("tokenizer.ggml.merges")) fail(error_kind::file_format, "tokenizer.ggml.merges is missing (gpt2 BPE needs it)");
    v.merges = string_array(file, "tokenizer.ggml.merges").strings;
    v.bos_id = optional_id(file, "tokenizer.ggml.bos_token_id");
    v.eos_id = optional_id(file, "tokenizer.ggml.eos_token_id");
    v.pad_id = optional_id(file, "tokenizer.ggml.padding_token_id");
    v.eot_id = optional_id(file, "tokenizer.ggml.eot_token_id");
    v.eom_id = optional_id(file, "tokenizer.ggml.eom_token_id");
    v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", false);
    return from_vocab(std::move(v));
}

}  // namespace tandem
