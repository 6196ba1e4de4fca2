// cuda/matvec_mixed.cu - a dense decode launch whose last extra matrix has a weight type of its own
// (matvec_part::typed): a Q4_K_M file's Q6_K V beside its Q4_K Q and K, one launch instead of two
// (in a launch of its own, V alone takes ~5.8 us a layer at one session, in 24 of 48 layers). Each
// block runs the body (matvec_kernel.cuh) of its matrix's type with the launch's warps and column
// tiles, as launch_matvec_shape would pick them for the launch's type: every output's arithmetic is
// that of its matrix's type, never of the step's rows, so decode rows stay batch invariant.
#include "matvec.h"

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
void launch_mixed(const matvec_args &a, cudaStream_t stream) {
    const int blocks0 = (a.n_out + block_rows - 1) / block_rows;
    const int blocks1 = a.n_extra > 0 ? (a.extra[0].n_out + block_rows - 1) / block_rows : 0;
    const int blocks2 = a.n_extra > 1 ? (a.extra[1].n_out + block_rows - 1) / block_rows : 0;
    const dim3 grid(blocks0 + blocks1 + blocks2);
    const int64_t row_bytes = matvec_row_bytes(T, a.n_in), row_bytes2 = matvec_row_bytes(T2, a.n_in);
    // launch_matvec_shape's choice for a dense Q4_K launch: its column tiles; K split 16 ways when
    // the launch has too few blocks to give every SM two.
    const int cols = dense_col_tiles(a);
    const bool narrow = int(grid.x) < narrow_blocks;
    auto go = [&](auto kernel, int warps) {
        launch_pdl(kernel, grid, dim3(warps * 32), stream, a, row_bytes, row_bytes2, blocks0, blocks1);
    };
    if (cols == 2)
        narrow ? go(matvec_mixed_kernel<T, T2, 4 * block_warps, split_in, 2>, 4 * block_warps)
               : go(matvec_mixed_kernel<T, T2, block_warps, split_in, 2>, block_warps);
    else
        narrow ? go(matvec_mixed_kernel<T, T2, 4 * block_warps, split_in, 1>, 4 * block_warps)
               : go(matvec_mixed_kernel<T, T2, block_warps, split_in, 1>, block_warps);
}

}  // namespace

bool matvec_mixed_supported(ggml_type type, ggml_type part) { return type == ggml_type::q4_k && part == ggml_type::q6_k; }

namespace matvec_detail {

void launch_matvec_mixed(const matvec_args &a, cudaStream_t stream) {
    if (a.x_split)
        launch_mixed<ggml_type::q4_k, ggml_type::q6_k, true>(a, stream);
    else
        launch_mixed<ggml_type::q4_k, ggml_type::q6_k, false>(a, stream);
}

}  // namespace matvec_detail
}  // namespace tandem::cuda
