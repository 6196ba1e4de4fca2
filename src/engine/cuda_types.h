// src/engine/cuda_types.h - which tensor types the CUDA backend computes with, decided on the
// host from the file alone, so a model is refused (or `--backend auto` falls back to the CPU)
// before anything is uploaded. No CUDA includes: built and tested in every build.
#pragma once

#include "tandem/types.h"

#include <string>

namespace tandem {

class gguf_file;

// The types the CUDA products and cuda::embed take (cuda/matvec_types.h): every type the CPU
// engine computes with.
bool cuda_computes(ggml_type type);
// "tensor NAME has type TYPE, which the CUDA backend cannot compute with" for the first matrix
// of the file the CUDA backend cannot compute with, or "" when there is none.
std::string cuda_type_refusal(const gguf_file &file);

}  // namespace tandem
