// tests/kernels/test_cuda_logits_draw.cpp - cuda/logits_draw against its host twin, draw_exact:
// the same id for every row, uniform number, temperature, top_k, min_p and top_p (the weights round alike
// and every sum is of integers), its logit, -1 for rows without a request; rows independent of
// the launch's other rows and of the blocks a row takes (a cluster of 1 to 8 on sm_90).
#include "cuda/logits_draw.h"
#include "gpu_test_util.h"
#include "logits_top_test_util.h"
#include "tandem/sampler.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

using namespace tandem;
using namespace tandem::test;

namespace {

// logits_top (for each row's max) then logits_draw, as the engine runs them. split < n_cols: the
// rows in two parts (ids below split, the rest), as a split head's drawing device holds them, with
// the summaries over the first part only (the kernel takes the row's max itself). cluster: the
// blocks a row (0: the device's default).
std::vector<cuda::logits_top_row> run_draw(const std::vector<float> &logits, int32_t n_rows, int32_t n_cols,
                                           const std::vector<row_draw> &draws, int32_t split = -1, int32_t cluster = 0) {
    if (split < 0) split = n_cols;
    std::vector<float> lo, hi;
    for (int32_t r = 0; r < n_rows; ++r) {
        const auto row = logits.begin() + std::ptrdiff_t(size_t(r) * size_t(n_cols));
        lo.insert(lo.end(), row, row + split);
        hi.insert(hi.end(), row + split, row + n_cols);
    }
    device_buffer<float> x(lo), rest(hi);  // a 0-byte copy for whole rows
    device_buffer<row_draw> req(draws);
    logits_top_run top(n_rows, split);
    top.launch(x.ptr, n_rows, split, 0);
    cuda::logits_draw_args d;
    d.logits = x.ptr;
    if (split < n_cols) {
        d.logits_rest = rest.ptr;
        d.split = split;
    }
    d.n_rows = n_rows;
    d.n_cols = n_cols;
    d.draws = req.ptr;
    d.rows = top.out.ptr;
    d.cluster = cluster;
    cuda::logits_draw(d, nullptr);
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    return top.out.download();
}

// The cluster sizes to try: one block a row, and where the device has clusters (sm_90), an odd
// size and the default's 8 (each block a contiguous part of the row's ids).
std::vector<int32_t> cluster_sizes() {
    if (cuda::logits_draw_cluster(0) == 1) return {1};
    return {1, 3, 8};
}

row_draw request(float temp, float min_p, float top_p, double u, int32_t top_k = 0) {
    row_draw d;
    d.top_k = top_k;
    d.temperature = temp;
    d.inv_temp = float(1.0 / double(temp));
    d.min_p = min_p;
    d.top_p = top_p;
    d.u = u;
    return d;
}

}  // namespace

TEST_CASE("logits_draw draws its host twin's token", "[gpu][draw]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(77);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const int32_t widths[] = {1, 31, 255, 256, 257, 8191, 8192, 8193, 75968, 151936};
    int64_t checked = 0;
    for (int32_t n_cols : widths) {
        const int32_t n_rows = 12;
        // Spreads from flat (every token a candidate) to peaked (the cutoff and min_p bite); row 1
        // ties on a coarse grid; row 2 is all equal.
        std::vector<float> x;
        for (int32_t r = 0; r < n_rows; ++r) {
            const std::vector<float> row = random_floats(rng, size_t(n_cols), r < 6 ? 1.0f : 8.0f);
            x.insert(x.end(), row.begin(), row.end());
        }
        for (int32_t c = 0; c < n_cols && n_rows > 2; ++c) {
            x[size_t(n_cols) + size_t(c)] = float(int(x[size_t(n_cols) + size_t(c)] * 2.0f)) * 0.5f;
            x[2 * size_t(n_cols) + size_t(c)] = 0.25f;
        }
        for (int pass = 0; pass < 8; ++pass) {
            std::vector<row_draw> draws;
            for (int32_t r = 0; r < n_rows; ++r) {
                // Row 3 draws nothing; rows 4 and 5 take u at the ends of [0, 1); half the passes
                // draw from a nucleus (top_p from 0.02, the best token alone, to 0.97).
                const double u = r == 4 ? 0.0 : r == 5 ? std::nextafter(1.0, 0.0) : uniform(rng);
                const float temp = r == 3 ? 0.0f : (pass % 4 == 0 ? 0.7f : pass % 4 == 1 ? 1.0f : pass % 4 == 2 ? 0.3f : 2.0f);
                const float top_p = pass < 4 ? 1.0f : (r % 3 == 0 ? 0.02f : r % 3 == 1 ? 0.6f : 0.97f);
                // top_k: off, a few, past the summary's 64, and past most rows' width.
                const int32_t top_k = r % 4 == 0 ? 0 : r % 4 == 1 ? 3 : r % 4 == 2 ? 100 : 5000;
                draws.push_back(request(temp, r % 2 == 0 ? 0.0f : 0.01f * float(pass % 4), top_p, u, top_k));
            }
            for (int32_t cluster : cluster_sizes()) {
                const std::vector<cuda::logits_top_row> got = run_draw(x, n_rows, n_cols, draws, -1, cluster);
                for (int32_t r = 0; r < n_rows; ++r) {
                    INFO("cols " << n_cols << " pass " << pass << " cluster " << cluster << " row " << r << " u " << draws[size_t(r)].u);
                    const float *row = x.data() + size_t(r) * size_t(n_cols);
                    if (draws[size_t(r)].temperature <= 0.0f) {
                        REQUIRE(got[size_t(r)].drawn == -1);
                        continue;
                    }
                    const float max_logit = *std::max_element(row, row + n_cols);
                    const int32_t want = draw_exact({row, size_t(n_cols)}, max_logit, draws[size_t(r)]);
                    REQUIRE(got[size_t(r)].drawn == want);
                    REQUIRE(std::memcmp(&got[size_t(r)].drawn_logit, &row[want], sizeof(float)) == 0);
                    ++checked;
                }
            }
        }
    }
    INFO("rows checked " << checked);
    REQUIRE(checked == 10 * 8 * 11 * int64_t(cluster_sizes().size()));
}

TEST_CASE("logits_draw: a row's token does not depend on the launch's other rows", "[gpu][draw]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(78);
    const int32_t n_cols = 151936, n_rows = 16;
    const std::vector<float> x = random_floats(rng, size_t(n_rows) * size_t(n_cols), 1.5f);
    std::vector<row_draw> draws;
    for (int32_t r = 0; r < n_rows; ++r) draws.push_back(request(0.8f, 0.0f, r % 2 ? 0.9f : 1.0f, (r + 0.5) / n_rows));
    const std::vector<cuda::logits_top_row> all = run_draw(x, n_rows, n_cols, draws);
    for (int32_t r : {0, 7, 15}) {
        const std::vector<float> one(x.begin() + std::ptrdiff_t(size_t(r) * size_t(n_cols)), x.begin() + std::ptrdiff_t(size_t(r + 1) * size_t(n_cols)));
        const std::vector<cuda::logits_top_row> alone = run_draw(one, 1, n_cols, {draws[size_t(r)]});
        REQUIRE(alone[0].drawn == all[size_t(r)].drawn);
    }
}

// The pick's three rounds (a 32nd of the row, a 32nd of that, then 32 ids a step) meet at their
// edges: one row drawn at many uniform numbers, u = 0 and the largest below 1 among them.
TEST_CASE("logits_draw: one row at many uniform numbers", "[gpu][draw]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(79);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int32_t n_cols : {1000, 33000, 151936}) {
        const std::vector<float> row = random_floats(rng, size_t(n_cols), 1.0f);
        const int32_t n_rows = 64;
        std::vector<float> x;
        for (int32_t r = 0; r < n_rows; ++r) x.insert(x.end(), row.begin(), row.end());
        for (float top_p : {1.0f, 0.5f}) {
            std::vector<row_draw> draws;
            for (int32_t r = 0; r < n_rows; ++r) {
                const double u = r == 0 ? 0.0 : r == n_rows - 1 ? std::nextafter(1.0, 0.0) : (r + uniform(rng)) / n_rows;
                draws.push_back(request(1.3f, 0.0f, top_p, u));
            }
            const std::vector<cuda::logits_top_row> got = run_draw(x, n_rows, n_cols, draws);
            const float max_logit = *std::max_element(row.begin(), row.end());
            int32_t last = -1;
            for (int32_t r = 0; r < n_rows; ++r) {
                INFO("cols " << n_cols << " top_p " << top_p << " u " << draws[size_t(r)].u);
                const int32_t want = draw_exact(row, max_logit, draws[size_t(r)]);
                REQUIRE(got[size_t(r)].drawn == want);
                REQUIRE(want >= last);  // the pick walks ids in order: u up, id not down
                last = want;
            }
        }
    }
}

// A split head's rows (two parts, the max taken by the kernel) draw the whole rows' tokens, where
// the best token sits in either part, with top_k, min_p and top_p.
TEST_CASE("logits_draw: a row in two parts draws the whole row's token", "[gpu][draw]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(80);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int32_t n_cols : {300, 8193, 151936}) {
        const int32_t n_rows = 8;
        std::vector<float> x = random_floats(rng, size_t(n_rows) * size_t(n_cols), 2.0f);
        x[5] = 40.0f;                                                    // row 0's best in the first part
        x[size_t(n_cols) + size_t(n_cols) - 3] = 40.0f;                  // row 1's in the rest
        for (int32_t split : {n_cols / 2, 1, n_cols - 1}) {
            std::vector<row_draw> draws;
            for (int32_t r = 0; r < n_rows; ++r)
                draws.push_back(request(r == 7 ? 0.0f : 0.6f + 0.2f * float(r % 3), r % 2 ? 0.01f : 0.0f, r % 4 < 2 ? 1.0f : 0.8f,
                                        uniform(rng), r == 3 ? 100 : 0));
            const std::vector<cuda::logits_top_row> whole = run_draw(x, n_rows, n_cols, draws);
            for (int32_t cluster : cluster_sizes()) {
                const std::vector<cuda::logits_top_row> parts = run_draw(x, n_rows, n_cols, draws, split, cluster);
                for (int32_t r = 0; r < n_rows; ++r) {
                    INFO("cols " << n_cols << " split " << split << " cluster " << cluster << " row " << r);
                    REQUIRE(parts[size_t(r)].drawn == whole[size_t(r)].drawn);
                    REQUIRE(std::memcmp(&parts[size_t(r)].drawn_logit, &whole[size_t(r)].drawn_logit, sizeof(float)) == 0);
                    if (r == 7) REQUIRE(parts[size_t(r)].drawn == -1);
                }
            }
        }
    }
}

// Every cluster size from 1 to 8 on short rows (small enough for racecheck), where the later
// blocks of a cluster hold no ids at all (33 ids: two blocks of 32).
TEST_CASE("logits_draw: every cluster size draws the host twin's token", "[gpu][draw]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(81);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const int32_t max_cluster = cuda::logits_draw_cluster(0);
    for (int32_t n_cols : {33, 1000, 4099}) {
        const int32_t n_rows = 6;
        const std::vector<float> x = random_floats(rng, size_t(n_rows) * size_t(n_cols), 1.0f);
        std::vector<row_draw> draws;
        for (int32_t r = 0; r < n_rows; ++r)
            draws.push_back(request(0.5f + 0.3f * float(r % 3), r == 5 ? 0.05f : 0.0f, r % 2 ? 0.5f : 1.0f, uniform(rng),
                                    r == 2 ? 3 : r == 3 ? 100 : 0));
        for (int32_t cluster = 1; cluster <= max_cluster; ++cluster) {
            const std::vector<cuda::logits_top_row> got = run_draw(x, n_rows, n_cols, draws, -1, cluster);
            for (int32_t r = 0; r < n_rows; ++r) {
                INFO("cols " << n_cols << " cluster " << cluster << " row " << r);
                const float *row = x.data() + size_t(r) * size_t(n_cols);
                const float max_logit = *std::max_element(row, row + n_cols);
                REQUIRE(got[size_t(r)].drawn == draw_exact({row, size_t(n_cols)}, max_logit, draws[size_t(r)]));
            }
        }
    }
}
