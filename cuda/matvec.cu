// cuda/matvec.cu - weight-times-activation products for the decode rows of a step, any GGUF
// weight type, dense or grouped by expert, optionally fused with SwiGLU or with the residual add:
// each call launches the kernel instance of its plan (the rules: matvec_plan.cpp). The kernel and
// its design: matvec_kernel.cuh.
#include "matvec.h"
#include "matvec_plan.h"

#include "cuda_check.h"
#include "matvec_kernel.cuh"

namespace tandem::cuda {
namespace {

using namespace matvec_detail;

// A block shape of matvec_kernel: K-split warps, row tiles, column tiles, register bound, virtual
// warps, staging (matvec_plan's fields of the same names).
template <int W, int tiles = 1, int cols = 1, int min_blocks = 0, int v = 1, bool staged = false>
struct shape {};

// Launches matvec_kernel of this shape if it is the plan's.
template <ggml_type T, bool swiglu, bool split_in, int W, int tiles, int cols, int min_blocks, int v, bool staged>
bool launch_if(const matvec_args &a, const matvec_plan &p, int64_t row_bytes, cudaStream_t stream,
               shape<W, tiles, cols, min_blocks, v, staged>) {
    if (p.warps != W || p.row_tiles != tiles || p.col_tiles != cols || p.min_blocks != min_blocks || p.virtual_warps != v ||
        p.staged != staged)
        return false;
    auto kernel = matvec_kernel<T, swiglu, W, split_in, false, tiles, cols, min_blocks, v, staged>;
    // Dense Q4_K's staged rows may take up to 160 KiB.
    if constexpr (T == ggml_type::q4_k && staged && cols == 2) allow_dynamic_smem(kernel, p.smem_bytes);
    launch_pdl_smem(kernel, dim3(p.grid_x, p.grid_y), dim3(W * 32), p.smem_bytes, stream, a, row_bytes, p.blocks0, p.blocks1);
    return true;
}

template <ggml_type T, bool swiglu, bool split_in, class... Shapes>
bool launch_one_of(const matvec_args &a, const matvec_plan &p, int64_t row_bytes, cudaStream_t stream, Shapes... shapes) {
    return (launch_if<T, swiglu, split_in>(a, p, row_bytes, stream, shapes) || ...);
}

// The shapes plan_matvec chooses, by type and mode: the kernel instances compiled.
template <ggml_type T, bool swiglu, bool split_in>
void launch_rows(const matvec_args &a, const matvec_plan &p, int64_t row_bytes, cudaStream_t stream) {
    constexpr auto q4_k = ggml_type::q4_k, q6_k = ggml_type::q6_k;
    auto one_of = [&](auto... shapes) { return launch_one_of<T, swiglu, split_in>(a, p, row_bytes, stream, shapes...); };
    if (one_of(shape<4>{})) return;
    if constexpr (!swiglu)
        if (one_of(shape<16>{})) return;  // dense, narrow
    if constexpr (T == q4_k && !swiglu) {
        // Dense of two column tiles, staged or streamed; grouped of three super-blocks a row.
        if (one_of(shape<16, 1, 2, 0, 1, true>{}, shape<4, 1, 2, 0, 1, true>{}, shape<16, 1, 2>{}, shape<4, 1, 2>{},
                   shape<3, 2, 1, 0, 1, true>{}, shape<3, 2, 1, 5>{}, shape<3, 2>{}, shape<3, 1, 1, 0, 1, true>{}, shape<3>{}))
            return;
    }
    if constexpr (T == q4_k) {
        // Grouped: two row tiles or one, staged or streamed.
        if (one_of(shape<4, 2, 1, 0, 1, true>{}, shape<4, 2>{}, shape<4, 1, 1, 0, 1, true>{})) return;
        if constexpr (swiglu)
            if (one_of(shape<1, 1, 1, 16, 4>{})) return;  // one warp playing four
    }
    if constexpr (T == q6_k && !swiglu) {
        // Grouped (three super-blocks a row, or four warps) and the head, staged or streamed.
        if (one_of(shape<1, 1, 1, 16, 3, true>{}, shape<1, 1, 1, 16, 3>{}, shape<3, 1, 1, 8, 1, true>{}, shape<3, 1, 1, 8>{},
                   shape<4, 1, 1, 0, 1, true>{}, shape<4, 1, 2, 0, 1, true>{}, shape<2, 1, 1, 8, 2>{}))
            return;
    }
    TANDEM_CUDA_REQUIRE(false, "matvec: no kernel of the plan's shape for this type");
}

template <ggml_type T, bool split_in>
void launch_matvec_mode(const matvec_args &a, const matvec_plan &p, cudaStream_t stream) {
    const int64_t row_bytes = matvec_row_bytes(a.type, a.n_in);
    if (p.variant == matvec_plan::kernel::k_parts) {
        TANDEM_CUDA_REQUIRE(!a.w_up && p.warps == 4, "matvec: K parts are plain products of four warps");
        launch_pdl(matvec_kernel<T, false, 4, split_in, true>, dim3(p.grid_x), dim3(4 * 32), stream, a, row_bytes, p.blocks0, 0);
    } else if (a.w_up) {
        launch_rows<T, true, split_in>(a, p, row_bytes, stream);
    } else {
        launch_rows<T, false, split_in>(a, p, row_bytes, stream);
    }
}

// The generic-only types (quant_decode.cuh) split the activations' fp32 rows in the kernel even
// where the producer wrote split rows (the same bits): one instance a mode instead of two.
template <ggml_type T>
void launch_matvec_type(const matvec_args &a, const matvec_plan &p, cudaStream_t stream) {
    if constexpr (!generic_only_type<T>) {
        if (p.split_in) {
            launch_matvec_mode<T, true>(a, p, stream);
            return;
        }
    }
    launch_matvec_mode<T, false>(a, p, stream);
}

// Every check of the arguments, before any plan.
void matvec_check(const matvec_args &a) {
    TANDEM_CUDA_REQUIRE(a.n_in > 0 && a.n_in % 32 == 0, "matvec: n_in must be a positive multiple of 32");
    TANDEM_CUDA_REQUIRE(a.n_out > 0 && a.w && a.x && a.y, "matvec: empty output or null pointer");
    TANDEM_CUDA_REQUIRE(a.x_stride % 4 == 0 && a.x_stride >= a.n_in, "matvec: x rows must be 16-byte aligned");
    TANDEM_CUDA_REQUIRE(!a.x_split || (a.x_sums && a.x_stride % 32 == 0),
                        "matvec: x_split comes with x_sums, over x rows of whole 32-element sub-blocks");
    TANDEM_CUDA_REQUIRE(!a.group_off || (a.group_mat && a.n_groups && a.max_groups >= 1 && a.max_groups <= 65535),
                        "matvec: grouped mode needs group_mat, n_groups and 1 <= max_groups <= 65535");
    TANDEM_CUDA_REQUIRE(!(a.w_up && a.accumulate), "matvec: SwiGLU and accumulate do not combine");
    TANDEM_CUDA_REQUIRE(a.k_parts >= 1 && (a.k_parts == 1 || (!a.group_off && !a.w_up && !a.accumulate && a.n_extra == 0 &&
                                                             a.y_part_stride >= int64_t(a.n_pairs) * a.y_stride &&
                                                             a.n_in / 256 >= a.k_parts)),
                        "matvec: k_parts is for dense products without SwiGLU, accumulate or extra matrices, with parts "
                        "that do not overlap and at least one 256-element chunk each");
    TANDEM_CUDA_REQUIRE(a.n_extra >= 0 && a.n_extra <= 2 && (a.n_extra == 0 || (!a.group_off && !a.w_up)),
                        "matvec: up to 2 extra matrices, dense and without SwiGLU only");
    for (int i = 0; i < a.n_extra; ++i) {
        TANDEM_CUDA_REQUIRE(a.extra[i].w && a.extra[i].y && a.extra[i].n_out > 0, "matvec: empty extra matrix");
        TANDEM_CUDA_REQUIRE(!a.extra[i].typed || (i == a.n_extra - 1 && a.k_parts == 1 && !a.accumulate &&
                                                  matvec_mixed_supported(a.type, a.extra[i].type) && a.n_in % 256 == 0),
                            "matvec: a typed extra matrix is the last of a dense launch without K parts or accumulate, of a "
                            "supported pair of types (Q4_K with a Q6_K part), over whole 256-element blocks");
    }
}

// Launches the plan (matvec checked the arguments).
void matvec_launch(const matvec_args &a, const matvec_plan &plan, cudaStream_t stream) {
    if (plan.variant == matvec_plan::kernel::mixed) {
        launch_matvec_mixed(a, plan, stream);
        TANDEM_CUDA_CHECK_LAUNCH();
        return;
    }
    TANDEM_CUDA_REQUIRE(matvec_block_elems(a.type) == 32 || a.n_in % 256 == 0, "matvec: K-quant rows are whole 256-element blocks");
    switch (a.type) {
    case ggml_type::q4_k:
        TANDEM_CUDA_REQUIRE(a.n_in % 256 == 0, "matvec: q4_K rows are whole 256-element blocks");
        launch_matvec_type<ggml_type::q4_k>(a, plan, stream);
        break;
    case ggml_type::q6_k:
        TANDEM_CUDA_REQUIRE(a.n_in % 256 == 0, "matvec: q6_K rows are whole 256-element blocks");
        launch_matvec_type<ggml_type::q6_k>(a, plan, stream);
        break;
    case ggml_type::q8_0: launch_matvec_type<ggml_type::q8_0>(a, plan, stream); break;
    case ggml_type::f16: launch_matvec_type<ggml_type::f16>(a, plan, stream); break;
    // Generic paths only (matvec_kernel's four-item chunks).
    case ggml_type::q5_k: launch_matvec_type<ggml_type::q5_k>(a, plan, stream); break;
    case ggml_type::q3_k: launch_matvec_type<ggml_type::q3_k>(a, plan, stream); break;
    case ggml_type::q2_k: launch_matvec_type<ggml_type::q2_k>(a, plan, stream); break;
    case ggml_type::q4_0: launch_matvec_type<ggml_type::q4_0>(a, plan, stream); break;
    case ggml_type::q4_1: launch_matvec_type<ggml_type::q4_1>(a, plan, stream); break;
    case ggml_type::q5_0: launch_matvec_type<ggml_type::q5_0>(a, plan, stream); break;
    case ggml_type::q5_1: launch_matvec_type<ggml_type::q5_1>(a, plan, stream); break;
    case ggml_type::iq4_nl: launch_matvec_type<ggml_type::iq4_nl>(a, plan, stream); break;
    case ggml_type::iq4_xs: launch_matvec_type<ggml_type::iq4_xs>(a, plan, stream); break;
    case ggml_type::mxfp4: launch_matvec_type<ggml_type::mxfp4>(a, plan, stream); break;
    case ggml_type::iq2_xxs: launch_matvec_type<ggml_type::iq2_xxs>(a, plan, stream); break;
    case ggml_type::iq2_xs: launch_matvec_type<ggml_type::iq2_xs>(a, plan, stream); break;
    case ggml_type::iq2_s: launch_matvec_type<ggml_type::iq2_s>(a, plan, stream); break;
    case ggml_type::iq3_xxs: launch_matvec_type<ggml_type::iq3_xxs>(a, plan, stream); break;
    case ggml_type::iq3_s: launch_matvec_type<ggml_type::iq3_s>(a, plan, stream); break;
    case ggml_type::iq1_s: launch_matvec_type<ggml_type::iq1_s>(a, plan, stream); break;
    case ggml_type::iq1_m: launch_matvec_type<ggml_type::iq1_m>(a, plan, stream); break;
    case ggml_type::bf16: launch_matvec_type<ggml_type::bf16>(a, plan, stream); break;
    case ggml_type::f32: launch_matvec_type<ggml_type::f32>(a, plan, stream); break;
    default: TANDEM_CUDA_REQUIRE(false, "matvec: weight type not supported on CUDA");
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

device_facts current_device_facts() {
    device_facts d;
    d.sm90 = pdl_supported();
    return d;
}

namespace {
// Launches a plan for checked arguments with pairs to compute.
void matvec_run(const matvec_args &a, const matvec_plan &plan, cudaStream_t stream) {
    if (a.x_split && !plan.split_in) {
        // Split rows the kernels cannot read (matvec_plan::split_in): split in the kernel instead (the same bits).
        matvec_args b = a;
        b.x_split = nullptr;
        b.x_sums = nullptr;
        matvec_launch(b, plan, stream);
        return;
    }
    matvec_launch(a, plan, stream);
}
}  // namespace

void matvec(const matvec_args &a, cudaStream_t stream) {
    matvec_check(a);
    if (!a.group_off && a.n_pairs == 0) return;
    matvec_run(a, plan_matvec(a, current_device_facts()), stream);
}

void matvec(const matvec_args &a, const matvec_plan &plan, cudaStream_t stream) {
    matvec_check(a);
    if (!a.group_off && a.n_pairs == 0) return;
    matvec_run(a, plan, stream);
}

}  // namespace tandem::cuda
