// tests/kernels/test_cuda_matvec_shapes.cpp - launch shapes that matvec() picks by a step's pair
// count must not change a pair's bits: the grouped Q6_K product of K = 768 (a Q4_K_M file's
// experts' down) takes three-warp blocks up to 8 pairs and one-warp blocks playing three above.
// Matrices of whole 16-row tiles may stage each tile in shared memory (one bulk copy) or stream it.
// A dense Q4_K launch may carry a last matrix of Q6_K (a Q4_K_M file's V beside Q and K).
// A Q6_K vocabulary head is staged in four-warp blocks or streamed in two-warp ones.
#include "gpu_test_util.h"
#include "quant_test_util.h"
#include "digit_groups_test_util.h"

#include "cuda/matvec.h"
#include "cuda/matvec_plan.h"
#include "src/cpu/cpu_ops.h"

#include <array>
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
            const cuda::matvec_plan plan = cuda::plan_matvec(a, cuda::current_device_facts(), {.staged = stage});
            CHECK(plan.staged == (stage == 1 && cuda::current_device_facts().sm90));  // whole tiles of K <= 1024 fit
            cuda::matvec(a, plan, nullptr);
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
                cuda::matvec(b, cuda::plan_matvec(b, cuda::current_device_facts(), {.staged = stage}), nullptr);
                CHECK(std::memcmp(y1.download().data(), all[0].data() + size_t(r) * k * n_out, size_t(k) * n_out * sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("a Q6_K V in the Q4_K Q/K launch: Q and K bitwise a Q/K launch's, V near the CPU, every row bitwise alone and among 12",
          "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    REQUIRE(cuda::matvec_mixed_supported(ggml_type::q4_k, ggml_type::q6_k));
    REQUIRE_FALSE(cuda::matvec_mixed_supported(ggml_type::q6_k, ggml_type::q4_k));
    struct shape {
        int32_t n_in, q_out, kv_out;
    };
    // Fewer blocks than two an SM (K split 16 ways) and more (4 ways); V's rows not a multiple of 16.
    for (const shape sh : {shape{512, 384, 72}, shape{256, 4224, 136}}) {
        INFO("n_in " << sh.n_in << " q " << sh.q_out << " kv " << sh.kv_out);
        constexpr int32_t rows = 12;
        std::mt19937_64 rng(uint64_t(7100 + sh.q_out));
        const auto wq = random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.q_out, 0.05f);
        const auto wk = random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.kv_out, 0.05f);
        const auto wv = random_matrix(rng, ggml_type::q6_k, sh.n_in, sh.kv_out, 0.05f);
        const auto x = test::random_floats(rng, size_t(rows) * sh.n_in);
        device_buffer<uint8_t> dq(wq), dk(wk), dv(wv);
        device_buffer<float> dx(x);
        // Q, K and V of n rows of x starting at row r0, in one launch (V typed) or Q and K alone.
        auto run = [&](int32_t r0, int32_t n, bool with_v) {
            device_buffer<float> yq(size_t(n) * sh.q_out), yk(size_t(n) * sh.kv_out), yv(size_t(n) * sh.kv_out);
            yq.poison();
            yk.poison();
            yv.poison();
            cuda::matvec_args a;
            a.w = dq.ptr;
            a.type = ggml_type::q4_k;
            a.n_in = sh.n_in;
            a.n_out = sh.q_out;
            a.x = dx.ptr + size_t(r0) * sh.n_in;
            a.x_stride = sh.n_in;
            a.y = yq.ptr;
            a.y_stride = sh.q_out;
            a.n_pairs = n;
            a.extra[0] = {dk.ptr, sh.kv_out, yk.ptr, sh.kv_out};
            a.extra[1] = {dv.ptr, sh.kv_out, yv.ptr, sh.kv_out, true, ggml_type::q6_k};
            a.n_extra = with_v ? 2 : 1;
            cuda::matvec(a, nullptr);
            return std::array<std::vector<float>, 3>{yq.download(), yk.download(), yv.download()};
        };
        const auto mixed = run(0, rows, true), plain = run(0, rows, false);
        CHECK(std::memcmp(mixed[0].data(), plain[0].data(), mixed[0].size() * sizeof(float)) == 0);
        CHECK(std::memcmp(mixed[1].data(), plain[1].data(), mixed[1].size() * sizeof(float)) == 0);
        cpu::cpu_context ctx{4};
        std::vector<float> ref(size_t(rows) * sh.kv_out);
        cpu::matmul(ctx, host_matrix(wv, ggml_type::q6_k, sh.n_in, sh.kv_out), x.data(), ref.data(), rows);
        CHECK(rel_err(mixed[2].data(), ref.data(), ref.size()) <= test::tolerance::matvec);
        for (int32_t r = 0; r < rows; r += 5) {
            INFO("row " << r);
            const auto one = run(r, 1, true);
            CHECK(std::memcmp(one[0].data(), mixed[0].data() + size_t(r) * sh.q_out, size_t(sh.q_out) * sizeof(float)) == 0);
            CHECK(std::memcmp(one[1].data(), mixed[1].data() + size_t(r) * sh.kv_out, size_t(sh.kv_out) * sizeof(float)) == 0);
            CHECK(std::memcmp(one[2].data(), mixed[2].data() + size_t(r) * sh.kv_out, size_t(sh.kv_out) * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("a Q6_K vocabulary head: staged four-warp blocks (one or two column tiles) and streamed two-warp ones give the same bits", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    constexpr int32_t n_in = 512, n_out = 16 * 4097;  // past the head launches' 4,096 blocks, whole tiles
    std::mt19937_64 rng(8128);
    const auto w = random_matrix(rng, ggml_type::q6_k, n_in, n_out, 0.05f);
    device_buffer<uint8_t> dw(w);
    for (const int32_t rows : {1, 5, 12, 16}) {
        INFO("rows " << rows);
        const auto x = test::random_floats(rng, size_t(rows) * n_in);
        device_buffer<float> dx(x);
        std::vector<float> got[3];
        for (int stage = 0; stage < 3; ++stage) {  // streamed; staged (above 8 rows two column tiles); staged, one
            device_buffer<float> dy(size_t(rows) * n_out);
            dy.poison();
            cuda::matvec_args a;
            a.w = dw.ptr;
            a.type = ggml_type::q6_k;
            a.n_in = n_in;
            a.n_out = n_out;
            a.x = dx.ptr;
            a.x_stride = n_in;
            a.y = dy.ptr;
            a.y_stride = n_out;
            a.n_pairs = rows;
            const cuda::matvec_forced forced{.col_tiles = stage == 2 ? 1 : 0, .staged = stage == 0 ? 0 : -1};
            cuda::matvec(a, cuda::plan_matvec(a, cuda::current_device_facts(), forced), nullptr);
            got[stage] = dy.download();
        }
        CHECK(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)) == 0);
        CHECK(std::memcmp(got[2].data(), got[1].data(), got[0].size() * sizeof(float)) == 0);
        cpu::cpu_context ctx{4};
        std::vector<float> ref(size_t(rows) * n_out);
        cpu::matmul(ctx, host_matrix(w, ggml_type::q6_k, n_in, n_out), x.data(), ref.data(), rows);
        CHECK(rel_err(got[1].data(), ref.data(), ref.size()) <= test::tolerance::matvec);
    }
}
