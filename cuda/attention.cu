// cuda/attention.cu - QK norm + RoPE + KV write, and chunked causal attention over each row's
// slot cache (flash-decoding style: chunk partials with their own max and sum, merged in chunk
// order). One block handles every query head of a KV head (GQA), so K/V are read once per group.
#include "attention.h"

#include "cuda_check.h"
#include "launch.cuh"
#include "warp_reduce.cuh"

#include <cmath>

namespace tandem::cuda {
namespace {

constexpr int rope_warps = 8;       // heads per block; blocks over (row, head group)
constexpr int attn_warps = 4;       // warps per (row, KV head, chunk); positions interleave over them
constexpr int max_dpl = 8;          // d_head up to 256 (8 elements per lane)

// Per-head RMSNorm (bitwise the CPU's order: element i in lane i % 32, butterfly) and NeoX RoPE
// with float32 angles and double cos/sin rounded to float, as the CPU twin computes them.
__global__ void __launch_bounds__(rope_warps * 32) qk_rope_kv_kernel(const qk_rope_kv_args a) {
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int slot = a.slots[r], pos = a.positions[r];
    const int dh = a.d_head, dpl = dh / 32, kv_dim = a.n_head_kv * dh;
    const int n_heads_all = a.n_head + 2 * a.n_head_kv;
    // blockIdx.y picks a group of rope_warps heads: every head of the row in flight at once.
    for (int hh = blockIdx.y * rope_warps + warp; hh < n_heads_all; hh += rope_warps * gridDim.y) {
        const float *src;
        float *dst;
        const float *norm = nullptr;
        if (hh < a.n_head) {
            src = a.q + (int64_t(r) * a.n_head + hh) * dh;
            dst = a.q + (int64_t(r) * a.n_head + hh) * dh;
            norm = a.q_norm;
        } else {
            if (slot < 0) continue;
            const bool is_k = hh < a.n_head + a.n_head_kv;
            const int kh = is_k ? hh - a.n_head : hh - a.n_head - a.n_head_kv;
            src = (is_k ? a.k : a.v) + (int64_t(r) * a.n_head_kv + kh) * dh;
            dst = (is_k ? a.k_cache : a.v_cache) + (int64_t(slot) * a.n_ctx + pos) * kv_dim + int64_t(kh) * dh;
            if (is_k) norm = a.k_norm;
        }
        float val[max_dpl];
#pragma unroll
        for (int t = 0; t < max_dpl; ++t) val[t] = t < dpl ? src[lane + 32 * t] : 0.0f;
        if (norm) {
            float acc = 0.0f;
#pragma unroll
            for (int t = 0; t < max_dpl; ++t)
                if (t < dpl) acc = __fadd_rn(acc, __fmul_rn(val[t], val[t]));
            const float mean_sq = __fdiv_rn(__shfl_sync(0xFFFFFFFFu, warp_sum_fixed(acc), 0), float(dh));
            const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, a.eps)));
#pragma unroll
            for (int t = 0; t < max_dpl; ++t)
                if (t < dpl) val[t] = __fmul_rn(__fmul_rn(val[t], inv), norm[lane + 32 * t]);
            if (dpl == 1) {
                // d_head 32: element i (lane i) rotates with lane i + 16.
                const int i = lane & 15;
                const float angle = __fmul_rn(float(pos), a.inv_freq[i]);
                double sd, cd;
                sincos(double(angle), &sd, &cd);
                const float c = float(cd), sn = float(sd);
                const float other = __shfl_xor_sync(0xFFFFFFFFu, val[0], 16);
                val[0] = lane < 16 ? __fsub_rn(__fmul_rn(val[0], c), __fmul_rn(other, sn))
                                   : __fadd_rn(__fmul_rn(val[0], c), __fmul_rn(other, sn));
            }
            // NeoX: element i rotates with i + d_head/2, which sits in the same lane dpl/2 slots on.
            const int half_t = dpl / 2;
#pragma unroll
            for (int t = 0; t < max_dpl / 2; ++t) {
                if (t >= half_t) continue;
                const float angle = __fmul_rn(float(pos), a.inv_freq[lane + 32 * t]);
                double sd, cd;
                sincos(double(angle), &sd, &cd);
                const float c = float(cd), s = float(sd);
                float x0 = val[t], x1 = val[t];
#pragma unroll
                for (int u = 0; u < max_dpl; ++u)
                    if (u == t + half_t) x1 = val[u];
                const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
                const float y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
                val[t] = y0;
#pragma unroll
                for (int u = 0; u < max_dpl; ++u)
                    if (u == t + half_t) val[u] = y1;
            }
        }
#pragma unroll
        for (int t = 0; t < max_dpl; ++t)
            if (t < dpl) dst[lane + 32 * t] = val[t];
    }
}

// One block per (KV head, chunk, row): each warp runs an online softmax over positions
// p_begin + warp, + attn_warps, ...; the warps merge in warp order, then the chunk partial
// (unnormalised output, max, sum) goes to `partial`.
template <int dpl, int group>
__global__ void __launch_bounds__(attn_warps * 32) attention_partial_kernel(const attention_args a, int n_chunks) {
    const int kh = blockIdx.x, c = blockIdx.y, r = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    constexpr int dh = dpl * 32;
    __shared__ float s_acc[attn_warps][group][dh];
    __shared__ float s_m[attn_warps][group], s_l[attn_warps][group];
    pdl_wait();
    pdl_trigger();
    const int slot = a.slots[r];
    if (slot < 0) return;
    const int pos = a.positions[r];
    const int p_begin = c * a.chunk;
    if (p_begin > pos) return;
    const int p_end = min(p_begin + a.chunk, pos + 1);
    const int kv_dim = a.n_head_kv * dh;

    float qv[group][dpl], acc[group][dpl], m[group], l[group];
#pragma unroll
    for (int g = 0; g < group; ++g) {
        const float *q = a.q + (int64_t(r) * a.n_head + kh * group + g) * dh;
#pragma unroll
        for (int t = 0; t < dpl; ++t) {
            qv[g][t] = q[lane + 32 * t];
            acc[g][t] = 0.0f;
        }
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    const float *kb = a.k_cache + int64_t(slot) * a.n_ctx * kv_dim + int64_t(kh) * dh + lane;
    const float *vb = a.v_cache + int64_t(slot) * a.n_ctx * kv_dim + int64_t(kh) * dh + lane;
    for (int p = p_begin + warp; p < p_end; p += attn_warps) {
        float kv[dpl], vv[dpl];
#pragma unroll
        for (int t = 0; t < dpl; ++t) {
            kv[t] = kb[int64_t(p) * kv_dim + 32 * t];
            vv[t] = vb[int64_t(p) * kv_dim + 32 * t];
        }
#pragma unroll
        for (int g = 0; g < group; ++g) {
            float s = 0.0f;
#pragma unroll
            for (int t = 0; t < dpl; ++t) s = fmaf(qv[g][t], kv[t], s);
            s = warp_sum_fixed(s) * a.scale;
            const float m_new = fmaxf(m[g], s);
            const float corr = expf(m[g] - m_new), pr = expf(s - m_new);
            l[g] = l[g] * corr + pr;
#pragma unroll
            for (int t = 0; t < dpl; ++t) acc[g][t] = acc[g][t] * corr + pr * vv[t];
            m[g] = m_new;
        }
    }
#pragma unroll
    for (int g = 0; g < group; ++g) {
#pragma unroll
        for (int t = 0; t < dpl; ++t) s_acc[warp][g][lane + 32 * t] = acc[g][t];
        if (lane == 0) {
            s_m[warp][g] = m[g];
            s_l[warp][g] = l[g];
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * dh; idx += attn_warps * 32) {
        const int g = idx / dh, e = idx % dh;
        float mx = -INFINITY;
        for (int w = 0; w < attn_warps; ++w) mx = fmaxf(mx, s_m[w][g]);
        float sum = 0.0f, out = 0.0f;
        for (int w = 0; w < attn_warps; ++w) {
            const float f = expf(s_m[w][g] - mx);  // 0 for a warp that saw no position
            sum += s_l[w][g] * f;
            out += s_acc[w][g][e] * f;
        }
        float *dst = a.partial + ((int64_t(r) * a.n_head + kh * group + g) * n_chunks + c) * (dh + 2);
        dst[e] = out;
        if (e == 0) {
            dst[dh] = mx;
            dst[dh + 1] = sum;
        }
    }
}

// One block per (query head, row): merges the row's chunk partials in chunk order.
__global__ void attention_combine_kernel(const attention_args a, int n_chunks) {
    pdl_wait();
    pdl_trigger();
    const int h = blockIdx.x, r = blockIdx.y, dh = a.d_head;
    float *out = a.out + (int64_t(r) * a.n_head + h) * dh;
    if (a.slots[r] < 0) {
        for (int e = threadIdx.x; e < dh; e += blockDim.x) out[e] = 0.0f;
        return;
    }
    const int nc = a.positions[r] / a.chunk + 1;
    const float *part = a.partial + (int64_t(r) * a.n_head + h) * n_chunks * (dh + 2);
    float mx = -INFINITY;
    for (int c = 0; c < nc; ++c) mx = fmaxf(mx, part[c * (dh + 2) + dh]);
    float sum = 0.0f;
    for (int c = 0; c < nc; ++c) sum += part[c * (dh + 2) + dh + 1] * expf(part[c * (dh + 2) + dh] - mx);
    const float inv = 1.0f / sum;
    for (int e = threadIdx.x; e < dh; e += blockDim.x) {
        float acc = 0.0f;
        for (int c = 0; c < nc; ++c) acc += part[c * (dh + 2) + e] * expf(part[c * (dh + 2) + dh] - mx);
        out[e] = acc * inv;
    }
}

template <int dpl, int group>
void launch_attention_partial(const attention_args &a, int n_chunks, cudaStream_t stream) {
    const dim3 grid(a.n_head_kv, n_chunks, a.n_rows);
    launch_pdl(attention_partial_kernel<dpl, group>, grid, dim3(attn_warps * 32), stream, a, n_chunks);
}

template <int dpl>
void launch_attention_dpl(const attention_args &a, int group, int n_chunks, cudaStream_t stream) {
    switch (group) {
    case 1: launch_attention_partial<dpl, 1>(a, n_chunks, stream); break;
    case 2: launch_attention_partial<dpl, 2>(a, n_chunks, stream); break;
    case 4: launch_attention_partial<dpl, 4>(a, n_chunks, stream); break;
    case 8:
        if constexpr (dpl <= 4) {
            launch_attention_partial<dpl, 8>(a, n_chunks, stream);
            break;
        }
        [[fallthrough]];
    default: TANDEM_CUDA_REQUIRE(false, "attention: query heads per KV head must be 1, 2, 4 or 8 (d_head <= 128 for 8)");
    }
}

}  // namespace

int32_t attention_chunk(int32_t n_ctx) {
    const int32_t per = (n_ctx + attention_max_chunks - 1) / attention_max_chunks;
    const int32_t rounded = (per + 31) / 32 * 32;
    return rounded < 64 ? 64 : rounded;  // short contexts: more blocks, fewer positions per warp
}

void qk_rope_kv(const qk_rope_kv_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE((a.d_head == 32 || a.d_head % 64 == 0) && a.d_head <= 32 * max_dpl,
                        "qk_rope_kv: d_head must be 32, 64, 128, 192 or 256");
    TANDEM_CUDA_REQUIRE(a.q && a.k && a.v && a.q_norm && a.k_norm && a.inv_freq && a.slots && a.positions &&
                            a.k_cache && a.v_cache, "qk_rope_kv: null pointer");
    if (a.n_rows == 0) return;
    const int head_groups = (a.n_head + 2 * a.n_head_kv + rope_warps - 1) / rope_warps;
    launch_pdl(qk_rope_kv_kernel, dim3(a.n_rows, head_groups), dim3(rope_warps * 32), stream, a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void attention(const attention_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0, "attention: n_head must be a multiple of n_head_kv");
    TANDEM_CUDA_REQUIRE(a.chunk > 0 && a.chunk % 32 == 0, "attention: chunk must be a positive multiple of 32");
    if (a.n_rows == 0) return;
    const int n_chunks = (a.n_ctx + a.chunk - 1) / a.chunk;
    TANDEM_CUDA_REQUIRE(n_chunks <= 65535, "attention: too many chunks");
    const int group = a.n_head / a.n_head_kv;
    switch (a.d_head) {
    case 32: launch_attention_dpl<1>(a, group, n_chunks, stream); break;
    case 64: launch_attention_dpl<2>(a, group, n_chunks, stream); break;
    case 128: launch_attention_dpl<4>(a, group, n_chunks, stream); break;
    case 256: launch_attention_dpl<8>(a, group, n_chunks, stream); break;
    default: TANDEM_CUDA_REQUIRE(false, "attention: d_head must be 32, 64, 128 or 256");
    }
    TANDEM_CUDA_CHECK_LAUNCH();
    launch_pdl(attention_combine_kernel, dim3(a.n_head, a.n_rows), dim3(a.d_head), stream, a, n_chunks);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
