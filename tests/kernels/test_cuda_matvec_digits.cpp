// tests/kernels/test_cuda_matvec_digits.cpp - the integer-digit products (cuda/matvec_digits.h):
// the digits against a host twin (bitwise), the product against the CPU's fp32 matmul and its
// rows' batch invariance (bitwise); a hidden [.bench] case times it beside matvec() on the
// decode shapes of qwen3-30b-a3b.
#include "gpu_test_util.h"
#include "quant_test_util.h"
#include "digits_test_util.h"
#include "digit_groups_test_util.h"
#include "routing_test_util.h"
#include "split_test_util.h"

#include "cuda/cuda_check.h"
#include "cuda/matvec.h"
#include "cuda/matvec_digits.h"
#include "cuda/moe.h"
#include "cuda/norm.h"
#include "src/cpu/cpu_ops.h"
#include "tandem/quant.h"
#include "tandem/swiglu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

using namespace tandem;
using tandem::test::device_buffer;
using tandem::test::host_matrix;
using tandem::test::random_matrix;
using tandem::test::rel_err;
using tandem::test::device_digits;
using tandem::test::device_groups;
using tandem::test::groups_of_row;
using tandem::test::host_groups;
using tandem::test::launch_timer;
using tandem::test::route_random;

TEST_CASE("dense digit products match the CPU and are batch invariant", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{4};
    struct shape { int32_t n_in, n_out, n_rows; };
    uint64_t seed = 4000;
    // 300 rows: 19 blocks (K split 16 ways), 4,500 rows: 282 blocks (4 ways).
    const shape shapes[] = {{256, 1, 1}, {768, 129, 13}, {2048, 67, 16}, {2048, 300, 3}, {4096, 40, 9}, {512, 4500, 9}};
    for (const shape &sh : shapes) {
        ++seed;
        INFO("n_in " << sh.n_in << " n_out " << sh.n_out << " rows " << sh.n_rows << " seed " << seed);
        std::mt19937_64 rng(seed);
        const auto w = random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f);
        auto x = test::random_floats(rng, size_t(sh.n_in) * sh.n_rows);
        for (size_t i = 0; i < x.size(); i += 97) x[i] *= 20.0f;  // outliers: the blocks' scales follow them
        std::fill(x.begin(), x.begin() + 256, 0.0f);            // a block of zeros
        std::vector<float> ref(size_t(sh.n_out) * sh.n_rows);
        cpu::matmul(ctx, host_matrix(w, ggml_type::q4_k, sh.n_in, sh.n_out), x.data(), ref.data(), sh.n_rows);

        device_buffer<uint8_t> dw(w);
        device_buffer<float> dx(x), dy(ref.size());
        device_digits dd(sh.n_rows, sh.n_in);
        dd.digits.poison();
        cuda::digits_quantize({dx.ptr, sh.n_rows, sh.n_in, dd.view()}, nullptr);
        const test::host_digits want = test::quantize_host(x, sh.n_rows, sh.n_in);
        CHECK(dd.digits.download() == want.digits);
        CHECK(test::same_bits(dd.scales.download(), want.scales));
        CHECK(dd.sums.download() == want.sums);
        {
            // Gathered rows (x_rows, as the head takes the rows that need logits): output row i
            // is x row n_rows - 1 - i, bitwise.
            std::vector<int32_t> order(size_t(sh.n_rows));
            for (int32_t i = 0; i < sh.n_rows; ++i) order[size_t(i)] = sh.n_rows - 1 - i;
            device_buffer<int32_t> drows(order);
            device_digits dg(sh.n_rows, sh.n_in);
            dg.digits.poison();
            cuda::digits_quantize({dx.ptr, sh.n_rows, sh.n_in, dg.view(), drows.ptr}, nullptr);
            const auto gd = dg.digits.download();
            const auto gs = dg.scales.download();
            const auto gu = dg.sums.download();
            const size_t nd = gd.size() / size_t(sh.n_rows), ns = gs.size() / size_t(sh.n_rows), nu = gu.size() / size_t(sh.n_rows);
            for (int32_t i = 0; i < sh.n_rows; ++i) {
                const size_t r = size_t(order[size_t(i)]);
                CHECK(std::memcmp(gd.data() + size_t(i) * nd, want.digits.data() + r * nd, nd * sizeof(gd[0])) == 0);
                CHECK(std::memcmp(gs.data() + size_t(i) * ns, want.scales.data() + r * ns, ns * sizeof(gs[0])) == 0);
                CHECK(std::memcmp(gu.data() + size_t(i) * nu, want.sums.data() + r * nu, nu * sizeof(gu[0])) == 0);
            }
        }

        dy.poison();
        cuda::matvec_digits_args a{dw.ptr, sh.n_in, sh.n_out, dd.view(), sh.n_rows, dy.ptr, sh.n_out};
        cuda::matvec_digits(a, nullptr);
        const auto got = dy.download();
        double worst = 0.0;
        for (int32_t r = 0; r < sh.n_rows; ++r)
            worst = std::max(worst, rel_err(got.data() + size_t(r) * sh.n_out, ref.data() + size_t(r) * sh.n_out, size_t(sh.n_out)));
        INFO("worst relative L2 error of a row " << worst);
        CHECK(worst <= test::tolerance::matvec);
        // The CPU's digit product of the same rows: the same bits.
        std::vector<int32_t> all_rows(static_cast<size_t>(sh.n_rows));
        for (int32_t r = 0; r < sh.n_rows; ++r) all_rows[size_t(r)] = r;
        CHECK(test::same_bits(test::cpu_digit_product(w, sh.n_in, sh.n_out, x, all_rows, test::dense_digits_k_split(sh.n_out)), got));
        // Each row alone: bitwise its value among the others.
        for (int32_t r = 0; r < sh.n_rows; r += 5) {
            device_digits one(1, sh.n_in);
            device_buffer<float> x1(std::vector<float>(x.begin() + size_t(r) * sh.n_in, x.begin() + size_t(r + 1) * sh.n_in));
            device_buffer<float> y1(size_t(sh.n_out));
            cuda::digits_quantize({x1.ptr, 1, sh.n_in, one.view()}, nullptr);
            cuda::matvec_digits({dw.ptr, sh.n_in, sh.n_out, one.view(), 1, y1.ptr, sh.n_out}, nullptr);
            CHECK(std::memcmp(y1.download().data(), got.data() + size_t(r) * sh.n_out, size_t(sh.n_out) * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("grouped SwiGLU digit products match the CPU and are batch invariant", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{4};
    // 512: two blocks a row; 2,048: eight (the 30b gate/up), two a warp, staged and streamed.
    for (const int32_t n_in : {512, 2048}) {
        INFO("n_in " << n_in);
        std::mt19937_64 rng(4100 + uint64_t(n_in));
        const int32_t n_expert = 6, k = 3, n_out = 203, rows = 5;  // 203: a partial tile of 8 outputs (3)
        std::vector<std::vector<uint8_t>> gate, up;
        std::vector<uint8_t> all_gate, all_up;
        for (int32_t e = 0; e < n_expert; ++e) {
            gate.push_back(random_matrix(rng, ggml_type::q4_k, n_in, n_out, 0.05f));
            up.push_back(random_matrix(rng, ggml_type::q4_k, n_in, n_out, 0.05f));
            all_gate.insert(all_gate.end(), gate.back().begin(), gate.back().end());
            all_up.insert(all_up.end(), up.back().begin(), up.back().end());
        }
        const auto x = test::random_floats(rng, size_t(n_in) * rows);
        const host_groups hg = route_random(rng, rows, k, n_expert);
        std::vector<float> ref(size_t(rows) * k * n_out);
        for (int32_t p = 0; p < rows * k; ++p) {
            const int32_t e = hg.ids[size_t(p)];
            std::vector<float> gv(static_cast<size_t>(n_out)), uv(static_cast<size_t>(n_out));
            cpu::matmul(ctx, host_matrix(gate[size_t(e)], ggml_type::q4_k, n_in, n_out), x.data() + size_t(p / k) * n_in, gv.data(), 1);
            cpu::matmul(ctx, host_matrix(up[size_t(e)], ggml_type::q4_k, n_in, n_out), x.data() + size_t(p / k) * n_in, uv.data(), 1);
            for (int32_t j = 0; j < n_out; ++j) ref[size_t(p) * n_out + j] = swiglu(gv[size_t(j)], uv[size_t(j)]);
        }
        device_buffer<uint8_t> dg(all_gate), du(all_up);
        device_buffer<float> dx(x), dy(ref.size());
        device_digits dd(rows, n_in);
        cuda::digits_quantize({dx.ptr, rows, n_in, dd.view()}, nullptr);
        auto run = [&](const host_groups &h, device_digits &digits, float *y, bool stage = false, int32_t solo_warps = 0,
                       int32_t group_rows = 0, bool tensor_copies = true) {
            device_groups gr(h);
            // max_groups n_expert: more than the step's groups, the rest find none
            cuda::matvec_digits_args a = gr.swiglu_args(dg.ptr, du.ptr, n_in, n_out, digits.view(), y, n_expert);
            a.stage = stage;
            a.solo_warps = solo_warps;
            a.group_rows = group_rows;
            a.tensor_copies = tensor_copies;
            a.groups_settled = solo_warps == 2;
            // The variant asked for is the one launched (K <= 2,048: every stage fits on sm_90).
            const cuda::device_facts facts = cuda::current_device_facts();
            const cuda::matvec_digits_plan plan = cuda::plan_matvec_digits(a, facts);
            CHECK((plan.variant == cuda::matvec_digits_plan::kernel::solo) == (solo_warps > 0));
            CHECK(plan.staged == (facts.sm90 && stage && solo_warps != 4));
            cuda::matvec_digits(a, nullptr);
            TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
        };
        dy.poison();
        run(hg, dd, dy.ptr);
        const auto got = dy.download();
        CHECK(rel_err(got.data(), ref.data(), ref.size()) <= test::tolerance::moe);
        {
            // The CPU's gate and up digit products (the GPU's bits: its plain grouped products of
            // either matrix give them) through the CPU's SwiGLU: within the exp functions' ulps.
            auto x_row = [&](size_t p) { return p / size_t(k); };
            const int32_t split = cuda::digits_grouped_k_split(true, n_in);
            const auto cg = test::cpu_grouped_product(gate, hg.ids, n_in, n_out, x, x_row, split);
            const auto cu = test::cpu_grouped_product(up, hg.ids, n_in, n_out, x, x_row, split);
            device_groups gr(hg);
            device_buffer<float> dplain(got.size());
            for (const bool is_gate : {true, false}) {
                INFO("plain grouped product of the " << (is_gate ? "gate" : "up") << " matrices");
                cuda::matvec_digits_args a = gr.swiglu_args(is_gate ? dg.ptr : du.ptr, nullptr, n_in, n_out, dd.view(), dplain.ptr, n_expert);
                a.x_rows = gr.px.ptr;
                dplain.poison();
                cuda::matvec_digits(a, nullptr);
                CHECK(test::same_bits(dplain.download(), is_gate ? cg : cu));
            }
            CHECK(test::max_rel_diff(test::cpu_swiglu(cg, cu), got) <= 1e-6);
        }
        // Weights staged in shared memory first, a row a bulk copy and (K = 2,048: rows of whole
        // 128-byte lines) in two swizzled tensor copies: the same arithmetic, bitwise.
        for (const bool tensor_copies : {false, true}) {
            INFO("staged, tensor copies " << tensor_copies);
            dy.poison();
            run(hg, dd, dy.ptr, true, 0, 0, tensor_copies);
            CHECK(std::memcmp(dy.download().data(), got.data(), got.size() * sizeof(float)) == 0);
        }
        // Solo warps (whole tiles a warp, no barrier): two staged a block, four streamed: the same bits.
        for (const bool stage : {true, false}) {
            INFO("solo staged " << stage);
            dy.poison();
            run(hg, dd, dy.ptr, stage, stage ? 2 : 4);
            CHECK(std::memcmp(dy.download().data(), got.data(), got.size() * sizeof(float)) == 0);
        }
        // Staged blocks and solo warps over fewer rows of blocks than groups (each row striding over
        // the groups, its stage reused: up to six groups a row), the blocks' tiles copied a row at a
        // time and (K = 2,048: rows of whole 128-byte lines) in two swizzled tensor copies: the same bits.
        for (const int32_t solo_warps : {0, 2})
            for (const int32_t group_rows : {1, 2, 4})
                for (const bool tensor_copies : {false, true}) {
                    if (solo_warps > 0 && tensor_copies) continue;  // blocks only
                    INFO("solo warps " << solo_warps << ", rows of blocks " << group_rows << ", tensor copies " << tensor_copies);
                    dy.poison();
                    run(hg, dd, dy.ptr, true, solo_warps, group_rows, tensor_copies);
                    CHECK(std::memcmp(dy.download().data(), got.data(), got.size() * sizeof(float)) == 0);
                }
        // Row 2 alone (its own k groups): its pairs' outputs bitwise those of the whole step.
        const host_groups one = groups_of_row(hg, 2, k);
        device_digits d1(1, n_in);
        device_buffer<float> x1(std::vector<float>(x.begin() + 2 * n_in, x.begin() + 3 * n_in)), y1(size_t(k) * n_out);
        cuda::digits_quantize({x1.ptr, 1, n_in, d1.view()}, nullptr);
        run(one, d1, y1.ptr);
        CHECK(std::memcmp(y1.download().data(), got.data() + size_t(2 * k) * n_out, size_t(k) * n_out * sizeof(float)) == 0);
    }
}

// A one-row step's gate/up may route the row itself (matvec_digits_args::route_logits) beside
// moe_route: the same experts, slots and outputs, bitwise, as the product over moe_route's groups;
// ties in the router (lower id first), a NaN logit, and a padding row (nothing written). K = 2,048:
// the routing blocks take their tile in tensor copies, the groups' product a bulk copy a row.
TEST_CASE("a one-row SwiGLU routing its row itself matches moe_route's groups, bitwise", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    struct shape {
        int32_t n_expert, k, n_in, n_out;
    };
    for (const shape sh : {shape{128, 8, 512, 76}, shape{20, 3, 768, 40}, shape{7, 7, 256, 8}, shape{128, 8, 2048, 76}}) {
        INFO("n_expert " << sh.n_expert << " k " << sh.k);
        std::mt19937_64 rng(4200 + uint64_t(sh.n_expert));
        std::vector<uint8_t> all_gate, all_up;
        for (int32_t e = 0; e < sh.n_expert; ++e) {
            const auto gm = random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f);
            const auto um = random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f);
            all_gate.insert(all_gate.end(), gm.begin(), gm.end());
            all_up.insert(all_up.end(), um.begin(), um.end());
        }
        device_buffer<uint8_t> dg(all_gate), du(all_up);
        const auto x = test::random_floats(rng, size_t(sh.n_in));
        device_buffer<float> dx(x);
        device_digits dd(1, sh.n_in);
        cuda::digits_quantize({dx.ptr, 1, sh.n_in, dd.view()}, nullptr);
        for (const int variant : {0, 1, 2, 3}) {  // plain, a tie among the top, a NaN logit, a padding row
            INFO("variant " << variant);
            auto logits = test::random_floats(rng, size_t(sh.n_expert));
            if (variant == 1 && sh.n_expert > 9) logits[5] = logits[9] = 4.0f;
            if (variant == 2) logits[size_t(sh.n_expert / 2)] = std::numeric_limits<float>::quiet_NaN();
            const test::device_routing route(logits, {variant == 3 ? -1 : 0}, sh.n_expert, sh.k);
            route.run();
            cuda::matvec_digits_args a{dg.ptr, sh.n_in, sh.n_out, dd.view(), 0, nullptr, sh.n_out};
            a.w_up = du.ptr;
            a.x_rows = route.pair_x.ptr;
            a.y_rows = route.pair_y.ptr;
            a.group_mat = route.group_expert.ptr;
            a.group_off = route.group_off.ptr;
            a.n_groups = route.n_groups.ptr;
            a.max_groups = sh.k;
            a.stage = true;
            a.tensor_copies = false;
            device_buffer<float> y_ref(size_t(sh.k) * sh.n_out), y(size_t(sh.k) * sh.n_out);
            y_ref.poison();
            y.poison();
            a.y = y_ref.ptr;
            cuda::matvec_digits(a, nullptr);
            a.y = y.ptr;
            a.tensor_copies = true;
            a.route_logits = route.logits.ptr;
            a.route_slots = route.slots.ptr;
            a.route_n_expert = sh.n_expert;
            a.route_k = sh.k;
            cuda::matvec_digits(a, nullptr);
            TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
            const auto got = y.download(), want = y_ref.download();
            CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
            if (variant == 3) {
                CHECK(std::all_of(got.begin(), got.end(), [](float v) { return std::isnan(v); }));  // poison left
            } else {
                CHECK(std::none_of(got.begin(), got.end(), [](float v) { return std::isnan(v); }));  // every slot written
            }
            // Published in moe_route's place (route_out): the same outputs and bits as moe_route's,
            // with and without renormalised weights, and the same count of groups.
            for (const bool renormalise : {false, true}) {
                INFO("renormalise " << renormalise);
                cuda::moe_route_args ra = route.args();
                ra.renormalise = renormalise;
                device_buffer<int32_t> total_ref(std::vector<int32_t>{5}), total(std::vector<int32_t>{5});
                ra.groups_total = total_ref.ptr;
                cuda::moe_route(ra, nullptr);
                test::device_routing pub(logits, {variant == 3 ? -1 : 0}, sh.n_expert, sh.k);
                for (auto *b : {&pub.ids, &pub.group_expert, &pub.group_off, &pub.n_groups, &pub.pair_x, &pub.pair_y}) b->poison();
                pub.weights.poison();
                y.poison();
                a.route_out = {pub.ids.ptr, pub.weights.ptr, pub.group_expert.ptr, pub.group_off.ptr, pub.n_groups.ptr,
                               pub.pair_x.ptr, pub.pair_y.ptr, total.ptr, renormalise};
                cuda::matvec_digits(a, nullptr);
                a.route_out = {};
                TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
                const auto got_pub = y.download();
                CHECK(std::memcmp(got_pub.data(), want.data(), got_pub.size() * sizeof(float)) == 0);
                CHECK(pub.ids.download() == route.ids.download());
                CHECK(test::same_bits(pub.weights.download(), route.weights.download()));
                const int32_t n_g = route.n_groups.download()[0];
                CHECK(pub.n_groups.download()[0] == n_g);
                CHECK(n_g == (variant == 3 ? 0 : sh.k));
                auto head = [](const std::vector<int32_t> &v, int32_t n) { return std::vector<int32_t>(v.begin(), v.begin() + n); };
                CHECK(head(pub.group_off.download(), n_g + 1) == head(route.group_off.download(), n_g + 1));
                CHECK(head(pub.group_expert.download(), n_g) == head(route.group_expert.download(), n_g));
                CHECK(head(pub.pair_x.download(), n_g) == head(route.pair_x.download(), n_g));
                CHECK(head(pub.pair_y.download(), n_g) == head(route.pair_y.download(), n_g));
                CHECK(total.download()[0] == total_ref.download()[0]);
            }
        }
    }
}

TEST_CASE("a block with a non-finite element quantises to a NaN scale", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    std::mt19937_64 rng(4200);
    const int32_t n_in = 512, n_out = 40, rows = 3;
    const auto w = random_matrix(rng, ggml_type::q4_k, n_in, n_out, 0.05f);
    auto x = test::random_floats(rng, size_t(n_in) * rows);
    x[300] = std::nanf("");                             // row 0, block 1
    x[size_t(n_in) + 17] = std::numeric_limits<float>::infinity();  // row 1, block 0
    device_buffer<uint8_t> dw(w);
    device_buffer<float> dx(x), dy(size_t(n_out) * rows);
    device_digits dd(rows, n_in);
    dd.digits.poison();
    cuda::digits_quantize({dx.ptr, rows, n_in, dd.view()}, nullptr);
    const test::host_digits want = test::quantize_host(x, rows, n_in);
    CHECK(dd.digits.download() == want.digits);
    CHECK(test::same_bits(dd.scales.download(), want.scales));
    CHECK(dd.sums.download() == want.sums);
    const auto scales = dd.scales.download();
    CHECK(std::isnan(scales[1]));
    CHECK(std::isnan(scales[2]));
    CHECK(std::isfinite(scales[0]));
    CHECK(std::isfinite(scales[3]));
    cuda::matvec_digits({dw.ptr, n_in, n_out, dd.view(), rows, dy.ptr, n_out}, nullptr);
    const auto got = dy.download();
    for (int32_t j = 0; j < n_out; ++j) {
        CHECK(std::isnan(got[size_t(j)]));
        CHECK(std::isnan(got[size_t(n_out + j)]));
        CHECK(std::isfinite(got[size_t(2 * n_out + j)]));
    }
}

// The experts' down on digits: fp32 rows quantised by digits_quantize first or by the product's own
// blocks, streamed or staged: all four bitwise equal, within tolerance of the CPU, each row's pairs
// bitwise alone and in the step; a pair with a NaN element gives NaN and leaves the others alone.
TEST_CASE("grouped plain digit products match the CPU, in-kernel digits equal the producer's", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{4};
    struct shape { int32_t n_in, n_out; };
    uint64_t seed = 4300;
    // 768: three blocks a row (three warps); 512: four warps, one idle; 2,048: two blocks a warp.
    // 20 rows x k 2 over 5 experts: groups of more than 8 pairs (several passes); row 5 alone
    // below: one pass.
    for (const shape sh : {shape{768, 200}, shape{512, 70}, shape{2048, 40}}) {
        const int32_t n_expert = 5, k = 2, rows = 20, pairs = rows * k;
        std::mt19937_64 rng(++seed);
        INFO("n_in " << sh.n_in << " n_out " << sh.n_out);
        std::vector<std::vector<uint8_t>> down;
        std::vector<uint8_t> all;
        for (int32_t e = 0; e < n_expert; ++e) {
            down.push_back(random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f));
            all.insert(all.end(), down.back().begin(), down.back().end());
        }
        auto x = test::random_floats(rng, size_t(sh.n_in) * pairs, 0.3f);  // pair p's SwiGLU output: row p
        for (size_t i = 0; i < x.size(); i += 89) x[i] *= 25.0f;
        const int32_t nan_pair = 7;
        x[size_t(nan_pair) * sh.n_in + 260] = std::nanf("");
        const host_groups hg = route_random(rng, rows, k, n_expert);
        std::vector<float> ref(size_t(pairs) * sh.n_out);
        for (int32_t p = 0; p < pairs; ++p)
            cpu::matmul(ctx, host_matrix(down[size_t(hg.ids[size_t(p)])], ggml_type::q4_k, sh.n_in, sh.n_out),
                        x.data() + size_t(p) * sh.n_in, ref.data() + size_t(p) * sh.n_out, 1);
        device_buffer<uint8_t> dw(all);
        device_buffer<float> dx(x), dy(ref.size());
        device_digits dd(pairs, sh.n_in);
        cuda::digits_quantize({dx.ptr, pairs, sh.n_in, dd.view()}, nullptr);
        device_groups gr(hg);
        auto run = [&](bool in_kernel, bool stage, int32_t solo_warps = 0, int32_t group_rows = 0) {
            cuda::matvec_digits_args a = gr.plain_args(dw.ptr, sh.n_in, sh.n_out, dy.ptr, n_expert);
            a.solo_warps = solo_warps;
            a.group_rows = group_rows;
            if (in_kernel) {
                a.x_f32 = dx.ptr;
                a.x_f32_stride = sh.n_in;
            } else {
                a.x = dd.view();
            }
            a.stage = stage;
            a.groups_settled = in_kernel != stage;  // weights loaded before the PDL wait or after
            dy.poison();
            cuda::matvec_digits(a, nullptr);
            return dy.download();
        };
        const auto got = run(false, false);
        // The CPU's digit products of the same pairs: the same bits (the NaN pair's outputs are NaN
        // on both; NaN payloads are not compared).
        {
            const auto cpu_y = test::cpu_grouped_product(down, hg.ids, sh.n_in, sh.n_out, x, [](size_t p) { return p; },
                                                         cuda::digits_grouped_k_split(false, sh.n_in));
            bool same = true;
            for (size_t i = 0; i < got.size(); ++i)
                same = same && (std::isnan(got[i]) ? std::isnan(cpu_y[i]) : std::memcmp(&got[i], &cpu_y[i], sizeof(float)) == 0);
            CHECK(same);
        }
        for (const bool in_kernel : {false, true})
            for (const bool stage : {false, true}) {
                INFO("in-kernel digits " << in_kernel << " staged " << stage);
                CHECK(test::same_bits(run(in_kernel, stage), got));
            }
        for (const bool stage : {true, false}) {  // solo warps, staged or streamed (K = 768; 512 keeps the blocks)
            INFO("solo staged " << stage);
            CHECK(test::same_bits(run(false, stage, 4), got));
        }
        for (const int32_t group_rows : {1, 3}) {  // staged solo warps striding over the groups
            INFO("solo staged, rows of blocks " << group_rows);
            CHECK(test::same_bits(run(false, true, 4, group_rows), got));
        }
        double num = 0.0, den = 0.0;
        for (int32_t p = 0; p < pairs; ++p)
            for (int32_t j = 0; j < sh.n_out; ++j) {
                const float v = got[size_t(p) * sh.n_out + j], r = ref[size_t(p) * sh.n_out + j];
                if (p == nan_pair) {
                    CHECK(std::isnan(v));
                    continue;
                }
                num += double(v - r) * double(v - r);
                den += double(r) * double(r);
            }
        INFO("relative L2 error " << std::sqrt(num / den));
        CHECK(std::sqrt(num / den) <= test::tolerance::moe);
        // Row 5 alone, its digits made in the kernel, staged: bitwise the step's (made by the producer).
        const int32_t r = 5;
        const host_groups one = groups_of_row(hg, r, k);
        device_groups g1(one);
        device_buffer<float> x1(std::vector<float>(x.begin() + size_t(r * k) * sh.n_in, x.begin() + size_t(r * k + k) * sh.n_in));
        device_buffer<float> y1(size_t(k) * sh.n_out);
        cuda::matvec_digits_args a1 = g1.plain_args(dw.ptr, sh.n_in, sh.n_out, y1.ptr, k);
        a1.x_f32 = x1.ptr;
        a1.x_f32_stride = sh.n_in;
        a1.stage = true;  // staged: whole tiles of odd-block rows (768) in one copy
        cuda::matvec_digits(a1, nullptr);
        CHECK(std::memcmp(y1.download().data(), got.data() + size_t(r * k) * sh.n_out, size_t(k) * sh.n_out * sizeof(float)) == 0);
    }
}

// The prompt rows' digit producers fused into the launches before them: the FFN norm (rmsnorm with
// y_digits) and the combine + next norm (moe_combine with h_digits) write the same y / x / h bits as
// without digits (the CPU's) and the digits the host twin of digits_quantize makes of that h.
TEST_CASE("the norm and the combine write h's digits bitwise digits_quantize's", "[gpu][kernels]") {
    {
        // Which rows take the fused digits (host checks, no GPU needed): whole digit blocks,
        // 16-byte aligned rows, no split output beside them, and the combine only with its norm.
        alignas(16) static float buf[64];
        float *p = buf, *odd = buf + 1;
        const cuda::rmsnorm_args ok{p, p, p, 1, 512, 1e-6f};
        CHECK(cuda::rmsnorm_digits_applies(ok));
        CHECK_FALSE(cuda::rmsnorm_digits_applies({p, p, p, 1, 320, 1e-6f}));
        CHECK_FALSE(cuda::rmsnorm_digits_applies({p, odd, p, 1, 512, 1e-6f}));
        CHECK_FALSE(cuda::rmsnorm_digits_applies({p, p, p, 1, 512, 1e-6f, reinterpret_cast<uint4 *>(p), p}));
        cuda::moe_combine_args ca;
        ca.x = p; ca.out = p; ca.norm = p; ca.h = p; ca.d_model = 2048;
        CHECK(cuda::moe_combine_digits_applies(ca));
        ca.h = odd;
        CHECK_FALSE(cuda::moe_combine_digits_applies(ca));
        ca.h = p;
        ca.d_model = 2080;
        CHECK_FALSE(cuda::moe_combine_digits_applies(ca));
        ca.d_model = 2048;
        ca.norm = nullptr;
        CHECK_FALSE(cuda::moe_combine_digits_applies(ca));
    }
    if (!test::gpu_present()) return;
    std::mt19937_64 rng(4100);
    for (const int32_t n : {256, 768, 2048, 4096, 8192}) {
        for (const int32_t rows : {1, 7}) {
            const int32_t k = n == 768 ? 3 : 8;  // 3: a partial batch of slots in the combine
            INFO("n " << n << " rows " << rows << " k " << k);
            auto x = test::random_floats(rng, size_t(n) * rows, 3.0f);
            for (size_t i = 0; i < x.size(); i += 131) x[i] *= 40.0f;  // outliers: the blocks' scales follow them
            const auto w = test::random_floats(rng, size_t(n));
            auto check_digits = [&](device_digits &dd, const std::vector<float> &h) {
                const test::host_digits want = test::quantize_host(h, rows, n);
                CHECK(dd.digits.download() == want.digits);
                CHECK(test::same_bits(dd.scales.download(), want.scales));
                CHECK(dd.sums.download() == want.sums);
            };
            {
                std::vector<float> ref(x.size());
                cpu::rmsnorm(x.data(), w.data(), ref.data(), rows, n, 1e-6f);
                device_buffer<float> dx(x), dw(w), dy(x.size());
                dy.poison();
                device_digits dd(rows, n);
                dd.digits.poison();
                dd.scales.poison();
                dd.sums.poison();
                cuda::rmsnorm_args na{dx.ptr, dw.ptr, dy.ptr, rows, n, 1e-6f};
                na.y_digits = dd.view();
                cuda::rmsnorm(na, nullptr);
                const auto got = dy.download();
                CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
                check_digits(dd, ref);
            }
            {
                // Row 0 a padding row (slot -1): x stays, h is x's norm, as moe_combine_kernel does.
                const auto out = test::random_floats(rng, size_t(n) * rows * k);
                const auto wts = test::random_floats(rng, size_t(rows) * k);
                std::vector<int32_t> slots(static_cast<size_t>(rows));
                for (int32_t r = 0; r < rows; ++r) slots[size_t(r)] = r == 0 && rows > 1 ? -1 : r;
                std::vector<float> x_ref = x, h_ref(x.size());
                cpu::moe_combine(x_ref.data(), out.data(), wts.data(), rows, k, n);
                for (int32_t r = 0; r < rows; ++r)
                    if (slots[size_t(r)] < 0) std::copy_n(x.data() + size_t(r) * n, n, x_ref.data() + size_t(r) * n);
                cpu::rmsnorm(x_ref.data(), w.data(), h_ref.data(), rows, n, 1e-6f);
                device_buffer<float> dx(x), dout(out), dwts(wts), dnorm(w), dh(x.size());
                device_buffer<int32_t> dslots(slots);
                dh.poison();
                device_digits dd(rows, n);
                dd.digits.poison();
                cuda::moe_combine_args ca;
                ca.x = dx.ptr; ca.out = dout.ptr; ca.weights = dwts.ptr; ca.slots = dslots.ptr; ca.norm = dnorm.ptr; ca.h = dh.ptr;
                ca.n_rows = rows; ca.k = k; ca.d_model = n; ca.eps = 1e-6f;
                ca.h_digits = dd.view();
                cuda::moe_combine(ca, nullptr);
                const auto gx = dx.download(), gh = dh.download();
                CHECK(std::memcmp(gx.data(), x_ref.data(), gx.size() * sizeof(float)) == 0);
                CHECK(std::memcmp(gh.data(), h_ref.data(), gh.size() * sizeof(float)) == 0);
                check_digits(dd, h_ref);
            }
        }
    }
}

// Timing: ./test_cuda_matvec_digits "[.bench]". Decode shapes of qwen3-30b-a3b (Q/K/V 5,120 x 2,048;
// all of a one-row step's gate/up 12,288 x 2,048; wo 2,048 x 4,096; down 2,048 x 768) at 1-16
// rows: matvec() on split rows (the engine's path) against matvec_digits on digit rows, each
// launch's producer excluded; errors against the CPU for both.
TEST_CASE("dense digit products timing beside matvec", "[.bench][gpu]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{16};
    std::mt19937_64 rng(77);
    launch_timer timer;
    auto median_us = [&](auto &&fn) { return timer.median_us(fn, 50); };
    struct shape { const char *name; int32_t n_in, n_out; };
    for (const shape &sh : {shape{"qkv", 2048, 5120}, shape{"gate/up x8", 2048, 12288}, shape{"wo", 4096, 2048}, shape{"down", 768, 2048}}) {
        const auto w = random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f);
        device_buffer<uint8_t> dw(w);
        for (const int32_t rows : {1, 2, 4, 8, 16}) {
            const auto x = test::random_floats(rng, size_t(sh.n_in) * rows);
            std::vector<float> ref(size_t(sh.n_out) * rows);
            cpu::matmul(ctx, host_matrix(w, ggml_type::q4_k, sh.n_in, sh.n_out), x.data(), ref.data(), rows);
            device_buffer<float> dx(x), y_split(ref.size()), y_dig(ref.size());
            device_buffer<uint16_t> dsplit(test::host_split(x));
            device_buffer<float> dsums(test::host_sums32(x));
            cuda::matvec_args a = test::dense_product_args(dw.ptr, ggml_type::q4_k, sh.n_in, sh.n_out, dx.ptr, y_split.ptr, rows);
            a.x_split = reinterpret_cast<const uint4 *>(dsplit.ptr);
            a.x_sums = dsums.ptr;
            const float t_split = median_us([&] { cuda::matvec(a, nullptr); });
            const auto gs = y_split.download();
            std::printf("%-11s rows %2d: matvec %6.2f us (err %.1e)", sh.name, rows, t_split, rel_err(gs.data(), ref.data(), ref.size()));
            device_digits dd(rows, sh.n_in);
            cuda::digits_quantize({dx.ptr, rows, sh.n_in, dd.view()}, nullptr);
            const cuda::matvec_digits_args b{dw.ptr, sh.n_in, sh.n_out, dd.view(), rows, y_dig.ptr, sh.n_out};
            const float t_dig = median_us([&] { cuda::matvec_digits(b, nullptr); });
            const auto gd = y_dig.download();
            std::printf("  digits %6.2f us (x%.2f, err %.1e)\n", t_dig, t_split / t_dig, rel_err(gd.data(), ref.data(), ref.size()));
            CHECK(t_dig > 0.0f);
        }
    }
}

// Timing: the vocabulary head of qwen3-30b-a3b (151,936 x 2,048 Q4_K, 175 MB: more than L2, so
// every launch streams it from DRAM) at 1 and 16 rows, matvec() on split rows as the engine runs
// it. The weights are 4,096 random rows repeated (quantising all 151,936 would take minutes).
TEST_CASE("head product timing", "[.bench][gpu]") {
    if (!test::gpu_present()) return;
    std::mt19937_64 rng(79);
    launch_timer timer;
    constexpr int32_t n_in = 2048, n_out = 151936, n_base = 4096;
    for (const ggml_type type : {ggml_type::q4_k, ggml_type::q6_k}) {
    const auto base = random_matrix(rng, type, n_in, n_base, 0.05f);
    std::vector<uint8_t> w(base.size() / n_base * size_t(n_out));
    for (size_t off = 0; off < w.size(); off += base.size()) std::memcpy(w.data() + off, base.data(), std::min(base.size(), w.size() - off));
    device_buffer<uint8_t> dw(w);
    for (const int32_t rows : {1, 4, 8, 12, 16}) {
        const auto x = test::random_floats(rng, size_t(n_in) * rows);
        device_buffer<float> dx(x), y(size_t(n_out) * rows);
        device_buffer<uint16_t> dsplit(test::host_split(x));
        device_buffer<float> dsums(test::host_sums32(x));
        cuda::matvec_args a = test::dense_product_args(dw.ptr, type, n_in, n_out, dx.ptr, y.ptr, rows);
        a.x_split = reinterpret_cast<const uint4 *>(dsplit.ptr);
        a.x_sums = dsums.ptr;
        const float us = timer.median_us([&] { cuda::matvec(a, nullptr); }, 50);
        const auto out = y.download();
        uint64_t hash = 1469598103934665603ull;
        for (float v : out) { uint32_t u; std::memcpy(&u, &v, 4); hash = (hash ^ u) * 1099511628211ull; }
        std::printf("head %s rows %2d: matvec %7.2f us, %.0f GB/s of weights, hash %016llx\n", std::string(ggml_type_name(type)).c_str(), rows, us,
                    double(w.size()) / (double(us) * 1e3), (unsigned long long)hash);
        CHECK(us > 0.0f);
        if (type == ggml_type::q4_k) {
            // The same product on digits, as one group: the decode kernel and the prompt tiles.
            device_digits dd(rows, n_in);
            cuda::digits_quantize({dx.ptr, rows, n_in, dd.view()}, nullptr);
            const cuda::matvec_digits_args b = cuda::one_group_args(dw.ptr, n_in, n_out, dd.view(), rows, y.ptr, n_out);
            const float t_vec = timer.median_us([&] { cuda::matvec_digits(b, nullptr); }, 50);
            cuda::matvec_digits_args b1 = b, b2 = b;
            b1.passes_together = 0;
            b2.passes_together = 2;
            const float t_vec1 = timer.median_us([&] { cuda::matvec_digits(b1, nullptr); }, 50);
            const float t_vec2 = timer.median_us([&] { cuda::matvec_digits(b2, nullptr); }, 50);
            const float t_mat = timer.median_us([&] { cuda::matmul_digits(b, nullptr); }, 50);
            const float t_q = timer.median_us([&] { cuda::digits_quantize({dx.ptr, rows, n_in, dd.view()}, nullptr); }, 50);
            std::printf("head q4_K rows %2d: digits matvec %7.2f us (a pass at a time %7.2f, two %7.2f), tiles %7.2f us, "
                        "quantise %5.2f us\n",
                        rows, t_vec, t_vec1, t_vec2, t_mat, t_q);
        }
    }
    }
}

// Timing: the experts' gate/up of qwen3-30b-a3b (128 experts of 768 x 2,048, k = 8) on 1, 4 and 16
// rows of random routing: matvec() (its grouped SwiGLU kernels, staged above 8 pairs) against the
// grouped digit kernel.
TEST_CASE("grouped SwiGLU digit products timing beside matvec", "[.bench][gpu]") {
    if (!test::gpu_present()) return;
    std::mt19937_64 rng(78);
    const int32_t n_expert = 128, k = 8, n_in = 2048, n_out = 768, distinct = 16;
    std::vector<uint8_t> all_gate, all_up;
    {
        std::vector<std::vector<uint8_t>> g, u;
        for (int32_t e = 0; e < distinct; ++e) {
            g.push_back(random_matrix(rng, ggml_type::q4_k, n_in, n_out, 0.05f));
            u.push_back(random_matrix(rng, ggml_type::q4_k, n_in, n_out, 0.05f));
        }
        for (int32_t e = 0; e < n_expert; ++e) {
            all_gate.insert(all_gate.end(), g[size_t(e % distinct)].begin(), g[size_t(e % distinct)].end());
            all_up.insert(all_up.end(), u[size_t(e % distinct)].begin(), u[size_t(e % distinct)].end());
        }
    }
    device_buffer<uint8_t> dg(all_gate), du(all_up);
    launch_timer timer;
    auto median_us = [&](auto &&fn) { return timer.median_us(fn, 20); };
    for (const int32_t rows : {1, 2, 4, 8, 16}) {
        const auto x = test::random_floats(rng, size_t(n_in) * rows);
        const host_groups hg = route_random(rng, rows, k, n_expert);
        device_groups gr(hg);
        device_buffer<float> dx(x), y_split(size_t(rows) * k * n_out), y_dig(size_t(rows) * k * n_out);
        device_buffer<uint16_t> dsplit(test::host_split(x));
        device_buffer<float> dsums(test::host_sums32(x));
        cuda::matvec_args a = gr.matvec_grouped_args(dg.ptr, du.ptr, n_in, n_out, dx.ptr, gr.px.ptr, y_split.ptr,
                                                     std::min(rows * k, n_expert), rows * k);
        a.x_split = reinterpret_cast<const uint4 *>(dsplit.ptr);
        a.x_sums = dsums.ptr;
        device_digits dd(rows, n_in);
        cuda::digits_quantize({dx.ptr, rows, n_in, dd.view()}, nullptr);
        cuda::matvec_digits_args b = gr.swiglu_args(dg.ptr, du.ptr, n_in, n_out, dd.view(), y_dig.ptr, a.max_groups);
        const float t_split = median_us([&] { cuda::matvec(a, nullptr); });
        const float t_dig = median_us([&] { cuda::matvec_digits(b, nullptr); });
        b.stage = true;
        const float t_staged = median_us([&] { cuda::matvec_digits(b, nullptr); });
        b.solo_warps = 2;
        const float t_solo_staged = median_us([&] { cuda::matvec_digits(b, nullptr); });
        b.solo_warps = 4;
        b.stage = false;
        const float t_solo = median_us([&] { cuda::matvec_digits(b, nullptr); });
        const auto gs = y_split.download(), gd = y_dig.download();
        std::printf("gate/up grouped rows %2d (%3d groups): matvec %6.2f us  2 digits %6.2f us (x%.2f), staged %6.2f us (x%.2f), "
                    "solo %6.2f (x%.2f) staged %6.2f (x%.2f)  digits vs split %.1e\n",
                    rows, hg.n_groups, t_split, t_dig, t_split / t_dig, t_staged, t_split / t_staged, t_solo, t_split / t_solo, t_solo_staged,
                    t_split / t_solo_staged, rel_err(gd.data(), gs.data(), gs.size()));
        CHECK(t_dig > 0.0f);
    }
}

// Timing: the experts' down of qwen3-30b-a3b (128 experts of 2,048 x 768, k = 8) on 1-16 rows of
// random routing, each with its producer where it has one: matvec() (the split made inside down up
// to 8 pairs, by split_rows above, as the engine does) against the digit kernel with its digits
// made in the kernel or by digits_quantize, streamed and staged.
TEST_CASE("grouped down digit products timing beside matvec", "[.bench][gpu]") {
    if (!test::gpu_present()) return;
    std::mt19937_64 rng(79);
    const int32_t n_expert = 128, k = 8, n_in = 768, n_out = 2048, distinct = 16;
    std::vector<uint8_t> all;
    {
        std::vector<std::vector<uint8_t>> d;
        for (int32_t e = 0; e < distinct; ++e) d.push_back(random_matrix(rng, ggml_type::q4_k, n_in, n_out, 0.05f));
        for (int32_t e = 0; e < n_expert; ++e) all.insert(all.end(), d[size_t(e % distinct)].begin(), d[size_t(e % distinct)].end());
    }
    device_buffer<uint8_t> dw(all);
    launch_timer timer;
    auto median_us = [&](auto &&fn) { return timer.median_us(fn, 20); };
    for (const int32_t rows : {1, 2, 4, 8, 16}) {
        const int32_t pairs = rows * k;
        const auto x = test::random_floats(rng, size_t(n_in) * pairs, 0.3f);
        const host_groups hg = route_random(rng, rows, k, n_expert);
        device_groups gr(hg);
        device_buffer<float> dx(x), y_split(size_t(pairs) * n_out), y_dig(size_t(pairs) * n_out), dsums(size_t(pairs) * n_in / 32);
        device_buffer<uint4> dsplit(size_t(pairs) * n_in / 4);
        cuda::matvec_args a = gr.matvec_grouped_args(dw.ptr, nullptr, n_in, n_out, dx.ptr, gr.py.ptr, y_split.ptr,
                                                     std::min(pairs, n_expert), pairs);
        a.groups_settled = true;
        const bool split_launch = pairs > 8;
        if (split_launch) {
            a.x_split = dsplit.ptr;
            a.x_sums = dsums.ptr;
        }
        const cuda::split_rows_args sa{dx.ptr, pairs, n_in, n_in, dsplit.ptr, dsums.ptr};
        const float t_split = median_us([&] {
            if (split_launch) cuda::split_rows(sa, nullptr);
            cuda::matvec(a, nullptr);
        });
        device_digits dd(pairs, n_in);
        cuda::matvec_digits_args b = gr.plain_args(dw.ptr, n_in, n_out, y_dig.ptr, a.max_groups);
        b.x_f32 = dx.ptr;
        b.x_f32_stride = n_in;
        b.groups_settled = true;
        const float t_in = median_us([&] { cuda::matvec_digits(b, nullptr); });
        b.stage = true;
        const float t_in_staged = median_us([&] { cuda::matvec_digits(b, nullptr); });
        b.x_f32 = nullptr;
        b.x = dd.view();
        const cuda::digits_quantize_args qa{dx.ptr, pairs, n_in, dd.view()};
        const float t_pre_staged = median_us([&] {
            cuda::digits_quantize(qa, nullptr);
            cuda::matvec_digits(b, nullptr);
        });
        float t_solo[2];
        for (const int staged : {0, 1}) {
            b.stage = staged != 0;
            b.solo_warps = 4;
            t_solo[staged] = median_us([&] {
                cuda::digits_quantize(qa, nullptr);
                cuda::matvec_digits(b, nullptr);
            });
        }
        b.solo_warps = 0;
        b.stage = false;
        const float t_pre = median_us([&] {
            cuda::digits_quantize(qa, nullptr);
            cuda::matvec_digits(b, nullptr);
        });
        const auto gs = y_split.download(), gd = y_dig.download();
        std::printf("down grouped rows %2d (%3d groups): matvec%s %6.2f us  in-kernel digits %6.2f (x%.2f) staged %6.2f (x%.2f)  "
                    "quantize + digits %6.2f (x%.2f) staged %6.2f (x%.2f) solo %6.2f (x%.2f) staged %6.2f (x%.2f)  "
                    "digits vs split %.1e\n",
                    rows, hg.n_groups, split_launch ? " + split" : "", t_split, t_in, t_split / t_in, t_in_staged,
                    t_split / t_in_staged, t_pre, t_split / t_pre, t_pre_staged, t_split / t_pre_staged, t_solo[0], t_split / t_solo[0], t_solo[1],
                    t_split / t_solo[1],
                    rel_err(gd.data(), gs.data(), gs.size()));
        CHECK(t_in > 0.0f);
    }
}
