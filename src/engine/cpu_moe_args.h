// src/engine/cpu_moe_args.h - one layer's routed experts as the CPU backend's grouped expert pass
// reads them, in place from the mapped GGUF file; shared by the virtual devices and the host tier.
#pragma once

#include "src/cpu/cpu_ops.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/quant.h"

namespace tandem {

inline cpu::cpu_matrix cpu_matrix_of(const gguf_tensor_info *t, int64_t n_in, int64_t n_out) {
    return {t->data, t->type, n_in, n_out, ggml_row_bytes(t->type, n_in)};
}

// rows x [n_rows][d_model] routed to ids [n_rows][k]; out [n_rows][k][d_model]; owned: nullptr = all.
inline cpu::moe_grouped_args cpu_moe_args(const layer_tensors &lt, const model_hparams &hp, int64_t k, int64_t n_rows,
                                          const float *x, const int32_t *ids, float *out, const uint8_t *owned) {
    const int64_t d = hp.d_model, ff = hp.d_ff_expert, ne = hp.n_expert;
    cpu::moe_grouped_args a;
    a.gate_exps = cpu_matrix_of(lt.gate_exps, d, ff * ne);
    a.up_exps = cpu_matrix_of(lt.up_exps, d, ff * ne);
    a.down_exps = cpu_matrix_of(lt.down_exps, ff, d * ne);
    a.x = x;
    a.ids = ids;
    a.out = out;
    a.n_rows = n_rows;
    a.k = k;
    a.n_expert = ne;
    a.d_model = d;
    a.d_ff = ff;
    a.owned = owned;
    return a;
}

}  // namespace tandem
