// cuda/matvec_plan.cpp - the decode products' launch rules (matvec_plan.h). Benchmarks cited as
// `bench --prompt 0 --sessions S` (decode steps of S sessions, Qwen3-30B-A3B Q4_K unless "the
// Q4_K_M mix": its Q4_K_M file, whose down is Q6_K in half the layers), on an H200.
#include "matvec_plan.h"

#include "cuda_check.h"

namespace tandem::cuda {
namespace {

constexpr int32_t block_rows = 16;  // weight rows a block (an m16 tile); SwiGLU: 8 gate + 8 up rows

// A staged block's row pitch in shared memory (matvec_kernel's s_stride for plain products): packed
// when a row is an odd number of 16-byte units, else 32 bytes apart.
int64_t staged_row_stride(int64_t row_bytes) { return row_bytes % 32 == 16 ? row_bytes : row_bytes + 32; }

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Dense Q4_K column tiles, n8 tiles of step rows a pass: two above 8 rows. The plain launch and
// the mixed one take the same, so a mixed launch's Q4_K parts keep their bits.
int32_t dense_col_tiles(const matvec_args &a, const matvec_forced &f) {
    return f.col_tiles > 0 ? f.col_tiles : (!a.group_off && a.k_parts == 1 && a.n_pairs > 8 ? 2 : 1);
}

// Grouped Q4_K weight-row tiles a block: two for down (three super-blocks a row) except 9-64
// pairs (2-8 sessions: `--sessions 1,4,16`), staged in one; two for SwiGLU only at one row (168
// registers leave 3 blocks an SM); four spill.
int32_t grouped_row_tiles(const matvec_args &a, bool swiglu, const matvec_forced &f) {
    if (f.row_tiles > 0) return f.row_tiles;
    if (swiglu) return a.n_pairs <= 8 ? 2 : 1;
    return three_superblocks(a.n_in) && (a.n_pairs <= 8 || a.n_pairs > 64) ? 2 : 1;
}

// A grouped Q4_K block of `warps` K warps (each playing v) and `tiles` row tiles: staged above 8
// pairs (`--sessions 1,4,16`: one copy a row on one barrier; up to 8 pairs, one row, staging gains
// nothing), where the rows and the warps' partials fit the 48 KiB a launch gets without opting in
// (the carve-out left alone: at its maximum the activations lose L1, -4-5%). Staged blocks hold few
// registers, so they run every K warp physically and without a register bound: the same arithmetic.
void grouped_q4_k(matvec_plan &p, const matvec_args &a, const device_facts &d, const matvec_forced &f, int64_t row_bytes,
                  int32_t warps, int32_t tiles, int32_t min_blocks, int32_t v) {
    p.row_tiles = tiles;
    const size_t smem = size_t(16 * tiles) * size_t(row_bytes + 32);
    const size_t smem_static = size_t(warps * v > 1 ? warps * v - 1 : 1) * 4 * tiles * 32 * sizeof(float) + 16;
    const bool wanted = f.staged < 0 ? a.n_pairs > 8 : f.staged > 0;
    if (wanted && smem + smem_static <= 48 * 1024 && aligned16(a.w) && aligned16(a.w_up) && d.sm90) {
        p.staged = true;
        p.warps = warps * v;
        p.smem_bytes = smem;
        return;
    }
    p.warps = warps;
    p.virtual_warps = v;
    p.min_blocks = min_blocks;
}

// A grouped plain Q6_K block: each 16-row tile in one bulk copy at every step size (`--sessions
// 1,4,16` on the Q4_K_M mix: +1-6%), in the block's own shape; only matrices of whole tiles.
void grouped_q6_k(matvec_plan &p, const matvec_args &a, const device_facts &d, const matvec_forced &f, int64_t row_bytes,
                  int32_t warps, int32_t min_blocks, int32_t v) {
    p.warps = warps;
    p.virtual_warps = v;
    p.min_blocks = min_blocks;
    const size_t smem = size_t(16) * size_t(row_bytes);
    if (f.staged != 0 && a.n_out % 16 == 0 && aligned16(a.w) && smem <= 40 * 1024 && d.sm90) {
        p.staged = true;
        p.smem_bytes = smem;
    }
}

// The grouped products (grid y: a group each).
void plan_grouped(matvec_plan &p, const matvec_args &a, const device_facts &d, const matvec_forced &f, int64_t row_bytes) {
    const bool swiglu = a.w_up != nullptr, q4_k = a.type == ggml_type::q4_k, q6_k = a.type == ggml_type::q6_k;
    const bool down3 = !swiglu && three_superblocks(a.n_in);
    if (q4_k && p.row_tiles > 1) {
        // Several rows a step, three warps: at most 136 registers (5 blocks an SM), `--sessions 1,16`: +4% at 16, -2% at one row.
        if (down3) return grouped_q4_k(p, a, d, f, row_bytes, 3, 2, a.n_pairs > 8 ? 5 : 0, 1);
        return grouped_q4_k(p, a, d, f, row_bytes, 4, 2, 0, 1);
    }
    // Three super-blocks a row, plain Q6_K: above 8 pairs one-warp blocks playing the three K
    // warps (16 an SM), else three-warp blocks bound to 8 an SM; `--sessions 1,4,16` on the
    // Q4_K_M mix: +2-9% over unbounded three-warp blocks.
    if (q6_k && down3) return a.n_pairs > 8 ? grouped_q6_k(p, a, d, f, row_bytes, 1, 16, 3) : grouped_q6_k(p, a, d, f, row_bytes, 3, 8, 1);
    // Three super-blocks a row, plain Q4_K: three warps, none idle (96 registers, 7 blocks an SM: 16 sessions +6%).
    if (q4_k && down3) return grouped_q4_k(p, a, d, f, row_bytes, 3, 1, 0, 1);
    // SwiGLU Q4_K above 64 pairs: one warp playing four (no barrier, 16 blocks an SM); `--sessions
    // 4,16`: +4.4% at 16, -9% at 4 (too few blocks: 1.4 waves of long warps).
    if (q4_k && swiglu && a.n_pairs > 64) return grouped_q4_k(p, a, d, f, row_bytes, 1, 1, 16, 4);
    if (q4_k) return grouped_q4_k(p, a, d, f, row_bytes, 4, 1, 0, 1);
    if (q6_k && !swiglu) return grouped_q6_k(p, a, d, f, row_bytes, 4, 0, 1);
    p.warps = 4;
}

// The dense products of matvec_kernel (one matrix and up to two more of its type).
void plan_dense(matvec_plan &p, const matvec_args &a, const device_facts &d, const matvec_forced &f, int64_t row_bytes) {
    const bool swiglu = a.w_up != nullptr, narrow = p.grid_x < matvec_narrow_blocks;
    const int32_t cols = dense_col_tiles(a, f);
    if (a.type == ggml_type::q4_k && cols == 2 && !swiglu && a.k_parts == 1) {
        // Q4_K over more than 8 rows: two n8 tiles a pass, the weights unpacked once for both
        // (dense SwiGLU, which no engine path uses, keeps one).
        p.col_tiles = 2;
        p.warps = narrow ? 16 : 4;
        // Staged: the 16 weight rows in one bulk copy each (109 registers instead of 128 with
        // spills), from 16-byte aligned matrices within 160 KiB (K up to ~18k); `--sessions
        // 12,16`: +0-1.3% over streamed.
        bool aligned = row_bytes % 16 == 0 && aligned16(a.w);
        for (int i = 0; i < a.n_extra; ++i) aligned = aligned && aligned16(a.extra[i].w);
        const size_t smem = 16 * size_t(staged_row_stride(row_bytes));
        if (f.staged != 0 && aligned && smem <= 160 * 1024 && d.sm90) {
            p.staged = true;
            p.smem_bytes = smem;
        }
        return;
    }
    if (swiglu) return;  // four warps
    if (a.k_parts > 1) {
        p.variant = matvec_plan::kernel::k_parts;
        p.blocks1 = 0;
        p.grid_x = p.blocks0 * a.k_parts;
        return;
    }
    // Too narrow to give every SM two blocks (wo; a router not fused with its norm): K split 16 ways (16-warp blocks beat 8 by 1-2%).
    if (narrow) {
        p.warps = 16;
        return;
    }
    if (a.type == ggml_type::q6_k && p.grid_x >= matvec_head_blocks) {
        // A Q6_K head of whole tiles and no extra matrices: one bulk copy a tile in four-warp
        // blocks (`--sessions 1,16` on the Q4_K_M mix: +1%), two n8 tiles a pass above 8 rows
        // (+0.5% at 16 sessions).
        if (f.staged != 0 && a.n_out % 16 == 0 && a.n_extra == 0 && aligned16(a.w) && 16 * row_bytes <= 40 * 1024 && d.sm90) {
            p.staged = true;
            p.col_tiles = cols;
            p.smem_bytes = size_t(16) * size_t(row_bytes);
            return;
        }
        // Else two-warp blocks playing the four K warps, 8 an SM: ~13% faster than four-warp blocks for the head alone.
        p.warps = 2;
        p.virtual_warps = 2;
        p.min_blocks = 8;
    }
}

}  // namespace

matvec_plan plan_matvec(const matvec_args &a, const device_facts &d, const matvec_forced &f) {
    TANDEM_CUDA_REQUIRE(f.row_tiles >= 0 && f.row_tiles <= 2, "matvec: row_tiles is 0 (the rules choose), 1 or 2");
    TANDEM_CUDA_REQUIRE(f.staged >= -1 && f.staged <= 1, "matvec: staged is -1 (the rules choose), 0 or 1");
    TANDEM_CUDA_REQUIRE(f.col_tiles >= 0 && f.col_tiles <= 2 && (f.col_tiles < 2 || (!a.group_off && a.k_parts == 1)),
                        "matvec: col_tiles is 0 (the rules choose), 1 or 2, and 2 is for dense products without K parts");
    matvec_plan p;
    // The kernels read a row's sums 8 bytes at a time; other rows are split in the kernel (the same bits).
    p.split_in = a.x_split && a.x_stride % 64 == 0 && reinterpret_cast<uintptr_t>(a.x_sums) % 8 == 0;
    const bool swiglu = a.w_up != nullptr, grouped = a.group_off != nullptr;
    if (a.n_extra > 0 && a.extra[a.n_extra - 1].typed) {
        // Each block runs its own matrix's type with the warps and column tiles a dense Q4_K launch takes.
        p.variant = matvec_plan::kernel::mixed;
        p.blocks0 = (a.n_out + block_rows - 1) / block_rows;
        p.blocks1 = (a.extra[0].n_out + block_rows - 1) / block_rows;
        p.grid_x = p.blocks0 + p.blocks1 + (a.n_extra > 1 ? (a.extra[1].n_out + block_rows - 1) / block_rows : 0);
        p.col_tiles = dense_col_tiles(a, f);
        p.warps = p.grid_x < matvec_narrow_blocks ? 16 : 4;
        return p;
    }
    const int32_t tiles = a.type == ggml_type::q4_k && grouped ? grouped_row_tiles(a, swiglu, f) : 1;
    const int32_t per_block = (swiglu ? block_rows / 2 : block_rows) * tiles;
    p.row_tiles = tiles;
    p.blocks0 = (a.n_out + per_block - 1) / per_block;
    p.blocks1 = a.n_extra > 0 ? (a.extra[0].n_out + per_block - 1) / per_block : 0;
    p.grid_x = p.blocks0 + p.blocks1 + (a.n_extra > 1 ? (a.extra[1].n_out + per_block - 1) / per_block : 0);
    p.grid_y = grouped ? a.max_groups : 1;
    const int64_t row_bytes = matvec_row_bytes(a.type, a.n_in);
    if (grouped)
        plan_grouped(p, a, d, f, row_bytes);
    else
        plan_dense(p, a, d, f, row_bytes);
    return p;
}

}  // namespace tandem::cuda
