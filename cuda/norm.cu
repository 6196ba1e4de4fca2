// cuda/norm.cu - RMSNorm over rows (one block per row, the row in registers), RMSNorm with the
// F32 router of decode rows, the split twin of rows (x_split.cuh), and the embedding lookup.
#include "norm.h"

#include "cp_async.cuh"
#include "cuda_check.h"
#include "digits.cuh"
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

// rmsnorm with digits: one block of n / 8 threads a row, each holding eight contiguous elements
// (rmsnorm_digits_block), so y and its digits leave together: bitwise rmsnorm_kernel's y, and
// digits_quantize's digits of it, in one launch instead of two.
__global__ void __launch_bounds__(norm_max_n / 8) rmsnorm_digits_kernel(const rmsnorm_args a) {
    __shared__ __align__(16) float s_sq[norm_max_n];
    __shared__ float s_inv;
    const int r = blockIdx.x, i0 = 8 * threadIdx.x;
    float wv[8], xv[8];
    load8(a.w + i0, wv);
    pdl_wait();
    pdl_trigger();
    load8(a.x + int64_t(r) * a.n + i0, xv);
    // y may alias x: every x element was read (into this thread's registers) before the barriers.
    rmsnorm_digits_block(xv, wv, s_sq, &s_inv, a.n, a.eps, a.y + int64_t(r) * a.n, a.y_digits, r);
}

// rmsnorm_router: blocks of `E` warps (E experts) over (experts, rows), 4 n (E + 2) bytes of
// shared memory: the block's router rows and the norm weights, copied before the PDL wait
// (immutable weights overlap the predecessor), and the row, normalised in place. E is 4 when that
// fits within 48 KiB (n up to 2,048), else 2 or 1 (n up to 4,096).
constexpr int router_smem_cap = 48 * 1024;
constexpr int router_load_batch = 8;  // 16-byte x loads a thread keeps in flight together
int router_block_warps(int32_t n) {
    for (int e = 4; e >= 1; e /= 2)
        if (4 * int64_t(n) * (e + 2) <= router_smem_cap) return e;
    return 0;
}

__global__ void __launch_bounds__(128) rmsnorm_router_kernel(const rmsnorm_router_args a) {
    extern __shared__ __align__(16) float s_dyn[];
    const int E = blockDim.x >> 5, n = a.n, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.y, e0 = blockIdx.x * E, n_here = min(E, a.n_expert - e0);
    float *s_w = s_dyn, *s_wn = s_dyn + E * n, *s_h = s_wn + n;
    const int units = n / 4;  // 16-byte units of a row
    for (int u = threadIdx.x; u < (n_here + 1) * units; u += blockDim.x) {
        const int e = u / units, c = u - e * units;
        if (e < n_here)
            cp_async_16(s_w + e * n + 4 * c, a.router + int64_t(e0 + e) * n + 4 * c, 16);
        else
            cp_async_16(s_wn + 4 * c, a.w_norm + 4 * c, 16);
    }
    cp_async_commit();
    pdl_wait();
    pdl_trigger();
    // The row into shared memory 16 bytes a load, a thread's loads (up to eight; four for n = 2,048) asked
    // for before any store: with scalar loads under a bounds test the compiler interleaved them
    // with the stores, five dependent round trips a row (visible in the SASS).
    const float4 *x4 = reinterpret_cast<const float4 *>(a.x + int64_t(r) * n);
    float4 *h4 = reinterpret_cast<float4 *>(s_h);
    const int n4 = n / 4;
    for (int u0 = threadIdx.x; u0 < n4; u0 += router_load_batch * int(blockDim.x)) {
        float4 v[router_load_batch];
#pragma unroll
        for (int b = 0; b < router_load_batch; ++b) v[b] = x4[min(u0 + b * int(blockDim.x), n4 - 1)];  // in bounds, unguarded
#pragma unroll
        for (int b = 0; b < router_load_batch; ++b)
            if (u0 + b * int(blockDim.x) < n4) h4[u0 + b * int(blockDim.x)] = v[b];
    }
    __syncthreads();
    // Every warp sums the squares as rmsnorm_kernel's warp 0 does (lane sums, butterfly): the
    // same bits in each, no barrier to share them.
    float acc = 0.0f;
#pragma unroll 16
    for (int i = lane; i < n; i += 32) acc = __fadd_rn(acc, __fmul_rn(s_h[i], s_h[i]));
    acc = warp_sum_fixed(acc);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(acc, float(n)), a.eps)));
    cp_async_wait_all();
    __syncthreads();  // every warp has summed the row; the copies are visible
    for (int i = threadIdx.x; i < n; i += blockDim.x) s_h[i] = __fmul_rn(__fmul_rn(s_h[i], inv), s_wn[i]);
    __syncthreads();
    // This block's share of h: 32-element groups bx E + w, then every gridDim.x E groups on.
    float *h = a.h + int64_t(r) * n;
    for (int grp = e0 + warp; grp < n / 32; grp += gridDim.x * E) {
        const int i = grp * 32 + lane;
        const float v = s_h[i];
        h[i] = v;
        if (a.h_split)
            split_store_warp(reinterpret_cast<uint16_t *>(a.h_split) + int64_t(r) * n * 2,
                             a.h_sums ? a.h_sums + int64_t(r) * (n / 32) : nullptr, i, v);
    }
    // Its share of h's digit blocks (256 elements each), the same way.
    if (a.h_digits.digits)
        for (int blk = e0 + warp; blk < n / 256; blk += gridDim.x * E) {
            float v[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = s_h[blk * 256 + 8 * lane + i];
            digits_quantize_warp(v, a.h_digits, r, n, blk, lane);
        }
    // The logit: lane j sums elements j, j + 32, ... in order, then the butterfly (dot_f32).
    if (warp < n_here) {
        const float *wr = s_w + warp * n;
        float dot = 0.0f;
#pragma unroll 16
        for (int i = lane; i < n; i += 32) dot = __fadd_rn(dot, __fmul_rn(wr[i], s_h[i]));
        dot = warp_sum_fixed(dot);
        if (lane == 0) a.logits[int64_t(r) * a.n_expert + e0 + warp] = dot;
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

bool rmsnorm_digits_applies(const rmsnorm_args &a) {
    return a.n % 256 == 0 && !a.y_split &&
           (reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w) | reinterpret_cast<uintptr_t>(a.y)) % 16 == 0;
}

void rmsnorm(const rmsnorm_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.x && a.w && a.y && a.n > 0 && a.n <= norm_max_n && a.n_rows >= 0, "rmsnorm: bad arguments (n up to 8192)");
    TANDEM_CUDA_REQUIRE(!a.y_split || a.n % 32 == 0, "rmsnorm: a split output needs n a multiple of 32");
    TANDEM_CUDA_REQUIRE(!a.y_sums || a.y_split, "rmsnorm: y_sums is written with y_split only");
    TANDEM_CUDA_REQUIRE(!a.y_digits.digits || (rmsnorm_digits_applies(a) && a.y_digits.scales && a.y_digits.sums),
                        "rmsnorm: digits need n a multiple of 256, scales and sums, 16-byte aligned rows, and no split output");
    if (a.n_rows == 0) return;
    if (a.y_digits.digits) {
        launch_pdl(rmsnorm_digits_kernel, dim3(a.n_rows), dim3(a.n / 8), stream, a);
        TANDEM_CUDA_CHECK_LAUNCH();
        return;
    }
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

bool rmsnorm_router_applies(int32_t n, int32_t n_expert) {
    return n > 0 && n % 32 == 0 && n_expert > 0 && router_block_warps(n) > 0;
}

void rmsnorm_router(const rmsnorm_router_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.x && a.w_norm && a.router && a.h && a.logits && a.n_rows >= 0 && rmsnorm_router_applies(a.n, a.n_expert),
                        "rmsnorm_router: bad arguments (n a multiple of 32, up to 4,096)");
    TANDEM_CUDA_REQUIRE(a.h != a.x, "rmsnorm_router: h must not alias x (every block of a row reads all of x)");
    TANDEM_CUDA_REQUIRE((reinterpret_cast<uintptr_t>(a.router) | reinterpret_cast<uintptr_t>(a.x)) % 16 == 0,
                        "rmsnorm_router: router rows and x must be 16-byte aligned");
    TANDEM_CUDA_REQUIRE(!a.h_sums || a.h_split, "rmsnorm_router: h_sums is written with h_split only");
    TANDEM_CUDA_REQUIRE(!a.h_digits.digits || (a.n % 256 == 0 && a.h_digits.scales && a.h_digits.sums),
                        "rmsnorm_router: digits need n a multiple of 256, scales and sums");
    if (a.n_rows == 0) return;
    const int e = router_block_warps(a.n);
    const dim3 grid((a.n_expert + e - 1) / e, a.n_rows);
    launch_pdl_smem(rmsnorm_router_kernel, grid, dim3(32 * e), size_t(4) * size_t(a.n) * size_t(e + 2), stream, a);
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
    case ggml_type::q5_k: launch_pdl(embed_kernel<ggml_type::q5_k>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::q3_k: launch_pdl(embed_kernel<ggml_type::q3_k>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::q2_k: launch_pdl(embed_kernel<ggml_type::q2_k>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::q4_0: launch_pdl(embed_kernel<ggml_type::q4_0>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::q4_1: launch_pdl(embed_kernel<ggml_type::q4_1>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::q5_0: launch_pdl(embed_kernel<ggml_type::q5_0>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::q5_1: launch_pdl(embed_kernel<ggml_type::q5_1>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq4_nl: launch_pdl(embed_kernel<ggml_type::iq4_nl>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq4_xs: launch_pdl(embed_kernel<ggml_type::iq4_xs>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::mxfp4: launch_pdl(embed_kernel<ggml_type::mxfp4>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq2_xxs: launch_pdl(embed_kernel<ggml_type::iq2_xxs>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq2_xs: launch_pdl(embed_kernel<ggml_type::iq2_xs>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq2_s: launch_pdl(embed_kernel<ggml_type::iq2_s>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq3_xxs: launch_pdl(embed_kernel<ggml_type::iq3_xxs>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq3_s: launch_pdl(embed_kernel<ggml_type::iq3_s>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq1_s: launch_pdl(embed_kernel<ggml_type::iq1_s>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::iq1_m: launch_pdl(embed_kernel<ggml_type::iq1_m>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::f16: launch_pdl(embed_kernel<ggml_type::f16>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::bf16: launch_pdl(embed_kernel<ggml_type::bf16>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    case ggml_type::f32: launch_pdl(embed_kernel<ggml_type::f32>, dim3(a.n_rows), dim3(threads), stream, a, row_bytes); break;
    default: TANDEM_CUDA_REQUIRE(false, "embed: table type not supported on CUDA");
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
