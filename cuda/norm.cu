// cuda/norm.cu - RMSNorm over rows (one block per row, the row in registers), the split twin of
// rows (x_split.cuh), and the embedding lookup.
#include "norm.h"

#include "cuda_check.h"
#include "launch.cuh"
#include "matvec.h"
#include "quant_decode.cuh"
#include "warp_reduce.cuh"
#include "x_split.cuh"

namespace tandem::cuda {
namespace {

constexpr int norm_threads = 1024;   // loads in parallel (few round trips per thread); the sum runs in warp 0
constexpr int norm_max_n = 8192;     // squares held in shared memory (32 KiB)

// One block per row; `per` = ceil(n / norm_threads) elements per thread, held in registers from
// the load to the store, so the row is read once and every load is in flight together. The
// weights are immutable, so they are read before the PDL wait (overlapping the predecessor).
// Warp 0 sums the squares in the CPU twin's order (element i in lane i % 32, ascending, then the
// butterfly), so the result stays bitwise the CPU's.
template <int per>
__global__ void __launch_bounds__(norm_threads) rmsnorm_kernel(const rmsnorm_args a) {
    __shared__ float s_sq[norm_max_n];
    __shared__ float s_inv;
    const int r = blockIdx.x;
    float wv[per], xv[per];
#pragma unroll
    for (int t = 0; t < per; ++t) {
        const int i = threadIdx.x + t * norm_threads;
        wv[t] = i < a.n ? a.w[i] : 0.0f;
    }
    pdl_wait();
    pdl_trigger();
    const float *x = a.x + int64_t(r) * a.n;
    float *y = a.y + int64_t(r) * a.n;
#pragma unroll
    for (int t = 0; t < per; ++t) {
        const int i = threadIdx.x + t * norm_threads;
        xv[t] = i < a.n ? x[i] : 0.0f;
    }
#pragma unroll
    for (int t = 0; t < per; ++t) {
        const int i = threadIdx.x + t * norm_threads;
        if (i < a.n) s_sq[i] = __fmul_rn(xv[t], xv[t]);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        float acc = 0.0f;
#pragma unroll 16
        for (int i = threadIdx.x; i < a.n; i += 32) acc = __fadd_rn(acc, s_sq[i]);
        acc = warp_sum_fixed(acc);
        if (threadIdx.x == 0) {
            const float mean_sq = __fdiv_rn(acc, float(a.n));
            s_inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, a.eps)));
        }
    }
    __syncthreads();
    const float inv = s_inv;
    // y may alias x: every x element was read (into this thread's registers) before the barrier.
#pragma unroll
    for (int t = 0; t < per; ++t) {
        const int i = threadIdx.x + t * norm_threads;
        if (i >= a.n) continue;
        const float v = __fmul_rn(__fmul_rn(xv[t], inv), wv[t]);
        y[i] = v;
        if (a.y_split)  // whole warps (n % 32 == 0): the sub-block sum shuffles
            split_store_warp(reinterpret_cast<uint16_t *>(a.y_split) + int64_t(r) * a.n * 2,
                             a.y_sums ? a.y_sums + int64_t(r) * (a.n / 32) : nullptr, i, v);
    }
}

// One block per row; a warp's 32 lanes take one 32-element sub-block (n % 32 == 0), so every
// lane of a warp calls split_store_warp together.
constexpr int split_threads = 256;
__global__ void __launch_bounds__(split_threads) split_rows_kernel(const split_rows_args a) {
    pdl_wait();
    pdl_trigger();
    const int64_t r = blockIdx.x;
    const float *x = a.x + r * a.stride;
    uint16_t *split = reinterpret_cast<uint16_t *>(a.split) + r * a.stride * 2;
    float *sums = a.sums + r * (a.stride / 32);
    for (int i = threadIdx.x; i < a.n; i += split_threads) split_store_warp(split, sums, i, x[i]);
}

template <ggml_type T>
__global__ void embed_kernel(const embed_args a, int64_t row_bytes) {
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.x;
    const uint8_t *row = static_cast<const uint8_t *>(a.table) + size_t(a.tokens[r]) * size_t(row_bytes);
    decode_row<T>(row, a.x + int64_t(r) * a.d_model, a.d_model, threadIdx.x, blockDim.x);
}

}  // namespace

void rmsnorm(const rmsnorm_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.x && a.w && a.y && a.n > 0 && a.n <= norm_max_n && a.n_rows >= 0, "rmsnorm: bad arguments (n up to 8192)");
    TANDEM_CUDA_REQUIRE(!a.y_split || a.n % 32 == 0, "rmsnorm: a split output needs n a multiple of 32");
    TANDEM_CUDA_REQUIRE(!a.y_sums || a.y_split, "rmsnorm: y_sums is written with y_split only");
    if (a.n_rows == 0) return;
    static_assert(norm_max_n == 8 * norm_threads, "rmsnorm: per-thread variants cover 1, 2, 4 and 8 elements");
    const dim3 grid(a.n_rows), block(norm_threads);
    switch ((a.n + norm_threads - 1) / norm_threads) {
    case 1: launch_pdl(rmsnorm_kernel<1>, grid, block, stream, a); break;
    case 2: launch_pdl(rmsnorm_kernel<2>, grid, block, stream, a); break;
    case 3:
    case 4: launch_pdl(rmsnorm_kernel<4>, grid, block, stream, a); break;
    default: launch_pdl(rmsnorm_kernel<8>, grid, block, stream, a); break;
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

void split_rows(const split_rows_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.x && a.split && a.sums && a.n_rows >= 0 && a.n > 0 && a.n % 32 == 0 && a.stride % 32 == 0 &&
                            a.n <= a.stride,
                        "split_rows: bad arguments (n and stride multiples of 32, n <= stride)");
    if (a.n_rows == 0) return;
    launch_pdl(split_rows_kernel, dim3(a.n_rows), dim3(split_threads), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void embed(const embed_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.table && a.tokens && a.x && a.d_model > 0 && a.d_model % 32 == 0, "embed: bad arguments");
    if (a.n_rows == 0) return;
    const int64_t row_bytes = matvec_row_bytes(a.type, a.d_model);
    constexpr int threads = 64;
    switch (a.type) {
    case ggml_type::q4_k: launch_pdl(embed_kernel<ggml_type::q4_k>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::q6_k: launch_pdl(embed_kernel<ggml_type::q6_k>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::q8_0: launch_pdl(embed_kernel<ggml_type::q8_0>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::f16: launch_pdl(embed_kernel<ggml_type::f16>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::bf16: launch_pdl(embed_kernel<ggml_type::bf16>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::f32: launch_pdl(embed_kernel<ggml_type::f32>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    default: TANDEM_CUDA_REQUIRE(false, "embed: table type not supported on CUDA");
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
