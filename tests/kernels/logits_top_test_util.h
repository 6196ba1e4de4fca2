// tests/kernels/logits_top_test_util.h - cuda/logits_top on device rows with its scratch, as the
// engine runs it: what the logits_top and logits_draw tests share.
#pragma once

#include "cuda/logits_top.h"
#include "gpu_test_util.h"

#include <catch2/catch.hpp>

namespace tandem::test {

// The scratch of one launch over n_rows rows of n_cols columns; out starts poisoned.
struct logits_top_run {
    int32_t slices;
    device_buffer<uint64_t> keys;
    device_buffer<float> smax;
    device_buffer<double> ssum;
    device_buffer<int32_t> snan;
    device_buffer<cuda::logits_top_row> out;

    logits_top_run(int32_t n_rows, int32_t n_cols)
        : slices(cuda::logits_top_slices(n_cols)), keys(size_t(n_rows) * size_t(slices) * cuda::logits_top_n),
          smax(size_t(n_rows) * size_t(slices)), ssum(size_t(n_rows) * size_t(slices)), snan(size_t(n_rows) * size_t(slices)),
          out(size_t(n_rows)) {
        REQUIRE(slices > 0);
        keys.poison();
        out.poison();
    }

    // Enqueues the reduction of the rows at x (device) on the default stream.
    void launch(const float *x, int32_t n_rows, int32_t n_cols, int32_t first_id) {
        cuda::logits_top_args a;
        a.logits = x;
        a.n_rows = n_rows;
        a.n_cols = n_cols;
        a.first_id = first_id;
        a.scratch = keys.ptr;
        a.slice_max = smax.ptr;
        a.slice_sum = ssum.ptr;
        a.slice_nan = snan.ptr;
        a.out = out.ptr;
        cuda::logits_top(a, nullptr);
    }
};

}  // namespace tandem::test
