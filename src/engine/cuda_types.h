// src/engine/cuda_types.h - which tensor types the CUDA backend computes with, decided on the
// host from the file alone, so a model is refused (or `--backend auto` falls back to the CPU)
// before anything is uploaded. No CUDA includes: built and tested in every build.
#pragma once

#include "tandem/types.h"

#include <string>

namespace tandem {

class gguf_file;

// The types cuda::matvec_row_bytes and cuda::embed accept: f32, f16, bf16, q8_0, q4_k, q6_k,
// q5_k, q3_k, q2_k, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, mxfp4 and the grid IQ types (iq2_xxs,
// iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m): every type the CPU engine computes with.
bool cuda_computes(ggml_type type);
// "tensor NAME has type TYPE, which the CUDA backend cannot compute with" for the first matrix
// of the file the CUDA backend cannot compute with, or "" when there is none.
std::string cuda_type_refusal(const gguf_file &file);

}  // namespace tandem
