// tests/unit/quant/test_quant_bench.cpp - hidden throughput report (run: test_quant "[bench]"):
// quantize/dequantize MB/s per type and dot_f32 GFLOP/s on one thread. Prints only; no timing
// is asserted.
#include "tandem/quant.h"
#include "tandem/types.h"

#include "quant_test_util.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

using namespace tandem;

namespace {

// Process CPU time, so a loaded machine slows the numbers less than wall time would.
double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

}  // namespace

TEST_CASE("quant throughput", "[.][bench]") {
    const int64_t n = 256 * 2048;  // 2 MB of floats: stays in cache, measures compute
    const std::vector<float> x = quant_test::make_data(quant_test::data_kind::gaussian, n, 7);
    std::vector<float> y(n);
    for (ggml_type type : {ggml_type::f16, ggml_type::bf16, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
        std::vector<uint8_t> q(ggml_row_bytes(type, n));
        quantize_row(type, x.data(), q.data(), n);
        const double t0 = cpu_seconds();
        int n_quant = 0, n_dequant = 0;
        while (cpu_seconds() - t0 < 0.5) quantize_row(type, x.data(), q.data(), n), ++n_quant;
        const double t1 = cpu_seconds();
        while (cpu_seconds() - t1 < 0.3) dequantize_row(type, q.data(), y.data(), n), ++n_dequant;
        const double t2 = cpu_seconds();
        std::printf("%-5s quantize %7.0f MB/s of f32 in   dequantize %7.0f MB/s of f32 out\n",
                    std::string(ggml_type_name(type)).c_str(), n_quant * n * 4.0 / (t1 - t0) / 1e6,
                    n_dequant * n * 4.0 / (t2 - t1) / 1e6);
        REQUIRE(n_quant > 0);
    }
    for (int64_t len : {int64_t{4096}, n - 1}) {  // in L1, and 2 MB from L2/L3
        std::vector<float> a(x.begin(), x.begin() + len), b(x.begin() + 1, x.begin() + 1 + len);
        const double t0 = cpu_seconds();
        int64_t calls = 0;
        float sink = 0;
        while (cpu_seconds() - t0 < 0.3)  // several calls per clock read: a 4096 dot is ~0.3 us
            for (int k = 0; k < 64; ++k) sink += dot_f32(a.data(), b.data(), len), ++calls;
        std::printf("dot_f32 n=%-8lld %6.1f GFLOP/s (%g)\n", static_cast<long long>(len),
                    calls * len * 2.0 / (cpu_seconds() - t0) / 1e9, static_cast<double>(sink));
        REQUIRE(calls > 0);
    }
}
