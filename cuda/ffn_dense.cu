// cuda/ffn_dense.cu - a warp an output for the plain products, a thread an element elsewhere.
#include "ffn_dense.h"

#include "cuda_check.h"
#include "tandem/swiglu.h"
#include "warp_reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tandem::cuda {
namespace {

constexpr int plain_warps = 8;
constexpr int elem_threads = 256;

template <ggml_type T>
__device__ __forceinline__ float weight_at(const void *w, int64_t i) {
    if constexpr (T == ggml_type::f16) return __half2float(static_cast<const __half *>(w)[i]);
    else if constexpr (T == ggml_type::bf16) return __bfloat162float(static_cast<const __nv_bfloat16 *>(w)[i]);
    else return static_cast<const float *>(w)[i];
}

template <ggml_type T>
__global__ void __launch_bounds__(plain_warps * 32) dense_plain_kernel(const dense_plain_args a) {
    const int lane = threadIdx.x & 31, o = blockIdx.x * plain_warps + (threadIdx.x >> 5), r = blockIdx.y;
    if (o >= a.n_out) return;
    const float *x = a.x + int64_t(r) * a.x_stride;
    const int64_t w0 = int64_t(o) * a.n_in;
    float acc = 0.0f;
    for (int i = lane; i < a.n_in; i += 32) acc = fmaf(weight_at<T>(a.w, w0 + i), x[i], acc);
    acc = warp_sum_fixed(acc);
    if (lane == 0) {
        float *y = a.y + int64_t(r) * a.y_stride + o;
        *y = a.accumulate ? *y + acc : acc;
    }
}

__global__ void swiglu_kernel(float *gate, const float *up, int32_t n_rows, int32_t n, int64_t stride) {
    const int64_t i = int64_t(blockIdx.x) * elem_threads + threadIdx.x;
    if (i >= int64_t(n_rows) * n) return;
    const int64_t at = (i / n) * stride + i % n;
    gate[at] = swiglu(gate[at], up[at]);  // the CPU's bits (tandem/swiglu.h)
}

__global__ void ffn_combine_kernel(const ffn_combine_args a) {
    const int r = blockIdx.y, i = blockIdx.x * elem_threads + threadIdx.x;
    if (i >= a.d_model || a.slots[r] < 0) return;
    float acc = 0.0f;
    for (int s = 0; s < a.k; ++s)  // fixed slot order, no FMA: the CPU's moe_combine_dense
        acc = __fadd_rn(acc, __fmul_rn(a.weights[int64_t(r) * a.k + s], a.out[(int64_t(r) * a.k + s) * a.d_model + i]));
    float *x = a.x + int64_t(r) * a.d_model + i;
    *x = __fadd_rn(*x, a.dense ? __fadd_rn(acc, a.dense[int64_t(r) * a.d_model + i]) : acc);
}

}  // namespace

bool dense_plain_supported(ggml_type type) {
    return type == ggml_type::f32 || type == ggml_type::f16 || type == ggml_type::bf16;
}

void dense_plain(const dense_plain_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.w && a.x && a.y && a.n_in > 0 && a.n_out > 0 && dense_plain_supported(a.type),
                        "dense_plain: F32, F16 or BF16 weights");
    TANDEM_CUDA_REQUIRE(a.n_rows <= 65535, "dense_plain: at most 65,535 rows a launch");
    if (a.n_rows == 0) return;
    const dim3 grid((a.n_out + plain_warps - 1) / plain_warps, a.n_rows);
    switch (a.type) {
    case ggml_type::f16: dense_plain_kernel<ggml_type::f16><<<grid, plain_warps * 32, 0, stream>>>(a); break;
    case ggml_type::bf16: dense_plain_kernel<ggml_type::bf16><<<grid, plain_warps * 32, 0, stream>>>(a); break;
    default: dense_plain_kernel<ggml_type::f32><<<grid, plain_warps * 32, 0, stream>>>(a); break;
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

void swiglu_rows(float *gate, const float *up, int32_t n_rows, int32_t n, int64_t stride, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(gate && up && n > 0 && stride >= n, "swiglu_rows: bad arguments");
    const int64_t total = int64_t(n_rows) * n;
    if (total == 0) return;
    swiglu_kernel<<<unsigned((total + elem_threads - 1) / elem_threads), elem_threads, 0, stream>>>(gate, up, n_rows, n, stride);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void ffn_combine(const ffn_combine_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.x && a.slots && (a.k > 0 || a.dense) && (a.k == 0 || (a.out && a.weights)) && a.d_model > 0,
                        "ffn_combine: bad arguments");
    TANDEM_CUDA_REQUIRE(a.n_rows <= 65535, "ffn_combine: at most 65,535 rows a launch");
    if (a.n_rows == 0) return;
    ffn_combine_kernel<<<dim3((a.d_model + elem_threads - 1) / elem_threads, a.n_rows), elem_threads, 0, stream>>>(a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
