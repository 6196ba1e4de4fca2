// cuda/attention_mla.cu - multi-head latent attention on CUDA cores: a block a row for the norm,
// RoPE and cache write; a warp an output for the per-head products; for the attention, each warp
// an online softmax over positions of one (row, head): decode rows spread a (row, head) over a
// block's eight warps, prompt rows give each warp a head and each block sixteen heads of a row.
#include "attention_mla.h"

#include "cuda_check.h"
#include "warp_reduce.cuh"

#include <cuda_fp16.h>

#include <cmath>

namespace tandem::cuda {
namespace {

constexpr int rope_threads = 128;
constexpr int product_warps = 8;
constexpr int attention_warps = 8;
constexpr int prompt_heads = 16;
constexpr int lat_per_lane = mla_max_kv_lora / 32;

// The CPU's rope_pairs: the angle in float, its cosine and sine in double, rounded to float.
__device__ __forceinline__ void rope_pair(float *v, int i, int32_t pos, const float *inv_freq) {
    const float angle = __fmul_rn(float(pos), inv_freq[i]);
    const float c = float(cos(double(angle))), s = float(sin(double(angle)));
    const float a = v[2 * i], b = v[2 * i + 1];
    v[2 * i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    v[2 * i + 1] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

__global__ void __launch_bounds__(rope_threads) mla_rope_cache_kernel(const mla_rope_cache_args a) {
    __shared__ float s_inv;
    const int r = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int width = a.kv_lora + a.d_rope, half = a.d_rope / 2;
    float *kv = a.kv + int64_t(r) * width;
    const int32_t pos = a.positions[r], slot = a.slots[r];
    if (warp == 0) {  // the CPU's rmsnorm: dot_f32's lanes and butterfly, no FMA
        float ss = 0.0f;
        for (int i = lane; i < a.kv_lora; i += 32) ss = __fadd_rn(ss, __fmul_rn(kv[i], kv[i]));
        ss = warp_sum_fixed(ss);
        if (lane == 0) s_inv = 1.0f / sqrtf(__fadd_rn(ss / float(a.kv_lora), a.eps));
    }
    __syncthreads();
    const float inv = s_inv;
    for (int i = threadIdx.x; i < a.kv_lora; i += rope_threads) kv[i] = __fmul_rn(__fmul_rn(kv[i], inv), a.kv_norm[i]);
    for (int i = threadIdx.x; i < half; i += rope_threads) rope_pair(kv + a.kv_lora, i, pos, a.inv_freq);
    const int64_t q_dim = int64_t(a.n_head) * a.d_head;
    for (int j = threadIdx.x; j < a.n_head * half; j += rope_threads) {
        const int h = j / half, i = j % half;
        rope_pair(a.q + int64_t(r) * q_dim + int64_t(h) * a.d_head + a.d_head - a.d_rope, i, pos, a.inv_freq);
    }
    __syncthreads();
    if (slot < 0) return;
    const int64_t at = (int64_t(slot) * a.n_ctx + pos) * width;
    for (int i = threadIdx.x; i < width; i += rope_threads) {
        if (a.cache_f16)
            static_cast<__half *>(a.cache)[at + i] = __float2half_rn(kv[i]);
        else
            static_cast<float *>(a.cache)[at + i] = kv[i];
    }
}

__global__ void __launch_bounds__(product_warps * 32) mla_head_product_kernel(const mla_head_product_args a) {
    const int lane = threadIdx.x & 31, o = blockIdx.x * product_warps + (threadIdx.x >> 5);
    const int h = blockIdx.y, r = blockIdx.z;
    if (o >= a.n_out) return;
    const float *w = a.w + (int64_t(h) * a.n_out + o) * a.n_in;
    const float *x = a.x + int64_t(r) * a.x_stride + int64_t(h) * a.x_head_stride;
    float acc = 0.0f;
    for (int i = lane; i < a.n_in; i += 32) acc = fmaf(w[i], x[i], acc);
    acc = warp_sum_fixed(acc);
    if (lane == 0) a.y[int64_t(r) * a.y_stride + int64_t(h) * a.y_head_stride + o] = acc;
}

__device__ __forceinline__ float cache_at(const mla_attention_args &a, int64_t i) {
    return a.cache_f16 ? __half2float(static_cast<const __half *>(a.cache)[i]) : static_cast<const float *>(a.cache)[i];
}

// One warp's state of a (row, head): its queries and the online softmax over the positions it took.
struct attend_state {
    float ql[lat_per_lane], qr[mla_max_d_rope / 32], acc[lat_per_lane];
    float m = -INFINITY, l = 0.0f;
};

__device__ __forceinline__ void attend_begin(const mla_attention_args &a, int r, int h, int lane, attend_state &st) {
    const float *q_lat = a.q_lat + (int64_t(r) * a.n_head + h) * a.kv_lora;
    const float *q_rope = a.q + int64_t(r) * a.q_stride + int64_t(h) * a.d_head + a.d_head - a.d_rope;
#pragma unroll
    for (int j = 0; j < lat_per_lane; ++j) {
        const int c = lane + 32 * j;
        st.ql[j] = c < a.kv_lora ? q_lat[c] : 0.0f;
        st.acc[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < mla_max_d_rope / 32; ++j) {
        const int c = lane + 32 * j;
        st.qr[j] = c < a.d_rope ? q_rope[c] : 0.0f;
    }
}

// The warp's online softmax takes cached position `row` (element offset of its latent).
__device__ __forceinline__ void attend_position(const mla_attention_args &a, int64_t row, int lane, attend_state &st) {
    const int lora = a.kv_lora;
    float lat[lat_per_lane];
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < lat_per_lane; ++j) {
        const int c = lane + 32 * j;
        lat[j] = c < lora ? cache_at(a, row + c) : 0.0f;
        dot = fmaf(st.ql[j], lat[j], dot);
    }
#pragma unroll
    for (int j = 0; j < mla_max_d_rope / 32; ++j) {
        const int c = lane + 32 * j;
        if (c < a.d_rope) dot = fmaf(st.qr[j], cache_at(a, row + lora + c), dot);
    }
    const float s = warp_sum_fixed(dot) * a.scale;
    const float m_new = fmaxf(st.m, s);
    const float corr = expf(st.m - m_new), e = expf(s - m_new);
    st.l = st.l * corr + e;
#pragma unroll
    for (int j = 0; j < lat_per_lane; ++j) st.acc[j] = st.acc[j] * corr + e * lat[j];
    st.m = m_new;
}

// Decode rows: a block a (row, head), each warp every attention_warps-th position, merged in warp
// order (a long context spreads over the block's warps; a one-session step still has n_head blocks).
__global__ void __launch_bounds__(attention_warps * 32) mla_attention_kernel(const mla_attention_args a) {
    __shared__ float s_max[attention_warps], s_sum[attention_warps];
    __shared__ float s_acc[attention_warps][mla_max_kv_lora];
    const int h = blockIdx.x, r = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int lora = a.kv_lora, width = a.kv_lora + a.d_rope;
    float *out = a.out_lat + (int64_t(r) * a.n_head + h) * lora;
    const int32_t slot = a.slots[r];
    if (slot < 0) {
        for (int i = threadIdx.x; i < lora; i += attention_warps * 32) out[i] = 0.0f;
        return;
    }
    const int32_t n_pos = a.positions[r] + 1;
    attend_state st;
    attend_begin(a, r, h, lane, st);
    const int64_t base = int64_t(slot) * a.n_ctx * width;
    for (int p = warp; p < n_pos; p += attention_warps) attend_position(a, base + int64_t(p) * width, lane, st);
    const float m = st.m, l = st.l;
    float(&acc)[lat_per_lane] = st.acc;
    if (lane == 0) {
        s_max[warp] = m;
        s_sum[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < lat_per_lane; ++j) {
        const int c = lane + 32 * j;
        if (c < lora) s_acc[warp][c] = acc[j];
    }
    __syncthreads();
    float m_all = s_max[0];
    for (int w = 1; w < attention_warps; ++w) m_all = fmaxf(m_all, s_max[w]);
    float sum = 0.0f, f[attention_warps];
    for (int w = 0; w < attention_warps; ++w) {
        f[w] = s_sum[w] > 0.0f ? expf(s_max[w] - m_all) : 0.0f;  // a warp without positions adds nothing
        sum += s_sum[w] * f[w];
    }
    const float inv = 1.0f / sum;
    for (int c = threadIdx.x; c < lora; c += attention_warps * 32) {
        float v = 0.0f;
        for (int w = 0; w < attention_warps; ++w) v += s_acc[w][c] * f[w];
        out[c] = v * inv;
    }
}

// Prompt rows: a warp a head over all of its row's positions in order, prompt_heads heads a block;
// the block's warps read each cached position together (from L1 after the first), so a prompt
// step reads its cache about n_head / prompt_heads times instead of n_head times.
__global__ void __launch_bounds__(prompt_heads * 32) mla_attention_prompt_kernel(const mla_attention_args a) {
    const int lane = threadIdx.x & 31, h = blockIdx.x * prompt_heads + (threadIdx.x >> 5), r = blockIdx.y;
    if (h >= a.n_head) return;
    const int lora = a.kv_lora, width = a.kv_lora + a.d_rope;
    float *out = a.out_lat + (int64_t(r) * a.n_head + h) * lora;
    const int32_t slot = a.slots[r];
    if (slot < 0) {
        for (int c = lane; c < lora; c += 32) out[c] = 0.0f;
        return;
    }
    const int32_t n_pos = a.positions[r] + 1;
    attend_state st;
    attend_begin(a, r, h, lane, st);
    const int64_t base = int64_t(slot) * a.n_ctx * width;
    for (int p = 0; p < n_pos; ++p) attend_position(a, base + int64_t(p) * width, lane, st);
    const float inv = 1.0f / st.l;
#pragma unroll
    for (int j = 0; j < lat_per_lane; ++j) {
        const int c = lane + 32 * j;
        if (c < lora) out[c] = st.acc[j] * inv;
    }
}

}  // namespace

void mla_rope_cache(const mla_rope_cache_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.kv && a.q && a.kv_norm && a.inv_freq && a.slots && a.positions && a.cache,
                        "mla_rope_cache: null pointer");
    TANDEM_CUDA_REQUIRE(a.kv_lora > 0 && a.d_rope > 0 && a.d_rope % 2 == 0 && a.d_rope <= a.d_head,
                        "mla_rope_cache: bad widths");
    if (a.n_rows == 0) return;
    mla_rope_cache_kernel<<<a.n_rows, rope_threads, 0, stream>>>(a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void mla_head_product(const mla_head_product_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.w && a.x && a.y && a.n_in > 0 && a.n_out > 0 && a.n_head > 0 && a.n_head <= 65535,
                        "mla_head_product: bad arguments");
    TANDEM_CUDA_REQUIRE(a.n_rows <= 65535, "mla_head_product: at most 65,535 rows a launch");
    if (a.n_rows == 0) return;
    const dim3 grid((a.n_out + product_warps - 1) / product_warps, a.n_head, a.n_rows);
    mla_head_product_kernel<<<grid, product_warps * 32, 0, stream>>>(a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void mla_attention(const mla_attention_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.q_lat && a.q && a.cache && a.slots && a.positions && a.out_lat, "mla_attention: null pointer");
    TANDEM_CUDA_REQUIRE(a.kv_lora > 0 && a.kv_lora <= mla_max_kv_lora && a.d_rope > 0 && a.d_rope <= mla_max_d_rope,
                        "mla_attention: kv_lora_rank up to 512 and a rope part up to 64");
    TANDEM_CUDA_REQUIRE(a.n_head <= 65535 && a.n_rows <= 65535, "mla_attention: at most 65,535 heads and rows");
    if (a.n_rows == 0) return;
    if (a.prompt)
        mla_attention_prompt_kernel<<<dim3((a.n_head + prompt_heads - 1) / prompt_heads, a.n_rows), prompt_heads * 32, 0, stream>>>(a);
    else
        mla_attention_kernel<<<dim3(a.n_head, a.n_rows), attention_warps * 32, 0, stream>>>(a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
