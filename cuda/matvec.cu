// cuda/matvec.cu - weight-times-activation products for the decode rows of a step, any GGUF
// weight type, dense or grouped by expert, optionally fused with SwiGLU or with the residual add:
// the launch shapes (warps, tiles, staging) by matrix and step size. The kernel and its design:
// matvec_kernel.cuh.
#include "matvec.h"

#include "cuda_check.h"
#include "matvec_kernel.cuh"

namespace tandem::cuda {
namespace {

using namespace matvec_detail;

constexpr int vw_swiglu_pairs = 64;  // grouped Q4_K SwiGLU above this many pairs: one-warp blocks (virtual warps)
constexpr int vw_q6_plain_pairs = 8;  // grouped Q6_K of K = 768 (down) above this many pairs: likewise
constexpr int head_blocks = 4096;  // dense launches of at least this many blocks (vocabulary heads)

// Grouped Q4_K products: weight-row tiles per block (matvec_args::row_tiles), by `bench --prompt 0
// --sessions 1,4,16`: two for the experts' down (K = 768, three warps) except 9-64 pairs (2-8
// sessions), staged in one; two for SwiGLU only at one row (168 registers leave 3 blocks an SM);
// four spill.
int grouped_row_tiles(const matvec_args &a, bool swiglu) {
    if (a.row_tiles > 0) return a.row_tiles;
    if (swiglu) return a.n_pairs <= 8 ? 2 : 1;
    return a.n_in == 3 * 256 && (a.n_pairs <= 8 || a.n_pairs > 64) ? 2 : 1;
}

// Grouped Q4_K launches that stage their weights (matvec_kernel's `staged`), by kind of launch
// (`bench --prompt 0 --sessions 1,4,16`): SwiGLU and down above 8 pairs, one copy a row on one
// barrier; up to 8 pairs (one row) staging gains nothing, so those stream. The shared-memory
// carve-out is left alone: at its maximum the activations lose L1 (-4-5%).
// A staged block's row pitch in shared memory (matvec_body's s_stride for plain products): packed
// when a row is an odd number of 16-byte units, else 32 bytes apart.
int64_t staged_row_stride(int64_t row_bytes) { return row_bytes % 32 == 16 ? row_bytes : row_bytes + 32; }

// Whether a dense Q4_K launch of two column tiles can stage its weight rows: bulk copies (sm_90)
// from 16-byte aligned matrices, a block's 16 rows within 160 KiB of shared memory (K up to ~18k).
bool dense_stage_fits(const matvec_args &a, int64_t row_bytes) {
    bool aligned = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
    for (int i = 0; i < a.n_extra; ++i) aligned = aligned && reinterpret_cast<uintptr_t>(a.extra[i].w) % 16 == 0;
    return aligned && 16 * staged_row_stride(row_bytes) <= 160 * 1024 && pdl_supported();
}

enum stage_kind : int { stage_swiglu_small = 1, stage_swiglu_mid = 2, stage_swiglu_large = 4, stage_plain_small = 8, stage_plain_large = 16 };
constexpr int staged_kinds = stage_swiglu_mid | stage_swiglu_large | stage_plain_large;

template <ggml_type T, bool swiglu, int W, bool split_in, int n_tiles, int min_blocks = 0, int v_warps = 1>
void launch_grouped(const matvec_args &a, dim3 grid, int64_t row_bytes, int blocks0, int blocks1, int kind,
                    cudaStream_t stream) {
    if constexpr (T == ggml_type::q4_k) {
        // Dynamic (the rows) plus static (the warps' partial sums and the barrier) shared memory
        // within the 48 KiB a launch gets without opting in.
        const size_t smem = size_t(16 * n_tiles) * size_t(row_bytes + 32);
        const size_t smem_static = size_t(W * v_warps > 1 ? W * v_warps - 1 : 1) * 4 * n_tiles * 32 * sizeof(float) + 16;
        const bool aligned = (reinterpret_cast<uintptr_t>(a.w) | reinterpret_cast<uintptr_t>(a.w_up)) % 16 == 0;
        const bool wanted = a.stage_weights < 0 ? (staged_kinds & kind) != 0 : a.stage_weights > 0;
        if (wanted && smem + smem_static <= 48 * 1024 && aligned && pdl_supported()) {
            // Staged blocks hold few registers (their weights come from shared memory when used), so
            // they run every K-split warp physically and without a register cap: the same arithmetic.
            launch_pdl_smem(matvec_kernel<T, swiglu, W * v_warps, split_in, false, n_tiles, 1, 0, 1, true>, grid,
                            dim3(W * v_warps * 32), smem, stream, a, row_bytes, blocks0, blocks1);
            return;
        }
    }
    if constexpr (T == ggml_type::q6_k && !swiglu && n_tiles == 1) {
        // Plain Q6_K (a Q4_K_M file's experts' down): each tile's 16 rows in one bulk copy, in the
        // block's own shape (warps, register bound, virtual warps); only matrices of whole tiles.
        const size_t smem = size_t(16) * size_t(row_bytes);
        const bool whole_tiles = a.n_out % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
        // Staged at every step size (`bench --prompt 0 --sessions 1,4,16` on the Q4_K_M mix: +1-6%).
        const bool wanted = a.stage_weights != 0;
        if (wanted && whole_tiles && smem <= 40 * 1024 && pdl_supported()) {
            launch_pdl_smem(matvec_kernel<T, false, W, split_in, false, 1, 1, min_blocks, v_warps, true>, grid, dim3(W * 32), smem,
                            stream, a, row_bytes, blocks0, blocks1);
            return;
        }
    }
    launch_pdl(matvec_kernel<T, swiglu, W, split_in, false, n_tiles, 1, min_blocks, v_warps>, grid, dim3(W * 32), stream, a,
               row_bytes, blocks0, blocks1);
}

template <ggml_type T, bool swiglu, bool split_in>
void launch_matvec_shape(const matvec_args &a, cudaStream_t stream) {
    constexpr int per_block = swiglu ? block_rows / 2 : block_rows;
    const int tiles = T == ggml_type::q4_k && a.group_off ? grouped_row_tiles(a, swiglu) : 1;
    const int per_tiled = per_block * tiles;
    const int blocks0 = (a.n_out + per_tiled - 1) / per_tiled;
    const int blocks1 = a.n_extra > 0 ? (a.extra[0].n_out + per_tiled - 1) / per_tiled : 0;
    const int blocks2 = a.n_extra > 1 ? (a.extra[1].n_out + per_tiled - 1) / per_tiled : 0;
    const dim3 grid(blocks0 + blocks1 + blocks2, a.group_off ? a.max_groups : 1);
    const int64_t row_bytes = matvec_row_bytes(a.type, a.n_in);
    if constexpr (T == ggml_type::q4_k) {
        // Dense Q4_K over more than 8 rows: two n8 tiles of rows a pass (matvec_args::col_tiles;
        // dense SwiGLU, which no engine path uses, keeps one).
        const int cols = dense_col_tiles(a);
        if (cols == 2 && !swiglu && !a.group_off && a.k_parts == 1) {
            // Staged by default (stage_weights -1 or 1): the block's 16 weight rows in one bulk copy
            // each, so the chunk loop waits on shared memory instead of a load chain a chunk (109
            // registers instead of 128 with 16 bytes of spills). Same bits. `bench --prompt 0
            // --sessions 12,16`: +0-1.3% over streamed.
            if (a.stage_weights != 0 && dense_stage_fits(a, row_bytes)) {
                const size_t smem = 16 * size_t(staged_row_stride(row_bytes));
                auto go = [&](auto kernel, int warps) {
                    allow_dynamic_smem(kernel, smem);
                    launch_pdl_smem(kernel, grid, dim3(warps * 32), smem, stream, a, row_bytes, blocks0, blocks1);
                };
                if (grid.x < narrow_blocks)
                    go(matvec_kernel<T, false, 4 * block_warps, split_in, false, 1, 2, 0, 1, true>, 4 * block_warps);
                else
                    go(matvec_kernel<T, false, block_warps, split_in, false, 1, 2, 0, 1, true>, block_warps);
                return;
            }
            auto go = [&](auto kernel, int warps) {
                launch_pdl(kernel, grid, dim3(warps * 32), stream, a, row_bytes, blocks0, blocks1);
            };
            if (grid.x < narrow_blocks)
                go(matvec_kernel<T, false, 4 * block_warps, split_in, false, 1, 2>, 4 * block_warps);
            else
                go(matvec_kernel<T, false, block_warps, split_in, false, 1, 2>, block_warps);
            return;
        }
        if (tiles > 1) {
            // Steps of several rows: at most 136 registers (5 blocks an SM); `bench --prompt 0
            // --sessions 1,16`: +4% at 16, while one row loses 2% with the cap.
            const int plain_kind = a.n_pairs > 8 ? stage_plain_large : stage_plain_small;
            if (!swiglu && a.n_in == 3 * 256 && a.n_pairs > 8)
                launch_grouped<T, false, 3, split_in, 2, 5>(a, grid, row_bytes, blocks0, blocks1, plain_kind, stream);
            else if (!swiglu && a.n_in == 3 * 256)
                launch_grouped<T, false, 3, split_in, 2>(a, grid, row_bytes, blocks0, blocks1, plain_kind, stream);
            else
                launch_grouped<T, swiglu, block_warps, split_in, 2>(
                    a, grid, row_bytes, blocks0, blocks1,
                    swiglu ? (a.n_pairs > 64 ? stage_swiglu_large : a.n_pairs > 8 ? stage_swiglu_mid : stage_swiglu_small) : plain_kind,
                    stream);
            return;
        }
    }
    if constexpr (!swiglu) {
        if (a.k_parts > 1) {
            const dim3 parts_grid(blocks0 * a.k_parts);
            launch_pdl(matvec_kernel<T, false, block_warps, split_in, true>, parts_grid, dim3(block_warps * 32), stream, a,
                       row_bytes, blocks0, 0);
            return;
        }
        if (!a.group_off && grid.x < narrow_blocks) {
            launch_pdl(matvec_kernel<T, false, 4 * block_warps, split_in>, grid, dim3(4 * block_warps * 32), stream, a, row_bytes,
                       blocks0, blocks1);
            return;
        }
        if constexpr (T == ggml_type::q4_k || T == ggml_type::q6_k) {
            // Three K-quant blocks a row (Qwen3-30B's experts' down, K = 768): three warps, none idle.
            if (a.group_off && a.n_in == 3 * 256) {
                if constexpr (T == ggml_type::q6_k) {
                    // Q6_K (a Q4_K_M file's down in half its layers): above 8 pairs one-warp blocks
                    // playing the three K warps (16 an SM), else three-warp blocks compiled for at
                    // least 8 an SM; the same arithmetic (`bench --prompt 0 --sessions 1,4,16` on
                    // the Q4_K_M mix: +2-9% over unbounded three-warp blocks).
                    const int kind = a.n_pairs > 8 ? stage_plain_large : stage_plain_small;
                    if (a.n_pairs > vw_q6_plain_pairs)
                        launch_grouped<T, false, 1, split_in, 1, 16, 3>(a, grid, row_bytes, blocks0, blocks1, kind, stream);
                    else
                        launch_grouped<T, false, 3, split_in, 1, 8>(a, grid, row_bytes, blocks0, blocks1, kind, stream);
                    return;
                }
                launch_grouped<T, false, 3, split_in, 1>(a, grid, row_bytes, blocks0, blocks1,
                                                         a.n_pairs > 8 ? stage_plain_large : stage_plain_small, stream);
                return;
            }
        }
    }
    if constexpr (T == ggml_type::q4_k && swiglu) {
        // Grouped SwiGLU of large steps: one warp playing the block's four (virtual warps; the same
        // arithmetic), no barrier, 16 blocks an SM. `bench --prompt 0 --sessions 4,16`: +4.4% at 16,
        // -9% at 4 (too few blocks: 1.4 waves of long warps), hence vw_swiglu_pairs.
        if (a.group_off && a.n_pairs > vw_swiglu_pairs) {
            launch_grouped<T, swiglu, 1, split_in, 1, 16, block_warps>(a, grid, row_bytes, blocks0, blocks1, stage_swiglu_large,
                                                                       stream);
            return;
        }
    }
    if (a.group_off) {
        const int kind = swiglu ? (a.n_pairs > 8 ? stage_swiglu_mid : stage_swiglu_small)
                                : (a.n_pairs > 8 ? stage_plain_large : stage_plain_small);
        launch_grouped<T, swiglu, block_warps, split_in, 1>(a, grid, row_bytes, blocks0, blocks1, kind, stream);
        return;
    }
    if constexpr (T == ggml_type::q6_k && !swiglu) {
        // A Q6_K head (Q4_K_M files): two-warp blocks playing the four K warps, 8 an SM; the same
        // arithmetic, ~13% faster than four-warp blocks for the head alone.
        if (!a.group_off && grid.x >= head_blocks) {
            // A head of whole tiles and no extra matrices staged by one bulk copy a tile, in
            // four-warp blocks (the same arithmetic again): `bench --prompt 0 --sessions 1,16` on
            // the Q4_K_M mix +1%.
            const size_t smem = size_t(16) * size_t(row_bytes);
            // Above 8 rows two n8 tiles of rows a pass share each unpacked weight (matvec_args::
            // col_tiles; the same bits): +0.5% at 16 sessions on the Q4_K_M mix.
            if (a.stage_weights != 0 && a.n_out % 16 == 0 && a.n_extra == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 &&
                smem <= 40 * 1024 && pdl_supported()) {
                if (dense_col_tiles(a) == 2)
                    launch_pdl_smem(matvec_kernel<T, false, block_warps, split_in, false, 1, 2, 0, 1, true>, grid,
                                    dim3(block_warps * 32), smem, stream, a, row_bytes, blocks0, blocks1);
                else
                    launch_pdl_smem(matvec_kernel<T, false, block_warps, split_in, false, 1, 1, 0, 1, true>, grid,
                                    dim3(block_warps * 32), smem, stream, a, row_bytes, blocks0, blocks1);
                return;
            }
            launch_pdl(matvec_kernel<T, false, 2, split_in, false, 1, 1, 8, 2>, grid, dim3(64), stream, a, row_bytes, blocks0, blocks1);
            return;
        }
    }
    launch_pdl(matvec_kernel<T, swiglu, block_warps, split_in>, grid, dim3(block_warps * 32), stream, a, row_bytes, blocks0, blocks1);
}

template <ggml_type T, bool split_in>
void launch_matvec_mode(const matvec_args &a, cudaStream_t stream) {
    if (a.w_up)
        launch_matvec_shape<T, true, split_in>(a, stream);
    else
        launch_matvec_shape<T, false, split_in>(a, stream);
}

// The generic-only types (quant_decode.cuh) split the activations' fp32 rows in the kernel even
// where the producer wrote split rows (the same bits): one instance a mode instead of two.
template <ggml_type T>
void launch_matvec_type(const matvec_args &a, cudaStream_t stream) {
    if constexpr (!generic_only_type<T>) {
        if (a.x_split) {
            launch_matvec_mode<T, true>(a, stream);
            return;
        }
    }
    launch_matvec_mode<T, false>(a, stream);
}

}  // namespace

int64_t matvec_row_bytes(ggml_type type, int32_t n_in) {
    switch (type) {
    case ggml_type::q4_k: return int64_t(n_in) / 256 * 144;
    case ggml_type::q6_k: return int64_t(n_in) / 256 * 210;
    case ggml_type::q5_k: return int64_t(n_in) / 256 * 176;
    case ggml_type::q3_k: return int64_t(n_in) / 256 * 110;
    case ggml_type::q2_k: return int64_t(n_in) / 256 * 84;
    case ggml_type::iq4_xs: return int64_t(n_in) / 256 * 136;
    case ggml_type::iq2_xxs: return int64_t(n_in) / 256 * 66;
    case ggml_type::iq2_xs: return int64_t(n_in) / 256 * 74;
    case ggml_type::iq2_s: return int64_t(n_in) / 256 * 82;
    case ggml_type::iq3_xxs: return int64_t(n_in) / 256 * 98;
    case ggml_type::iq3_s: return int64_t(n_in) / 256 * 110;
    case ggml_type::iq1_s: return int64_t(n_in) / 256 * 50;
    case ggml_type::iq1_m: return int64_t(n_in) / 256 * 56;
    case ggml_type::q8_0: return int64_t(n_in) / 32 * 34;
    case ggml_type::q4_0:
    case ggml_type::iq4_nl: return int64_t(n_in) / 32 * 18;
    case ggml_type::q4_1: return int64_t(n_in) / 32 * 20;
    case ggml_type::q5_0: return int64_t(n_in) / 32 * 22;
    case ggml_type::q5_1: return int64_t(n_in) / 32 * 24;
    case ggml_type::mxfp4: return int64_t(n_in) / 32 * 17;
    case ggml_type::f32: return int64_t(n_in) * 4;
    case ggml_type::f16:
    case ggml_type::bf16: return int64_t(n_in) * 2;
    default: return 0;
    }
}

int32_t matvec_block_elems(ggml_type type) {
    switch (type) {
    case ggml_type::q4_k:
    case ggml_type::q6_k:
    case ggml_type::q5_k:
    case ggml_type::q3_k:
    case ggml_type::q2_k:
    case ggml_type::iq4_xs:
    case ggml_type::iq2_xxs:
    case ggml_type::iq2_xs:
    case ggml_type::iq2_s:
    case ggml_type::iq3_xxs:
    case ggml_type::iq3_s:
    case ggml_type::iq1_s:
    case ggml_type::iq1_m: return 256;
    default: return 32;  // 32-element blocks, and the plain types by items of 32
    }
}

void matvec(const matvec_args &a, cudaStream_t stream) {
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
    TANDEM_CUDA_REQUIRE(a.row_tiles >= 0 && a.row_tiles <= 2, "matvec: row_tiles is 0 (chosen here), 1 or 2");
    TANDEM_CUDA_REQUIRE(a.stage_weights >= -1 && a.stage_weights <= 1, "matvec: stage_weights is -1 (chosen here), 0 or 1");
    TANDEM_CUDA_REQUIRE(a.col_tiles >= 0 && a.col_tiles <= 2 && (a.col_tiles < 2 || (!a.group_off && a.k_parts == 1)),
                        "matvec: col_tiles is 0 (chosen here), 1 or 2, and 2 is for dense products without K parts");
    TANDEM_CUDA_REQUIRE(a.n_extra >= 0 && a.n_extra <= 2 && (a.n_extra == 0 || (!a.group_off && !a.w_up)),
                        "matvec: up to 2 extra matrices, dense and without SwiGLU only");
    for (int i = 0; i < a.n_extra; ++i) {
        TANDEM_CUDA_REQUIRE(a.extra[i].w && a.extra[i].y && a.extra[i].n_out > 0, "matvec: empty extra matrix");
        TANDEM_CUDA_REQUIRE(!a.extra[i].typed || (i == a.n_extra - 1 && a.k_parts == 1 && !a.accumulate &&
                                                  matvec_mixed_supported(a.type, a.extra[i].type) && a.n_in % 256 == 0),
                            "matvec: a typed extra matrix is the last of a dense launch without K parts or accumulate, of a "
                            "supported pair of types (Q4_K with a Q6_K part), over whole 256-element blocks");
    }
    if (!a.group_off && a.n_pairs == 0) return;
    if (a.x_split && (a.x_stride % 64 != 0 || reinterpret_cast<uintptr_t>(a.x_sums) % 8 != 0)) {
        // The kernels read a row's sums 8 bytes at a time; other rows are split in the kernel
        // (the same bits).
        matvec_args b = a;
        b.x_split = nullptr;
        b.x_sums = nullptr;
        matvec(b, stream);
        return;
    }
    if (a.n_extra > 0 && a.extra[a.n_extra - 1].typed) {
        launch_matvec_mixed(a, stream);
        TANDEM_CUDA_CHECK_LAUNCH();
        return;
    }
    TANDEM_CUDA_REQUIRE(matvec_block_elems(a.type) == 32 || a.n_in % 256 == 0, "matvec: K-quant rows are whole 256-element blocks");
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
    // Generic paths only (matvec_kernel's four-item chunks).
    case ggml_type::q5_k: launch_matvec_type<ggml_type::q5_k>(a, stream); break;
    case ggml_type::q3_k: launch_matvec_type<ggml_type::q3_k>(a, stream); break;
    case ggml_type::q2_k: launch_matvec_type<ggml_type::q2_k>(a, stream); break;
    case ggml_type::q4_0: launch_matvec_type<ggml_type::q4_0>(a, stream); break;
    case ggml_type::q4_1: launch_matvec_type<ggml_type::q4_1>(a, stream); break;
    case ggml_type::q5_0: launch_matvec_type<ggml_type::q5_0>(a, stream); break;
    case ggml_type::q5_1: launch_matvec_type<ggml_type::q5_1>(a, stream); break;
    case ggml_type::iq4_nl: launch_matvec_type<ggml_type::iq4_nl>(a, stream); break;
    case ggml_type::iq4_xs: launch_matvec_type<ggml_type::iq4_xs>(a, stream); break;
    case ggml_type::mxfp4: launch_matvec_type<ggml_type::mxfp4>(a, stream); break;
    case ggml_type::iq2_xxs: launch_matvec_type<ggml_type::iq2_xxs>(a, stream); break;
    case ggml_type::iq2_xs: launch_matvec_type<ggml_type::iq2_xs>(a, stream); break;
    case ggml_type::iq2_s: launch_matvec_type<ggml_type::iq2_s>(a, stream); break;
    case ggml_type::iq3_xxs: launch_matvec_type<ggml_type::iq3_xxs>(a, stream); break;
    case ggml_type::iq3_s: launch_matvec_type<ggml_type::iq3_s>(a, stream); break;
    case ggml_type::iq1_s: launch_matvec_type<ggml_type::iq1_s>(a, stream); break;
    case ggml_type::iq1_m: launch_matvec_type<ggml_type::iq1_m>(a, stream); break;
    case ggml_type::bf16: launch_matvec_type<ggml_type::bf16>(a, stream); break;
    case ggml_type::f32: launch_matvec_type<ggml_type::f32>(a, stream); break;
    default: TANDEM_CUDA_REQUIRE(false, "matvec: weight type not supported on CUDA");
    }
    TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
