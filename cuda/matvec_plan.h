// cuda/matvec_plan.h - how a decode product launches: the kernel shape (K-split warps, tiles,
// staging, register bound) chosen from the product's shape (matvec_args: the "what") and the
// device's facts, one rule a line in plan_matvec (matvec_plan.cpp), each naming the benchmark that
// justifies it. Host code only, so the rules are unit-tested without a GPU.
// Owns: the launch plans of matvec (matvec.h) and matvec_digits (matvec_digits.h), and the shape
// rules both share. Does not own: the kernels, or the prompt products' tiles (matmul_prompt.h).
//
// Every plan of a product gives the same bits: an output's arithmetic depends on the K split
// (k_split()), which the rules take from the matrix's shape only, never from the step's rows or
// the device; the rest (tiles, staging, register bounds, virtual warps) moves no bit.
#pragma once

#include "matvec.h"

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

// What the rules read of the device.
struct device_facts {
    bool sm90 = false;  // PDL, bulk copies and tensor copies (compute capability 9.0+: pdl_supported())
};
// The current device's facts (calls the runtime; matvec.cu).
device_facts current_device_facts();

// Dense matrices of fewer blocks than this (two an SM of an H200) split K 16 ways, else 4.
constexpr int32_t matvec_narrow_blocks = 264;
// Dense Q6_K matrices of at least this many blocks: vocabulary heads.
constexpr int32_t matvec_head_blocks = 4096;

// K-quant super-blocks (256 elements) of a row of n_in elements; 0 when rows are not whole blocks.
constexpr int32_t superblocks_per_row(int32_t n_in) { return n_in > 0 && n_in % 256 == 0 ? n_in / 256 : 0; }
// Three super-blocks a row (e.g. an MoE expert's down of width 768): a K split of three warps
// leaves none idle, where four would idle one a chunk.
constexpr bool three_superblocks(int32_t n_in) { return superblocks_per_row(n_in) == 3; }

// The launch of one matvec call. matvec() launches plan_matvec's plan; a test passes one planned
// with matvec_forced knobs to pin a variant (the same bits).
struct matvec_plan {
    enum class kernel : int8_t {
        rows,     // matvec_kernel: dense or grouped, every K chunk in one block
        k_parts,  // matvec_kernel, matvec_args::k_parts: each part's chunks on blocks of their own
        mixed,    // matvec_mixed_kernel: the last extra matrix of its own type (matvec_mixed.cu)
    };
    kernel variant = kernel::rows;
    bool split_in = false;      // read the producer's split rows (x_split, x_sums), else split x in the kernel
    int32_t warps = 4;          // warps a block (threads: 32 each), the kernel's n_warps
    int32_t virtual_warps = 1;  // K-split warps each warp plays, one after the other (v_warps)
    int32_t min_blocks = 0;     // __launch_bounds__ blocks an SM (a register bound); 0: none
    int32_t row_tiles = 1;      // m16 tiles of weight rows a block (n_tiles)
    int32_t col_tiles = 1;      // n8 tiles of step rows a pass (n_cols)
    bool staged = false;        // the block's weight rows copied whole into shared memory first
    size_t smem_bytes = 0;      // dynamic shared memory a block
    int32_t blocks0 = 0, blocks1 = 0;  // column blocks of matrix 0 and of extra matrix 0
    int32_t grid_x = 0, grid_y = 1;    // blocks: every matrix's (times k_parts), and groups

    int32_t k_split() const { return warps * virtual_warps; }
};

// Knobs that pin a variant (tests): 0 or -1 leave the rule's choice. Every value gives the same bits.
struct matvec_forced {
    int32_t row_tiles = 0;  // grouped Q4_K: m16 tiles of weight rows a block, 1 or 2
    int32_t col_tiles = 0;  // dense Q4_K and a staged Q6_K head: n8 tiles of step rows a pass, 1 or 2
    int32_t staged = -1;    // where staging applies (matvec_plan::staged): 0 streamed, 1 staged where it fits
};

// The plan for a validated matvec call (matvec.cu checks the arguments first).
matvec_plan plan_matvec(const matvec_args &a, const device_facts &device, const matvec_forced &forced = {});
// Launches `plan` (one of plan_matvec's for these arguments).
void matvec(const matvec_args &args, const matvec_plan &plan, cudaStream_t stream);

// The K split of the grouped digit products (matvec_digits.h): each output sums V partials,
// partial v over blocks v, v + V, ..., added in order of v. The decode kernels and the prompt
// tiles share it, so a row gets the same bits from either.
constexpr int digits_grouped_k_split(bool swiglu, int32_t n_in) { return !swiglu && three_superblocks(n_in) ? 3 : 4; }

}  // namespace tandem::cuda
