// cuda/matmul_prompt.cu - prompt-row products on tensor cores (mma.sync m16n8k16, bf16 hi/lo
// split, fp32 accumulate), any GGUF weight type, dense or grouped by expert.
//
// Work: a 2,048-token prompt of qwen3-30b-a3b is ~13.5 TFLOP of products; the split triples the
// tensor-core work (~40 TFLOP of bf16 mma), which the H200's tensor cores still do in a fraction
// of the time the fp32 matvec path takes (CUDA cores, activations re-read per weight row).
// Block tile: 64 rows (pairs) x 64 weight rows, K in steps of 128 elements. Per K step the block
// dequantises its 64 x 128 weights (4 items of every weight row, quant_decode.cuh) and converts
// its 64 x 128 activations, both into bf16 hi/lo tiles in shared memory; 4 warps (2 x 2) then run
// 8 k16 steps of 2 x 4 mma tiles x 3 split products each.
#include "matmul_prompt.h"

#include "cuda_check.h"
#include "launch.cuh"
#include "quant_decode.cuh"

#include <cuda_bf16.h>

namespace tandem::cuda {
namespace {

constexpr int tile_m = 64;       // rows per block: a prefill step's expert holds ~32-128 pairs
constexpr int tile_n = 64;       // weight rows per block (SwiGLU: 32 gate + 32 up rows, by runs of 8)
constexpr int tile_k = 128;      // items 4t .. 4t + 3 of every row cover elements 128t .. 128t + 127 in
                                 // every type (half a Q4_K/Q6_K block, four Q8_0 blocks)
constexpr int n_threads = 128;   // 4 warps as 2 (rows) x 2 (weight rows), 32 x 32 each
constexpr int row_elems = tile_k + 8;  // bf16 per shared row: +16 bytes, so the 8 rows an ldmatrix
                                       // reads start in different banks
constexpr size_t smem_bytes = size_t(2 * (tile_m + tile_n) * row_elems) * sizeof(__nv_bfloat16);

__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 a, __nv_bfloat16 b) {
    return uint32_t(__bfloat16_as_ushort(a)) | (uint32_t(__bfloat16_as_ushort(b)) << 16);
}

// Eight floats to their bf16 hi and lo parts, stored as one 16-byte word each.
__device__ __forceinline__ void split_store8(const float *v, __nv_bfloat16 *hi, __nv_bfloat16 *lo) {
    uint32_t h[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __nv_bfloat16 h0 = __float2bfloat16_rn(v[2 * i]), h1 = __float2bfloat16_rn(v[2 * i + 1]);
        const __nv_bfloat16 l0 = __float2bfloat16_rn(v[2 * i] - __bfloat162float(h0));
        const __nv_bfloat16 l1 = __float2bfloat16_rn(v[2 * i + 1] - __bfloat162float(h1));
        h[i] = pack_bf16(h0, h1);
        l[i] = pack_bf16(l0, l1);
    }
    *reinterpret_cast<uint4 *>(hi) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4 *>(lo) = make_uint4(l[0], l[1], l[2], l[3]);
}

__device__ __forceinline__ void zero_store(__nv_bfloat16 *p, int n) {
    for (int i = 0; i < n; i += 8) *reinterpret_cast<uint4 *>(p + i) = make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16 *p) {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a b for one m16n8k16 tile (a: 16 x 16 row-major, b: 16 x 8 column-major, bf16; c fp32).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Grouped mode: block tile t of the concatenated groups (each group's pairs in tiles of tile_m).
// Every warp computes it (uniform per block): a warp scan over the groups' tile counts.
__device__ __forceinline__ bool find_group_tile(const matvec_args &a, int t, int &begin, int &end, int &mat, int &m0) {
    const int lane = threadIdx.x & 31, n_groups = *a.n_groups;
    int base = 0;
    for (int g0 = 0; g0 < n_groups; g0 += 32) {
        const int g = g0 + lane;
        const int cnt = g < n_groups ? (a.group_off[g + 1] - a.group_off[g] + tile_m - 1) / tile_m : 0;
        int incl = cnt;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += v;
        }
        const int total = __shfl_sync(0xFFFFFFFFu, incl, 31);
        if (t < base + total) {
            const int hit = __ffs(__ballot_sync(0xFFFFFFFFu, t < base + incl)) - 1;
            const int before = __shfl_sync(0xFFFFFFFFu, incl - cnt, hit);
            const int gg = g0 + hit;
            begin = a.group_off[gg];
            end = a.group_off[gg + 1];
            mat = a.group_mat[gg];
            m0 = begin + (t - base - before) * tile_m;
            return true;
        }
        base += total;
    }
    return false;
}

template <ggml_type T, bool swiglu>
__global__ void __launch_bounds__(n_threads) matmul_prompt_kernel(const matvec_args a, int64_t row_bytes) {
    extern __shared__ uint4 smem_words[];
    __nv_bfloat16 *const x_hi = reinterpret_cast<__nv_bfloat16 *>(smem_words);
    __nv_bfloat16 *const x_lo = x_hi + tile_m * row_elems;
    __nv_bfloat16 *const w_hi = x_lo + tile_m * row_elems;
    __nv_bfloat16 *const w_lo = w_hi + tile_n * row_elems;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    pdl_wait();  // groups, rows and activations come from the kernels before
    pdl_trigger();
    int begin = 0, end = a.n_pairs, mat = 0, m0 = blockIdx.y * tile_m;
    if (a.group_off) {
        if (!find_group_tile(a, blockIdx.y, begin, end, mat, m0)) return;
    } else if (m0 >= end) {
        return;
    }
    const int rows_here = min(tile_m, end - m0);
    const int outs_per_block = swiglu ? tile_n / 2 : tile_n;
    const int j0 = blockIdx.x * outs_per_block;
    const int n_items = a.n_in / 32, n_k_tiles = (a.n_in + tile_k - 1) / tile_k;

    // This thread's loads: weight row `wr` (items 2 (tid & 1), +1 of each K step) and activation
    // row `xr` (elements 64 (tid & 1) .. +63 of each K step).
    const int wr = tid >> 1, xr = tid >> 1, half = tid & 1;
    const uint8_t *w_row = nullptr;
    {
        int j;
        const void *base;
        if constexpr (swiglu) {
            const int q = wr >> 4, within = wr & 15;  // runs of 8: gate j .. j + 7, then up j .. j + 7
            j = j0 + 8 * q + (within & 7);
            base = within < 8 ? a.w : a.w_up;
        } else {
            j = j0 + wr;
            base = a.w;
        }
        if (j < a.n_out) w_row = static_cast<const uint8_t *>(base) + (size_t(mat) * a.n_out + size_t(j)) * size_t(row_bytes);
    }
    const float *x_row = nullptr;
    if (xr < rows_here) {
        const int p = m0 + xr;
        x_row = a.x + int64_t(a.x_rows ? a.x_rows[p] : p) * a.x_stride;
    }

    const int wm = warp >> 1, wn = warp & 1;
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    for (int kt = 0; kt < n_k_tiles; ++kt) {
        // Activations: 64 floats of row xr, split into hi/lo (zeros past the row count or n_in).
        {
            __nv_bfloat16 *hi = x_hi + xr * row_elems + 64 * half, *lo = x_lo + xr * row_elems + 64 * half;
            const int col0 = kt * tile_k + 64 * half;
#pragma unroll
            for (int c = 0; c < 64; c += 8) {
                float v[8];
                if (x_row && col0 + c < a.n_in) {
                    const float4 f0 = *reinterpret_cast<const float4 *>(x_row + col0 + c);
                    const float4 f1 = *reinterpret_cast<const float4 *>(x_row + col0 + c + 4);
                    v[0] = f0.x; v[1] = f0.y; v[2] = f0.z; v[3] = f0.w;
                    v[4] = f1.x; v[5] = f1.y; v[6] = f1.z; v[7] = f1.w;
                    split_store8(v, hi + c, lo + c);
                } else {
                    zero_store(hi + c, 8);
                    zero_store(lo + c, 8);
                }
            }
        }
        // Weights: two items of row wr, dequantised as matvec does, split into hi/lo.
#pragma unroll
        for (int ii = 0; ii < 2; ++ii) {
            const int item = 4 * kt + 2 * half + ii;
            __nv_bfloat16 *hi = w_hi + wr * row_elems, *lo = w_lo + wr * row_elems;
            if (w_row && item < n_items) {
                float v[32];
                int start[4];
                decode_item<T>(w_row, item, v, start);
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    const int col = start[t] - kt * tile_k;
                    split_store8(v + 8 * t, hi + col, lo + col);
                }
            } else {
                // The two threads of a row zero 32 columns per item: together the whole K step.
                const int col = 32 * (item - 4 * kt);
                zero_store(hi + col, 32);
                zero_store(lo + col, 32);
            }
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < tile_k / 16; ++ks) {
            uint32_t ah[2][4], al[2][4], bh[2][4], bl[2][4];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                // A (rows): lanes 0-15 rows 0-15 at k 0, lanes 16-31 rows 0-15 at k 8.
                const int off = (32 * wm + 16 * i + (lane & 15)) * row_elems + 16 * ks + 8 * (lane >> 4);
                ldmatrix_x4(ah[i], x_hi + off);
                ldmatrix_x4(al[i], x_lo + off);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                // B (weight rows, k contiguous = column-major B): matrices (n 0-7, k 0), (n 0-7, k 8),
                // (n 8-15, k 0), (n 8-15, k 8): b0, b1 of n-tile 2j, then of n-tile 2j + 1.
                const int off = (32 * wn + 16 * j + (lane & 7) + 8 * (lane >> 4)) * row_elems + 16 * ks + 8 * ((lane >> 3) & 1);
                ldmatrix_x4(bh[j], w_hi + off);
                ldmatrix_x4(bl[j], w_lo + off);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int jj = j >> 1, s = 2 * (j & 1);
                    mma_bf16(acc[i][j], ah[i], bh[jj][s], bh[jj][s + 1]);
                    mma_bf16(acc[i][j], ah[i], bl[jj][s], bl[jj][s + 1]);
                    mma_bf16(acc[i][j], al[i], bh[jj][s], bh[jj][s + 1]);
                }
        }
        __syncthreads();  // the tiles are rewritten by the next K step
    }

    // Accumulator element e of tile (i, j): row 16 i + (lane >> 2) + 8 (e >> 1), weight row 8 j +
    // 2 (lane & 3) + (e & 1), both within the warp's 32 x 32.
    const int g = lane >> 2, t2 = 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int lm = 32 * wm + 16 * i + g + 8 * (e >> 1);
            if (lm >= rows_here) continue;
            const int p = m0 + lm;
            float *y_row = a.y + int64_t(a.y_rows ? a.y_rows[p] : p) * a.y_stride;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if constexpr (swiglu) {
                    if (j & 1) continue;  // n-tile 2q: gate, 2q + 1: up of the same 8 outputs
                    const int jo = j0 + 8 * (2 * wn + (j >> 1)) + t2 + (e & 1);
                    if (jo >= a.n_out) continue;
                    const float gate = acc[i][j][e], up = acc[i][j + 1][e];
                    y_row[jo] = gate / (1.0f + expf(-gate)) * up;  // silu(gate) * up, as matvec writes it
                } else {
                    const int jo = j0 + 32 * wn + 8 * j + t2 + (e & 1);
                    if (jo >= a.n_out) continue;
                    y_row[jo] = a.accumulate ? y_row[jo] + acc[i][j][e] : acc[i][j][e];
                }
            }
        }
}

template <ggml_type T, bool swiglu>
void launch_matmul_prompt_shape(const matvec_args &a, cudaStream_t stream) {
    auto kernel = matmul_prompt_kernel<T, swiglu>;
    // Per device and cheap: set every launch rather than remembering which devices have it.
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
    const int outs_per_block = swiglu ? tile_n / 2 : tile_n;
    const int m_tiles = a.group_off ? a.n_pairs / tile_m + a.max_groups : (a.n_pairs + tile_m - 1) / tile_m;
    const dim3 grid((a.n_out + outs_per_block - 1) / outs_per_block, m_tiles);
    launch_pdl_smem(kernel, grid, dim3(n_threads), smem_bytes, stream, a, matvec_row_bytes(a.type, a.n_in));
    TANDEM_CUDA_CHECK_LAUNCH();
}

template <ggml_type T>
void launch_matmul_prompt_type(const matvec_args &a, cudaStream_t stream) {
    if (a.w_up)
        launch_matmul_prompt_shape<T, true>(a, stream);
    else
        launch_matmul_prompt_shape<T, false>(a, stream);
}

}  // namespace

void matmul_prompt(const matvec_args &args, cudaStream_t stream) {
    const matvec_args &a = args;
    TANDEM_CUDA_REQUIRE(a.n_in > 0 && a.n_in % 32 == 0, "matmul_prompt: n_in must be a positive multiple of 32");
    TANDEM_CUDA_REQUIRE(a.n_out > 0 && a.w && a.x && a.y, "matmul_prompt: empty output or null pointer");
    TANDEM_CUDA_REQUIRE(a.x_stride % 4 == 0 && a.x_stride >= a.n_in, "matmul_prompt: x rows must be 16-byte aligned");
    TANDEM_CUDA_REQUIRE(!a.group_off || (a.group_mat && a.n_groups && a.max_groups >= 1 && a.n_pairs >= 0),
                        "matmul_prompt: grouped mode needs group_mat, n_groups, max_groups >= 1 and a pair bound");
    TANDEM_CUDA_REQUIRE(!(a.w_up && a.accumulate), "matmul_prompt: SwiGLU and accumulate do not combine");
    TANDEM_CUDA_REQUIRE(a.n_extra >= 0 && a.n_extra <= 2 && (a.n_extra == 0 || (!a.group_off && !a.w_up)),
                        "matmul_prompt: up to 2 extra matrices, dense and without SwiGLU only");
    if (a.n_pairs == 0) return;
    TANDEM_CUDA_REQUIRE(int64_t(a.n_pairs) / tile_m + a.max_groups <= 65535, "matmul_prompt: too many rows for one launch");
    if ((a.type == ggml_type::q4_k || a.type == ggml_type::q6_k) && a.n_in % 256 != 0)
        TANDEM_CUDA_REQUIRE(false, "matmul_prompt: K-quant rows are whole 256-element blocks");
    // Extra matrices (Q, K, V together in matvec): one launch each here; the grid is wide anyway.
    matvec_args one = a;
    one.n_extra = 0;
    for (int part = 0; part <= a.n_extra; ++part) {
        if (part > 0) {
            one.w = a.extra[part - 1].w;
            one.n_out = a.extra[part - 1].n_out;
            one.y = a.extra[part - 1].y;
            one.y_stride = a.extra[part - 1].y_stride;
            TANDEM_CUDA_REQUIRE(one.w && one.y && one.n_out > 0, "matmul_prompt: empty extra matrix");
        }
        switch (a.type) {
        case ggml_type::q4_k: launch_matmul_prompt_type<ggml_type::q4_k>(one, stream); break;
        case ggml_type::q6_k: launch_matmul_prompt_type<ggml_type::q6_k>(one, stream); break;
        case ggml_type::q8_0: launch_matmul_prompt_type<ggml_type::q8_0>(one, stream); break;
        case ggml_type::f16: launch_matmul_prompt_type<ggml_type::f16>(one, stream); break;
        case ggml_type::bf16: launch_matmul_prompt_type<ggml_type::bf16>(one, stream); break;
        case ggml_type::f32: launch_matmul_prompt_type<ggml_type::f32>(one, stream); break;
        default: TANDEM_CUDA_REQUIRE(false, "matmul_prompt: weight type not supported on CUDA");
        }
    }
}

}  // namespace tandem::cuda
