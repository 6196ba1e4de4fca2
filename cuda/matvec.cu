// cuda/matvec.cu - weight-times-activation products for the rows of a step, any GGUF weight type,
// dense or grouped by expert, optionally fused with SwiGLU or with the residual add.
// Memory-bound at decode: each weight row is read once per group of up to `pair_batch` rows and
// dequantised in registers; activations come through L1/L2 (a few KB per row).
#include "matvec.h"

#include "cuda_check.h"
#include "launch.cuh"
#include "quant_decode.cuh"

namespace tandem::cuda {
namespace {

constexpr int warps_per_block = 4;  // one output element per warp; 4 per block keeps grids large
constexpr int pair_batch = 8;       // rows sharing one decode of the weights; 8 covers most decode groups

__device__ __forceinline__ float dot_item(const float (&v)[32], const float *__restrict__ x, const int (&start)[4]) {
    float part[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const float4 a = *reinterpret_cast<const float4 *>(x + start[t]);
        const float4 b = *reinterpret_cast<const float4 *>(x + start[t] + 4);
        float s = v[8 * t] * a.x;
        s = fmaf(v[8 * t + 1], a.y, s);
        s = fmaf(v[8 * t + 2], a.z, s);
        s = fmaf(v[8 * t + 3], a.w, s);
        s = fmaf(v[8 * t + 4], b.x, s);
        s = fmaf(v[8 * t + 5], b.y, s);
        s = fmaf(v[8 * t + 6], b.z, s);
        s = fmaf(v[8 * t + 7], b.w, s);
        part[t] = s;
    }
    return (part[0] + part[1]) + (part[2] + part[3]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, w);
    return v;
}

template <ggml_type T, bool swiglu, int batch>
__global__ void __launch_bounds__(warps_per_block * 32)
    matvec_kernel(const matvec_args a, int64_t row_bytes, int blocks0, int blocks1) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // Which matrix of a fused launch this block computes (uniform per block).
    int bx = blockIdx.x, n_out = a.n_out;
    const void *w = a.w;
    float *y_base = a.y;
    int64_t y_stride = a.y_stride;
    if (a.n_extra > 0 && bx >= blocks0) {
        bx -= blocks0;
        int part = 0;
        if (a.n_extra > 1 && bx >= blocks1) {
            bx -= blocks1;
            part = 1;
        }
        w = a.extra[part].w;
        n_out = a.extra[part].n_out;
        y_base = a.extra[part].y;
        y_stride = a.extra[part].y_stride;
    }
    const int j = bx * warps_per_block + warp;
    if (j >= n_out) return;
    const bool grouped = a.group_off != nullptr;
    const bool early = !grouped || a.groups_settled;  // the weight row is known before the wait
    const int n_items = a.n_in / 32;
    int begin = 0, end = a.n_pairs, mat = 0;
    auto resolve_group = [&]() {
        const int g = blockIdx.y;
        if (g >= *a.n_groups) return false;
        begin = a.group_off[g];
        end = a.group_off[g + 1];
        mat = a.group_mat[g];
        return true;
    };
    const uint8_t *w_row = nullptr, *u_row = nullptr;
    auto resolve_rows = [&]() {
        const size_t offset = (size_t(mat) * n_out + j) * size_t(row_bytes);
        w_row = static_cast<const uint8_t *>(w) + offset;
        if constexpr (swiglu) u_row = static_cast<const uint8_t *>(a.w_up) + offset;
    };
    item_raw<T> cur{}, cur_u{};
    bool prefetched = false;
    if (early) {
        if (grouped && !resolve_group()) return;
        resolve_rows();
        if (lane < n_items) {
            // Stream this lane's first weights while the previous kernel finishes.
            cur = load_item<T>(w_row, lane);
            if constexpr (swiglu) cur_u = load_item<T>(u_row, lane);
            prefetched = true;
        }
    }
    pdl_wait();
    pdl_trigger();
    if (!early) {
        if (!resolve_group()) return;
        resolve_rows();
    }
    for (int p0 = begin; p0 < end; p0 += batch) {
        const float *xr[batch];
        float acc[batch], acc_up[batch];
#pragma unroll
        for (int p = 0; p < batch; ++p) {
            const int i = p0 + p;
            xr[p] = i < end ? a.x + int64_t(a.x_rows ? a.x_rows[i] : i) * a.x_stride : nullptr;
            acc[p] = 0.0f;
            acc_up[p] = 0.0f;
        }
        if (!(prefetched && p0 == begin) && lane < n_items) {
            cur = load_item<T>(w_row, lane);
            if constexpr (swiglu) cur_u = load_item<T>(u_row, lane);
        }
        for (int item = lane; item < n_items; item += 32) {
            // Next item's loads go out before this one is decoded (software pipelining).
            item_raw<T> nxt{}, nxt_u{};
            if (item + 32 < n_items) {
                nxt = load_item<T>(w_row, item + 32);
                if constexpr (swiglu) nxt_u = load_item<T>(u_row, item + 32);
            }
            float v[32], vu[32];
            int start[4];
            decode_raw<T>(cur, item, v, start);
            if constexpr (swiglu) decode_raw<T>(cur_u, item, vu, start);
#pragma unroll
            for (int p = 0; p < batch; ++p) {
                if (!xr[p]) continue;
                acc[p] += dot_item(v, xr[p], start);
                if constexpr (swiglu) acc_up[p] += dot_item(vu, xr[p], start);
            }
            cur = nxt;
            cur_u = nxt_u;
        }
#pragma unroll
        for (int p = 0; p < batch; ++p) {
            if (!xr[p]) continue;
            float r = warp_sum(acc[p]);
            if constexpr (swiglu) {
                const float u = warp_sum(acc_up[p]);
                r = r / (1.0f + expf(-r)) * u;  // silu(gate) * up, as the CPU twin writes it
            }
            if (lane == 0) {
                const int i = p0 + p;
                float *y = y_base + int64_t(a.y_rows ? a.y_rows[i] : i) * y_stride + j;
                *y = a.accumulate ? *y + r : r;
            }
        }
    }
}

template <ggml_type T, int batch>
void launch_matvec_batch(const matvec_args &a, cudaStream_t stream) {
    const int blocks0 = (a.n_out + warps_per_block - 1) / warps_per_block;
    const int blocks1 = a.n_extra > 0 ? (a.extra[0].n_out + warps_per_block - 1) / warps_per_block : 0;
    const int blocks2 = a.n_extra > 1 ? (a.extra[1].n_out + warps_per_block - 1) / warps_per_block : 0;
    const dim3 grid(blocks0 + blocks1 + blocks2, a.group_off ? a.max_groups : 1);
    const int64_t row_bytes = matvec_row_bytes(a.type, a.n_in);
    if (a.w_up)
        launch_pdl(matvec_kernel<T, true, batch>, grid, dim3(warps_per_block * 32), stream, a, row_bytes, blocks0, blocks1);
    else
        launch_pdl(matvec_kernel<T, false, batch>, grid, dim3(warps_per_block * 32), stream, a, row_bytes, blocks0, blocks1);
}

// Rows sharing one pass over the weights: fewer registers (more warps in flight) when a step
// has few rows per matrix. The batch changes no value: each row keeps its own accumulator.
template <ggml_type T>
void launch_matvec_type(const matvec_args &a, cudaStream_t stream) {
    const int32_t rows = a.group_off ? a.max_pairs_per_group : a.n_pairs;
    if constexpr (T == ggml_type::q4_k) {
        if (rows == 1) return launch_matvec_batch<T, 1>(a, stream);
        if (rows >= 1 && rows <= 4) return launch_matvec_batch<T, 4>(a, stream);
    }
    launch_matvec_batch<T, pair_batch>(a, stream);
}

}  // namespace

int64_t matvec_row_bytes(ggml_type type, int32_t n_in) {
    switch (type) {
    case ggml_type::q4_k: return int64_t(n_in) / 256 * 144;
    case ggml_type::q6_k: return int64_t(n_in) / 256 * 210;
    case ggml_type::q8_0: return int64_t(n_in) / 32 * 34;
    case ggml_type::f32: return int64_t(n_in) * 4;
    case ggml_type::f16:
    case ggml_type::bf16: return int64_t(n_in) * 2;
    default: return 0;
    }
}

void matvec(const matvec_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.n_in > 0 && a.n_in % 32 == 0, "matvec: n_in must be a positive multiple of 32");
    TANDEM_CUDA_REQUIRE(a.n_out > 0 && a.w && a.x && a.y, "matvec: empty output or null pointer");
    TANDEM_CUDA_REQUIRE(a.x_stride % 4 == 0 && a.x_stride >= a.n_in, "matvec: x rows must be 16-byte aligned");
    TANDEM_CUDA_REQUIRE(!a.group_off || (a.group_mat && a.n_groups && a.max_groups >= 1 && a.max_groups <= 65535),
                        "matvec: grouped mode needs group_mat, n_groups and 1 <= max_groups <= 65535");
    TANDEM_CUDA_REQUIRE(!(a.w_up && a.accumulate), "matvec: SwiGLU and accumulate do not combine");
    TANDEM_CUDA_REQUIRE(a.n_extra >= 0 && a.n_extra <= 2 && (a.n_extra == 0 || (!a.group_off && !a.w_up)),
                        "matvec: up to 2 extra matrices, dense and without SwiGLU only");
    for (int i = 0; i < a.n_extra; ++i)
        TANDEM_CUDA_REQUIRE(a.extra[i].w && a.extra[i].y && a.extra[i].n_out > 0, "matvec: empty extra matrix");
    if (!a.group_off && a.n_pairs == 0) return;
    switch (a.type) {
    case ggml_type::q4_k:
        TANDEM_CUDA_REQUIRE(a.n_in % 256 == 0, "matvec: q4_K rows are whole 256-element blocks");
        launch_matvec_type<ggml_type::q4_k>(a, stream);
        break;
    case ggml_type::q6_k:
        TANDEM_CUDA_REQUIRE(a.n_in % 256 == 0, "matvec: q6_K rows are whole 256-element blocks");
        launch_matvec_type<ggml_type::q6_k>(a, stream);
        break;
    case ggml_type::q8_0: launch_matvec_type<ggml_type::q8_0>(a, stream); break;
    case ggml_type::f16: launch_matvec_type<ggml_type::f16>(a, stream); break;
    case ggml_type::bf16: launch_matvec_type<ggml_type::bf16>(a, stream); break;
    case ggml_type::f32: launch_matvec_type<ggml_type::f32>(a, stream); break;
    default: TANDEM_CUDA_REQUIRE(false, "matvec: weight type not supported on CUDA");
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
