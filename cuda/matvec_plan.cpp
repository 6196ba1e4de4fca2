// cuda/matvec_plan.cpp - the decode products' launch rules (matvec_plan.h). Benchmarks cited as
// `bench --prompt 0 --sessions S` (decode steps of S sessions, Qwen3-30B-A3B Q4_K unless "the
// Q4_K_M mix": its Q4_K_M file, whose down is Q6_K in half the layers), on an H200.
#include "matvec_plan.h"

#include "cuda_check.h"
#include "matvec_digits.h"

#include <algorithm>

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

int32_t matvec_digits_group_rows(int32_t max_groups) {
    // Half the groups' rows from 64 groups up: about two groups a row at steps of 8 and 16 sessions
    // (~52 and ~82 of 64 and 128 groups live with 128 experts, 8 a row), a row a group below.
    // `--sessions 2,4,8,16`: half beats 32-96 rows of 128 groups, and loses below 64 groups.
    return max_groups >= 64 ? max_groups / 2 : max_groups;
}

namespace {

// The staged SwiGLU blocks' tensor copies (matvec_digits_args::tensor_copies): rows of whole
// 128-byte lines (K a multiple of 2,048), at most 256 of them (a box's extent), 16-byte aligned
// matrices. `--sessions 8,16`: +1.3-1.5% over a bulk copy a row for the strided blocks.
bool digits_tensor_copies(const matvec_digits_args &a) {
    const int64_t row_bytes = int64_t(a.n_in / 256) * 144;
    return a.tensor_copies && row_bytes % 128 == 0 && row_bytes / 128 <= 256 && aligned16(a.w) && aligned16(a.w_up);
}

// Dense products as one group (prompt rows' Q, K, V and wo): K split as the grouped products, no
// solo warps; more rows than a pass of 4: two or four passes at a time (a 151,936 x 2,048 head:
// two fastest at 8 rows, four at 16, whose 159 registers leave 3 blocks an SM).
void plan_one_group(matvec_digits_plan &p, const matvec_digits_args &a, bool stage, size_t stage_bytes) {
    p.variant = matvec_digits_plan::kernel::one_group;
    p.k_split = p.warps = digits_grouped_k_split(false, a.n_in);
    p.staged = stage;
    p.smem_bytes = stage ? stage_bytes : 0;
    const int32_t together = stage || a.n_rows <= 4 ? 1 : a.passes_together >= 0 ? a.passes_together : a.n_rows <= 8 ? 2 : 4;
    p.passes_together = together == 2 || together == 4 ? together : 1;
}

}  // namespace

matvec_digits_plan plan_matvec_digits(const matvec_digits_args &a, const device_facts &d) {
    const bool swiglu = a.w_up != nullptr, grouped = a.group_off != nullptr || a.one_group, quantize = a.x_f32 != nullptr;
    matvec_digits_plan p;
    const int32_t tiles = (a.n_out + (swiglu ? 7 : 15)) / (swiglu ? 8 : 16);
    p.grid_x = tiles;
    p.grid_y = grouped && !a.one_group ? a.max_groups : 1;
    const size_t stage_bytes = size_t(16) * (size_t(a.n_in / 256) * 144 + 32);
    const bool aligned = aligned16(a.w) && aligned16(a.w_up);
    // Staged where asked (the engine does: the copy engine loads the weights before the PDL wait), and a tile fits 40 KiB.
    const bool stage = grouped && a.stage && stage_bytes <= 40 * 1024 && aligned && d.sm90;
    // Staged blocks of moe_route's groups: fewer rows of blocks than groups, each striding over them.
    const int32_t group_rows = a.group_rows > 0 ? std::min(a.group_rows, a.max_groups) : matvec_digits_group_rows(a.max_groups);
    const bool strided = grouped && !a.one_group && group_rows < a.max_groups;
    if (a.one_group) {
        plan_one_group(p, a, stage, stage_bytes);
        return p;
    }
    // Solo warps where asked, of producer digits: SwiGLU, or K split three ways (else blocks).
    const bool solo_staged = a.stage && aligned && d.sm90 && size_t(a.solo_warps) * stage_bytes <= 48 * 1024;
    if (grouped && a.solo_warps > 0 && !quantize && (swiglu || digits_grouped_k_split(false, a.n_in) == 3)) {
        p.variant = matvec_digits_plan::kernel::solo;
        p.k_split = digits_grouped_k_split(swiglu, a.n_in);
        // Staged SwiGLU solo blocks are two warps; the rest four.
        p.staged = solo_staged && (!swiglu || a.solo_warps == 2);
        p.warps = swiglu && p.staged ? 2 : 4;
        p.smem_bytes = p.staged ? size_t(p.warps) * stage_bytes : 0;
        p.grid_x = (tiles + p.warps - 1) / p.warps;
        if (p.staged && strided) p.group_rows = p.grid_y = group_rows;
        return p;
    }
    if (swiglu && grouped && stage) {
        p.staged = true;
        p.tensor_copies = digits_tensor_copies(a);
        // Tensor copies: the stage 1 KiB larger, its start rounded up to the swizzle's 1,024-byte alignment.
        p.smem_bytes = p.tensor_copies ? size_t(16) * size_t(a.n_in / 256) * 144 + 1024 : stage_bytes;
        // Blocks that route their row take one a group.
        if (!a.route_logits && strided) p.group_rows = p.grid_y = group_rows;
        return p;
    }
    if (swiglu) return p;
    if (grouped) {
        p.k_split = p.warps = digits_grouped_k_split(false, a.n_in);
        p.staged = stage;
        p.smem_bytes = stage ? stage_bytes : 0;
        return p;
    }
    // Dense, too narrow to give every SM two blocks: K split 16 ways.
    if (tiles < matvec_narrow_blocks) p.k_split = p.warps = 16;
    return p;
}

}  // namespace tandem::cuda
