// tests/kernels/digit_groups_test_util.h - what the digit-product tests share: device digit rows, a
// step's random routing grouped by expert (cuda/moe.h's layout) and its device arrays with the
// products' arguments, and a launch timer for the [.bench] cases.
#pragma once

#include "gpu_test_util.h"
#include "quant_test_util.h"

#include "cuda/cuda_check.h"
#include "cuda/matvec.h"
#include "cuda/matvec_digits.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace tandem::test {

struct device_digits {
    device_buffer<int8_t> digits;
    device_buffer<float> scales;
    device_buffer<uint16_t> sums;
    device_digits(int32_t rows, int32_t n)
        : digits(size_t(rows) * cuda::digits_per_element * n), scales(size_t(rows) * (n / 256)), sums(size_t(rows) * (n / 256) * 16) {}
    cuda::digit_rows view() { return {digits.ptr, scales.ptr, sums.ptr}; }
};

// A step's routing grouped by expert (cuda/moe.h's layout): each row's k distinct experts.
struct host_groups {
    std::vector<int32_t> ids, group_mat, group_off, pair_x, pair_y;
    int32_t n_groups = 0;
};
inline host_groups route_random(std::mt19937_64 &rng, int32_t rows, int32_t k, int32_t n_expert) {
    host_groups h;
    for (int32_t r = 0; r < rows; ++r) {
        std::vector<int32_t> all(static_cast<size_t>(n_expert));
        for (int32_t e = 0; e < n_expert; ++e) all[size_t(e)] = e;
        std::shuffle(all.begin(), all.end(), rng);
        h.ids.insert(h.ids.end(), all.begin(), all.begin() + k);
    }
    for (int32_t e = 0; e < n_expert; ++e) {
        const size_t before = h.pair_x.size();
        for (int32_t p = 0; p < rows * k; ++p)
            if (h.ids[size_t(p)] == e) {
                h.pair_x.push_back(p / k);
                h.pair_y.push_back(p);
            }
        if (h.pair_x.size() > before) {
            h.group_mat.push_back(e);
            h.group_off.push_back(int32_t(before));
        }
    }
    h.n_groups = int32_t(h.group_mat.size());
    // As moe_route's arrays: room for every expert's group (kernels read their group's entries with
    // the count, up to max_groups <= n_expert of them), the entries past the count empty groups.
    h.group_mat.resize(size_t(n_expert), 0);
    h.group_off.resize(size_t(n_expert) + 1, int32_t(h.pair_x.size()));
    return h;
}

// Row r of a step alone: its k pairs in their own groups (ascending expert), pair s reading x row 0
// (h) and writing y row s.
inline host_groups groups_of_row(const host_groups &step, int32_t r, int32_t k) {
    host_groups one;
    for (int32_t s = 0; s < k; ++s) one.ids.push_back(step.ids[size_t(r * k + s)]);
    std::vector<int32_t> order(static_cast<size_t>(k));
    for (int32_t s = 0; s < k; ++s) order[size_t(s)] = s;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return one.ids[size_t(a)] < one.ids[size_t(b)]; });
    for (int32_t s : order) {
        one.group_mat.push_back(one.ids[size_t(s)]);
        one.group_off.push_back(int32_t(one.pair_x.size()));
        one.pair_x.push_back(0);
        one.pair_y.push_back(s);
    }
    one.n_groups = k;
    one.group_off.push_back(k);
    return one;
}

struct device_groups {
    device_buffer<int32_t> mat, off, n, px, py;
    explicit device_groups(const host_groups &h)
        : mat(h.group_mat), off(h.group_off), n(std::vector<int32_t>{h.n_groups}), px(h.pair_x), py(h.pair_y) {}
    // The grouped SwiGLU product of these groups: gate w, up w_up, rows of x (digits) to y.
    cuda::matvec_digits_args swiglu_args(const void *w, const void *w_up, int32_t n_in, int32_t n_out, const cuda::digit_rows &x,
                                         float *y, int32_t grid_groups) const {
        cuda::matvec_digits_args a{w, n_in, n_out, x, 0, y, n_out};
        a.w_up = w_up;
        a.x_rows = px.ptr;
        a.y_rows = py.ptr;
        a.group_mat = mat.ptr;
        a.group_off = off.ptr;
        a.n_groups = n.ptr;
        a.max_groups = grid_groups;
        return a;
    }
    // matvec()'s grouped Q4_K product of these groups (SwiGLU when w_up is set): pair i reads x row
    // x_rows[i] and writes y row y_rows[i].
    cuda::matvec_args matvec_grouped_args(const void *w, const void *w_up, int32_t n_in, int32_t n_out, const float *x,
                                          const int32_t *x_rows, float *y, int32_t grid_groups, int32_t n_pairs) const {
        cuda::matvec_args a;
        a.w = w;
        a.w_up = w_up;
        a.type = ggml_type::q4_k;
        a.n_in = n_in;
        a.n_out = n_out;
        a.x = x;
        a.x_stride = n_in;
        a.y = y;
        a.y_stride = n_out;
        a.x_rows = x_rows;
        a.y_rows = py.ptr;
        a.group_mat = mat.ptr;
        a.group_off = off.ptr;
        a.n_groups = n.ptr;
        a.max_groups = grid_groups;
        a.n_pairs = n_pairs;
        return a;
    }
    // The grouped plain product (down) of these groups: pair i reads x row y_rows[i] (its SwiGLU
    // output) and writes y row y_rows[i].
    cuda::matvec_digits_args plain_args(const void *w, int32_t n_in, int32_t n_out, float *y, int32_t grid_groups) const {
        cuda::matvec_digits_args a = swiglu_args(w, nullptr, n_in, n_out, {}, y, grid_groups);
        a.x_rows = py.ptr;
        return a;
    }
};

// Median microseconds a launch of fn, over 7 timings of `per` back-to-back launches after 10 warm-up ones.
class launch_timer {
  public:
    launch_timer() {
        TANDEM_CUDA_CHECK(cudaEventCreate(&e0_));
        TANDEM_CUDA_CHECK(cudaEventCreate(&e1_));
    }
    ~launch_timer() {
        cudaEventDestroy(e0_);
        cudaEventDestroy(e1_);
    }
    launch_timer(const launch_timer &) = delete;
    launch_timer &operator=(const launch_timer &) = delete;
    template <class F>
    float median_us(F &&fn, int per) {
        for (int i = 0; i < 10; ++i) fn();
        std::vector<float> ms(7);
        for (float &m : ms) {
            TANDEM_CUDA_CHECK(cudaEventRecord(e0_));
            for (int i = 0; i < per; ++i) fn();
            TANDEM_CUDA_CHECK(cudaEventRecord(e1_));
            TANDEM_CUDA_CHECK(cudaEventSynchronize(e1_));
            TANDEM_CUDA_CHECK(cudaEventElapsedTime(&m, e0_, e1_));
        }
        std::sort(ms.begin(), ms.end());
        return ms[ms.size() / 2] * 1000.0f / float(per);
    }

  private:
    cudaEvent_t e0_{}, e1_{};
};

}  // namespace tandem::test
