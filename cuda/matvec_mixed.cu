// cuda/matvec_mixed.cu - a dense decode launch whose last extra matrix has a weight type of its own
// (matvec_part::typed): a Q4_K_M file's Q6_K V beside its Q4_K Q and K, one launch instead of two
// (in a launch of its own, V alone takes ~5.8 us a layer at one session, in 24 of 48 layers). Each
// block runs the body (matvec_kernel.cuh) of its matrix's type with the launch's warps and column
// tiles, as plan_matvec picks them for the launch's type: every output's arithmetic is
// that of its matrix's type, never of the step's rows, so decode rows stay batch invariant.
#include "matvec.h"

#include "cuda_check.h"
#include "matvec_kernel.cuh"

namespace tandem::cuda {
namespace {

using namespace matvec_detail;

// Blocks before the last matrix's first block run T's body (n_cols step-row tiles a pass), the
// rest T2's (one tile: K-quant column tiles are Q4_K's only).
template <ggml_type T, ggml_type T2, int n_warps, bool split_in, int n_cols>
__global__ void __launch_bounds__(n_warps * 32)
    matvec_mixed_kernel(const matvec_args a, int64_t row_bytes, int64_t row_bytes2, int blocks0, int blocks1) {
    const int own_first = a.n_extra > 1 ? blocks0 + blocks1 : blocks0;
    if (int(blockIdx.x) < own_first)
        matvec_body<T, false, n_warps, split_in, false, 1, n_cols>(a, row_bytes, blocks0, blocks1);
    else
        matvec_body<T2, false, n_warps, split_in>(a, row_bytes2, blocks0, blocks1);
}

template <ggml_type T, ggml_type T2, bool split_in>
void launch_mixed(const matvec_args &a, const matvec_plan &p, cudaStream_t stream) {
    const int64_t row_bytes = matvec_row_bytes(T, a.n_in), row_bytes2 = matvec_row_bytes(T2, a.n_in);
    // plan_matvec's choice for a dense Q4_K launch: its column tiles, and K split 16 ways when the
    // launch has too few blocks to give every SM two.
    auto go = [&](auto kernel) {
        launch_pdl(kernel, dim3(p.grid_x), dim3(p.warps * 32), stream, a, row_bytes, row_bytes2, p.blocks0, p.blocks1);
    };
    TANDEM_CUDA_REQUIRE((p.warps == 16 || p.warps == 4) && (p.col_tiles == 1 || p.col_tiles == 2),
                        "matvec: a mixed launch runs 4 or 16 warps of 1 or 2 column tiles");
    if (p.col_tiles == 2)
        p.warps == 16 ? go(matvec_mixed_kernel<T, T2, 16, split_in, 2>) : go(matvec_mixed_kernel<T, T2, 4, split_in, 2>);
    else
        p.warps == 16 ? go(matvec_mixed_kernel<T, T2, 16, split_in, 1>) : go(matvec_mixed_kernel<T, T2, 4, split_in, 1>);
}

}  // namespace

bool matvec_mixed_supported(ggml_type type, ggml_type part) { return type == ggml_type::q4_k && part == ggml_type::q6_k; }

namespace matvec_detail {

void launch_matvec_mixed(const matvec_args &a, const matvec_plan &plan, cudaStream_t stream) {
    if (plan.split_in)
        launch_mixed<ggml_type::q4_k, ggml_type::q6_k, true>(a, plan, stream);
    else
        launch_mixed<ggml_type::q4_k, ggml_type::q6_k, false>(a, plan, stream);
}

}  // namespace matvec_detail
}  // namespace tandem::cuda
