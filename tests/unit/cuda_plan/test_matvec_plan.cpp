// tests/unit/cuda_plan/test_matvec_plan.cpp - plan_matvec's launch shapes for the products an MoE
// decode step runs (dense heads and projections, grouped SwiGLU and down at 1 to 128 pairs, Q4_K,
// Q6_K, Q8_0 and other types), each written out here as the shape the launcher has always taken
// for it: a rule that moves changes a test, never a kernel quietly.
#include "cuda/matvec_digits.h"
#include "cuda/matvec_plan.h"

#include <catch2/catch.hpp>

#include <cstdint>

using namespace tandem;
using cuda::matvec_plan;

namespace {

// Addresses are compared, never read: a 16-byte aligned one and one that is not.
const void *at(uintptr_t address) { return reinterpret_cast<const void *>(address); }
const void *const aligned_w = at(0x100000);
const int32_t *const fake_groups = reinterpret_cast<const int32_t *>(0x200000);

const cuda::device_facts sm90{true}, sm89{false};

cuda::matvec_args dense(ggml_type type, int32_t n_in, int32_t n_out, int32_t rows) {
    cuda::matvec_args a;
    a.w = aligned_w;
    a.type = type;
    a.n_in = n_in;
    a.n_out = n_out;
    a.n_pairs = rows;
    a.x_stride = n_in;
    a.y_stride = n_out;
    return a;
}

cuda::matvec_args grouped(ggml_type type, int32_t n_in, int32_t n_out, int32_t pairs, bool swiglu, int32_t max_groups = 64) {
    cuda::matvec_args a = dense(type, n_in, n_out, pairs);
    if (swiglu) a.w_up = at(0x400000);
    a.group_off = a.group_mat = a.n_groups = fake_groups;
    a.max_groups = max_groups;
    return a;
}

// The launch shape expected: warps, virtual warps, register bound, row tiles, column tiles, staged
// with this much shared memory, column blocks of matrix 0 and the grid.
struct shape {
    int32_t warps, virtual_warps = 1, min_blocks = 0, row_tiles = 1, col_tiles = 1;
    bool staged = false;
    size_t smem = 0;
};

void check(const matvec_plan &p, const shape &s) {
    CHECK(p.warps == s.warps);
    CHECK(p.virtual_warps == s.virtual_warps);
    CHECK(p.min_blocks == s.min_blocks);
    CHECK(p.row_tiles == s.row_tiles);
    CHECK(p.col_tiles == s.col_tiles);
    CHECK(p.staged == s.staged);
    CHECK(p.smem_bytes == s.smem);
}

void check_grid(const matvec_plan &p, int32_t blocks0, int32_t blocks1, int32_t grid_x, int32_t grid_y) {
    CHECK(p.blocks0 == blocks0);
    CHECK(p.blocks1 == blocks1);
    CHECK(p.grid_x == grid_x);
    CHECK(p.grid_y == grid_y);
}

// Q4_K rows of K elements: 144 bytes a 256-element block; Q6_K: 210.
constexpr size_t q4k_row(int32_t k) { return size_t(k / 256) * 144; }
constexpr size_t q6k_row(int32_t k) { return size_t(k / 256) * 210; }

}  // namespace

TEST_CASE("matvec plan: shape rules name K-quant super-blocks, not a model", "[matvec_plan]") {
    CHECK(cuda::superblocks_per_row(768) == 3);
    CHECK(cuda::superblocks_per_row(2048) == 8);
    CHECK(cuda::superblocks_per_row(800) == 0);  // not whole blocks
    CHECK(cuda::three_superblocks(768));
    CHECK_FALSE(cuda::three_superblocks(1024));
    CHECK_FALSE(cuda::three_superblocks(800));
    CHECK(cuda::digits_grouped_k_split(false, 768) == 3);
    CHECK(cuda::digits_grouped_k_split(true, 768) == 4);  // SwiGLU keeps four
    CHECK(cuda::digits_grouped_k_split(false, 2048) == 4);
    CHECK(cuda::digits_grouped_k_split(false, 1536) == 4);
}

TEST_CASE("matvec plan: grouped Q4_K SwiGLU (gate/up, K = 2048) at 1 to 128 pairs", "[matvec_plan]") {
    const size_t one_tile = 16 * (q4k_row(2048) + 32);  // 18,944 bytes
    for (const int32_t pairs : {1, 4, 8}) {
        INFO("pairs " << pairs);  // one row: two row tiles, streamed
        const matvec_plan p = cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 768, pairs, true), sm90);
        CHECK(p.variant == matvec_plan::kernel::rows);
        check(p, {.warps = 4, .row_tiles = 2});
        check_grid(p, 48, 0, 48, 64);
    }
    for (const int32_t pairs : {9, 16, 64}) {
        INFO("pairs " << pairs);  // one tile, staged, four warps
        const matvec_plan p = cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 768, pairs, true), sm90);
        check(p, {.warps = 4, .staged = true, .smem = one_tile});
        check_grid(p, 96, 0, 96, 64);
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 768, pairs, true), sm89), {.warps = 4});
    }
    for (const int32_t pairs : {65, 128, 512}) {
        INFO("pairs " << pairs);  // staged: four physical warps; streamed: one playing four, 16 an SM
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 768, pairs, true), sm90), {.warps = 4, .staged = true, .smem = one_tile});
        const matvec_plan p = cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 768, pairs, true), sm89);
        check(p, {.warps = 1, .virtual_warps = 4, .min_blocks = 16});
        CHECK(p.k_split() == 4);
    }
    // Unaligned gate weights: no bulk copies.
    cuda::matvec_args a = grouped(ggml_type::q4_k, 2048, 768, 128, true);
    a.w = at(0x100008);
    check(cuda::plan_matvec(a, sm90), {.warps = 1, .virtual_warps = 4, .min_blocks = 16});
}

TEST_CASE("matvec plan: grouped Q4_K down of three super-blocks a row (K = 768) at 1 to 128 pairs", "[matvec_plan]") {
    const size_t two_tiles = 32 * (q4k_row(768) + 32), one_tile = 16 * (q4k_row(768) + 32);  // 14,848 and 7,424
    for (const int32_t pairs : {1, 4, 8}) {
        INFO("pairs " << pairs);
        const matvec_plan p = cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, pairs, false), sm90);
        check(p, {.warps = 3, .row_tiles = 2});
        check_grid(p, 64, 0, 64, 64);
    }
    for (const int32_t pairs : {9, 16, 64}) {
        INFO("pairs " << pairs);
        const matvec_plan p = cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, pairs, false), sm90);
        check(p, {.warps = 3, .staged = true, .smem = one_tile});
        check_grid(p, 128, 0, 128, 64);
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, pairs, false), sm89), {.warps = 3});
    }
    for (const int32_t pairs : {65, 128}) {
        INFO("pairs " << pairs);
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, pairs, false), sm90),
              {.warps = 3, .row_tiles = 2, .staged = true, .smem = two_tiles});
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, pairs, false), sm89), {.warps = 3, .min_blocks = 5, .row_tiles = 2});
    }
}

TEST_CASE("matvec plan: other grouped products", "[matvec_plan]") {
    SECTION("Q4_K plain, K = 2048: four warps, staged above 8 pairs") {
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 1024, 8, false), sm90), {.warps = 4});
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 1024, 16, false), sm90),
              {.warps = 4, .staged = true, .smem = 16 * (q4k_row(2048) + 32)});
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 1024, 128, false), sm90),
              {.warps = 4, .staged = true, .smem = 16 * (q4k_row(2048) + 32)});
    }
    SECTION("Q6_K down of three super-blocks a row: bound three-warp blocks, one warp playing three above 8 pairs") {
        const size_t tile = 16 * q6k_row(768);  // 10,080
        for (const int32_t pairs : {1, 4, 8}) {
            INFO("pairs " << pairs);
            const matvec_plan p = cuda::plan_matvec(grouped(ggml_type::q6_k, 768, 2048, pairs, false), sm90);
            check(p, {.warps = 3, .min_blocks = 8, .staged = true, .smem = tile});
            check_grid(p, 128, 0, 128, 64);
            check(cuda::plan_matvec(grouped(ggml_type::q6_k, 768, 2048, pairs, false), sm89), {.warps = 3, .min_blocks = 8});
        }
        for (const int32_t pairs : {9, 16, 64, 128}) {
            INFO("pairs " << pairs);
            check(cuda::plan_matvec(grouped(ggml_type::q6_k, 768, 2048, pairs, false), sm90),
                  {.warps = 1, .virtual_warps = 3, .min_blocks = 16, .staged = true, .smem = tile});
            check(cuda::plan_matvec(grouped(ggml_type::q6_k, 768, 2048, pairs, false), sm89),
                  {.warps = 1, .virtual_warps = 3, .min_blocks = 16});
        }
        // Not whole 16-row tiles: streamed.
        check(cuda::plan_matvec(grouped(ggml_type::q6_k, 768, 2040, 16, false), sm90), {.warps = 1, .virtual_warps = 3, .min_blocks = 16});
    }
    SECTION("Q6_K plain, K = 2048: four warps, staged at every size; SwiGLU streamed") {
        for (const int32_t pairs : {1, 16, 128})
            check(cuda::plan_matvec(grouped(ggml_type::q6_k, 2048, 1024, pairs, false), sm90),
                  {.warps = 4, .staged = true, .smem = 16 * q6k_row(2048)});
        // A Q6_K row of K = 4096 (53,760 bytes a tile) does not fit.
        check(cuda::plan_matvec(grouped(ggml_type::q6_k, 4096, 1024, 16, false), sm90), {.warps = 4});
        const matvec_plan s = cuda::plan_matvec(grouped(ggml_type::q6_k, 2048, 768, 4, true), sm90);
        check(s, {.warps = 4});
        check_grid(s, 96, 0, 96, 64);
    }
    SECTION("other types: four warps, whatever the width or step") {
        for (const ggml_type t : {ggml_type::q8_0, ggml_type::f16, ggml_type::q5_k, ggml_type::iq4_xs, ggml_type::f32})
            for (const int32_t k : {768, 2048})
                for (const int32_t pairs : {1, 16, 128})
                    for (const bool swiglu : {false, true}) {
                        INFO("type " << int(t) << " K " << k << " pairs " << pairs << " swiglu " << swiglu);
                        const matvec_plan p = cuda::plan_matvec(grouped(t, k, 1024, pairs, swiglu, 128), sm90);
                        check(p, {.warps = 4});
                        check_grid(p, swiglu ? 128 : 64, 0, swiglu ? 128 : 64, 128);
                    }
    }
}

TEST_CASE("matvec plan: dense products (projections, router, heads)", "[matvec_plan]") {
    SECTION("Q4_K Q with K and V beside it (K = 2048): one column tile up to 8 rows, two staged above") {
        cuda::matvec_args a = dense(ggml_type::q4_k, 2048, 4096, 1);
        a.n_extra = 2;
        a.extra[0] = {at(0x500000), 512, nullptr, 0};
        a.extra[1] = {at(0x600000), 512, nullptr, 0};
        for (const int32_t rows : {1, 4, 8}) {
            a.n_pairs = rows;
            const matvec_plan p = cuda::plan_matvec(a, sm90);
            check(p, {.warps = 4});
            check_grid(p, 256, 32, 320, 1);
        }
        for (const int32_t rows : {9, 16, 64}) {
            a.n_pairs = rows;
            const matvec_plan p = cuda::plan_matvec(a, sm90);
            check(p, {.warps = 4, .col_tiles = 2, .staged = true, .smem = 16 * (q4k_row(2048) + 32)});
            check_grid(p, 256, 32, 320, 1);
            check(cuda::plan_matvec(a, sm89), {.warps = 4, .col_tiles = 2});
        }
        a.extra[1].w = at(0x600004);  // an unaligned extra matrix: streamed
        check(cuda::plan_matvec(a, sm90), {.warps = 4, .col_tiles = 2});
    }
    SECTION("Q4_K wo (K = 4096, 2048 out: 128 blocks): narrow, K split 16 ways") {
        check(cuda::plan_matvec(dense(ggml_type::q4_k, 4096, 2048, 1), sm90), {.warps = 16});
        check(cuda::plan_matvec(dense(ggml_type::q4_k, 4096, 2048, 16), sm90),
              {.warps = 16, .col_tiles = 2, .staged = true, .smem = 16 * (q4k_row(4096) + 32)});
        // K = 768: 432-byte rows (an odd number of 16-byte units) packed.
        check(cuda::plan_matvec(dense(ggml_type::q4_k, 768, 2048, 16), sm90), {.warps = 16, .col_tiles = 2, .staged = true, .smem = 16 * 432});
    }
    SECTION("a router in K parts") {
        cuda::matvec_args a = dense(ggml_type::q4_k, 2048, 128, 16);
        a.k_parts = 4;
        const matvec_plan p = cuda::plan_matvec(a, sm90);
        CHECK(p.variant == matvec_plan::kernel::k_parts);
        check(p, {.warps = 4});
        check_grid(p, 8, 0, 32, 1);
        const matvec_plan f = cuda::plan_matvec(dense(ggml_type::f32, 2048, 128, 1), sm90);  // whole: narrow
        CHECK(f.variant == matvec_plan::kernel::rows);
        check(f, {.warps = 16});
    }
    SECTION("Q6_K heads: staged four-warp blocks where a tile fits, else two warps playing four") {
        for (const int32_t rows : {1, 8, 16}) {
            INFO("rows " << rows);
            const matvec_plan p = cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 151936, rows), sm90);
            check(p, {.warps = 4, .col_tiles = rows > 8 ? 2 : 1, .staged = true, .smem = 16 * q6k_row(2048)});
            check_grid(p, 9496, 0, 9496, 1);
            check(cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 151936, rows), sm89), {.warps = 2, .virtual_warps = 2, .min_blocks = 8});
            check(cuda::plan_matvec(dense(ggml_type::q6_k, 4096, 151936, rows), sm90), {.warps = 2, .virtual_warps = 2, .min_blocks = 8});
            // Not whole tiles (151,000 rows): two warps playing four.
            check(cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 151000, rows), sm90), {.warps = 2, .virtual_warps = 2, .min_blocks = 8});
        }
        // Below 4,096 blocks: not a head.
        check(cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 16 * 4095, 16), sm90), {.warps = 4});
        check(cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 16 * 4096, 16), sm90),
              {.warps = 4, .col_tiles = 2, .staged = true, .smem = 16 * q6k_row(2048)});
        check(cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 512, 16), sm90), {.warps = 16});
    }
    SECTION("other types: 16 warps below 264 blocks, else four; no column tiles") {
        for (const ggml_type t : {ggml_type::q8_0, ggml_type::f16, ggml_type::bf16, ggml_type::q4_0, ggml_type::q5_k})
            for (const int32_t rows : {1, 16}) {
                INFO("type " << int(t) << " rows " << rows);
                check(cuda::plan_matvec(dense(t, 2048, 16 * 263, rows), sm90), {.warps = 16});
                check(cuda::plan_matvec(dense(t, 2048, 16 * 264, rows), sm90), {.warps = 4});
                check(cuda::plan_matvec(dense(t, 2048, 151936, rows), sm90), {.warps = 4});
            }
    }
    SECTION("dense SwiGLU: four warps, one column tile, whatever the width") {
        cuda::matvec_args a = dense(ggml_type::q4_k, 2048, 1024, 16);
        a.w_up = at(0x700000);
        const matvec_plan p = cuda::plan_matvec(a, sm90);
        check(p, {.warps = 4});
        check_grid(p, 128, 0, 128, 1);
    }
}

TEST_CASE("matvec plan: a mixed launch (Q4_K Q and K, Q6_K V)", "[matvec_plan]") {
    cuda::matvec_args a = dense(ggml_type::q4_k, 2048, 4096, 1);
    a.n_extra = 2;
    a.extra[0] = {at(0x500000), 512, nullptr, 0};
    a.extra[1] = {at(0x600000), 512, nullptr, 0, true, ggml_type::q6_k};
    matvec_plan p = cuda::plan_matvec(a, sm90);
    CHECK(p.variant == matvec_plan::kernel::mixed);
    check(p, {.warps = 4});
    check_grid(p, 256, 32, 320, 1);
    a.n_pairs = 16;
    check(cuda::plan_matvec(a, sm90), {.warps = 4, .col_tiles = 2});
    a.n_out = 1024;
    a.extra[0].n_out = a.extra[1].n_out = 256;
    p = cuda::plan_matvec(a, sm90);
    check(p, {.warps = 16, .col_tiles = 2});
    check_grid(p, 64, 16, 96, 1);
}

TEST_CASE("matvec plan: split rows read where the kernels can", "[matvec_plan]") {
    cuda::matvec_args a = dense(ggml_type::q4_k, 2048, 4096, 4);
    CHECK_FALSE(cuda::plan_matvec(a, sm90).split_in);
    a.x_split = reinterpret_cast<const uint4 *>(0x800000);
    a.x_sums = reinterpret_cast<const float *>(0x900000);
    CHECK(cuda::plan_matvec(a, sm90).split_in);
    a.x_stride = 2080;  // not a multiple of 64
    CHECK_FALSE(cuda::plan_matvec(a, sm90).split_in);
    a.x_stride = 2048;
    a.x_sums = reinterpret_cast<const float *>(0x900004);  // sums read 8 bytes at a time
    CHECK_FALSE(cuda::plan_matvec(a, sm90).split_in);
}

TEST_CASE("matvec plan: forced knobs", "[matvec_plan]") {
    const size_t down_two = 32 * (q4k_row(768) + 32);
    // Dense Q4_K of 6,144 rows: 384 blocks, not narrow.
    SECTION("row tiles") {
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, 16, false), sm90, {.row_tiles = 2}),
              {.warps = 3, .row_tiles = 2, .staged = true, .smem = down_two});
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, 16, false), sm90, {.row_tiles = 2, .staged = 0}),
              {.warps = 3, .min_blocks = 5, .row_tiles = 2});
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, 4, false), sm90, {.row_tiles = 1}), {.warps = 3});
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 768, 128, true), sm90, {.row_tiles = 2}),
              {.warps = 4, .row_tiles = 2, .staged = true, .smem = 32 * (q4k_row(2048) + 32)});
        // Row tiles are grouped Q4_K's only.
        check(cuda::plan_matvec(grouped(ggml_type::q6_k, 768, 2048, 16, false), sm89, {.row_tiles = 2}),
              {.warps = 1, .virtual_warps = 3, .min_blocks = 16});
        check(cuda::plan_matvec(dense(ggml_type::q4_k, 2048, 6144, 1), sm90, {.row_tiles = 2}), {.warps = 4});
    }
    SECTION("staging") {
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 768, 2048, 4, false), sm90, {.staged = 1}),
              {.warps = 3, .row_tiles = 2, .staged = true, .smem = down_two});
        // Two SwiGLU tiles of K = 2048 fit 48 KiB with the warps' partials; of K = 4096 they do not.
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 768, 4, true), sm90, {.staged = 1}),
              {.warps = 4, .row_tiles = 2, .staged = true, .smem = 32 * (q4k_row(2048) + 32)});
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 4096, 768, 4, true), sm90, {.staged = 1}), {.warps = 4, .row_tiles = 2});
        check(cuda::plan_matvec(grouped(ggml_type::q4_k, 2048, 768, 128, true), sm90, {.staged = 0}),
              {.warps = 1, .virtual_warps = 4, .min_blocks = 16});
        check(cuda::plan_matvec(grouped(ggml_type::q6_k, 768, 2048, 4, false), sm90, {.staged = 0}), {.warps = 3, .min_blocks = 8});
        check(cuda::plan_matvec(dense(ggml_type::q4_k, 2048, 6144, 16), sm90, {.staged = 0}), {.warps = 4, .col_tiles = 2});
        check(cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 151936, 16), sm90, {.staged = 0}),
              {.warps = 2, .virtual_warps = 2, .min_blocks = 8});
        // Staging applies where the rules stage: a dense Q4_K step of one column tile stays streamed.
        check(cuda::plan_matvec(dense(ggml_type::q4_k, 2048, 6144, 4), sm90, {.staged = 1}), {.warps = 4});
    }
    SECTION("column tiles") {
        check(cuda::plan_matvec(dense(ggml_type::q4_k, 2048, 6144, 16), sm90, {.col_tiles = 1}), {.warps = 4});
        check(cuda::plan_matvec(dense(ggml_type::q4_k, 2048, 6144, 4), sm90, {.col_tiles = 2}),
              {.warps = 4, .col_tiles = 2, .staged = true, .smem = 16 * (q4k_row(2048) + 32)});
        check(cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 151936, 16), sm90, {.col_tiles = 1}),
              {.warps = 4, .staged = true, .smem = 16 * q6k_row(2048)});
        check(cuda::plan_matvec(dense(ggml_type::q6_k, 2048, 151936, 4), sm90, {.col_tiles = 2}),
              {.warps = 4, .col_tiles = 2, .staged = true, .smem = 16 * q6k_row(2048)});
    }
}

namespace {

using cuda::matvec_digits_plan;

cuda::matvec_digits_args digits_grouped(int32_t n_in, int32_t n_out, bool swiglu, int32_t max_groups, bool stage) {
    cuda::matvec_digits_args a;
    a.w = aligned_w;
    if (swiglu) a.w_up = at(0x400000);
    a.n_in = n_in;
    a.n_out = n_out;
    a.group_off = a.group_mat = a.n_groups = fake_groups;
    a.max_groups = max_groups;
    a.stage = stage;
    return a;
}

// The digit launch expected: kind, K split, warps, staged with this much shared memory, tensor
// copies, strided rows of blocks, passes together, grid.
struct digit_shape {
    matvec_digits_plan::kernel variant = matvec_digits_plan::kernel::blocks;
    int32_t k_split = 4, warps = 4;
    bool staged = false;
    size_t smem = 0;
    bool tensor_copies = false;
    int32_t group_rows = 0, passes_together = 1, grid_x = 0, grid_y = 1;
};

void check(const matvec_digits_plan &p, const digit_shape &s) {
    CHECK(p.variant == s.variant);
    CHECK(p.k_split == s.k_split);
    CHECK(p.warps == s.warps);
    CHECK(p.staged == s.staged);
    CHECK(p.smem_bytes == s.smem);
    CHECK(p.tensor_copies == s.tensor_copies);
    CHECK(p.group_rows == s.group_rows);
    CHECK(p.passes_together == s.passes_together);
    CHECK(p.grid_x == s.grid_x);
    CHECK(p.grid_y == s.grid_y);
}

// A staged tile of K = 2048 (16 rows of 1,152 bytes, each padded by 32) and of K = 768.
constexpr size_t stage_2048 = 16 * (1152 + 32), stage_768 = 16 * (432 + 32);

}  // namespace

TEST_CASE("matvec_digits plan: grouped SwiGLU (gate/up, K = 2048)", "[matvec_plan]") {
    using k = matvec_digits_plan::kernel;
    const float logits = 0.0f;
    SECTION("blocks: staged, tensor copies, strided from 64 groups") {
        cuda::matvec_digits_args a = digits_grouped(2048, 768, true, 8, true);
        a.route_logits = &logits;  // one row, routed in the kernel: a block row a group
        check(cuda::plan_matvec_digits(a, sm90), {.staged = true, .smem = 16 * 1152 + 1024, .tensor_copies = true, .grid_x = 96, .grid_y = 8});
        a = digits_grouped(2048, 768, true, 128, true);
        check(cuda::plan_matvec_digits(a, sm90),
              {.staged = true, .smem = 16 * 1152 + 1024, .tensor_copies = true, .group_rows = 64, .grid_x = 96, .grid_y = 64});
        a.route_logits = &logits;
        check(cuda::plan_matvec_digits(a, sm90), {.staged = true, .smem = 16 * 1152 + 1024, .tensor_copies = true, .grid_x = 96, .grid_y = 128});
        a.route_logits = nullptr;
        a.tensor_copies = false;
        check(cuda::plan_matvec_digits(a, sm90), {.staged = true, .smem = stage_2048, .group_rows = 64, .grid_x = 96, .grid_y = 64});
        a.group_rows = 3;
        check(cuda::plan_matvec_digits(a, sm90), {.staged = true, .smem = stage_2048, .group_rows = 3, .grid_x = 96, .grid_y = 3});
        a.group_rows = 500;  // capped at the groups: not strided
        check(cuda::plan_matvec_digits(a, sm90), {.staged = true, .smem = stage_2048, .grid_x = 96, .grid_y = 128});
        check(cuda::plan_matvec_digits(digits_grouped(2048, 768, true, 32, true), sm90),
              {.staged = true, .smem = 16 * 1152 + 1024, .tensor_copies = true, .grid_x = 96, .grid_y = 32});
        // K = 1536: rows of 864 bytes, not whole 128-byte lines: a bulk copy a row.
        check(cuda::plan_matvec_digits(digits_grouped(1536, 768, true, 32, true), sm90),
              {.staged = true, .smem = 16 * (864 + 32), .grid_x = 96, .grid_y = 32});
    }
    SECTION("blocks: streamed when not asked, on sm_89, or unaligned") {
        check(cuda::plan_matvec_digits(digits_grouped(2048, 768, true, 128, false), sm90), {.grid_x = 96, .grid_y = 128});
        check(cuda::plan_matvec_digits(digits_grouped(2048, 768, true, 128, true), sm89), {.grid_x = 96, .grid_y = 128});
        cuda::matvec_digits_args a = digits_grouped(2048, 768, true, 128, true);
        a.w_up = at(0x400008);
        check(cuda::plan_matvec_digits(a, sm90), {.grid_x = 96, .grid_y = 128});
        // K = 4096: a tile of 37,376 bytes fits 40 KiB; K = 8192 does not.
        check(cuda::plan_matvec_digits(digits_grouped(4096, 768, true, 16, true), sm90),
              {.staged = true, .smem = 16 * 2304 + 1024, .tensor_copies = true, .grid_x = 96, .grid_y = 16});
        check(cuda::plan_matvec_digits(digits_grouped(8192, 768, true, 16, true), sm90), {.grid_x = 96, .grid_y = 16});
    }
    SECTION("solo warps: two staged ones, else four streamed") {
        cuda::matvec_digits_args a = digits_grouped(2048, 768, true, 128, true);
        a.solo_warps = 2;
        a.group_rows = 2;
        check(cuda::plan_matvec_digits(a, sm90),
              {.variant = k::solo, .warps = 2, .staged = true, .smem = 2 * stage_2048, .group_rows = 2, .grid_x = 48, .grid_y = 2});
        a.group_rows = 0;
        a.max_groups = 32;
        check(cuda::plan_matvec_digits(a, sm90), {.variant = k::solo, .warps = 2, .staged = true, .smem = 2 * stage_2048, .grid_x = 48, .grid_y = 32});
        a.solo_warps = 4;  // four stages do not fit 48 KiB
        check(cuda::plan_matvec_digits(a, sm90), {.variant = k::solo, .grid_x = 24, .grid_y = 32});
        a.solo_warps = 2;
        a.stage = false;
        check(cuda::plan_matvec_digits(a, sm90), {.variant = k::solo, .grid_x = 24, .grid_y = 32});
    }
}

TEST_CASE("matvec_digits plan: grouped down (three super-blocks a row, and four)", "[matvec_plan]") {
    using k = matvec_digits_plan::kernel;
    cuda::matvec_digits_args a = digits_grouped(768, 2048, false, 128, true);
    a.solo_warps = 4;  // producer digits of a large step
    check(cuda::plan_matvec_digits(a, sm90),
          {.variant = k::solo, .k_split = 3, .staged = true, .smem = 4 * stage_768, .group_rows = 64, .grid_x = 32, .grid_y = 64});
    a.max_groups = 48;
    check(cuda::plan_matvec_digits(a, sm90), {.variant = k::solo, .k_split = 3, .staged = true, .smem = 4 * stage_768, .grid_x = 32, .grid_y = 48});
    check(cuda::plan_matvec_digits(a, sm89), {.variant = k::solo, .k_split = 3, .grid_x = 32, .grid_y = 48});
    // Rows quantised in the kernel (fp32 rows): blocks of three warps, whatever solo_warps asks.
    const float x = 0.0f;
    a.x_f32 = &x;
    check(cuda::plan_matvec_digits(a, sm90), {.k_split = 3, .warps = 3, .staged = true, .smem = stage_768, .grid_x = 128, .grid_y = 48});
    a.x_f32 = nullptr;
    a.solo_warps = 0;
    a.stage = false;
    check(cuda::plan_matvec_digits(a, sm90), {.k_split = 3, .warps = 3, .grid_x = 128, .grid_y = 48});
    // K = 2048 down: four warps; no solo warps for a K split of four.
    cuda::matvec_digits_args b = digits_grouped(2048, 1024, false, 64, true);
    b.solo_warps = 4;
    check(cuda::plan_matvec_digits(b, sm90), {.staged = true, .smem = stage_2048, .grid_x = 64, .grid_y = 64});
}

TEST_CASE("matvec_digits plan: one group and dense products", "[matvec_plan]") {
    using k = matvec_digits_plan::kernel;
    auto one = [](int32_t n_in, int32_t n_out, int32_t rows, bool stage, int32_t together = -1) {
        cuda::matvec_digits_args a = cuda::one_group_args(aligned_w, n_in, n_out, {}, rows, nullptr, 0);
        a.stage = stage;
        a.passes_together = together;
        return a;
    };
    check(cuda::plan_matvec_digits(one(2048, 4096, 16, true), sm90), {.variant = k::one_group, .staged = true, .smem = stage_2048, .grid_x = 256});
    check(cuda::plan_matvec_digits(one(768, 4096, 16, true), sm90),
          {.variant = k::one_group, .k_split = 3, .warps = 3, .staged = true, .smem = stage_768, .grid_x = 256});
    for (const int32_t rows : {1, 4, 5, 8, 9, 16, 31}) {
        INFO("rows " << rows);
        const int32_t together = rows <= 4 ? 1 : rows <= 8 ? 2 : 4;
        check(cuda::plan_matvec_digits(one(2048, 151936, rows, false), sm90),
              {.variant = k::one_group, .passes_together = together, .grid_x = 9496});
        check(cuda::plan_matvec_digits(one(2048, 151936, rows, true), sm89),
              {.variant = k::one_group, .passes_together = together, .grid_x = 9496});
        check(cuda::plan_matvec_digits(one(8192, 2048, rows, true), sm90),  // a tile past 40 KiB: streamed
              {.variant = k::one_group, .passes_together = together, .grid_x = 128});
        check(cuda::plan_matvec_digits(one(2048, 151936, rows, false, 0), sm90), {.variant = k::one_group, .grid_x = 9496});
        check(cuda::plan_matvec_digits(one(2048, 151936, rows, false, 2), sm90),
              {.variant = k::one_group, .passes_together = rows <= 4 ? 1 : 2, .grid_x = 9496});
    }
    // Dense products: 16 warps below 264 blocks; SwiGLU four.
    cuda::matvec_digits_args d = one(2048, 2048, 4, true);
    d.one_group = false;
    check(cuda::plan_matvec_digits(d, sm90), {.k_split = 16, .warps = 16, .grid_x = 128});
    d.n_out = 151936;
    check(cuda::plan_matvec_digits(d, sm90), {.grid_x = 9496});
    d.w_up = at(0x400000);
    d.n_out = 1024;
    check(cuda::plan_matvec_digits(d, sm90), {.grid_x = 128});
}
