// tests/kernels/test_cuda_matmul_digits.cpp - the prompt tiles of the grouped digit products
// (matmul_digits, cuda/matmul_prompt_digits.cu): bitwise the decode kernels' outputs
// (matvec_digits) for the same digit rows, on groups that fill several 32-pair tiles, end in
// partial ones, and matrices whose blocks of 256 divide unevenly among the K split's partials (or
// leave some empty); within tolerance of the CPU's fp32 products. The timing beside the bf16 prompt
// tiles is in test_cuda_matmul_prompt's [.bench] case. Dense products as one group (prompt rows' Q/K/V
// and wo) likewise, with the residual add, and with each tile's K partials on a cluster of blocks.
// Each on the mma.sync tiles and, where the build and device have sm_90a, the warpgroup tiles.
#include "gpu_test_util.h"
#include "quant_test_util.h"
#include "digit_groups_test_util.h"
#include "digits_test_util.h"

#include "cuda/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/matvec_digits.h"
#include "src/cpu/cpu_ops.h"
#include "tandem/quant.h"
#include "tandem/swiglu.h"

#include <cmath>
#include <cstring>
#include <tuple>

using namespace tandem;
using tandem::test::device_buffer;
using tandem::test::device_digits;
using tandem::test::device_groups;
using tandem::test::host_groups;
using tandem::test::host_matrix;
using tandem::test::random_matrix;
using tandem::test::rel_err;
using tandem::test::route_random;

namespace {

struct grouped_shape {
    int32_t n_expert, k, rows, n_in, n_out;
};

// Random activations with a block of zeros and, if `outliers`, every 97th element 20x (the blocks'
// scales follow them: the digits keep fewer bits of the rest).
std::vector<float> activations(std::mt19937_64 &rng, size_t n, bool outliers) {
    auto x = test::random_floats(rng, n);
    if (outliers)
        for (size_t i = 0; i < x.size(); i += 97) x[i] *= 20.0f;
    std::fill(x.begin(), x.begin() + std::min<size_t>(256, n), 0.0f);
    return x;
}

int32_t largest_group(const host_groups &h) {
    int32_t m = 0;
    for (int32_t g = 0; g < h.n_groups; ++g) m = std::max(m, h.group_off[size_t(g) + 1] - h.group_off[size_t(g)]);
    return m;
}

// The same product by the decode kernels (matvec_digits) and by the tiles (matmul_digits, a bound of
// `pairs`), each into a poisoned buffer of `count` floats: the tiles' outputs, after checking that
// they are bitwise the decode kernels'.
std::vector<float> tiles_checked_against_decode(cuda::matvec_digits_args a, int32_t pairs, size_t count) {
    device_buffer<float> y_tiles(count), y_decode(count);
    y_decode.poison();
    a.y = y_decode.ptr;
    cuda::matvec_digits(a, nullptr);
    const auto want = y_decode.download();
    std::vector<float> got;
    // Both mma.sync tile widths, the warpgroup tiles (sm_90a builds) of 32 and 64 pairs, then
    // whatever matmul_digits chooses by itself (0).
    for (const int32_t width : {64, 128, -32, -64, 0}) {
        if (width < 0 && !cuda::wgmma_built()) continue;
        INFO("tile weight rows " << width << (width < 0 ? " (wgmma: pairs a tile)" : width == 0 ? " (automatic)" : ""));
        y_tiles.poison();
        a.y = y_tiles.ptr;
        a.n_pairs = pairs;
        a.tile_weight_rows = width > 0 ? width : 0;
        a.tile_pairs = width < 0 ? -width : 0;
        a.engine = width < 0    ? cuda::matvec_digits_args::tile_engine::wgmma
                   : width > 0  ? cuda::matvec_digits_args::tile_engine::mma_sync
                                : cuda::matvec_digits_args::tile_engine::automatic;
        cuda::matmul_digits(a, nullptr);
        TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
        got = y_tiles.download();
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    }
    return got;
}

}  // namespace

TEST_CASE("prompt digit tiles: grouped SwiGLU bitwise the decode kernels, within tolerance of the CPU", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{4};
    // 2048: 8 blocks (partials 0,4 | 1,5 | 2,6 | 3,7); 1280: 5 (uneven); 768: 3 (one partial
    // empty); 256: one block (three empty). Groups of ~9 to ~150 pairs: one to five 32-pair tiles;
    // the last shape's ~200-pair groups span two of the warpgroup tiles' 128-pair chunks.
    const grouped_shape shapes[] = {{4, 2, 150, 2048, 200}, {8, 3, 260, 512, 64}, {3, 1, 200, 1280, 72}, {5, 2, 40, 256, 130},
                                    {16, 4, 37, 768, 96},   {2, 2, 200, 512, 40}};
    uint64_t seed = 5000;
    for (const grouped_shape &sh : shapes) {
        std::mt19937_64 rng(++seed);
        std::vector<std::vector<uint8_t>> gate, up;
        std::vector<uint8_t> all_gate, all_up;
        for (int32_t e = 0; e < sh.n_expert; ++e) {
            gate.push_back(random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f));
            up.push_back(random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f));
            all_gate.insert(all_gate.end(), gate.back().begin(), gate.back().end());
            all_up.insert(all_up.end(), up.back().begin(), up.back().end());
        }
        // No outliers here: through SwiGLU they take the error to ~2.4e-4 (measured on an H200), the decode
        // kernels' as well (the bits are theirs); the plain products below have them.
        const auto x = activations(rng, size_t(sh.n_in) * sh.rows, false);
        const host_groups hg = route_random(rng, sh.rows, sh.k, sh.n_expert);
        INFO("n_in " << sh.n_in << " n_out " << sh.n_out << " rows " << sh.rows << " largest group " << largest_group(hg));
        const int32_t pairs = sh.rows * sh.k;
        device_buffer<uint8_t> dg(all_gate), du(all_up);
        device_buffer<float> dx(x);
        device_digits dd(sh.rows, sh.n_in);
        cuda::digits_quantize({dx.ptr, sh.rows, sh.n_in, dd.view()}, nullptr);
        device_groups gr(hg);
        // max_groups n_expert: more than the step's groups where some expert got no pair.
        const auto got = tiles_checked_against_decode(gr.swiglu_args(dg.ptr, du.ptr, sh.n_in, sh.n_out, dd.view(), nullptr, sh.n_expert),
                                                      pairs, size_t(pairs) * sh.n_out);

        {
            // The CPU's digit products of gate and up through its SwiGLU: within the exp functions' ulps.
            auto x_row = [&](size_t p) { return p / size_t(sh.k); };
            const auto cg = test::cpu_grouped_product(gate, hg.ids, sh.n_in, sh.n_out, x, x_row, cuda::digits_grouped_k_split(true, sh.n_in));
            const auto cu = test::cpu_grouped_product(up, hg.ids, sh.n_in, sh.n_out, x, x_row, cuda::digits_grouped_k_split(true, sh.n_in));
            CHECK(test::max_rel_diff(test::cpu_swiglu(cg, cu), got) <= 1e-6);
        }
        std::vector<float> ref(got.size()), gv(size_t(sh.n_out)), uv(size_t(sh.n_out));
        for (int32_t p = 0; p < pairs; ++p) {
            const int32_t e = hg.ids[size_t(p)];
            cpu::matmul(ctx, host_matrix(gate[size_t(e)], ggml_type::q4_k, sh.n_in, sh.n_out), x.data() + size_t(p / sh.k) * sh.n_in, gv.data(), 1);
            cpu::matmul(ctx, host_matrix(up[size_t(e)], ggml_type::q4_k, sh.n_in, sh.n_out), x.data() + size_t(p / sh.k) * sh.n_in, uv.data(), 1);
            for (int32_t j = 0; j < sh.n_out; ++j)
                ref[size_t(p) * sh.n_out + j] = swiglu(gv[size_t(j)], uv[size_t(j)]);
        }
        CHECK(rel_err(got.data(), ref.data(), ref.size()) <= test::tolerance::moe);
    }
}

TEST_CASE("prompt digit tiles: grouped plain products bitwise the decode kernels, within tolerance of the CPU", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{4};
    // 768: three blocks (K split 3, the experts' down); 2048: 8 blocks (split 4); 512: two (two
    // partials empty). Each pair reads its own row (the SwiGLU output of the pair), as down does.
    // The last shape's ~170-pair groups span two 128-pair chunks.
    const grouped_shape shapes[] = {{5, 2, 100, 768, 200}, {4, 2, 90, 2048, 130}, {6, 2, 70, 512, 40}, {3, 2, 250, 768, 48}};
    uint64_t seed = 5100;
    for (const grouped_shape &sh : shapes) {
        std::mt19937_64 rng(++seed);
        std::vector<std::vector<uint8_t>> w;
        std::vector<uint8_t> all;
        for (int32_t e = 0; e < sh.n_expert; ++e) {
            w.push_back(random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f));
            all.insert(all.end(), w.back().begin(), w.back().end());
        }
        const int32_t pairs = sh.rows * sh.k;
        const auto x = activations(rng, size_t(sh.n_in) * pairs, true);
        const host_groups hg = route_random(rng, sh.rows, sh.k, sh.n_expert);
        INFO("n_in " << sh.n_in << " n_out " << sh.n_out << " pairs " << pairs << " largest group " << largest_group(hg));
        device_buffer<uint8_t> dw(all);
        device_buffer<float> dx(x);
        device_digits dd(pairs, sh.n_in);
        cuda::digits_quantize({dx.ptr, pairs, sh.n_in, dd.view()}, nullptr);
        device_groups gr(hg);
        cuda::matvec_digits_args a = gr.plain_args(dw.ptr, sh.n_in, sh.n_out, nullptr, sh.n_expert);
        a.x = dd.view();
        const auto got = tiles_checked_against_decode(a, pairs, size_t(pairs) * sh.n_out);
        CHECK(test::same_bits(test::cpu_grouped_product(w, hg.ids, sh.n_in, sh.n_out, x, [](size_t p) { return p; },
                                                        cuda::digits_grouped_k_split(false, sh.n_in)),
                              got));

        std::vector<float> ref(got.size());
        for (int32_t p = 0; p < pairs; ++p)
            cpu::matmul(ctx, host_matrix(w[size_t(hg.ids[size_t(p)])], ggml_type::q4_k, sh.n_in, sh.n_out), x.data() + size_t(p) * sh.n_in,
                        ref.data() + size_t(p) * sh.n_out, 1);
        CHECK(rel_err(got.data(), ref.data(), ref.size()) <= test::tolerance::moe);
    }
}

TEST_CASE("dense digit products as one group: tiles bitwise the decode kernels, accumulate, within tolerance of the CPU",
          "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{4};
    // Prompt rows' Q/K/V and wo shapes, shrunk: K of 8 blocks (split 4 ways), 16 (wo's 4,096), 3
    // (one partial empty) and 5 (uneven); rows of one partial tile, several tiles, one row.
    struct dense_shape {
        int32_t n_in, n_out, rows;
    };
    const dense_shape shapes[] = {{2048, 200, 70}, {4096, 130, 33}, {768, 64, 5}, {1280, 40, 100}, {2048, 16, 1}};
    uint64_t seed = 5200;
    for (const dense_shape &sh : shapes) {
        std::mt19937_64 rng(++seed);
        INFO("n_in " << sh.n_in << " n_out " << sh.n_out << " rows " << sh.rows);
        const auto w = random_matrix(rng, ggml_type::q4_k, sh.n_in, sh.n_out, 0.05f);
        const auto x = activations(rng, size_t(sh.n_in) * sh.rows, true);
        const auto base = test::random_floats(rng, size_t(sh.n_out) * sh.rows);
        device_buffer<uint8_t> dw(w);
        device_buffer<float> dx(x);
        device_digits dd(sh.rows, sh.n_in);
        cuda::digits_quantize({dx.ptr, sh.rows, sh.n_in, dd.view()}, nullptr);
        cuda::matvec_digits_args a = cuda::one_group_args(dw.ptr, sh.n_in, sh.n_out, dd.view(), sh.rows, nullptr, sh.n_out);
        std::vector<float> ref(size_t(sh.n_out) * sh.rows);
        cpu::matmul(ctx, host_matrix(w, ggml_type::q4_k, sh.n_in, sh.n_out), x.data(), ref.data(), sh.rows);
        for (const bool acc : {false, true}) {
            INFO("accumulate " << acc);
            a.accumulate = acc;
            // Decode kernels streamed (passes together) and staged, then the mma.sync tiles 64 and
            // 128 weight rows wide, each with its K partials in one block and on a cluster of
            // blocks, then the warpgroup tiles of 32 and 64 pairs (sm_90a builds): all the same bits.
            // An output buffer as every variant starts: the residual (accumulate) or poison.
            auto reset = [&](device_buffer<float> &dy) {
                if (acc)
                    dy.upload(base);
                else
                    dy.poison();
            };
            std::vector<std::vector<float>> outs;
            const int n_variants = cuda::wgmma_built() ? 8 : 6;
            for (int variant = 0; variant < n_variants; ++variant) {
                device_buffer<float> dy(ref.size());
                reset(dy);
                a.y = dy.ptr;
                a.stage = variant == 1;
                a.tile_weight_rows = variant % 2 == 0 ? 64 : 128;
                a.tile_k_blocks = variant >= 4 && variant < 6 ? 1 : 0;
                a.engine = variant >= 6 ? cuda::matvec_digits_args::tile_engine::wgmma : cuda::matvec_digits_args::tile_engine::mma_sync;
                a.tile_pairs = variant == 6 ? 32 : variant == 7 ? 64 : 0;
                if (variant < 2)
                    cuda::matvec_digits(a, nullptr);
                else
                    cuda::matmul_digits(a, nullptr);
                TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
                outs.push_back(dy.download());
            }
            CHECK(std::memcmp(outs[0].data(), outs[1].data(), ref.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(outs[0].data(), outs[2].data(), ref.size() * sizeof(float)) == 0);
            {
                // The streamed decode kernel a pass of 4 rows at a time, and two passes at a time
                // (variant 0 takes four passes together above 4 rows): the same bits.
                device_buffer<float> dy(ref.size());
                for (const int32_t together : {0, 2}) {
                    INFO("passes together " << together);
                    reset(dy);
                    cuda::matvec_digits_args p = a;
                    p.y = dy.ptr;
                    p.stage = false;
                    p.passes_together = together;
                    cuda::matvec_digits(p, nullptr);
                    CHECK(std::memcmp(outs[0].data(), dy.download().data(), ref.size() * sizeof(float)) == 0);
                }
            }
            for (int variant = 3; variant < n_variants; ++variant) {
                INFO("variant " << variant);
                CHECK(std::memcmp(outs[0].data(), outs[size_t(variant)].data(), ref.size() * sizeof(float)) == 0);
            }
            {
                // The CPU's digit product of the same rows (plus the residual, one rounding): the same bits.
                std::vector<int32_t> all_rows(static_cast<size_t>(sh.rows));
                for (int32_t r = 0; r < sh.rows; ++r) all_rows[size_t(r)] = r;
                std::vector<float> cpu_y = test::cpu_digit_product(w, sh.n_in, sh.n_out, x, all_rows, cuda::digits_grouped_k_split(false, sh.n_in));
                if (acc)
                    for (size_t i = 0; i < cpu_y.size(); ++i) cpu_y[i] = base[i] + cpu_y[i];
                CHECK(test::same_bits(cpu_y, outs[3]));
            }
            std::vector<float> want = ref, got = outs[3];
            if (acc)
                for (size_t i = 0; i < got.size(); ++i) got[i] -= base[i];
            CHECK(rel_err(got.data(), want.data(), want.size()) <= test::tolerance::moe);
        }
    }
    // A row's outputs do not depend on the other rows of the launch (prompt chunking): the first
    // rows alone give the bits they had among all.
    std::mt19937_64 rng(5300);
    const int32_t n_in = 2048, n_out = 96, rows = 80, part = 37;
    const auto w = random_matrix(rng, ggml_type::q4_k, n_in, n_out, 0.05f);
    const auto x = activations(rng, size_t(n_in) * rows, true);
    device_buffer<uint8_t> dw(w);
    device_buffer<float> dx(x), y_all(size_t(n_out) * rows), y_part(size_t(n_out) * part);
    device_digits dd(rows, n_in);
    cuda::digits_quantize({dx.ptr, rows, n_in, dd.view()}, nullptr);
    cuda::matvec_digits_args a = cuda::one_group_args(dw.ptr, n_in, n_out, dd.view(), rows, y_all.ptr, n_out);
    cuda::matmul_digits(a, nullptr);
    a.n_rows = part;
    a.y = y_part.ptr;
    a.stage = true;
    cuda::matvec_digits(a, nullptr);
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    const auto all = y_all.download(), some = y_part.download();
    CHECK(std::memcmp(all.data(), some.data(), some.size() * sizeof(float)) == 0);

    // Q, K and V in one launch (extras): each matrix bitwise its own launch.
    const int32_t n_k = 40, n_v = 24;
    const auto wk = random_matrix(rng, ggml_type::q4_k, n_in, n_k, 0.05f), wv = random_matrix(rng, ggml_type::q4_k, n_in, n_v, 0.05f);
    device_buffer<uint8_t> dwk(wk), dwv(wv);
    device_buffer<float> yq(size_t(n_out) * rows), yk(size_t(n_k) * rows), yv(size_t(n_v) * rows);
    // The mma.sync tiles 64 and 128 wide, 64 wide with K partials on a cluster of blocks; the
    // warpgroup tiles of 32 and 64 pairs.
    struct tiles {
        int32_t weight_rows, k_blocks, pairs;
    };
    for (const tiles v : {tiles{64, 0, 0}, tiles{128, 0, 0}, tiles{64, 1, 0}, tiles{0, 0, 32}, tiles{0, 0, 64}}) {
        const bool wg = v.pairs > 0;
        if (wg && !cuda::wgmma_built()) continue;
        INFO("tile weight rows " << v.weight_rows << ", K on clusters " << v.k_blocks << ", wgmma pairs " << v.pairs);
        for (auto *b : {&yq, &yk, &yv}) b->poison();
        cuda::matvec_digits_args f = cuda::one_group_args(dw.ptr, n_in, n_out, dd.view(), rows, yq.ptr, n_out);
        f.tile_weight_rows = v.weight_rows;
        f.tile_k_blocks = v.k_blocks;
        f.engine = wg ? cuda::matvec_digits_args::tile_engine::wgmma : cuda::matvec_digits_args::tile_engine::mma_sync;
        f.tile_pairs = v.pairs;
        f.extra[0] = {dwk.ptr, n_k, yk.ptr, n_k};
        f.extra[1] = {dwv.ptr, n_v, yv.ptr, n_v};
        f.n_extra = 2;
        cuda::matmul_digits(f, nullptr);
        TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
        CHECK(std::memcmp(yq.download().data(), all.data(), all.size() * sizeof(float)) == 0);
        for (const auto &[wm, n_o, got] : {std::tuple{&dwk, n_k, &yk}, std::tuple{&dwv, n_v, &yv}}) {
            device_buffer<float> alone(size_t(n_o) * rows);
            alone.poison();
            a.w = wm->ptr;
            a.n_out = n_o;
            a.y_stride = n_o;
            a.n_rows = rows;
            a.y = alone.ptr;
            cuda::matvec_digits(a, nullptr);  // staged decode kernel: the same bits as the tiles
            TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
            const auto want = alone.download(), have = got->download();
            CHECK(std::memcmp(have.data(), want.data(), want.size() * sizeof(float)) == 0);
        }
    }
}
