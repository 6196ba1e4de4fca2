// src/cpu/workspace.h - scratch the CPU ops keep across calls (a device owns one), so a step
// allocates nothing once a step of its size has run: digit rows, per-thread tile buffers, the grouped
// expert pass's pair arrays and activations. Every buffer only grows.
#pragma once

#include "cpu_ops.h"
#include "digits.h"

#include <cstdint>
#include <vector>

namespace tandem::cpu {

struct cpu_workspace {
    digit_rows x_digits;                   // a product's input rows
    digit_rows act_digits;                 // the experts' SwiGLU outputs (the down product's input)
    std::vector<digits_scratch> tiles;     // [thread] unpacked weight tiles
    std::vector<const float *> x_ptrs;     // [rows] a product's input rows
    std::vector<float *> y_ptrs, y2_ptrs;  // [rows] its outputs (two matrices: gate and up)
    std::vector<int32_t> rows, pairs, expert_off;  // the grouped pass: pairs by expert
    std::vector<int64_t> items;            // the grouped pass: (expert, tile) work items
    std::vector<float> gate, act;          // [pairs][d_ff]

    // Per-thread scratch for n threads (call before a parallel region).
    void reserve_threads(int32_t n) {
        if (tiles.size() < size_t(n)) tiles.resize(size_t(n));
    }
};

// v holds at least n elements (it never shrinks).
template <class T>
T *grow(std::vector<T> &v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

}  // namespace tandem::cpu
