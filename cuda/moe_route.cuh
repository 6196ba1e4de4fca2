// cuda/moe_route.cuh - one warp's routing of one row: the router logits' softmax in the CPU twin's
// order and its top k by candidates (ties: lower expert id). moe.cu's routing kernels and the
// experts' one-row gate/up (matvec_digits.cu, which routes its row itself in moe_route's place) call
// the same code, so both pick the same experts, bitwise.
#pragma once

#include "warp_reduce.cuh"

#include <cmath>
#include <cstdint>

namespace tandem::cuda {

constexpr int route_max_logit_parts = 4;  // the router's K parts a row's logits may come in
constexpr int route_cand_cap = 64;        // top-k candidates a row keeps in shared memory

// The lane's logits of experts lane + 32 t (-inf past ne): the K parts (part s at l + s *
// part_stride) of every expert loaded before the first addition, then added in part order. The
// loads come in batches of route_load_batch experts (all of them for up to 128 experts): with an
// addition between two experts' loads, each expert's loads would wait in issue order for the
// previous expert's round trip (four round trips instead of one for 128 experts).
constexpr int route_load_batch = 4;  // experts a lane loads at once (x route_max_logit_parts registers)
template <int epl>
__device__ __forceinline__ void route_load_logits(const float *l, int n_parts, int64_t part_stride, int ne, float (&p)[epl]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int t0 = 0; t0 < epl; t0 += route_load_batch) {
        float v[route_load_batch][route_max_logit_parts];
#pragma unroll
        for (int b = 0; b < route_load_batch; ++b) {
            const bool live = t0 + b < epl && lane + 32 * (t0 + b) < ne;
#pragma unroll
            for (int part = 0; part < route_max_logit_parts; ++part)
                v[b][part] = live && part < n_parts ? l[part * part_stride + lane + 32 * (t0 + b)] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < route_load_batch; ++b) {
            const int t = t0 + b;
            if (t >= epl) break;
            float sum = v[b][0];
#pragma unroll
            for (int part = 1; part < route_max_logit_parts; ++part)
                if (part < n_parts) sum = __fadd_rn(sum, v[b][part]);
            p[t] = lane + 32 * t < ne ? sum : -INFINITY;
        }
    }
}

// Softmax of the row in place (p[t] of expert lane + 32 t), also written to row[0 .. ne): a NaN
// (from NaN or infinite logits) becomes -1, so the ranks stay a permutation and every slot gets
// exactly one expert.
template <int epl>
__device__ __forceinline__ void route_softmax(float (&p)[epl], int ne, float *row) {
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY;
#pragma unroll
    for (int t = 0; t < epl; ++t) mx = fmaxf(mx, p[t]);
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < epl; ++t) {
        p[t] = lane + 32 * t < ne ? expf(p[t] - mx) : 0.0f;
        sum += p[t];
    }
    sum = warp_sum_fixed(sum);
#pragma unroll
    for (int t = 0; t < epl; ++t) {
        if (lane + 32 * t >= ne) continue;  // p[t] is 0 there and never read
        const float pt = p[t] / sum;
        p[t] = pt == pt ? pt : -1.0f;
        row[lane + 32 * t] = p[t];
    }
}

// Rank of each expert: the experts before it in (probability desc, id asc) order; take(rank, e,
// p_e) for each of the k first (each by one lane). The warp ranks only candidates: with T the k-th
// largest of the 32 lanes' maxima, k distinct experts reach T, so an expert below T has rank >= k;
// the experts before a candidate are candidates too, so its rank among candidates is its rank.
// Typically ~k candidates. row: the probabilities (route_softmax's), cand: route_cand_cap ids.
template <int epl, class Take>
__device__ __forceinline__ void route_select_top_k(const float (&p)[epl], const float *row, uint16_t *cand, int ne, int k, Take &&take) {
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY;  // -1 (NaN) and real probabilities compare as floats; -inf: no expert
#pragma unroll
    for (int t = 0; t < epl; ++t)
        if (lane + 32 * t < ne) mx = fmaxf(mx, p[t]);
    int lane_rank = 0;
#pragma unroll 8
    for (int j = 0; j < 32; ++j) {
        const float mj = __shfl_sync(0xFFFFFFFFu, mx, j);
        lane_rank += (mj > mx || (mj == mx && j < lane)) ? 1 : 0;
    }
    const unsigned at_k = __ballot_sync(0xFFFFFFFFu, lane_rank == k - 1);
    const float thr = __shfl_sync(0xFFFFFFFFu, mx, __ffs(at_k) - 1);
    // Candidates in expert order, kept as ids; more than route_cand_cap (ties): rank them all.
    int n_c = 0;
#pragma unroll
    for (int t = 0; t < epl; ++t) {
        const bool c = lane + 32 * t < ne && p[t] >= thr;
        const unsigned m = __ballot_sync(0xFFFFFFFFu, c);
        const int at = n_c + __popc(m & ((1u << lane) - 1u));
        if (c && at < route_cand_cap) cand[at] = uint16_t(lane + 32 * t);
        n_c += __popc(m);
    }
    __syncwarp();
    const bool all = n_c > route_cand_cap;
    const int n_list = all ? ne : n_c;
    for (int c = lane; c < n_list; c += 32) {
        const int e = all ? c : cand[c];
        const float pe = row[e];
        if (pe < thr) continue;
        int rank = 0;
        for (int j = 0; j < n_list; ++j) {
            const int ej = all ? j : cand[j];
            const float pj = row[ej];
            rank += (pj > pe || (pj == pe && ej < e)) ? 1 : 0;
        }
        if (rank < k) take(rank, e, pe);
    }
}

// A one-row step's groups (moe_route's, and the gate/up that routes its row itself): lanes 0 .. k - 1
// hold the row's k distinct experts (slot order); the group of lane's expert is its place in
// ascending id order. Every lane of the warp calls it (the others' values are not read).
__device__ __forceinline__ int route_one_row_group(int e, int k) {
    int g = 0;
    for (int s = 0; s < k; ++s) g += __shfl_sync(0xFFFFFFFFu, e, s) < e ? 1 : 0;
    return g;
}

// A one-row step's groups as moe_route writes them: lane s < k holds the row's slot-s expert e, its
// group g = route_one_row_group(e, k), with one pair (step row 0 into output row s); a padding row
// has no groups. groups_total (optional) counts them. moe_route's one-row kernel and the gate/up that
// publishes its routing (matvec_digits.cu) both write them here.
__device__ __forceinline__ void route_one_row_write_groups(bool pad, int e, int g, int k, int32_t *group_expert, int32_t *group_off,
                                                           int32_t *n_groups, int32_t *pair_x, int32_t *pair_y,
                                                           int32_t *groups_total) {
    const int lane = threadIdx.x & 31;
    if (!pad && lane < k) {
        group_expert[g] = e;
        group_off[g] = g;
        pair_x[g] = 0;
        pair_y[g] = lane;
    }
    if (lane == 0) {
        group_off[pad ? 0 : k] = pad ? 0 : k;
        *n_groups = pad ? 0 : k;
        if (groups_total && !pad) atomicAdd(groups_total, k);
    }
}

}  // namespace tandem::cuda
