// cuda/moe_split.cu - the expert split of a tensor-parallel pair (see moe_split.h). Launched
// without programmatic dependent launch: each kernel starts after everything before it in the
// stream, copies and cross-device event waits included, has finished.
#include "cuda_check.h"
#include "moe_split.h"

namespace tandem::cuda {

namespace {

constexpr int filter_threads = moe_split_max_experts;

// Thread g owns group g: whether it is held, and its pair count, then exclusive scans of both
// give its place among the kept groups and kept pairs.
__global__ void __launch_bounds__(filter_threads) moe_groups_filter_kernel(const moe_groups_filter_args a) {
    __shared__ int32_t keep_scan[filter_threads];
    __shared__ int32_t pair_scan[filter_threads];
    const int g = int(threadIdx.x);
    const int n_groups = *a.n_groups;
    int32_t mat = -1, begin = 0, count = 0;
    if (g < n_groups) {
        mat = a.local[a.group_expert[g]];
        begin = a.group_off[g];
        count = mat >= 0 ? a.group_off[g + 1] - begin : 0;
    }
    keep_scan[g] = mat >= 0 ? 1 : 0;
    pair_scan[g] = count;
    __syncthreads();
    for (int step = 1; step < filter_threads; step *= 2) {  // inclusive Hillis-Steele scans
        const int32_t k = g >= step ? keep_scan[g - step] : 0;
        const int32_t p = g >= step ? pair_scan[g - step] : 0;
        __syncthreads();
        keep_scan[g] += k;
        pair_scan[g] += p;
        __syncthreads();
    }
    const int32_t slot = keep_scan[g] - 1, dst = pair_scan[g] - count;
    if (mat >= 0) {
        a.out_group_mat[slot] = mat;
        a.out_group_off[slot] = dst;
        for (int32_t i = 0; i < count; ++i) {
            a.out_pair_x[dst + i] = a.pair_x[begin + i];
            a.out_pair_y[dst + i] = a.pair_y[begin + i];
        }
    }
    if (g == filter_threads - 1) {
        *a.out_n_groups = keep_scan[g];
        a.out_group_off[keep_scan[g]] = pair_scan[g];
    }
}

constexpr int merge_threads = 256;

// One block per (row, slot) pair: copy the partner's output when the expert is not held here.
__global__ void __launch_bounds__(merge_threads) moe_pairs_merge_kernel(const moe_pairs_merge_args a) {
    const int p = int(blockIdx.x);
    const int r = p / a.k;
    if (a.slots[r] < 0) return;
    const int32_t e = a.ids[p];
    if (e < 0 || a.local[e] >= 0) return;
    const float4 *src = reinterpret_cast<const float4 *>(a.other + size_t(p) * size_t(a.d_model));
    float4 *dst = reinterpret_cast<float4 *>(a.out + size_t(p) * size_t(a.d_model));
    for (int i = int(threadIdx.x); i < a.d_model / 4; i += merge_threads) dst[i] = src[i];
}

}  // namespace

void moe_groups_filter(const moe_groups_filter_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.max_groups >= 0 && a.max_groups <= moe_split_max_experts,
                        "moe_groups_filter: more groups than moe_split_max_experts");
    moe_groups_filter_kernel<<<1, filter_threads, 0, stream>>>(a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_pairs_merge(const moe_pairs_merge_args &a, cudaStream_t stream) {
    TANDEM_CUDA_REQUIRE(a.d_model % 4 == 0, "moe_pairs_merge: d_model must be a multiple of 4");
    if (a.n_rows == 0) return;
    moe_pairs_merge_kernel<<<a.n_rows * a.k, merge_threads, 0, stream>>>(a);
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
