// cuda/matvec_digits.h - Q4_K decode products on integer tensor cores. Activations are held as
// two int8 digits per element against one power-of-two scale per 256 elements (x ~ s (d0 + d1 /
// 256); a block with a non-finite element gets a NaN scale, cuda/digits.cuh); a product takes each
// 32-element sub-block on mma.m16n8k32 (u8 quants x s8 digits, exact int32), applies the sub-block
// scales as integer multiply-adds, the mins on one bf16 mma a block, and converts to float once per
// 256 elements. Each output's float arithmetic depends only on the matrix's shape (its K split),
// never on the rows of the step or on the kernel variant (streamed, staged, solo warps, digits made
// in the kernel or by the producer), so a row's result never depends on the other rows of its step.
// The engine uses the grouped SwiGLU product for the experts' Q4_K gate/up of decode rows (its
// digits written by the FFN norm + router launch) and the grouped plain product for their Q4_K
// down (digits made by its own blocks, or by digits_quantize for large steps): 1.1-1.5x faster
// than the bf16-split kernels, each product ~6x less precise (relative L2 ~4e-5 against the CPU's
// fp32, within tolerance::moe); a one-row step's gate/up routes its row itself and
// publishes the routing in moe_route's place (route_logits, route_out below: one session +4%).
// Prompt rows' Q4_K Q, K, V and wo take the grouped arithmetic as one group (one_group; the tiles
// from 32 rows): 1.1-1.3x faster than the bf16 exact-quant prompt products. A Q4_K vocabulary head
// takes them too, as one group for every step size (twice as fast as the bf16 split at 1-4 rows).
// Decode rows' Q/K/V stay off digits: slower at one session, and they move a router near-tie.
// Owns: the digit format and its producer, the dense and grouped (SwiGLU, plain) products. Does not
// own: the other decode products (cuda/matvec.h).
#pragma once

#include "matvec.h"
#include "matvec_plan.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

// Digits per element: x ~ s (d0 + d1 / 256). (A third digit would be little faster than the bf16
// split and no more precise.)
constexpr int digits_per_element = 2;

// Per row of n elements (n a multiple of 256): digits [n / 32][4][16 bytes] (sub-block j, lane group
// t: d0 of elements 8t .. 8t + 7, then their d1); scales [n / 256] (s = 2^e, the smallest with 127 s
// >= the block's largest |x|); per block of 256 the sub-blocks' digit sums S_j = sum (256 d0 + d1)
// as bf16 hi/lo: [n / 256][4][hi S_2t, hi S_2t+1, lo S_2t, lo S_2t+1].
struct digit_rows {
    int8_t *digits = nullptr;   // [n_rows][2 n]
    float *scales = nullptr;    // [n_rows][n / 256]
    uint16_t *sums = nullptr;   // [n_rows][n / 256 * 16]
};
struct digits_quantize_args {
    const float *x = nullptr;  // [n_rows][n]
    int32_t n_rows = 0, n = 0;
    digit_rows out;
    const int32_t *x_rows = nullptr;  // output row i from x row x_rows[i] (nullptr: row i)
};
void digits_quantize(const digits_quantize_args &args, cudaStream_t stream);

// Whether a one-row grouped SwiGLU of this router can route its row itself (matvec_digits_args::
// route_logits): up to route_max_experts experts, k of them a row, k <= 32 (a lane a slot).
constexpr int32_t route_max_experts = 128;
inline bool matvec_digits_route_applies(int32_t n_expert, int32_t k) {
    return k >= 1 && k <= 32 && k <= n_expert && n_expert <= route_max_experts;
}

// What moe_route writes for a one-row step (moe_route_args's outputs of the same names), when the
// one-row gate/up publishes its routing instead (matvec_digits_args::route_out).
struct route_outputs {
    int32_t *ids = nullptr;  // [k]
    float *weights = nullptr;  // [k]
    int32_t *group_expert = nullptr, *group_off = nullptr, *n_groups = nullptr, *pair_x = nullptr, *pair_y = nullptr;
    int32_t *groups_total = nullptr;  // optional: += the step's groups
    bool renormalise = false;
};

struct matvec_digits_args {
    const void *w = nullptr;  // [n_mat][n_out][n_in / 256 blocks of 144 bytes] Q4_K
    int32_t n_in = 0, n_out = 0;
    digit_rows x;             // rows of n_in
    int32_t n_rows = 0;       // dense: the rows computed
    float *y = nullptr;       // [*][y_stride]
    int64_t y_stride = 0;
    // SwiGLU (w_up set, same shape as w): y = silu(W x) * (W_up x).
    const void *w_up = nullptr;
    // Grouped (group_off set), as matvec_args: group g < *n_groups multiplies matrix group_mat[g]
    // with pairs group_off[g] .. group_off[g + 1] - 1; pair i reads x row x_rows[i] and writes y row
    // y_rows[i]; max_groups bounds *n_groups.
    const int32_t *x_rows = nullptr, *y_rows = nullptr;
    const int32_t *group_mat = nullptr, *group_off = nullptr, *n_groups = nullptr;
    int32_t max_groups = 1;
    bool stage = false;  // grouped: the block's weight rows copied into shared memory first
    // Grouped: the group arrays were written two or more launches before this one (matvec_args::
    // groups_settled): the blocks read them and start loading weights before the PDL wait.
    bool groups_settled = false;
    // Grouped products of producer digits (SwiGLU, or three blocks a row): each warp computes whole
    // 16-row tiles, all of K, with no barrier (0: off; a block of 4 warps, or 2 staged SwiGLU
    // ones; staged with `stage`). The same arithmetic, bitwise.
    int32_t solo_warps = 0;
    // Grouped staged products over moe_route's groups (SwiGLU blocks, solo warps): the launch's rows
    // of blocks. Fewer rows than groups: block row y takes groups y, y + rows, ... in turn, reusing
    // its stage, so a step of many groups launches fewer blocks (and fewer that find no group).
    // 0: matvec_digits_group_rows(max_groups). The same bits whatever the rows.
    int32_t group_rows = 0;
    // Staged SwiGLU blocks (routing, one a group or strided; sm_90) whose rows are whole 128-byte
    // lines (n_in a multiple of 2,048): the tile's 8 gate rows and its 8 up rows each in one tensor
    // copy, swizzled so the reads stay conflict-free (true), or one bulk copy a padded row (false;
    // other rows always). The same bits either way.
    bool tensor_copies = true;
    // One-row grouped SwiGLU (a decode step of one session): each block routes the row itself from
    // its router logits (route_logits [route_n_expert], route_slots [1]; cuda/moe_route.cuh, the
    // experts moe_route picks, bitwise) instead of reading moe_route's groups; group g is the row's
    // g-th expert by id and its one pair writes y row = that expert's slot (moe_route's one-row
    // groups). x is step row 0; x_rows, y_rows and the group arrays are not read. Without route_out
    // (tests), moe_route runs before this launch and the blocks route before their PDL wait (the
    // logits, written by the launch before moe_route's, are complete when this one starts).
    // max_groups = route_k. Staged only.
    const float *route_logits = nullptr;
    const int32_t *route_slots = nullptr;
    int32_t route_n_expert = 0, route_k = 0;
    // With route_logits, route_out.ids set: no moe_route launch before this one; block (0, 0) writes
    // moe_route's outputs for the row (the same bits, route_out) and the launch after this one may
    // read them before its PDL wait (groups_settled), because every block triggers it only after
    // routing, block (0, 0) after writing them and a fence. The logits then come from the launch just
    // before this one, so the blocks route after their PDL wait.
    route_outputs route_out = {};
    // Grouped plain products (the experts' down): x as fp32 rows instead of digit rows; each block
    // quantises the rows it multiplies itself, to the bits digits_quantize would write (x unused).
    const float *x_f32 = nullptr;  // [*][x_f32_stride], 16-byte aligned
    int64_t x_f32_stride = 0;
    // matmul_digits (grouped): a bound on all groups' pairs together (its grid of row tiles).
    int32_t n_pairs = 0;
    // A dense product with the grouped products' arithmetic (prompt rows' Q, K, V and wo): one group
    // of rows 0 .. n_rows - 1, matrix 0, x and y rows by index, no group arrays (group_off unset).
    // matvec_digits and matmul_digits then give the same bits, so how a prompt is chunked changes
    // nothing whichever kernel a chunk takes.
    bool one_group = false;
    // Plain products: y += W x (wo's residual add, one rounding) instead of y = W x.
    bool accumulate = false;
    // matvec_digits, one_group (unstaged): passes of 4 rows at a time (2 or 4), so each chunk's
    // weights are loaded and unpacked once for up to 8 or 16 rows instead of once for every 4.
    // -1: two for 5-8 rows, four above; 0 or 1: a pass at a time. The same bits either way.
    int32_t passes_together = -1;
    // matmul_digits: weight rows a block tile (64 or 128; 0: 64 when 128-row tiles would give fewer
    // blocks than two an SM). Every width gives the same bits.
    int32_t tile_weight_rows = 0;
    // matmul_digits, one_group plain products: each tile's K partials (digits_grouped_k_split) on
    // blocks of their own, one thread-block cluster a tile, the partials added in order by its
    // first block through distributed shared memory (sm_90). -1: when the tiles would leave a
    // quarter of the SMs or more without a block (and the GPU has clusters); 0: never; 1: always
    // where the GPU has clusters. The same bits either way.
    int32_t tile_k_blocks = -1;
    // matmul_digits, one_group: more matrices over the same rows in the same launch (K and V beside
    // Q), each with its own outputs; their column blocks continue the grid.
    matvec_part extra[2] = {};
    int32_t n_extra = 0;
    // matmul_digits: which tiles. automatic: the warpgroup tiles (sm_90a) where wgmma_built() for
    // one-group plain products of 512 rows or more and for grouped products whose groups average
    // 64 pairs or more (n_pairs against max_groups), else mma.sync; mma_sync or wgmma
    // (wgmma_built() required; those tiles ignore tile_weight_rows and tile_k_blocks) to choose.
    // The same bits either way.
    enum class tile_engine : int8_t { automatic, mma_sync, wgmma };
    tile_engine engine = tile_engine::automatic;
    // The warpgroup tiles' pairs a tile: 32 or 64 (0: 32 where the groups average fewer than 24
    // pairs, else 64). The same bits either way.
    int32_t tile_pairs = 0;
};

// The digit product of matvec's grouped arguments: its matrices, shape, output rows and groups,
// with x as digit rows (the rest left at their defaults).
inline matvec_digits_args digit_args_of(const matvec_args &m, const digit_rows &x) {
    matvec_digits_args a;
    a.w = m.w;
    a.w_up = m.w_up;
    a.n_in = m.n_in;
    a.n_out = m.n_out;
    a.x = x;
    a.y = m.y;
    a.y_stride = m.y_stride;
    a.x_rows = m.x_rows;
    a.y_rows = m.y_rows;
    a.group_mat = m.group_mat;
    a.group_off = m.group_off;
    a.n_groups = m.n_groups;
    a.max_groups = m.max_groups;
    a.n_pairs = m.n_pairs;
    return a;
}

// A dense product as one group (one_group): matrix w (n_out rows of n_in), rows 0 .. n_rows - 1 of
// x, outputs y [n_rows][y_stride]; the rest (accumulate, extras, staging) left at their defaults.
inline matvec_digits_args one_group_args(const void *w, int32_t n_in, int32_t n_out, const digit_rows &x, int32_t n_rows, float *y,
                                         int64_t y_stride) {
    matvec_digits_args a;
    a.w = w;
    a.n_in = n_in;
    a.n_out = n_out;
    a.x = x;
    a.n_rows = n_rows;
    a.y = y;
    a.y_stride = y_stride;
    a.one_group = true;
    return a;
}

// The K split of the grouped digit products: digits_grouped_k_split (matvec_plan.h).
// The rows of blocks a grouped staged product launches for up to max_groups groups when
// matvec_digits_args::group_rows is 0: max_groups up to a bound, the bound above it.
int32_t matvec_digits_group_rows(int32_t max_groups);
// How a matvec_digits call launches: the kernel shape plan_matvec_digits (matvec_plan.cpp) picks
// from the arguments (with the caller's requests: stage, solo_warps, group_rows, tensor_copies,
// passes_together) and the device. Every plan of a call gives the same bits.
struct matvec_digits_plan {
    enum class kernel : int8_t {
        blocks,     // a tile of 16 weight rows (8 gate + 8 up) a block, K split over its warps
        solo,       // warps of whole tiles, all of K each (matvec_digits_solo.cu)
        one_group,  // a dense product with the grouped arithmetic (one_group)
    };
    kernel variant = kernel::blocks;
    int32_t k_split = 4;          // partials an output sums (3 or 4; 16 for a narrow dense matrix)
    int32_t warps = 4;            // warps a block
    bool staged = false;          // the block's weight rows copied into shared memory first
    bool tensor_copies = false;   // staged SwiGLU blocks: the tile's rows in two tensor copies
    int32_t group_rows = 0;       // staged: rows of blocks striding over the groups (0: a row a group)
    int32_t passes_together = 1;  // one group: passes of 4 rows that share each unpacked chunk (1, 2, 4)
    size_t smem_bytes = 0;        // dynamic shared memory a block
    int32_t grid_x = 0, grid_y = 1;
};
// The plan for a validated matvec_digits call.
matvec_digits_plan plan_matvec_digits(const matvec_digits_args &a, const device_facts &device);
// y = W x for every row or pair (16 weight rows a block, or 8 gate and 8 up rows; K split 4 ways,
// 3 for a grouped matrix of three blocks a row, or 16 for a dense matrix of fewer than 264 blocks;
// 4 step rows a pass, each row's two digits in adjacent mma columns).
void matvec_digits(const matvec_digits_args &args, cudaStream_t stream);

// The grouped products (SwiGLU or plain, producer digits: x, not x_f32; or one_group) of many rows at
// once, for prompt steps: block tiles of 32 pairs of a group x 128 weight rows (64 when a launch has
// too few tiles to fill the GPU: tile_weight_rows; fewer still, one-group tiles' K partials on
// clusters of blocks: tile_k_blocks), the weights' raw Q4_K bytes
// and the rows' digits staged by cp.async in two stages (cuda/matmul_prompt_digits.cu). Each
// output's arithmetic is matvec_digits' (digits_grouped_k_split, digit_fold), so its outputs are
// bitwise matvec_digits' for the same digit rows, whatever the tiles.
void matmul_digits(const matvec_digits_args &args, cudaStream_t stream);
// matmul_digits' tiles on sm_90a's warpgroup products (cuda/matmul_prompt_wgmma.cu): 64 pairs x 128
// weight rows a block (two warpgroups), or 32 x 64, the sub-block scales inside the tensor-core
// products; bitwise the same outputs. Needs wgmma_built() (cuda/launch.cuh); matmul_digits calls it.
void matmul_digits_wgmma(const matvec_digits_args &args, cudaStream_t stream);

}  // namespace tandem::cuda
