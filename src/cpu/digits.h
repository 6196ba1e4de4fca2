// src/cpu/digits.h - activations as two int8 digits per element (cuda/matvec_digits.h's format, bit
// for bit) and the integer products of Q4_K, Q6_K and Q8_0 weights with them.
// Owns: the format and its producer, the three products and their SIMD variants (one table, chosen
// at run time). Does not own: which matrices take digits (matmul.cpp, moe.cpp) or threading.
//
// Format, per row of n elements (n a multiple of 256), block c of 256 elements and sub-block j of 32:
//   scale  s_c = 2^e, the smallest power of two with 127 s >= the block's largest |x| (1 for zeros;
//          NaN for a block holding a non-finite element, whose digits and sums are then zero; a block
//          whose largest |x| is below 2^-121 keeps its scale and zero digits: 1 / s overflows);
//   digits x ~ s (d0 + d1 / 256), d0 = rint(x / s), d1 = clamp(rint((x / s - d0) 256), -127, 127);
//          stored [c][j][t = 0..3][d0 of elements 8t .. 8t + 7, then their d1] (16 bytes a group);
//   sums   S_j = sum over the sub-block of (256 d0 + d1), as bf16 hi (truncated) and lo (rounded
//          remainder): [c][pair q = 0..3][hi S_2q, hi S_2q+1, lo S_2q, lo S_2q+1].
//
// Q4_K product (the GPU's arithmetic, bit for bit): per block, the integer sums acc_d = sum_j sc_j
// (q . d_d) (exact int32), the mins cm = sum_j m_j hi_j + m_j lo_j as the GPU's bf16 tensor-core
// product rounds it (digit_mins), and the fold out = fma(s, fma(d, fma(acc1, 1/256, acc0),
// -(dm (cm / 256))), out). The blocks of a row go to k_split partial sums (block c to partial
// c % k_split, in ascending c), added in partial order at the end: the GPU's K split.
// Q6_K and Q8_0 products (the GPU uses a bf16 split there; this arithmetic is the CPU's own, exact up
// to the fold): Q6_K acc_d = sum_j sc_j ((q . d_d) - 32 sum d_d) over 16 sub-blocks of 16, folded as
// out = fma(s, d * fma(acc1, 1/256, acc0), out); Q8_0, 8 blocks of 32 a digit block, t_b = 256 (q .
// d0) + (q . d1) (exact), part = fma(d_b, t_b, part) in ascending b, out = fma(s / 256, part, out).
// Both take the blocks in ascending order into one sum.
// Every output's arithmetic depends only on its weight row and its activation row: never on the other
// rows of the call, the tile or the instruction set.
#pragma once

#include "cpu_ops.h"

#include <cstdint>
#include <vector>

namespace tandem::cpu {

constexpr int64_t digit_block = 256;  // elements a digit scale covers
constexpr int digits_per_element = 2;

// Rows of digits in the format above, plus what the products derive from them once a row: the mins'
// operands (hi_j + lo_j of each S_j, an integer: |S_j| <= 32 (256 127 + 127) < 2^20) and each
// 16-element group's digit sums (the Q6_K and Q8_0 offsets). Storage grows and is kept: reused
// across calls, it allocates only for a larger call.
struct digit_rows {
    std::vector<int8_t> digits;    // [n_rows][2 n]
    std::vector<float> scales;     // [n_rows][n / 256]
    std::vector<uint16_t> sums;    // [n_rows][n / 256][16]
    std::vector<int32_t> mins_t;   // [n_rows][n / 256][8]: hi S_j + lo S_j
    std::vector<int32_t> group_sums;  // [n_rows][n / 16][2]: sum of d0, sum of d1 over 16 elements
    int64_t n_rows = 0, n = 0;

    void resize(int64_t rows, int64_t n_elems);
    const int8_t *digits_of(int64_t r) const { return digits.data() + r * digits_per_element * n; }
    const float *scales_of(int64_t r) const { return scales.data() + r * (n / digit_block); }
    const uint16_t *sums_of(int64_t r) const { return sums.data() + r * (n / digit_block) * 16; }
    const int32_t *mins_t_of(int64_t r) const { return mins_t.data() + r * (n / digit_block) * 8; }
    const int32_t *group_sums_of(int64_t r) const { return group_sums.data() + r * (n / 16) * 2; }
};

// out <- digits of x [n_rows][x_stride] (the first n elements of each row); n a multiple of 256.
void digits_quantize(const float *x, int64_t x_stride, int64_t n_rows, int64_t n, digit_rows &out);
// Row r of out <- digits of x [n] (out already sized by resize).
void digits_quantize_row(const float *x, digit_rows &out, int64_t r);

// The GPU's K split of a Q4_K digit product (cuda/matvec_digits.h, digits_grouped_k_split): 3
// partials for a plain product of three blocks a row (Qwen3-30B's experts' down), else 4.
inline int32_t digits_k_split(bool swiglu, int64_t n_in) { return !swiglu && n_in == 3 * digit_block ? 3 : 4; }
constexpr int32_t digits_max_k_split = 16;

// Whether the digit products take this matrix: Q4_K, Q6_K or Q8_0 rows of whole digit blocks.
bool digits_apply(ggml_type type, int64_t n_in);

// The instruction sets the products have variants for; `best` is the fastest this CPU runs.
enum class cpu_isa : int8_t { scalar, avx2, avx512_vnni, best };
bool cpu_isa_supported(cpu_isa isa);
cpu_isa cpu_isa_best();  // never `best`
const char *cpu_isa_name(cpu_isa isa);

// Output rows a tile of the products: callers split the outputs in such tiles over threads.
constexpr int64_t digits_tile_rows = 16;

struct digits_product_args {
    cpu_matrix w;                    // [n_out][n_in] Q4_K, Q6_K or Q8_0; digits_apply(w.type, w.n_in)
    const digit_rows *x = nullptr;   // rows of w.n_in elements
    const int32_t *x_rows = nullptr; // [n_rows] the digit row of each product row (nullptr: row r)
    float *const *y = nullptr;       // [n_rows] -> [w.n_out]
    int64_t n_rows = 0;
    int32_t k_split = 4;             // Q4_K: partial sums, 1..digits_max_k_split (digits_k_split)
    cpu_isa isa = cpu_isa::best;     // tests pick a variant; every variant gives the same bits
};

// Per-thread scratch of the products (the tile's unpacked weights); grows, is kept.
struct digits_scratch {
    std::vector<uint8_t> bytes;
};

// y[r][o] for outputs o in [out_begin, out_end) (at most digits_tile_rows) of every row; serial.
void digits_product_tile(const digits_product_args &args, int64_t out_begin, int64_t out_end, digits_scratch &scratch);

// sum_j m_j hi_j + m_j lo_j as the GPU's bf16 mma.m16n8k16 with fp32 accumulation returns it (C = 0):
// m [8] the sub-blocks' 6-bit mins, t [8] hi_j + lo_j (digit_rows::mins_t). Every term and partial sum
// is an integer below 2^29, which the tensor core adds exactly; it rounds the sum toward zero.
float digit_mins(const uint8_t *m, const int32_t *t);

}  // namespace tandem::cpu
