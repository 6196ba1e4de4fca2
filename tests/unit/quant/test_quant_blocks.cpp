// tests/unit/quant/test_quant_blocks.cpp - Q8_0/Q4_K/Q6_K layouts: hand-built blocks, naive
// bit-by-bit decoders on random bytes, dequantize_rows, and errors for bad input.
#include "tandem/error.h"
#include "tandem/quant.h"
#include "tandem/quant_blocks.h"
#include "tandem/types.h"

#include "quant_test_util.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

using namespace tandem;
using namespace quant_test;

namespace {

// Byte offsets of the fields, written from ggml-common.h's structs; the tests address blocks
// through these rather than through quant_blocks.h, so they check the structs too.
constexpr size_t q8_0_bytes = 34;                    // d @0, qs[32] @2
constexpr size_t q4_k_bytes = 144;                   // d @0, dmin @2, scales[12] @4, qs[128] @16
constexpr size_t q6_k_bytes = 210;                   // ql[128] @0, qh[64] @128, scales[16] @192, d @208

// Naive decoders, straight from the layout descriptions, one element at a time. The float
// expression per element is ggml's (d * scale) * q [- dmin * min], which dequantize must match bitwise.

float naive_q8_0(const uint8_t *blk, int e) {
    const float d = static_cast<float>(half_value(load_u16(blk)));
    return static_cast<float>(static_cast<int8_t>(blk[2 + e])) * d;
}

int bit(const uint8_t *bytes, int byte, int b) { return (bytes[byte] >> b) & 1; }

// Q4_K's 6-bit scale and min of sub-block j, gathered bit by bit:
// j < 4: scale bits 0-5 = scales[j] bits 0-5, min bits 0-5 = scales[j+4] bits 0-5;
// j >= 4: scale bits 0-3 = scales[j+4] bits 0-3, bits 4-5 = scales[j-4] bits 6-7;
//         min bits 0-3 = scales[j+4] bits 4-7, bits 4-5 = scales[j] bits 6-7.
void naive_q4_k_scale_min(const uint8_t *scales, int j, int &sc, int &m) {
    sc = m = 0;
    for (int b = 0; b < 6; ++b) {
        if (j < 4) {
            sc |= bit(scales, j, b) << b;
            m |= bit(scales, j + 4, b) << b;
        } else if (b < 4) {
            sc |= bit(scales, j + 4, b) << b;
            m |= bit(scales, j + 4, b + 4) << b;
        } else {
            sc |= bit(scales, j - 4, b + 2) << b;
            m |= bit(scales, j, b + 2) << b;
        }
    }
}

// Element e of a Q4_K block: sub-block s = e / 32 sits in 32-byte chunk s / 2 of qs, in the low
// nibbles for even s and the high nibbles for odd s, byte e % 32 of the chunk.
float naive_q4_k(const uint8_t *blk, int e) {
    const float d = static_cast<float>(half_value(load_u16(blk)));
    const float dmin = static_cast<float>(half_value(load_u16(blk + 2)));
    const int s = e / 32;
    int sc = 0, m = 0;
    naive_q4_k_scale_min(blk + 4, s, sc, m);
    const uint8_t byte = blk[16 + 32 * (s / 2) + e % 32];
    int q = 0;
    for (int b = 0; b < 4; ++b) q |= ((byte >> (b + (s % 2) * 4)) & 1) << b;
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    return ds * static_cast<float>(q) - dm;
}

// Element e of a Q6_K block: half h = e / 128, r = e % 128, group g = r / 32, l = r % 32.
// Low 4 bits: byte ql[64h + l + 32 (g odd)], low nibble for g < 2, high for g >= 2.
// High 2 bits: bits 2g, 2g+1 of qh[32h + l]. Scale: scales[e / 16]; q biased by 32.
float naive_q6_k(const uint8_t *blk, int e) {
    const int h = e / 128, r = e % 128, g = r / 32, l = r % 32;
    const uint8_t lo_byte = blk[64 * h + l + 32 * (g % 2)];
    const uint8_t hi_byte = blk[128 + 32 * h + l];
    int q = 0;
    for (int b = 0; b < 4; ++b) q |= ((lo_byte >> (b + (g >= 2 ? 4 : 0))) & 1) << b;
    for (int b = 0; b < 2; ++b) q |= ((hi_byte >> (2 * g + b)) & 1) << (4 + b);
    const int scale = static_cast<int8_t>(blk[192 + e / 16]);
    const float d = static_cast<float>(half_value(load_u16(blk + 208)));
    return (d * static_cast<float>(scale)) * static_cast<float>(q - 32);
}

// Random bytes with the fp16 fields made finite (exponent 31 -> 30) so values are comparable.
std::vector<uint8_t> random_blocks(size_t block_bytes, int n_blocks, std::vector<size_t> half_offsets, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> bytes(block_bytes * n_blocks);
    for (uint8_t &b : bytes) b = static_cast<uint8_t>(rng());
    for (int i = 0; i < n_blocks; ++i) {
        for (size_t off : half_offsets) {
            uint8_t *p = bytes.data() + block_bytes * i + off;
            uint16_t h = load_u16(p);
            if ((h & 0x7c00) == 0x7c00) h = static_cast<uint16_t>(h & ~0x0400);
            store_u16(p, h);
        }
    }
    return bytes;
}

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

}  // namespace

TEST_CASE("block structs have ggml's field offsets", "[quant][layout]") {
    CHECK(sizeof(block_q8_0) == q8_0_bytes);
    CHECK(offsetof(block_q8_0, qs) == 2);
    CHECK(sizeof(block_q4_k) == q4_k_bytes);
    CHECK(offsetof(block_q4_k, dmin) == 2);
    CHECK(offsetof(block_q4_k, scales) == 4);
    CHECK(offsetof(block_q4_k, qs) == 16);
    CHECK(sizeof(block_q6_k) == q6_k_bytes);
    CHECK(offsetof(block_q6_k, qh) == 128);
    CHECK(offsetof(block_q6_k, scales) == 192);
    CHECK(offsetof(block_q6_k, d) == 208);
    CHECK(static_cast<size_t>(ggml_type_info(ggml_type::q8_0).block_bytes) == q8_0_bytes);
    CHECK(static_cast<size_t>(ggml_type_info(ggml_type::q4_k).block_bytes) == q4_k_bytes);
    CHECK(static_cast<size_t>(ggml_type_info(ggml_type::q6_k).block_bytes) == q6_k_bytes);
}

TEST_CASE("hand-built Q8_0 block", "[quant][q8_0]") {
    uint8_t blk[q8_0_bytes];
    store_u16(blk, 0x3800);  // d = 0.5
    for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
    float y[32];
    dequantize_row(ggml_type::q8_0, blk, y, 32);
    for (int j = 0; j < 32; ++j) {
        CAPTURE(j);
        REQUIRE(y[j] == 0.5f * static_cast<float>(j * 8 - 128));  // -64, -60, ..., 60
    }
}

TEST_CASE("hand-built Q4_K block, including the packed scales of sub-blocks 4..7", "[quant][q4_k]") {
    // Sub-block scales and mins, and their packing worked out by hand:
    //   sc = {1, 2, 3, 4, 17, 33, 50, 63}, m = {5, 6, 7, 8, 16, 32, 48, 60}
    //   bytes 0-3: sc[j] | (sc[j+4] >> 4) << 6   = 0x41 0x82 0xC3 0xC4
    //   bytes 4-7: m[j]  | (m[j+4] >> 4) << 6    = 0x45 0x86 0xC7 0xC8
    //   bytes 8-11: (sc[j+4] & 15) | (m[j+4] & 15) << 4 = 0x01 0x01 0x02 0xCF
    const int sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
    const int m[8] = {5, 6, 7, 8, 16, 32, 48, 60};
    const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x45, 0x86, 0xC7, 0xC8, 0x01, 0x01, 0x02, 0xCF};
    for (int j = 0; j < 8; ++j) {
        CAPTURE(j);
        const q4_k_scale_min sm = q4_k_get_scale_min(scales, j);
        CHECK(sm.scale == sc[j]);
        CHECK(sm.min == m[j]);
    }
    uint8_t blk[q4_k_bytes] = {};
    store_u16(blk, 0x3c00);      // d = 1
    store_u16(blk + 2, 0x3800);  // dmin = 0.5
    std::memcpy(blk + 4, scales, 12);
    // q[e] = (7e + e/32) % 16, placed by the rule: chunk e/64, byte e%32, high nibble if (e/32) odd.
    auto q_of = [](int e) { return (7 * e + e / 32) % 16; };
    for (int e = 0; e < 256; ++e) blk[16 + 32 * (e / 64) + e % 32] |= static_cast<uint8_t>(q_of(e) << (((e / 32) % 2) * 4));
    float y[256];
    dequantize_row(ggml_type::q4_k, blk, y, 256);
    for (int e = 0; e < 256; ++e) {
        CAPTURE(e);
        // Small integers and halves: exact in float whatever the evaluation order.
        REQUIRE(y[e] == static_cast<float>(sc[e / 32] * q_of(e) - 0.5 * m[e / 32]));
    }
}

TEST_CASE("hand-built Q6_K blocks", "[quant][q6_k]") {
    SECTION("four elements sharing ql/qh bytes, decoded by hand") {
        // ql[0] = 0x21, ql[32] = 0x43, qh[0] = 0b11'10'01'00, all scales 1, d = 1:
        //   e0:  low 1, high 0 -> q 1  -> -31      e32: low 3, high 1 -> q 19 -> -13
        //   e64: low 2, high 2 -> q 34 -> 2        e96: low 4, high 3 -> q 52 -> 20
        // Every other element has q = 0 -> -32.
        uint8_t blk[q6_k_bytes] = {};
        blk[0] = 0x21;
        blk[32] = 0x43;
        blk[128] = 0xE4;
        for (int s = 0; s < 16; ++s) blk[192 + s] = 1;
        store_u16(blk + 208, 0x3c00);
        float y[256];
        dequantize_row(ggml_type::q6_k, blk, y, 256);
        for (int e = 0; e < 256; ++e) {
            CAPTURE(e);
            const float expect = e == 0 ? -31.f : e == 32 ? -13.f : e == 64 ? 2.f : e == 96 ? 20.f : -32.f;
            REQUIRE(y[e] == expect);
        }
    }
    SECTION("every element and every scale, including -128 and 127") {
        const int scales[16] = {-128, 127, -1, 1, 2, -3, 5, -8, 13, -21, 34, -55, 89, 100, -100, 0};
        auto q_of = [](int e) { return (11 * e + 3) % 64; };
        uint8_t blk[q6_k_bytes] = {};
        for (int e = 0; e < 256; ++e) {
            const int h = e / 128, r = e % 128, g = r / 32, l = r % 32, q = q_of(e);
            blk[64 * h + l + 32 * (g % 2)] |= static_cast<uint8_t>((q & 15) << (g >= 2 ? 4 : 0));
            blk[128 + 32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * g));
        }
        for (int s = 0; s < 16; ++s) blk[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(scales[s]));
        store_u16(blk + 208, 0x3400);  // d = 0.25
        float y[256];
        dequantize_row(ggml_type::q6_k, blk, y, 256);
        for (int e = 0; e < 256; ++e) {
            CAPTURE(e);
            REQUIRE(y[e] == static_cast<float>(0.25 * scales[e / 16] * (q_of(e) - 32)));
        }
    }
}

TEST_CASE("hand-built f16 and bf16 rows", "[quant][fp16][bf16]") {
    const uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    float y[4];
    dequantize_row(ggml_type::f16, h, y, 4);
    CHECK(y[0] == 1.0f);
    CHECK(y[1] == -2.0f);
    CHECK(y[2] == std::ldexp(1.0f, -24));
    CHECK(y[3] == 65504.0f);
    const uint16_t b[3] = {0x3f80, 0xc040, 0x4049};
    dequantize_row(ggml_type::bf16, b, y, 3);
    CHECK(y[0] == 1.0f);
    CHECK(y[1] == -3.0f);
    CHECK(y[2] == 3.140625f);
}

TEST_CASE("dequantize matches naive bit-by-bit decoders on random blocks", "[quant][q8_0][q4_k][q6_k]") {
    const uint64_t seed = 20240601;
    const int n_blocks = 64;
    struct type_case {
        ggml_type type;
        size_t block_bytes;
        int block_elems;
        std::vector<size_t> half_offsets;
        float (*naive)(const uint8_t *, int);
    };
    const type_case cases[] = {
        {ggml_type::q8_0, q8_0_bytes, 32, {0}, naive_q8_0},
        {ggml_type::q4_k, q4_k_bytes, 256, {0, 2}, naive_q4_k},
        {ggml_type::q6_k, q6_k_bytes, 256, {208}, naive_q6_k},
    };
    for (const type_case &tc : cases) {
        const std::vector<uint8_t> bytes = random_blocks(tc.block_bytes, n_blocks, tc.half_offsets, seed);
        const int64_t n = static_cast<int64_t>(n_blocks) * tc.block_elems;
        std::vector<float> y(n);
        dequantize_row(tc.type, bytes.data(), y.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            const float expect = tc.naive(bytes.data() + tc.block_bytes * (i / tc.block_elems), static_cast<int>(i % tc.block_elems));
            CAPTURE(seed, ggml_type_name(tc.type), i, y[i], expect);
            REQUIRE(bits_of(y[i]) == bits_of(expect));
        }
    }
}

TEST_CASE("dequantize_rows equals row-by-row dequantize_row", "[quant]") {
    const uint64_t seed = 99;
    const int64_t n_rows = 5, row_len = 512;
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
        const std::vector<float> x = make_data(data_kind::gaussian, n_rows * row_len, seed);
        const size_t row_bytes = ggml_row_bytes(type, row_len);
        std::vector<uint8_t> q(row_bytes * n_rows);
        for (int64_t r = 0; r < n_rows; ++r) quantize_row(type, x.data() + r * row_len, q.data() + r * row_bytes, row_len);
        std::vector<float> all(n_rows * row_len), one(row_len);
        dequantize_rows(type, q.data(), all.data(), n_rows, row_len);
        for (int64_t r = 0; r < n_rows; ++r) {
            dequantize_row(type, q.data() + r * row_bytes, one.data(), row_len);
            CAPTURE(seed, ggml_type_name(type), r);
            REQUIRE(std::memcmp(one.data(), all.data() + r * row_len, row_len * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("bad arguments throw typed errors", "[quant][errors]") {
    std::vector<float> x(512, 1.0f), y(512);
    std::vector<uint8_t> q(4096);
    auto kind_of = [](auto &&fn) {
        try {
            fn();
        } catch (const tandem::error &e) {
            return e.kind();
        }
        return error_kind::internal;  // nothing thrown
    };
    SECTION("unsupported types name the type") {
        for (ggml_type type : {ggml_type::q8_1, ggml_type::q8_k, ggml_type::i32, ggml_type::tq1_0, ggml_type::tq2_0}) {
            CAPTURE(ggml_type_name(type));
            CHECK(kind_of([&] { dequantize_row(type, q.data(), y.data(), 256); }) == error_kind::unsupported);
            CHECK(kind_of([&] { quantize_row(type, x.data(), q.data(), 256); }) == error_kind::unsupported);
            CHECK_THROWS_WITH(dequantize_row(type, q.data(), y.data(), 256),
                              Catch::Contains(std::string(ggml_type_name(type))));
        }
        // Types ggml quantizes only with an importance matrix: quantize_row (none) refuses them.
        for (ggml_type type : {ggml_type::iq2_xxs, ggml_type::iq2_xs, ggml_type::iq1_s}) {
            CAPTURE(ggml_type_name(type));
            CHECK(kind_of([&] { quantize_row(type, x.data(), q.data(), 256); }) == error_kind::unsupported);
            CHECK(ggml_type_can_quantize(type));
            CHECK(ggml_type_needs_importance(type));
        }
        // The other IQ grid types have an imatrix-free search (ggml's quantize_iq2_s etc. with no weights).
        for (ggml_type type : {ggml_type::iq2_s, ggml_type::iq1_m, ggml_type::iq3_xxs, ggml_type::iq3_s}) {
            CAPTURE(ggml_type_name(type));
            CHECK_NOTHROW(quantize_row(type, x.data(), q.data(), 256));
            CHECK_FALSE(ggml_type_needs_importance(type));
        }
        const auto bogus = static_cast<ggml_type>(99u);
        CHECK(kind_of([&] { dequantize_row(bogus, q.data(), y.data(), 256); }) == error_kind::unsupported);
        CHECK_THROWS_WITH(quantize_row(bogus, x.data(), q.data(), 256), Catch::Contains("99"));
    }
    SECTION("lengths that are not whole blocks, or negative") {
        CHECK(kind_of([&] { dequantize_row(ggml_type::q8_0, q.data(), y.data(), 33); }) == error_kind::invalid_request);
        CHECK(kind_of([&] { quantize_row(ggml_type::q4_k, x.data(), q.data(), 255); }) == error_kind::invalid_request);
        CHECK(kind_of([&] { quantize_row(ggml_type::q6_k, x.data(), q.data(), 300); }) == error_kind::invalid_request);
        CHECK(kind_of([&] { dequantize_row(ggml_type::f16, q.data(), y.data(), -1); }) == error_kind::invalid_request);
        CHECK(kind_of([&] { dequantize_rows(ggml_type::q4_k, q.data(), y.data(), 2, 100); }) == error_kind::invalid_request);
        CHECK(kind_of([&] { dequantize_rows(ggml_type::q8_0, q.data(), y.data(), -2, 32); }) == error_kind::invalid_request);
        CHECK_THROWS_WITH(dequantize_row(ggml_type::q6_k, q.data(), y.data(), 100), Catch::Contains("256"));
    }
    SECTION("zero elements is a no-op") {
        CHECK_NOTHROW(dequantize_row(ggml_type::q4_k, nullptr, nullptr, 0));
        CHECK_NOTHROW(quantize_row(ggml_type::q6_k, nullptr, nullptr, 0));
        CHECK_NOTHROW(dequantize_rows(ggml_type::q8_0, nullptr, nullptr, 0, 64));
    }
    SECTION("non-finite input to a block type") {
        for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
            for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()}) {
                std::vector<float> xb(512, 0.5f);
                xb[300] = bad;
                CAPTURE(ggml_type_name(type), bad);
                CHECK(kind_of([&] { quantize_row(type, xb.data(), q.data(), 512); }) == error_kind::invalid_request);
                CHECK_THROWS_WITH(quantize_row(type, xb.data(), q.data(), 512), Catch::Contains("element 300"));
            }
        }
        // f16/bf16 keep IEEE semantics instead: inf stays inf.
        std::vector<float> xi(4, std::numeric_limits<float>::infinity());
        uint16_t h[4];
        quantize_row(ggml_type::f16, xi.data(), h, 4);
        CHECK(h[0] == 0x7c00);
    }
    SECTION("magnitudes whose block scale overflows fp16") {
        std::vector<float> big(256, 1.0f);
        big[7] = 1e10f;  // q8_0: d = 1e10/127 > 65504; q4_K/q6_K: far beyond their fp16 scales
        for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
            CAPTURE(ggml_type_name(type));
            CHECK(kind_of([&] { quantize_row(type, big.data(), q.data(), 256); }) == error_kind::invalid_request);
        }
        big[7] = 1e30f;
        for (ggml_type type : {ggml_type::q4_k, ggml_type::q6_k}) {
            CAPTURE(ggml_type_name(type));
            CHECK(kind_of([&] { quantize_row(type, big.data(), q.data(), 256); }) == error_kind::invalid_request);
        }
    }
}
