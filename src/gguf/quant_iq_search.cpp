// src/gguf/quant_iq_search.cpp - the IQ grids' search structures (ggml's iq2xs_init_impl and
// iq3xs_init_impl), built once at first use, and the nearest-grid-point searches.
#include "quant_iq_search.h"

#include "tandem/error.h"

#include "quant_iq_grid_data.h"
#include "quant_rows.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cstring>
#include <mutex>

namespace tandem::quant_detail {
namespace {

struct grid_spec {
    const uint16_t *kgrid;
    int grid_size, n_values, bits;
    int map_size;  // packed points searched: ggml's kmap_size (43692 = 0xAAAC for 8 values, 4096 for 4)
    int n_want;    // neighbours are the grid points at the n_want smallest distinct distances
};

grid_spec spec_of(iq_grid_kind kind) {
    switch (kind) {
    case iq_grid_kind::iq2xxs: return {kgrid_iq2xxs, 256, 8, 2, 43692, 2};
    case iq_grid_kind::iq2xs: return {kgrid_iq2xs, 512, 8, 2, 43692, 2};
    case iq_grid_kind::iq2s: return {kgrid_iq2s, 1024, 8, 2, 43692, 1};
    case iq_grid_kind::iq1s: return {kgrid_iq1s, 2048, 8, 2, 43692, 3};
    case iq_grid_kind::iq3xxs: return {kgrid_iq3xxs, 256, 4, 3, 4096, 2};
    case iq_grid_kind::iq3s: return {kgrid_iq3s, 512, 4, 3, 4096, 3};
    }
    TANDEM_ASSERT(false, "unknown IQ grid");
    return {};
}

// The neighbours of packed point p: every grid index at one of the n_want smallest squared
// distances, ordered by (distance, index) - the order of ggml's qsort with its total comparator.
std::vector<uint16_t> nearest_points(const iq_grid_search &g, const grid_spec &s, int p) {
    int8_t pos[8];
    for (int k = 0; k < s.n_values; ++k) pos[k] = static_cast<int8_t>(2 * ((p >> (s.bits * k)) & ((1 << s.bits) - 1)) + 1);
    std::vector<int> d2(static_cast<size_t>(s.grid_size));
    std::array<int, 3> smallest{};  // distinct distances, ascending
    int n_smallest = 0;
    for (int j = 0; j < s.grid_size; ++j) {
        const int8_t *q = g.point(j);
        int d = 0;
        for (int k = 0; k < s.n_values; ++k) d += (q[k] - pos[k]) * (q[k] - pos[k]);
        d2[static_cast<size_t>(j)] = d;
        int at = 0;
        while (at < n_smallest && smallest[static_cast<size_t>(at)] < d) ++at;
        if (at < n_smallest && smallest[static_cast<size_t>(at)] == d) continue;
        if (at >= s.n_want) continue;
        for (int m = std::min(n_smallest, s.n_want - 1); m > at; --m) smallest[static_cast<size_t>(m)] = smallest[static_cast<size_t>(m - 1)];
        smallest[static_cast<size_t>(at)] = d;
        n_smallest = std::min(n_smallest + 1, s.n_want);
    }
    std::vector<uint16_t> out;
    for (int m = 0; m < n_smallest; ++m)
        for (int j = 0; j < s.grid_size; ++j)
            if (d2[static_cast<size_t>(j)] == smallest[static_cast<size_t>(m)]) out.push_back(static_cast<uint16_t>(j));
    return out;
}

iq_grid_search build(iq_grid_kind kind) {
    const grid_spec s = spec_of(kind);
    iq_grid_search g;
    g.n_values = s.n_values;
    g.bits = s.bits;
    g.points.resize(static_cast<size_t>(s.grid_size) * static_cast<size_t>(s.n_values));
    g.map.assign(static_cast<size_t>(s.map_size), -1);
    const int mask = (1 << s.bits) - 1;
    for (int k = 0; k < s.grid_size; ++k) {
        int packed = 0;
        for (int i = 0; i < s.n_values; ++i) {
            const int l = (s.kgrid[k] >> (s.bits * i)) & mask;
            g.points[static_cast<size_t>(k * s.n_values + i)] = static_cast<int8_t>(2 * l + 1);
            packed |= l << (s.bits * i);
        }
        g.map[static_cast<size_t>(packed)] = k;
    }
    std::vector<std::vector<uint16_t>> lists(static_cast<size_t>(s.map_size));
#pragma omp parallel for schedule(dynamic, 64)
    for (int p = 0; p < s.map_size; ++p)
        if (g.map[static_cast<size_t>(p)] < 0) lists[static_cast<size_t>(p)] = nearest_points(g, s, p);
    for (int p = 0; p < s.map_size; ++p) {
        if (g.map[static_cast<size_t>(p)] >= 0) continue;
        const auto &list = lists[static_cast<size_t>(p)];
        g.map[static_cast<size_t>(p)] = -(static_cast<int32_t>(g.neighbours.size()) + 1);
        g.neighbours.push_back(static_cast<uint16_t>(list.size()));
        g.neighbours.insert(g.neighbours.end(), list.begin(), list.end());
    }
    return g;
}

}  // namespace

const iq_grid_search &iq_grid(iq_grid_kind kind) {
    static std::array<std::once_flag, 6> once;
    static std::array<iq_grid_search, 6> grids;
    const auto i = static_cast<size_t>(kind);
    std::call_once(once[i], [&] { grids[i] = build(kind); });
    return grids[i];
}

int iq_best_neighbour(const iq_grid_search &g, const uint16_t *neighbours, const float *xval, const float *weight,
                      float scale, int8_t *L) {
    const int n = neighbours[0];
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= n; ++j) {
        const int8_t *q = g.point(neighbours[j]);
        float d2 = 0;
        for (int i = 0; i < g.n_values; ++i) {
            const float diff = scale * static_cast<float>(q[i]) - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = neighbours[j];
        }
    }
    if (best < 0) fail(error_kind::invalid_request, "IQ quantization: no grid point at a finite distance from a group");
    const int8_t *q = g.point(best);
    for (int i = 0; i < g.n_values; ++i) L[i] = static_cast<int8_t>((q[i] - 1) / 2);
    return best;
}

int iq1_best_neighbour(const iq_grid_search &g, const uint16_t *neighbours, const float *xval, const float *weight,
                       float scale, const float *xg, int8_t *L) {
    const int n = neighbours[0];
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= n; ++j) {
        const int8_t *q = g.point(neighbours[j]);
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            const float diff = scale * xg[(q[i] - 1) / 2] - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = neighbours[j];
        }
    }
    if (best < 0) fail(error_kind::invalid_request, "IQ1 quantization: no grid point at a finite distance from a group");
    const int8_t *q = g.point(best);
    for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((q[i] - 1) / 2);
    return best;
}

uint8_t iq_signs8(const float *x, const float *weight, bool even_parity, float *xval) {
    int n_neg = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; ++i) {
        // x >= 0 keeps -0.0 as it is, as ggml's test does.
        if (x[i] >= 0) {
            xval[i] = x[i];
        } else {
            xval[i] = -x[i];
            ++n_neg;
            s = static_cast<uint8_t>(s | (1 << i));
        }
    }
    if (even_parity && n_neg % 2) {
        int imin = 0;
        float min = weight[0] * x[0] * x[0];
        for (int i = 1; i < 8; ++i) {
            const float ax = weight[i] * x[i] * x[i];
            if (ax < min) {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s = static_cast<uint8_t>(s ^ (1 << imin));
    }
    return s;
}

int iq_levels(const float *xval, float id, int n, int bits, int n_levels, int8_t *L) {
    int packed = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::max(0, std::min(n_levels - 1, nearest_int(0.5f * (id * xval[i] - 1))));
        L[i] = static_cast<int8_t>(l);
        packed |= l << (bits * i);
    }
    return packed;
}

namespace {

// Puts group k (n_values levels at L) on the grid: its own point, or the best neighbour at
// `scale`. Returns whether the levels were on the grid.
bool snap_group(const iq_grid_search &g, int packed, const float *xval, const float *waux, float scale, int8_t *L) {
    if (g.map[static_cast<size_t>(packed)] >= 0) return true;
    iq_best_neighbour(g, g.neighbours_of(packed), xval, waux, scale, L);
    return false;
}

// sum w x q and sum w q^2 with q = 2l + 1.
void fit_sums(int n, const float *xval, const float *weight, const int8_t *L, float &sumqx, float &sumq2) {
    sumqx = sumq2 = 0;
    for (int i = 0; i < n; ++i) {
        const float w = weight[i], q = static_cast<float>(2 * L[i] + 1);
        sumqx += w * xval[i] * q;
        sumq2 += w * q * q;
    }
}

}  // namespace

float iq_grid_fit(const iq_fit_args &a, const float *xval, const float *weight, const float *waux, float max, int8_t *L) {
    const iq_grid_search &g = *a.grid;
    const int nv = g.n_values, n_groups = a.n / nv;
    int8_t Laux[32];
    bool on_grid[8], on_grid_aux[8];
    float best = 0;
    float scale = max / static_cast<float>(2 * a.n_levels - 1);
    for (int k = 0; k < n_groups; ++k) on_grid[k] = a.start_on_grid;
    for (int is = -a.is_range; is <= a.is_range; ++is) {
        const float id = (static_cast<float>(2 * a.n_levels - 1) + static_cast<float>(is) * a.step) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < n_groups; ++k) {
            const int u = iq_levels(xval + nv * k, id, nv, g.bits, a.n_levels, Laux + nv * k);
            on_grid_aux[k] = snap_group(g, u, xval + nv * k, waux + nv * k, this_scale, Laux + nv * k);
        }
        float sumqx, sumq2;
        fit_sums(a.n, xval, weight, Laux, sumqx, sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::memcpy(L, Laux, static_cast<size_t>(a.n));
            std::copy(on_grid_aux, on_grid_aux + n_groups, on_grid);
        }
    }
    const bool any_off = std::any_of(on_grid, on_grid + n_groups, [](bool b) { return !b; });
    if (any_off && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < n_groups; ++k) {
            if (on_grid[k] && !a.refit_all) continue;
            const int u = iq_levels(xval + nv * k, id, nv, g.bits, a.n_levels, L + nv * k);
            snap_group(g, u, xval + nv * k, waux + nv * k, scale, L + nv * k);
        }
        float sumqx, sumq2;
        fit_sums(a.n, xval, weight, L, sumqx, sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

}  // namespace tandem::quant_detail
