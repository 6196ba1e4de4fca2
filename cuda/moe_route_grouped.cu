// cuda/moe_route_grouped.cu - grouped routing: one thread a row over its experts held in local
// memory (n_expert up to 512), the CPU twin's loops one for one.
#include "moe_route_grouped.h"

#include "cuda_check.h"

#include <cmath>

namespace tandem::cuda {
namespace {

constexpr int rows_per_block = 32;
constexpr int max_groups = 64;
constexpr int max_k = 32;

__global__ void __launch_bounds__(rows_per_block) moe_route_grouped_kernel(const moe_route_grouped_args a) {
    const int r = blockIdx.x * rows_per_block + threadIdx.x;
    if (r >= a.n_rows) return;
    const int ne = a.n_expert, k = a.k;
    int32_t *ids = a.ids + int64_t(r) * k;
    float *weights = a.weights + int64_t(r) * k;
    if (a.slots[r] < 0) {
        for (int s = 0; s < k; ++s) {
            ids[s] = -1;
            weights[s] = 0.0f;
        }
        return;
    }
    const float *logits = a.logits + int64_t(r) * ne;
    float scores[moe_route_grouped_max_experts], sel[moe_route_grouped_max_experts];
    if (a.sigmoid) {
        for (int e = 0; e < ne; ++e) scores[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        float max_l = logits[0];
        for (int e = 1; e < ne; ++e) max_l = fmaxf(max_l, logits[e]);
        float sum = 0.0f;
        for (int e = 0; e < ne; ++e) sum += scores[e] = expf(logits[e] - max_l);
        for (int e = 0; e < ne; ++e) scores[e] /= sum;
    }
    for (int e = 0; e < ne; ++e) sel[e] = a.bias ? scores[e] + a.bias[e] : scores[e];
    if (a.n_group > 1) {
        const int per = ne / a.n_group;
        float group_score[max_groups];
        bool keep[max_groups];
        for (int g = 0; g < a.n_group; ++g) {
            float best = -INFINITY, second = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; ++e) {
                if (sel[e] > best) {
                    second = best;
                    best = sel[e];
                } else if (sel[e] > second) {
                    second = sel[e];
                }
            }
            group_score[g] = best + second;
            keep[g] = false;
        }
        for (int i = 0; i < a.n_group_used; ++i) {  // the best group left, ties to the lower one
            int pick = -1;
            for (int g = 0; g < a.n_group; ++g)
                if (!keep[g] && (pick < 0 || group_score[g] > group_score[pick])) pick = g;
            keep[pick] = true;
        }
        for (int e = 0; e < ne; ++e)
            if (!keep[e / per]) sel[e] = -INFINITY;
    }
    bool taken[moe_route_grouped_max_experts];
    for (int e = 0; e < ne; ++e) taken[e] = false;
    int order[max_k];
    for (int s = 0; s < k; ++s) {  // the best expert left, ties to the lower id
        int pick = -1;
        for (int e = 0; e < ne; ++e)
            if (!taken[e] && (pick < 0 || sel[e] > sel[pick])) pick = e;
        taken[pick] = true;
        order[s] = pick;
    }
    float sum = 0.0f;
    for (int s = 0; s < k; ++s) sum += scores[order[s]];
    constexpr float min_sum = 6.103515625e-5f;  // as the CPU twin (half precision's smallest normal)
    const float norm = a.normalise ? 1.0f / fmaxf(sum, min_sum) : 1.0f;
    for (int s = 0; s < k; ++s) {
        ids[s] = order[s];
        float w = scores[order[s]];
        if (a.normalise) w *= norm;
        weights[s] = w * a.scale;
    }
}

}  // namespace

void moe_route_grouped(const moe_route_grouped_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.logits && a.slots && a.ids && a.weights, "moe_route_grouped: null pointer");
    TANDEM_CUDA_REQUIRE(a.n_expert >= 1 && a.n_expert <= moe_route_grouped_max_experts && a.k >= 1 && a.k <= max_k &&
                            a.k <= a.n_expert,
                        "moe_route_grouped: n_expert up to 512, k up to 32");
    TANDEM_CUDA_REQUIRE(a.n_group >= 1 && a.n_group <= max_groups && a.n_expert % a.n_group == 0 && a.n_group_used >= 1 &&
                            a.n_group_used <= a.n_group && a.n_group_used * (a.n_expert / a.n_group) >= a.k,
                        "moe_route_grouped: groups must divide the experts and hold the top k");
    if (a.n_rows == 0) return;
    moe_route_grouped_kernel<<<(a.n_rows + rows_per_block - 1) / rows_per_block, rows_per_block, 0, stream>>>(a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
