// cuda/norm.cu - RMSNorm over rows (one block per row) and the embedding lookup.
#include "norm.h"

#include "cuda_check.h"
#include "launch.cuh"
#include "matvec.h"
#include "quant_decode.cuh"
#include "warp_reduce.cuh"

namespace tandem::cuda {
namespace {

constexpr int norm_threads = 1024;   // loads in parallel (few round trips per thread); the sum runs in warp 0
constexpr int norm_max_n = 8192;     // row held in shared memory (32 KiB)

// The row goes to shared memory with every load in flight at once; warp 0 then sums it in the
// CPU twin's order (element i in lane i % 32, butterfly), so the result stays bitwise the CPU's.
__global__ void __launch_bounds__(norm_threads) rmsnorm_kernel(const rmsnorm_args a) {
    __shared__ float s_x[norm_max_n];
    __shared__ float s_inv;
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.x;
    const float *x = a.x + int64_t(r) * a.n;
    float *y = a.y + int64_t(r) * a.n;
    for (int i = threadIdx.x; i < a.n; i += norm_threads) s_x[i] = x[i];
    __syncthreads();
    if (threadIdx.x < 32) {
        float acc = 0.0f;
#pragma unroll 8
        for (int i = threadIdx.x; i < a.n; i += 32) acc = __fadd_rn(acc, __fmul_rn(s_x[i], s_x[i]));
        acc = warp_sum_fixed(acc);
        if (threadIdx.x == 0) {
            const float mean_sq = __fdiv_rn(acc, float(a.n));
            s_inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, a.eps)));
        }
    }
    __syncthreads();
    const float inv = s_inv;
    for (int i = threadIdx.x; i < a.n; i += norm_threads) y[i] = __fmul_rn(__fmul_rn(s_x[i], inv), a.w[i]);
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
    if (a.n_rows == 0) return;
    launch_pdl(rmsnorm_kernel, dim3(a.n_rows), dim3(norm_threads), stream, a);
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
