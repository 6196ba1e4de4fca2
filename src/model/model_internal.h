// src/model/model_internal.h - helpers the architecture readers share: checked metadata reads
// and tensor binding with shape and type checks, each error naming the key or tensor.
#pragma once

#include "tandem/gguf.h"
#include "tandem/model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::model_detail {

// The integer at `key`, which must lie in 1..max_value; throws file_format naming the key.
int32_t read_positive(const gguf_file &file, const std::string &key, int64_t max_value);
// As read_positive, but 0 is allowed and a missing key reads as `fallback`.
int32_t read_count(const gguf_file &file, const std::string &key, int64_t max_value, int32_t fallback);

std::string shape_text(const std::vector<int64_t> &ne);

// The tensor `name` with exactly `shape`, of a type the engine computes with (f32 when must_be_f32);
// throws file_format naming the tensor when it is missing or misshaped, unsupported for its type.
const gguf_tensor_info *bind(const gguf_file &file, const std::string &name, std::vector<int64_t> shape,
                             bool must_be_f32);

// qwen3moe / deepseek2 readers, writers and binders (model_desc.cpp, model_deepseek2.cpp).
void qwen3moe_hparams_read(const gguf_file &file, model_hparams &hp);
void deepseek2_hparams_read(const gguf_file &file, model_hparams &hp);
void deepseek2_hparams_write(gguf_writer &w, const model_hparams &hp);
void deepseek2_tensors_bind(const gguf_file &file, const model_hparams &hp, model_tensors &t);

}  // namespace tandem::model_detail
