// tests/unit/cpu/test_cpu_digits.cpp - the digit format and products (src/cpu/digits.h): the producer
// and every instruction-set variant of every product against the independent reference bit for bit,
// on shapes with partial tiles, one row, odd row counts and every K split; rows alone and among others
// bitwise; non-finite blocks; and each product within its bound of the exact fp32 product.
#include "digits_reference.h"

#include "src/cpu/cpu_ops.h"
#include "src/cpu/digits.h"
#include "tandem/quant.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <cstdio>
#include <ctime>
#include <vector>

using namespace tandem;

namespace {

std::vector<float> random_floats(std::mt19937_64 &rng, size_t n, float std_dev = 1.0f) {
    std::normal_distribution<float> normal(0.0f, std_dev);
    std::vector<float> v(n);
    for (float &f : v) f = normal(rng);
    return v;
}

std::vector<uint8_t> random_matrix(std::mt19937_64 &rng, ggml_type type, int64_t n_in, int64_t n_out) {
    const size_t row_bytes = ggml_row_bytes(type, n_in);
    std::vector<uint8_t> bytes(row_bytes * size_t(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
        const std::vector<float> w = random_floats(rng, size_t(n_in), 0.05f);
        quantize_row(type, w.data(), bytes.data() + size_t(r) * row_bytes, n_in);
    }
    return bytes;
}

// Activation rows with what the products must survive: outliers that set a block's scale, a block of
// zeros, small values beside large ones, and (odd rows) blocks of one sign, whose digit sums reach
// 2^20 so that the mins' sum needs more than fp32's 24 bits and its rounding shows.
std::vector<float> activations(std::mt19937_64 &rng, int64_t rows, int64_t n) {
    std::vector<float> x = random_floats(rng, size_t(rows * n));
    for (size_t i = 0; i < x.size(); i += 97) x[i] *= 30.0f;
    for (size_t i = 5; i < x.size(); i += 61) x[i] *= 1e-4f;
    for (int64_t r = 1; r < rows; r += 2)
        for (int64_t i = 0; i < n; ++i) x[size_t(r * n + i)] = 4.0f + 0.1f * x[size_t(r * n + i)];
    std::fill(x.begin(), x.begin() + std::min<int64_t>(256, n), 0.0f);
    return x;
}

std::vector<cpu::cpu_isa> variants() {
    std::vector<cpu::cpu_isa> out;
    for (cpu::cpu_isa isa : {cpu::cpu_isa::scalar, cpu::cpu_isa::avx2, cpu::cpu_isa::avx512_vnni})
        if (cpu::cpu_isa_supported(isa)) out.push_back(isa);
        else WARN("this CPU has no " << cpu::cpu_isa_name(isa) << ": that variant is not checked here");
    return out;
}

float ref_product(ggml_type type, const uint8_t *row, const test::ref_digits &x, int64_t n, int k_split) {
    switch (type) {
    case ggml_type::q4_k: return test::ref_q4_k(reinterpret_cast<const block_q4_k *>(row), x, n, k_split);
    case ggml_type::q6_k: return test::ref_q6_k(reinterpret_cast<const block_q6_k *>(row), x, n);
    default: return test::ref_q8_0(reinterpret_cast<const block_q8_0 *>(row), x, n);
    }
}

// All outputs of the product, tile by tile, with the given variant.
std::vector<float> product(const cpu::cpu_matrix &w, const cpu::digit_rows &x, const std::vector<int32_t> &x_rows, int32_t k_split,
                           cpu::cpu_isa isa) {
    const int64_t n_rows = int64_t(x_rows.size());
    std::vector<float> y(size_t(n_rows * w.n_out), std::numeric_limits<float>::quiet_NaN());
    std::vector<float *> ys(static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) ys[size_t(r)] = y.data() + r * w.n_out;
    cpu::digits_product_args a;
    a.w = w;
    a.x = &x;
    a.x_rows = x_rows.data();
    a.y = ys.data();
    a.n_rows = n_rows;
    a.k_split = k_split;
    a.isa = isa;
    cpu::digits_scratch scratch;
    for (int64_t o = 0; o < w.n_out; o += cpu::digits_tile_rows)
        cpu::digits_product_tile(a, o, std::min(o + cpu::digits_tile_rows, w.n_out), scratch);
    return y;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double rel_l2(const std::vector<float> &a, const std::vector<float> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("digits equal the format's definition bit for bit", "[cpu][digits]") {
    std::mt19937_64 rng(6601);
    const int64_t rows = 5, n = 1024;
    std::vector<float> x = activations(rng, rows, n);
    x[size_t(n + 300)] = std::numeric_limits<float>::quiet_NaN();     // row 1, block 1
    x[size_t(2 * n + 17)] = std::numeric_limits<float>::infinity();   // row 2, block 0
    for (int i = 0; i < 256; ++i) x[size_t(3 * n + 512 + i)] = 3.0e-30f * float(i % 7 - 3);  // tiny values
    for (int i = 0; i < 256; ++i) x[size_t(3 * n + 768 + i)] = 1.0e-38f * float(i % 7 - 3);  // below 2^-121: no 1 / s
    for (int i = 0; i < 256; ++i) x[size_t(4 * n + 256 + i)] = 1.5e30f * float(i % 5 - 2);   // huge values
    x[size_t(4 * n + 768)] = 127.0f;  // a block's largest exactly 127 s
    cpu::digit_rows d;
    cpu::digits_quantize(x.data(), n, rows, n, d);
    for (int64_t r = 0; r < rows; ++r) {
        INFO("row " << r);
        const test::ref_digits want = test::ref_quantize(x.data() + r * n, n);
        CHECK(std::memcmp(d.digits_of(r), want.packed.data(), size_t(2 * n)) == 0);
        CHECK(std::memcmp(d.sums_of(r), want.sums.data(), want.sums.size() * 2) == 0);
        for (int64_t c = 0; c < n / 256; ++c) {
            INFO("block " << c);
            CHECK(std::bit_cast<uint32_t>(d.scales_of(r)[c]) == std::bit_cast<uint32_t>(want.scale[size_t(c)]));
        }
    }
    CHECK(std::all_of(d.digits_of(3) + 2 * 768, d.digits_of(3) + 2 * 1024, [](int8_t v) { return v == 0; }));
    CHECK(std::isnan(d.scales_of(1)[1]));
    CHECK(std::isnan(d.scales_of(2)[0]));
    CHECK(std::isfinite(d.scales_of(1)[0]));
}

TEST_CASE("every variant of every digit product equals the reference bit for bit", "[cpu][digits]") {
    struct shape {
        int64_t n_in, n_out, rows;
    };
    // 1 output; partial tiles of 16 and 8; three blocks a row (K split 3); a tile and one more row.
    const shape shapes[] = {{256, 1, 1}, {768, 40, 3}, {512, 17, 13}, {2048, 33, 2}, {1024, 16, 5}, {4096, 9, 4}};
    uint64_t seed = 6610;
    for (const ggml_type type : {ggml_type::q4_k, ggml_type::q6_k, ggml_type::q8_0})
        for (const shape &sh : shapes) {
            std::mt19937_64 rng(++seed);
            INFO(ggml_type_name(type) << " n_in " << sh.n_in << " n_out " << sh.n_out << " rows " << sh.rows << " seed " << seed);
            const std::vector<uint8_t> w = random_matrix(rng, type, sh.n_in, sh.n_out);
            const cpu::cpu_matrix m{w.data(), type, sh.n_in, sh.n_out, ggml_row_bytes(type, sh.n_in)};
            const std::vector<float> x = activations(rng, sh.rows, sh.n_in);
            cpu::digit_rows d;
            cpu::digits_quantize(x.data(), sh.n_in, sh.rows, sh.n_in, d);
            // Rows gathered in reverse, as the grouped products read theirs.
            std::vector<int32_t> order(size_t(sh.rows));
            for (int64_t r = 0; r < sh.rows; ++r) order[size_t(r)] = int32_t(sh.rows - 1 - r);
            const std::vector<int32_t> splits = type == ggml_type::q4_k ? std::vector<int32_t>{1, 3, 4, 16} : std::vector<int32_t>{1};
            for (const int32_t k_split : splits) {
                INFO("k_split " << k_split);
                std::vector<float> want(size_t(sh.rows * sh.n_out));
                for (int64_t r = 0; r < sh.rows; ++r) {
                    const test::ref_digits rd = test::ref_quantize(x.data() + order[size_t(r)] * sh.n_in, sh.n_in);
                    for (int64_t o = 0; o < sh.n_out; ++o)
                        want[size_t(r * sh.n_out + o)] = ref_product(type, w.data() + size_t(o) * m.row_bytes, rd, sh.n_in, k_split);
                }
                for (const cpu::cpu_isa isa : variants()) {
                    INFO("variant " << cpu::cpu_isa_name(isa));
                    CHECK(same_bits(product(m, d, order, k_split, isa), want));
                }
            }
        }
}

TEST_CASE("a row's digit products do not depend on the other rows", "[cpu][digits][invariance]") {
    std::mt19937_64 rng(6620);
    const int64_t n_in = 2048, n_out = 50, rows = 9;
    for (const ggml_type type : {ggml_type::q4_k, ggml_type::q6_k, ggml_type::q8_0}) {
        INFO(ggml_type_name(type));
        const std::vector<uint8_t> w = random_matrix(rng, type, n_in, n_out);
        const cpu::cpu_matrix m{w.data(), type, n_in, n_out, ggml_row_bytes(type, n_in)};
        const std::vector<float> x = activations(rng, rows, n_in);
        cpu::digit_rows all;
        cpu::digits_quantize(x.data(), n_in, rows, n_in, all);
        std::vector<int32_t> order(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) order[size_t(r)] = int32_t(r);
        const std::vector<float> together = product(m, all, order, 4, cpu::cpu_isa::best);
        for (int64_t r = 0; r < rows; r += 4) {
            cpu::digit_rows one;
            cpu::digits_quantize(x.data() + r * n_in, n_in, 1, n_in, one);
            const std::vector<float> alone = product(m, one, {0}, 4, cpu::cpu_isa::best);
            CHECK(std::memcmp(alone.data(), together.data() + r * n_out, size_t(n_out) * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("a block with a non-finite element makes its row's outputs NaN and no other's", "[cpu][digits]") {
    std::mt19937_64 rng(6630);
    const int64_t n_in = 512, n_out = 20, rows = 3;
    for (const ggml_type type : {ggml_type::q4_k, ggml_type::q6_k, ggml_type::q8_0}) {
        INFO(ggml_type_name(type));
        const std::vector<uint8_t> w = random_matrix(rng, type, n_in, n_out);
        const cpu::cpu_matrix m{w.data(), type, n_in, n_out, ggml_row_bytes(type, n_in)};
        std::vector<float> x = activations(rng, rows, n_in);
        x[size_t(n_in + 300)] = std::numeric_limits<float>::infinity();
        cpu::digit_rows d;
        cpu::digits_quantize(x.data(), n_in, rows, n_in, d);
        for (const cpu::cpu_isa isa : variants()) {
            INFO("variant " << cpu::cpu_isa_name(isa));
            const std::vector<float> y = product(m, d, {0, 1, 2}, 4, isa);
            for (int64_t o = 0; o < n_out; ++o) {
                CHECK(std::isfinite(y[size_t(o)]));
                CHECK(std::isnan(y[size_t(n_out + o)]));
                CHECK(std::isfinite(y[size_t(2 * n_out + o)]));
            }
        }
    }
}

// Bounds against the exact fp32 product (dequantised weights, cpu::matmul) on the same rows. Two
// digits hold each element to 2^-15 of its block's largest |x| (not of itself): ~4e-5 relative
// for rows like these (the GPU's products measured 3.4-4.1e-5); the bound leaves ~5x. The mins'
// bf16 halves keep 16 of S_j's bits, below that.
TEST_CASE("digit products stay within their bound of the exact product", "[cpu][digits]") {
    constexpr double bound = 2e-4;
    std::mt19937_64 rng(6640);
    const int64_t n_in = 2048, n_out = 96, rows = 6;
    for (const ggml_type type : {ggml_type::q4_k, ggml_type::q6_k, ggml_type::q8_0}) {
        const std::vector<uint8_t> w = random_matrix(rng, type, n_in, n_out);
        const cpu::cpu_matrix m{w.data(), type, n_in, n_out, ggml_row_bytes(type, n_in)};
        std::vector<float> x = random_floats(rng, size_t(rows * n_in));
        for (size_t i = 0; i < x.size(); i += 97) x[i] *= 8.0f;
        std::vector<float> exact(size_t(rows * n_out));
        cpu::cpu_context ctx;
        cpu::matmul(ctx, m, x.data(), exact.data(), rows);
        cpu::digit_rows d;
        cpu::digits_quantize(x.data(), n_in, rows, n_in, d);
        const std::vector<float> got = product(m, d, {0, 1, 2, 3, 4, 5}, 4, cpu::cpu_isa::best);
        const double err = rel_l2(got, exact);
        INFO(ggml_type_name(type) << ": relative L2 error " << err);
        CHECK(err <= bound);
        CHECK(err > 0.0);  // the digit arithmetic, not the exact one, was measured
    }
}

// Timing: ./test_cpu_ops "[.bench]". One thread's CPU time per product (the machine may be shared:
// CPU time, not wall time; the fastest of repeated runs) on qwen3-30b-a3b's shapes, exact and on
// digits, for 1 to 64 rows.
TEST_CASE("digit product timing", "[.bench][cpu]") {
    struct shape {
        const char *name;
        int64_t n_in, n_out;
        ggml_type type = ggml_type::q4_k;
    };
    std::mt19937_64 rng(6690);
    // "head": 65,536 rows (75 MB and more, beyond the L3 cache), 4,096 random rows repeated.
    for (const shape sh : {shape{"gate", 2048, 768}, shape{"down", 768, 2048}, shape{"q", 2048, 4096}, shape{"wo", 4096, 2048},
                           shape{"head", 2048, 65536}, shape{"head", 2048, 65536, ggml_type::q6_k}, shape{"head", 2048, 65536, ggml_type::q8_0}}) {
        const std::vector<uint8_t> base = random_matrix(rng, sh.type, sh.n_in, std::min<int64_t>(sh.n_out, 4096));
        std::vector<uint8_t> w(ggml_row_bytes(sh.type, sh.n_in) * size_t(sh.n_out));
        for (size_t o = 0; o < w.size(); o += base.size()) std::memcpy(w.data() + o, base.data(), std::min(base.size(), w.size() - o));
        const cpu::cpu_matrix m{w.data(), sh.type, sh.n_in, sh.n_out, ggml_row_bytes(sh.type, sh.n_in)};
        for (const int64_t rows : {1, 2, 4, 8, 64}) {
            if (sh.n_out > 4096 && rows > 4) continue;
            const std::vector<float> x = random_floats(rng, size_t(rows * sh.n_in));
            std::vector<float> y(size_t(rows * sh.n_out));
            // The fastest of repeated runs (interference from other processes only slows a run).
            auto cpu_ms = [&](auto &&fn) {
                fn();
                double best = 1e30, spent = 0;
                for (int rep = 0; rep < 200 && spent < 400; ++rep) {
                    timespec t0, t1;
                    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
                    fn();
                    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
                    const double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
                    best = std::min(best, ms);
                    spent += ms;
                }
                return best;
            };
            cpu::cpu_context exact, digits;
            digits.arithmetic = cpu::cpu_arithmetic::digits;
            const double t_exact = cpu_ms([&] { cpu::matmul(exact, m, x.data(), y.data(), rows); });
            const double t_digits = cpu_ms([&] { cpu::matmul(digits, m, x.data(), y.data(), rows); });
            const double gb = double(w.size()) * 1e-9;
            std::printf("%-5s %-4s %5lld x %5lld rows %3lld: exact %8.3f ms, digits %8.3f ms (x%.2f; %.1f GB/s of weights, %.1f GMAC/s)", sh.name,
                        std::string(ggml_type_name(sh.type)).c_str(),
                        (long long)sh.n_out, (long long)sh.n_in, (long long)rows, t_exact, t_digits, t_exact / t_digits, gb / (t_digits * 1e-3),
                        double(sh.n_in * sh.n_out * rows) * 1e-6 / t_digits);
            if (cpu::cpu_isa_best() == cpu::cpu_isa::avx512_vnni) {  // the AVX2 variant beside it
                cpu::digit_rows d;
                cpu::digits_quantize(x.data(), sh.n_in, rows, sh.n_in, d);
                std::vector<float *> ys(static_cast<size_t>(rows));
                for (int64_t r = 0; r < rows; ++r) ys[size_t(r)] = y.data() + r * sh.n_out;
                cpu::digits_product_args a;
                a.w = m;
                a.x = &d;
                a.y = ys.data();
                a.n_rows = rows;
                a.isa = cpu::cpu_isa::avx2;
                cpu::digits_scratch scratch;
                const double t_avx2 = cpu_ms([&] {
                    for (int64_t o = 0; o < sh.n_out; o += cpu::digits_tile_rows)
                        cpu::digits_product_tile(a, o, std::min(o + cpu::digits_tile_rows, sh.n_out), scratch);
                });
                std::printf(", avx2 %8.3f ms", t_avx2);
            }
            std::printf("\n");
            CHECK(t_digits > 0.0);
        }
    }
}
