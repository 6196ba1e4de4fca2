// tests/kernels/test_cuda_logits_top.cpp - cuda/logits_top against its host twin, logits_top_of:
// ids and logits bitwise (ties to the lower id, -0 == +0), the max bitwise, the normaliser to
// double rounding, NaN flagged; rows independent of the launch's other rows. logits_best (each
// row's best token alone) against logits_top's first entry and the host twin's, at every cluster
// size.
#include "cuda/logits_top.h"
#include "gpu_test_util.h"
#include "logits_top_test_util.h"
#include "tandem/sampler.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

using namespace tandem;
using namespace tandem::test;

namespace {

struct top_run {
    std::vector<cuda::logits_top_row> rows;
};

top_run run_top(const std::vector<float> &logits, int32_t n_rows, int32_t n_cols, int32_t first_id) {
    device_buffer<float> x(logits);
    logits_top_run top(n_rows, n_cols);
    top.launch(x.ptr, n_rows, n_cols, first_id);
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    return {top.out.download()};
}

// One device row against the host twin of the same columns.
void check_row(const cuda::logits_top_row &got, const float *row, int32_t n_cols, int32_t first_id) {
    const logits_top ref = logits_top_of({row, size_t(n_cols)});
    REQUIRE(got.has_nan == (ref.has_nan ? 1 : 0));
    REQUIRE(got.n == std::min(n_cols, cuda::logits_top_n));
    const size_t n_valid = ref.top.size();  // NaNs are left out of both
    for (size_t i = 0; i < n_valid; ++i) {
        INFO("place " << i);
        REQUIRE(got.id[i] == ref.top[i].id + first_id);
        REQUIRE(std::memcmp(&got.logit[i], &ref.top[i].logit, sizeof(float)) == 0);
    }
    if (n_valid == 0) return;
    REQUIRE(got.max == ref.top[0].logit);  // as values: fmaxf may pick either of -0 and +0
    const double log_norm = double(got.max) + std::log(got.sum_exp);
    REQUIRE(std::abs(log_norm - ref.log_norm) <= 1e-12 * std::max(1.0, std::abs(ref.log_norm)));
}

}  // namespace

TEST_CASE("logits_top matches its host twin", "[gpu][logits_top]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(21);
    const int32_t widths[] = {1, 5, 63, 64, 65, 4095, 4096, 4097, 75968, 151936, 262144};
    for (int32_t n_cols : widths) {
        const int32_t n_rows = n_cols > 100000 ? 4 : 7;
        const int32_t first_id = n_cols % 2 ? 0 : 75968;
        std::vector<float> x = random_floats(rng, size_t(n_rows) * size_t(n_cols), 3.0f);
        // Row 1: exact ties on a coarse grid, across slices; row 2: all equal, with -0 and +0 mixed;
        // row 3: values a few ulps apart (the keys share their first bytes: the selection's later
        // passes, where a bin is rarely needed whole).
        std::uniform_int_distribution<int> level(0, 4), ulps(0, 300);
        for (int32_t c = 0; c < n_cols; ++c) {
            x[size_t(n_cols) + size_t(c)] = float(level(rng)) * 0.5f;
            x[2 * size_t(n_cols) + size_t(c)] = c % 3 ? 0.0f : -0.0f;
            x[3 * size_t(n_cols) + size_t(c)] = 1.0f + float(ulps(rng)) * 0x1p-23f;
        }
        // Row 0: its best values planted in the last slice and at the first column.
        x[size_t(n_cols) - 1] = 100.0f;
        x[0] = 100.0f;
        const top_run r = run_top(x, n_rows, n_cols, first_id);
        for (int32_t row = 0; row < n_rows; ++row) {
            INFO("n_cols " << n_cols << " row " << row);
            check_row(r.rows[size_t(row)], x.data() + size_t(row) * size_t(n_cols), n_cols, first_id);
        }
        // Batch invariance: row 0 alone gives the same bytes (the sum included).
        const top_run alone = run_top(std::vector<float>(x.begin(), x.begin() + n_cols), 1, n_cols, first_id);
        REQUIRE(std::memcmp(&alone.rows[0], &r.rows[0], sizeof(cuda::logits_top_row)) == 0);
    }
}

TEST_CASE("logits_top flags NaN rows and rejects rows too wide", "[gpu][logits_top]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(22);
    const int32_t n_cols = 9000;
    std::vector<float> x = random_floats(rng, 2 * size_t(n_cols));
    x[size_t(n_cols) + 4321] = NAN;
    const top_run r = run_top(x, 2, n_cols, 0);
    REQUIRE(r.rows[0].has_nan == 0);
    REQUIRE(r.rows[1].has_nan == 1);
    check_row(r.rows[1], x.data() + n_cols, n_cols, 0);  // the NaN is left out of the top and the sum
    REQUIRE(cuda::logits_top_slices(262144) == 64);
    REQUIRE(cuda::logits_top_slices(262145) == 0);
    REQUIRE(cuda::logits_top_slices(0) == 0);
}

namespace {

std::vector<cuda::logits_top_row> run_best(const std::vector<float> &logits, int32_t n_rows, int32_t n_cols, int32_t first_id,
                                           int32_t cluster) {
    device_buffer<float> x(logits);
    device_buffer<cuda::logits_top_row> out{size_t(n_rows)};
    out.poison();
    cuda::logits_best_args a;
    a.logits = x.ptr;
    a.n_rows = n_rows;
    a.n_cols = n_cols;
    a.first_id = first_id;
    a.out = out.ptr;
    a.cluster = cluster;
    cuda::logits_best(a, nullptr);
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    return out.download();
}

// A best-token row against the host twin of the same columns (and the NaN flag).
void check_best(const cuda::logits_top_row &got, const float *row, int32_t n_cols, int32_t first_id) {
    const logits_top ref = logits_top_of({row, size_t(n_cols)});
    REQUIRE(got.has_nan == (ref.has_nan ? 1 : 0));
    REQUIRE(got.n == 1);
    REQUIRE(got.drawn == -1);
    REQUIRE(std::isnan(got.sum_exp));
    if (ref.top.empty()) {  // every logit NaN
        REQUIRE(got.id[0] == -1);
        REQUIRE(got.logit[0] == -INFINITY);
        return;
    }
    REQUIRE(got.id[0] == ref.top[0].id + first_id);
    REQUIRE(std::memcmp(&got.logit[0], &ref.top[0].logit, sizeof(float)) == 0);
    REQUIRE(std::memcmp(&got.max, &got.logit[0], sizeof(float)) == 0);
}

std::vector<int32_t> best_cluster_sizes() {
    std::vector<int32_t> sizes;
    for (int32_t c = 1; c <= cuda::logits_best_cluster(0); ++c) sizes.push_back(c);
    return sizes;
}

}  // namespace

TEST_CASE("logits_best matches logits_top's first entry and the host twin", "[gpu][logits_top]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(23);
    // Widths down to fewer columns than a cluster has blocks, and past logits_top's widest row.
    const int32_t widths[] = {1, 3, 7, 9, 63, 4097, 75968, 151936, 300001};
    int64_t checked = 0;
    for (int32_t n_cols : widths) {
        const int32_t n_rows = 7;
        const int32_t first_id = n_cols % 2 ? 0 : 75968;
        std::vector<float> x = random_floats(rng, size_t(n_rows) * size_t(n_cols), 3.0f);
        std::uniform_int_distribution<int> level(0, 4), ulps(0, 300);
        std::uniform_int_distribution<int32_t> col(0, n_cols - 1);
        for (int32_t c = 0; c < n_cols; ++c) {
            x[size_t(n_cols) + size_t(c)] = float(level(rng)) * 0.5f;         // row 1: ties on a coarse grid
            x[2 * size_t(n_cols) + size_t(c)] = c % 3 ? 0.0f : -0.0f;        // row 2: -0 and +0, the first -0
            x[3 * size_t(n_cols) + size_t(c)] = 1.0f + float(ulps(rng)) * 0x1p-23f;  // row 3: a few ulps apart
            x[4 * size_t(n_cols) + size_t(c)] = c % 2 ? NAN : -INFINITY;     // row 4: NaN and -inf only
            x[5 * size_t(n_cols) + size_t(c)] = NAN;                          // row 5: NaN only
        }
        // Row 0: its best planted at the last column and at the first (the first wins the tie);
        // row 6: random, with a NaN somewhere.
        x[size_t(n_cols) - 1] = 100.0f;
        x[0] = 100.0f;
        x[6 * size_t(n_cols) + size_t(col(rng))] = NAN;
        // logits_top's rows for the widths it takes: the best entry bitwise the same.
        std::vector<cuda::logits_top_row> full;
        if (cuda::logits_top_slices(n_cols) > 0) full = run_top(x, n_rows, n_cols, first_id).rows;
        for (int32_t cluster : best_cluster_sizes()) {
            const std::vector<cuda::logits_top_row> got = run_best(x, n_rows, n_cols, first_id, cluster);
            for (int32_t row = 0; row < n_rows; ++row) {
                INFO("n_cols " << n_cols << " cluster " << cluster << " row " << row);
                check_best(got[size_t(row)], x.data() + size_t(row) * size_t(n_cols), n_cols, first_id);
                if (!full.empty()) {
                    REQUIRE(got[size_t(row)].id[0] == full[size_t(row)].id[0]);
                    REQUIRE(std::memcmp(&got[size_t(row)].logit[0], &full[size_t(row)].logit[0], sizeof(float)) == 0);
                    REQUIRE(got[size_t(row)].has_nan == full[size_t(row)].has_nan);
                }
                ++checked;
            }
            // A row alone gives the same bytes as among others.
            const std::vector<cuda::logits_top_row> alone =
                run_best(std::vector<float>(x.begin() + 3 * n_cols, x.begin() + 4 * n_cols), 1, n_cols, first_id, cluster);
            REQUIRE(std::memcmp(&alone[0], &got[3], sizeof(cuda::logits_top_row)) == 0);
        }
    }
    REQUIRE(checked == 9 * 7 * int64_t(best_cluster_sizes().size()));
}
