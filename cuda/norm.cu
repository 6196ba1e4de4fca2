// cuda/norm.cu - RMSNorm over rows (one block per row) and the embedding lookup.
#include "norm.h"

#include "cuda_check.h"
#include "launch.cuh"
#include "matvec.h"
#include "quant_decode.cuh"
#include "warp_reduce.cuh"

namespace tandem::cuda {
namespace {

constexpr int norm_threads = 32;  // one warp per row: lane j sums elements j, j+32, ... like dot_f32

__global__ void rmsnorm_kernel(const rmsnorm_args a) {
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.x, lane = threadIdx.x;
    const float *x = a.x + int64_t(r) * a.n;
    float *y = a.y + int64_t(r) * a.n;
    float acc = 0.0f;
    for (int i = lane; i < a.n; i += 32) acc = __fadd_rn(acc, __fmul_rn(x[i], x[i]));
    const float mean_sq = __fdiv_rn(__shfl_sync(0xFFFFFFFFu, warp_sum_fixed(acc), 0), float(a.n));
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, a.eps)));
    for (int i = lane; i < a.n; i += 32) y[i] = __fmul_rn(__fmul_rn(x[i], inv), a.w[i]);
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
    TANDEM_CUDA_REQUIRE(a.x && a.w && a.y && a.n > 0 && a.n_rows >= 0, "rmsnorm: bad arguments");
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
