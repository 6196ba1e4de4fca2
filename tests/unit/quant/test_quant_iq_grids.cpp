// tests/unit/quant/test_quant_iq_grids.cpp - the IQ grids Tandem expands from its packed data
// (src/gguf/quant_iq_grid_data.h) against entries of ggml's published expanded tables
// (ggml-common.h: iq2xxs_grid, iq2xs_grid, iq2s_grid, iq3xxs_grid, iq3s_grid, iq1s_grid, ksigns_iq2xs),
// and the properties every grid must have: sorted distinct packed points, levels in range.
#include "../../../src/gguf/quant_iq_grids.h"

#include <catch2/catch.hpp>

#include <bit>
#include <set>
#include <utility>
#include <vector>

using namespace tandem::quant_detail;

namespace {

template <class Grid, class Entry>
void check_entries(const Grid &grid, const std::vector<std::pair<size_t, Entry>> &published) {
    for (const auto &[index, value] : published) {
        CAPTURE(index);
        CHECK(grid[index] == value);
    }
}

template <size_t N>
void check_packed(const uint16_t (&kgrid)[N], int bits, int values, int max_level) {
    std::set<uint16_t> seen;
    for (size_t k = 0; k < N; ++k) {
        CAPTURE(k);
        if (k > 0) CHECK(kgrid[k - 1] < kgrid[k]);  // ggml lists the points in increasing order
        CHECK(kgrid[k] >> (bits * values) == 0);
        for (int i = 0; i < values; ++i) CHECK(((kgrid[k] >> (bits * i)) & ((1 << bits) - 1)) <= max_level);
        seen.insert(kgrid[k]);
    }
    CHECK(seen.size() == N);
}

}  // namespace

TEST_CASE("IQ grids: packed data has the sizes and shape of ggml's tables", "[quant][iq]") {
    check_packed(kgrid_iq2xxs, 2, 8, 2);
    check_packed(kgrid_iq2xs, 2, 8, 2);
    check_packed(kgrid_iq2s, 2, 8, 2);
    check_packed(kgrid_iq1s, 2, 8, 2);
    check_packed(kgrid_iq3xxs, 3, 4, 7);
    check_packed(kgrid_iq3s, 3, 4, 7);
}

TEST_CASE("IQ grids: expanded entries equal ggml's published tables", "[quant][iq]") {
    check_entries<decltype(iq2xxs_grid), uint64_t>(iq2xxs_grid, {
        {0, 0x0808080808080808}, {1, 0x080808080808082b}, {2, 0x0808080808081919}, {11, 0x0808080819080819},
        {44, 0x080819082b2b1908}, {49, 0x080819191908192b}, {50, 0x08081919192b2b19},
        {252, 0x2b2b082b08080808}, {253, 0x2b2b190808192b08}, {254, 0x2b2b2b0819190808}, {255, 0x2b2b2b1908081908}});
    check_entries<decltype(iq2xs_grid), uint64_t>(iq2xs_grid, {
        {0, 0x0808080808080808}, {7, 0x080808080819192b}, {23, 0x080808082b080808}, {39, 0x0808081908192b2b},
        {510, 0x2b2b2b2b2b190819}, {511, 0x2b2b2b2b2b2b2b2b}});
    check_entries<decltype(iq2s_grid), uint64_t>(iq2s_grid, {
        {0, 0x0808080808080808}, {7, 0x080808080819192b}, {21, 0x08080808192b0819}, {23, 0x08080808192b192b},
        {24, 0x08080808192b2b19}, {29, 0x080808082b190819}});
    check_entries<decltype(iq3xxs_grid), uint32_t>(iq3xxs_grid, {
        {0, 0x04040404}, {5, 0x04040c3e}, {10, 0x04043e1c}, {43, 0x04242424}, {57, 0x043e340c}, {71, 0x0c0c0c0c},
        {254, 0x3e2c1424}, {255, 0x3e341c04}});
    check_entries<decltype(iq3s_grid), uint32_t>(iq3s_grid, {
        {0, 0x01010101}, {3, 0x0101010b}, {13, 0x01010707}, {24, 0x01010f0f}, {26, 0x01030103},
        {510, 0x0f0d0703}, {511, 0x0f0f0101}});
    check_entries<decltype(iq1s_grid), uint64_t>(iq1s_grid, {
        {0, 0xffffffffffffffff}, {1, 0xffffffffffffff01}, {2, 0xffffffffffff0000}, {5, 0xffffffffff00ff00},
        {11, 0xffffffff00ff0000}, {16, 0xffffffff01ffffff}, {24, 0xffffffff01010101}, {25, 0xffffff00ffff00ff}});
}

TEST_CASE("IQ sign table: ggml's ksigns_iq2xs", "[quant][iq]") {
    // The first and last rows of ggml's table, then the rule for all: an even count of set bits.
    const uint8_t first[16] = {0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15};
    const uint8_t last[16] = {240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255};
    for (uint32_t i = 0; i < 16; ++i) {
        CHECK(iq_signs(i) == first[i]);
        CHECK(iq_signs(112 + i) == last[i]);
    }
    for (uint32_t i = 0; i < 128; ++i) {
        CHECK((iq_signs(i) & 127) == i);
        CHECK(std::popcount(static_cast<unsigned>(iq_signs(i))) % 2 == 0);
    }
}
