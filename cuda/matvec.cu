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

constexpr int warps_per_block = 4;  // each warp computes R output elements (matvec_kernel); 4 warps per block
constexpr int pair_batch = 8;       // rows sharing one decode of the weights; 8 covers most decode groups

// The 32 activations an item multiplies (runs of 8 at start[t]), as dot_vals takes them.
__device__ __forceinline__ void load_x(const float *__restrict__ x, const int (&start)[4], float (&xv)[32]) {
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const float4 a = *reinterpret_cast<const float4 *>(x + start[t]);
        const float4 b = *reinterpret_cast<const float4 *>(x + start[t] + 4);
        xv[8 * t] = a.x; xv[8 * t + 1] = a.y; xv[8 * t + 2] = a.z; xv[8 * t + 3] = a.w;
        xv[8 * t + 4] = b.x; xv[8 * t + 5] = b.y; xv[8 * t + 6] = b.z; xv[8 * t + 7] = b.w;
    }
}

// One item's products, in a fixed order: four runs of 8 chained FMAs, then (r0 + r1) + (r2 + r3).
__device__ __forceinline__ float dot_vals(const float (&v)[32], const float (&xv)[32]) {
    float part[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        float s = v[8 * t] * xv[8 * t];
#pragma unroll
        for (int i = 1; i < 8; ++i) s = fmaf(v[8 * t + i], xv[8 * t + i], s);
        part[t] = s;
    }
    return (part[0] + part[1]) + (part[2] + part[3]);
}

__device__ __forceinline__ float dot_item(const float (&v)[32], const float *__restrict__ x, const int (&start)[4]) {
    float xv[32];
    load_x(x, start, xv);
    return dot_vals(v, xv);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, w);
    return v;
}

// R output rows per warp, U items per lane per chunk: the R x U (x2 with SwiGLU) weight loads of a
// chunk are all issued before the first is decoded, so each lane keeps several 16-byte loads in
// flight. Lane l still visits items l, l + 32, ... of each row in ascending order and adds them into
// that row's accumulator one by one: R and U change which loads overlap, never an output's value.
template <ggml_type T, bool swiglu, int batch, int R, int U>
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
    const int j0 = (bx * warps_per_block + warp) * R;
    if (j0 >= n_out) return;
    const bool grouped = a.group_off != nullptr;
    const bool early = !grouped || a.groups_settled;  // the weight rows are known before the wait
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
    const uint8_t *w_row[R], *u_row[R];
    auto resolve_rows = [&]() {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const size_t offset = (size_t(mat) * n_out + size_t(j0 + r)) * size_t(row_bytes);
            w_row[r] = static_cast<const uint8_t *>(w) + offset;
            u_row[r] = swiglu ? static_cast<const uint8_t *>(a.w_up) + offset : nullptr;
        }
    };
    item_raw<T> cur[R][U], cur_u[R][U];
    auto load_chunk = [&](int item0) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int item = item0 + 32 * u;
                if (j0 + r < n_out && item < n_items) {
                    cur[r][u] = load_item<T>(w_row[r], item);
                    if constexpr (swiglu) cur_u[r][u] = load_item<T>(u_row[r], item);
                }
            }
    };
    bool prefetched = false;
    if (early) {
        if (grouped && !resolve_group()) return;
        resolve_rows();
        if (lane < n_items) {
            // Stream this lane's first weights while the previous kernel finishes.
            load_chunk(lane);
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
        float acc[R][batch], acc_up[R][batch];
#pragma unroll
        for (int p = 0; p < batch; ++p) {
            const int i = p0 + p;
            xr[p] = i < end ? a.x + int64_t(a.x_rows ? a.x_rows[i] : i) * a.x_stride : nullptr;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                acc[r][p] = 0.0f;
                acc_up[r][p] = 0.0f;
            }
        }
        for (int item0 = lane; item0 < n_items; item0 += 32 * U) {
            if (!(prefetched && p0 == begin && item0 == lane)) load_chunk(item0);
            if constexpr (R == 1) {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int item = item0 + 32 * u;
                    if (item >= n_items) continue;
                    float v[32], vu[32];
                    int start[4];
                    decode_raw<T>(cur[0][u], item, v, start);
                    if constexpr (swiglu) decode_raw<T>(cur_u[0][u], item, vu, start);
#pragma unroll
                    for (int p = 0; p < batch; ++p) {
                        if (!xr[p]) continue;
                        acc[0][p] += dot_item(v, xr[p], start);
                        if constexpr (swiglu) acc_up[0][p] += dot_item(vu, xr[p], start);
                    }
                }
            } else {
                // One row of the step (batch 1): each item's activations are read once for the
                // warp's R weight rows instead of once per row.
                static_assert(batch == 1, "several weight rows per warp only for one-row steps");
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int item = item0 + 32 * u;
                    if (item >= n_items) continue;
                    float xv[32];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        if (j0 + r >= n_out) continue;
                        float v[32], vu[32];
                        int start[4];
                        decode_raw<T>(cur[r][u], item, v, start);
                        if constexpr (swiglu) decode_raw<T>(cur_u[r][u], item, vu, start);
                        if (r == 0) load_x(xr[0], start, xv);
                        acc[r][0] += dot_vals(v, xv);
                        if constexpr (swiglu) acc_up[r][0] += dot_vals(vu, xv);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (j0 + r >= n_out) continue;
#pragma unroll
            for (int p = 0; p < batch; ++p) {
                if (!xr[p]) continue;
                float y_val = warp_sum(acc[r][p]);
                if constexpr (swiglu) {
                    const float u = warp_sum(acc_up[r][p]);
                    y_val = y_val / (1.0f + expf(-y_val)) * u;  // silu(gate) * up, as the CPU twin writes it
                }
                if (lane == 0) {
                    const int i = p0 + p;
                    float *y = y_base + int64_t(a.y_rows ? a.y_rows[i] : i) * y_stride + j0 + r;
                    *y = a.accumulate ? *y + y_val : y_val;
                }
            }
        }
    }
}

template <ggml_type T, bool swiglu, int batch, int R, int U>
void launch_matvec_shape(const matvec_args &a, cudaStream_t stream) {
    constexpr int per_block = warps_per_block * R;
    const int blocks0 = (a.n_out + per_block - 1) / per_block;
    const int blocks1 = a.n_extra > 0 ? (a.extra[0].n_out + per_block - 1) / per_block : 0;
    const int blocks2 = a.n_extra > 1 ? (a.extra[1].n_out + per_block - 1) / per_block : 0;
    const dim3 grid(blocks0 + blocks1 + blocks2, a.group_off ? a.max_groups : 1);
    launch_pdl(matvec_kernel<T, swiglu, batch, R, U>, grid, dim3(warps_per_block * 32), stream, a,
               matvec_row_bytes(a.type, a.n_in), blocks0, blocks1);
}

template <ggml_type T, int batch, int R, int U>
void launch_matvec_batch(const matvec_args &a, cudaStream_t stream) {
    if (a.w_up)
        launch_matvec_shape<T, true, batch, R, U>(a, stream);
    else
        launch_matvec_shape<T, false, batch, R, U>(a, stream);
}

// Rows sharing one pass over the weights: fewer registers (more warps in flight) when a step
// has few rows per matrix. The batch changes no value: each row keeps its own accumulator.
// Q4_K: a lane's items of a row (up to 2) are loaded together; with one row per matrix
// (one-session decode) a warp without SwiGLU computes 2 outputs and reads each item's
// activations once for both. Measured on the H200 (docs/perf-notes.md): 4 outputs per warp, or
// 2 with SwiGLU, cost occupancy (167 registers) and were slower.
template <ggml_type T>
void launch_matvec_type(const matvec_args &a, cudaStream_t stream) {
    const int32_t rows = a.group_off ? a.max_pairs_per_group : a.n_pairs;
    if constexpr (T == ggml_type::q4_k) {
        const bool one_item = a.n_in <= 32 * 32;  // each lane holds at most one item of a row
        if (rows == 1) {
            if (a.w_up) {
                if (one_item) return launch_matvec_shape<T, true, 1, 1, 1>(a, stream);
                return launch_matvec_shape<T, true, 1, 1, 2>(a, stream);
            }
            if (one_item) return launch_matvec_shape<T, false, 1, 2, 1>(a, stream);
            return launch_matvec_shape<T, false, 1, 2, 2>(a, stream);
        }
        if (rows >= 1 && rows <= 4) {
            if (one_item) return launch_matvec_batch<T, 4, 1, 1>(a, stream);
            return launch_matvec_batch<T, 4, 1, 2>(a, stream);
        }
        if (one_item) return launch_matvec_batch<T, pair_batch, 1, 1>(a, stream);
        launch_matvec_batch<T, pair_batch, 1, 2>(a, stream);
    } else {
        launch_matvec_batch<T, pair_batch, 1, 1>(a, stream);
    }
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
