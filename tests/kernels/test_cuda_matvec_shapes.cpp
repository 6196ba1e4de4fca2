// tests/kernels/test_cuda_matvec_shapes.cpp - launch shapes that matvec() picks by a step's pair
// count must not change a pair's bits: the grouped Q6_K product of K = 768 (a Q4_K_M file's
// experts' down) takes three-warp blocks up to 8 pairs and one-warp blocks playing three above.
// Matrices of whole 16-row tiles may stage each tile in shared memory (one bulk copy) or stream it.
#include "gpu_test_util.h"
#include "quant_test_util.h"
#include "digit_groups_test_util.h"

#include "cuda/matvec.h"
#include "src/cpu/cpu_ops.h"

#include <cstring>

using namespace tandem;
using tandem::test::device_buffer;
using tandem::test::device_groups;
using tandem::test::groups_of_row;
using tandem::test::host_groups;
using tandem::test::host_matrix;
using tandem::test::random_matrix;
using tandem::test::rel_err;
using tandem::test::route_random;

TEST_CASE("grouped Q6_K products of K 768: a row's pairs alone bitwise among 96, within tolerance of the CPU", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    constexpr int32_t n_expert = 16, k = 8, rows = 12, n_in = 768, n_out = 200;  // 96 pairs; n_out not a multiple of 16
    std::mt19937_64 rng(5150);
    const host_groups hg = route_random(rng, rows, k, n_expert);
    const auto w = random_matrix(rng, ggml_type::q6_k, n_in, int64_t(n_out) * n_expert, 0.05f);
    const auto x = test::random_floats(rng, size_t(rows) * k * n_in);  // one input row a pair
    device_buffer<uint8_t> dw(w);
    device_buffer<float> dx(x), dy(size_t(rows) * k * n_out);
    dy.poison();
    const device_groups g(hg);
    cuda::matvec_args a = g.matvec_grouped_args(dw.ptr, nullptr, n_in, n_out, dx.ptr, g.py.ptr, dy.ptr, n_expert, rows * k);
    a.type = ggml_type::q6_k;
    cuda::matvec(a, nullptr);
    const auto got = dy.download();

    cpu::cpu_context ctx{4};
    const size_t row_bytes = ggml_row_bytes(ggml_type::q6_k, n_in);
    for (int32_t p = 0; p < rows * k; ++p) {
        INFO("pair " << p << " expert " << hg.ids[size_t(p)]);
        const std::vector<uint8_t> mat(w.begin() + std::ptrdiff_t(size_t(hg.ids[size_t(p)]) * n_out * row_bytes),
                                       w.begin() + std::ptrdiff_t(size_t(hg.ids[size_t(p)] + 1) * n_out * row_bytes));
        std::vector<float> ref(n_out);
        cpu::matmul(ctx, host_matrix(mat, ggml_type::q6_k, n_in, n_out), x.data() + size_t(p) * n_in, ref.data(), 1);
        CHECK(rel_err(got.data() + size_t(p) * n_out, ref.data(), size_t(n_out)) <= test::tolerance::matvec);
    }
    for (int32_t r = 0; r < rows; r += 5) {
        INFO("row " << r);
        const host_groups one = groups_of_row(hg, r, k);
        const device_groups g1(one);
        device_buffer<float> x1(std::vector<float>(x.begin() + std::ptrdiff_t(size_t(r) * k * n_in),
                                                   x.begin() + std::ptrdiff_t(size_t(r + 1) * k * n_in)));
        device_buffer<float> y1(size_t(k) * n_out);
        cuda::matvec_args b = g1.matvec_grouped_args(dw.ptr, nullptr, n_in, n_out, x1.ptr, g1.py.ptr, y1.ptr, k, k);
        b.type = ggml_type::q6_k;
        cuda::matvec(b, nullptr);
        CHECK(std::memcmp(y1.download().data(), got.data() + size_t(r) * k * n_out, size_t(k) * n_out * sizeof(float)) == 0);
    }
}

TEST_CASE("grouped Q6_K products of whole tiles: staged and streamed rows give a pair the same bits, alone and among 96",
          "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    constexpr int32_t n_expert = 16, k = 8, rows = 12, n_out = 256;  // 96 pairs; n_out whole 16-row tiles (staged)
    for (const int32_t n_in : {768, 1024}) {
        INFO("n_in " << n_in);
        std::mt19937_64 rng(uint64_t(6160 + n_in));
        const host_groups hg = route_random(rng, rows, k, n_expert);
        const auto w = random_matrix(rng, ggml_type::q6_k, n_in, int64_t(n_out) * n_expert, 0.05f);
        const auto x = test::random_floats(rng, size_t(rows) * k * n_in);
        device_buffer<uint8_t> dw(w);
        device_buffer<float> dx(x);
        const device_groups g(hg);
        std::vector<float> all[2];
        for (int stage = 0; stage < 2; ++stage) {
            device_buffer<float> dy(size_t(rows) * k * n_out);
            dy.poison();
            cuda::matvec_args a = g.matvec_grouped_args(dw.ptr, nullptr, n_in, n_out, dx.ptr, g.py.ptr, dy.ptr, n_expert, rows * k);
            a.type = ggml_type::q6_k;
            a.stage_weights = stage;
            cuda::matvec(a, nullptr);
            all[stage] = dy.download();
        }
        CHECK(std::memcmp(all[0].data(), all[1].data(), all[0].size() * sizeof(float)) == 0);

        cpu::cpu_context ctx{4};
        const size_t row_bytes = ggml_row_bytes(ggml_type::q6_k, n_in);
        for (int32_t p = 0; p < rows * k; p += 7) {
            INFO("pair " << p);
            const size_t e = size_t(hg.ids[size_t(p)]);
            const std::vector<uint8_t> mat(w.begin() + std::ptrdiff_t(e * n_out * row_bytes),
                                           w.begin() + std::ptrdiff_t((e + 1) * n_out * row_bytes));
            std::vector<float> ref(n_out);
            cpu::matmul(ctx, host_matrix(mat, ggml_type::q6_k, n_in, n_out), x.data() + size_t(p) * n_in, ref.data(), 1);
            CHECK(rel_err(all[1].data() + size_t(p) * n_out, ref.data(), size_t(n_out)) <= test::tolerance::matvec);
        }
        for (int32_t r = 0; r < rows; r += 4) {
            const host_groups one = groups_of_row(hg, r, k);
            const device_groups g1(one);
            device_buffer<float> x1(std::vector<float>(x.begin() + std::ptrdiff_t(size_t(r) * k * n_in),
                                                       x.begin() + std::ptrdiff_t(size_t(r + 1) * k * n_in)));
            for (int stage = 0; stage < 2; ++stage) {
                INFO("row " << r << " staged " << stage);
                device_buffer<float> y1(size_t(k) * n_out);
                cuda::matvec_args b = g1.matvec_grouped_args(dw.ptr, nullptr, n_in, n_out, x1.ptr, g1.py.ptr, y1.ptr, k, k);
                b.type = ggml_type::q6_k;
                b.stage_weights = stage;
                cuda::matvec(b, nullptr);
                CHECK(std::memcmp(y1.download().data(), all[0].data() + size_t(r) * k * n_out, size_t(k) * n_out * sizeof(float)) == 0);
            }
        }
    }
}
