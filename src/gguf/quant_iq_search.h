// src/gguf/quant_iq_search.h - private to tandem_gguf: the quantization side of the IQ grids
// (ggml's iq2xs_init_impl / iq3xs_init_impl and their *_find_best_neighbour*): every grid point
// as bytes 2l + 1 of its levels l, a map from a packed point (levels at `bits` bits each) to its
// grid index, and for each packed point off the grid its nearest grid points. Built from the
// kgrid tables of quant_iq_grid_data.h at first use, once per process, thread-safely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::quant_detail {

enum class iq_grid_kind { iq2xxs, iq2xs, iq2s, iq1s, iq3xxs, iq3s };

struct iq_grid_search {
    int n_values = 0;              // values a grid point: 8 (IQ2/IQ1) or 4 (IQ3)
    int bits = 0;                  // bits a level in a packed point: 2 or 3
    std::vector<int8_t> points;    // [grid size][n_values] bytes 2l + 1
    std::vector<int32_t> map;      // packed point -> grid index; -(offset + 1) into neighbours when off the grid
    std::vector<uint16_t> neighbours;  // at each offset: a count, then that many grid indices

    int grid_size() const { return static_cast<int>(points.size()) / n_values; }
    const int8_t *point(int index) const { return points.data() + static_cast<size_t>(index) * n_values; }
    // The neighbour list (count first) of a packed point whose map entry is negative.
    const uint16_t *neighbours_of(int packed) const { return neighbours.data() + (-map[static_cast<std::size_t>(packed)] - 1); }
};

const iq_grid_search &iq_grid(iq_grid_kind kind);

// iq2_find_best_neighbour / iq3_find_best_neighbour: among the neighbours, the grid point q
// minimising sum w[i] (scale * q[i] - xval[i])^2 (the first on ties); L gets its levels.
// Returns its grid index.
int iq_best_neighbour(const iq_grid_search &g, const uint16_t *neighbours, const float *xval, const float *weight,
                      float scale, int8_t *L);

// iq1_find_best_neighbour2: the same with the IQ1 values xg[level] instead of 2l + 1; refuses
// (invalid_request) a group for which no neighbour has a finite distance, where ggml falls into
// an out-of-bounds search.
int iq1_best_neighbour(const iq_grid_search &g, const uint16_t *neighbours, const float *xval, const float *weight,
                       float scale, const float *xg, int8_t *L);

// Eight values as magnitudes xval and a sign byte (bit i: value i negative). With even_parity
// (IQ2_XXS, IQ2_XS, IQ3_XXS store 7 sign bits and imply the 8th), an odd number of negatives
// flips the value of least weight * x^2 (the first of equals) to the other sign; its magnitude
// becomes negative, as in ggml.
uint8_t iq_signs8(const float *x, const float *weight, bool even_parity, float *xval);

// The levels of n values at inverse scale id, clamp(nearest(0.5 (id x - 1)), 0, n_levels - 1)
// (grid byte 2l + 1 is nearest to id x), into L; returns them packed, `bits` bits a level.
int iq_levels(const float *xval, float id, int n, int bits, int n_levels, int8_t *L);

// The scale search IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S share: for each trial inverse scale
// (n_levels * 2 - 1 + is * step) / max, is = -is_range..is_range, every group of n_values is
// put on the grid (its nearest levels, or the best neighbour when they are off the grid) and the
// weighted least-squares scale of the result is kept when it fits better; then groups left off
// the grid (all groups with refit_all) are projected again at the chosen scale and the scale
// refit. xval[n] are magnitudes (signs handled by the caller). Returns the scale; L[n] the levels.
struct iq_fit_args {
    const iq_grid_search *grid;
    int n, n_levels, is_range;
    float step;
    bool start_on_grid, refit_all;
};
float iq_grid_fit(const iq_fit_args &a, const float *xval, const float *weight, const float *waux, float max, int8_t *L);

}  // namespace tandem::quant_detail
